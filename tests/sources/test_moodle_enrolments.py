"""Enrolled learners from Moodle's enrolment tables, on PostgreSQL and MariaDB, into both stores: every published
enrolled_learners and active_share compared with a recount made here from the rows the test wrote, and what a
settled day or period keeps when an enrolment is edited or deleted after it closed (until a rebuild)."""

import datetime as dt
import zoneinfo

import pytest

from helpers.moodle_mariadb import MariaDBMoodle, create_reader
from helpers.moodledb import READER_PASSWORD, course_iri, load_two_days, moodle_project, unix

ZONE = zoneinfo.ZoneInfo("Europe/Paris")
K = 2  # moodle_project's min_cell_size


@pytest.fixture(scope="session")
def mariadb_reader(mariadb_server, tmp_path_factory):
    create_reader(mariadb_server)
    path = tmp_path_factory.mktemp("mariadb-enrol") / "moodle-password"
    path.write_text(READER_PASSWORD + "\n")
    path.chmod(0o644)
    return str(path)


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgresql),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def any_moodle(request):
    """A Moodle database on each kind of server in turn, and its reader's password file."""
    if request.param == "mariadb":
        reader = request.getfixturevalue("mariadb_reader")
        return MariaDBMoodle(request.getfixturevalue("mariadb_server")), reader
    return request.getfixturevalue("moodle"), request.getfixturevalue("moodle_reader")


class Enrolled:
    """The enrolments the test wrote, as plain rows, and the recount of who was enrolled when."""

    def __init__(self, moodle):
        self.moodle, self.rows = moodle, {}

    def enrol(self, user, course, role="student", start=0, end=0, status=0, method_status=0):
        number = self.moodle.enrol(user, course, role=role, start=start, end=end, status=status,
                                   method_status=method_status)
        self.rows[number] = {"user": user, "course": course, "role": role, "start": start, "end": end,
                             "status": status, "method_status": method_status}
        return number

    def edit(self, number, **columns):
        self.moodle.edit_enrolment(number, **columns)
        self.rows[number].update({"start": columns.get("timestart", self.rows[number]["start"]),
                                  "end": columns.get("timeend", self.rows[number]["end"])})

    def delete(self, number):
        self.moodle.unenrol(number)
        del self.rows[number]

    def recount(self, course, first, last):
        """The users enrolled as students in `course` (None: any) at any moment of the local days first..last."""
        begins = int(dt.datetime.combine(dt.date.fromisoformat(first), dt.time(), tzinfo=ZONE).timestamp())
        ends = int(dt.datetime.combine(dt.date.fromisoformat(last) + dt.timedelta(days=1), dt.time(),
                                       tzinfo=ZONE).timestamp())
        return {row["user"] for row in self.rows.values()
                if (course is None or row["course"] == course) and row["role"] == "student"
                and row["status"] == 0 and row["method_status"] == 0
                and row["start"] < ends and (row["end"] == 0 or row["end"] > begins)}

    def published(self, course, first, last):
        """(enrolled_learners, active share's denominator) as published with exact counts: withheld under K."""
        count = len(self.recount(course, first, last))
        return count if count >= K else None


def expected_columns(enrolled, rows, bounds):
    """{(label, course): (enrolled_learners, active_share)} recounted for published `rows` of a grain, where
    bounds(row) gives (label, course IRI or None, first day, last day, active_learners)."""
    wanted = {}
    courses = {course_iri(7): 7, course_iri(9): 9, None: None}
    for row in rows:
        label, course, first, last, active = bounds(row)
        count = enrolled.published(courses[course], first, last)
        wanted[(label, course)] = (count, None if count is None or active is None else active / count)
    return wanted


def published_columns(project):
    """{grain: {(label, course): (enrolled_learners, active_share)}} of every published row, the site's too."""
    found = {"day": {(row[0], row[1]): row[-2:] for row in project.serving(site=True)}}
    for grain in ("week", "month"):
        found[grain] = {(row[0], row[3]): row[-2:] for row in project.grain_rows(grain, site=True)}
    return found


def recounted(project, enrolled):
    days = project.serving(site=True)
    result = {"day": expected_columns(enrolled, days, lambda row: (row[0], row[1], row[0], row[0], row[2]))}
    for grain in ("week", "month"):
        result[grain] = expected_columns(enrolled, project.grain_rows(grain, site=True),
                                         lambda row: (row[0], row[3], row[1], row[2], row[4]))
    return result


def at(text):
    return unix(text)


def test_enrolled_learners_match_a_recount_and_settled_periods_keep_theirs(tmp_path, any_moodle, store_kind,
                                                                             request):
    moodle, reader = any_moodle
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    load_two_days(moodle)  # course 7 active on the 23rd (101, 102, 103), course 9 on the 24th (201, 202, 203)
    enrolled = Enrolled(moodle)
    for user in (101, 102, 103):
        enrolled.enrol(user, 7)  # open at both ends
    late = enrolled.enrol(104, 7, start=at("2026-11-24T09:00:00+01:00"))  # from the 24th on
    enrolled.enrol(105, 7, status=1)  # suspended: never counted
    enrolled.enrol(106, 7, role="editingteacher")  # a teacher: never counted
    enrolled.enrol(107, 7, method_status=1)  # in a disabled enrolment method: never counted
    ended = enrolled.enrol(108, 7, start=at("2026-11-01T00:00:00+01:00"), end=at("2026-11-23T12:00:00+01:00"))
    enrolled.enrol(109, 7, start=at("2026-11-26T08:00:00+01:00"))  # later in the week
    enrolled.enrol(110, 7, end=2147483647)  # Moodle's default timeend
    enrolled.enrol(111, 7, end=at("2026-11-22T23:59:59+01:00"))  # ended before the 23rd: not in it, in the month
    enrolled.enrol(201, 9)  # course 9's one student: withheld everywhere but in the site's rows
    enrolled.enrol(101, 9, role="teacher")
    project = moodle_project(tmp_path / "p", moodle, reader, postgres)

    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    first = published_columns(project)
    assert first == recounted(project, enrolled)
    # The figures themselves, so that the recount is not trusted blindly: the 23rd in course 7 holds 101, 102, 103,
    # 108 and 110 (active 3 of 5); course 9 has one student, withheld, and no share; the week holds 104 and 109 too.
    assert first["day"][("2026-11-23", course_iri(7))] == (5, 3 / 5)
    assert first["day"][("2026-11-24", course_iri(9))] == (None, None)
    assert first["week"][("2026-W48", course_iri(7))] == (7, 3 / 7)
    assert first["month"][("2026-11", course_iri(7))] == (8, 3 / 8)
    assert first["day"][("2026-11-24", None)] == (6, 3 / 6)  # 101, 102, 103, 104, 110 and 201; 201..203 active
    assert project.query("SELECT grain, period, settled FROM enrolled_periods ORDER BY grain, period") == [
        ("day", "2026-11-23", 1), ("day", "2026-11-24", 1), ("month", "2026-11", 0), ("week", "2026-W48", 0)]

    # Edited after the days closed, before the week and the month did: the days keep what they were counted with,
    # the week and the month (still open, then settled by the first run after they end) follow the edit.
    enrolled.delete(ended)
    enrolled.edit(late, timestart=at("2026-11-27T09:00:00+01:00"))
    enrolled.enrol(112, 7)  # enrolled later, open at both ends: in every period, but not in the settled days
    moodle.log("viewed", 104, 7, "2026-11-27T10:00:00+01:00")
    moodle.log("viewed", 112, 7, "2026-11-27T10:00:00+01:00")
    project.invoke("run", now="2026-12-01T04:15:00+01:00", check=0)
    second = published_columns(project)
    for key in (("2026-11-23", course_iri(7)), ("2026-11-23", None), ("2026-11-24", None)):
        assert second["day"][key] == first["day"][key]
    now = recounted(project, enrolled)
    assert second["week"] == now["week"] and second["month"] == now["month"]
    assert second["week"][("2026-W48", course_iri(7))] == (7, 5 / 7)  # 108 gone, 112 in; 104 and 112 active too
    assert second["day"][("2026-11-27", course_iri(7))] == now["day"][("2026-11-27", course_iri(7))]
    assert project.query("SELECT COUNT(*) FROM enrolled_periods WHERE settled = 0") == [(0,)]

    # Changed again after everything closed: nothing published changes, however often the log is read again.
    enrolled.delete(late)
    enrolled.enrol(113, 7)
    project.invoke("run", now="2026-12-02T04:15:00+01:00", check=0)
    assert published_columns(project) == second
    # A rebuild counts them again, from the enrolments as they are now.
    project.invoke("rebuild", "--since", "2026-11-01", now="2026-12-02T04:20:00+01:00", check=0)
    assert published_columns(project) == recounted(project, enrolled)
    assert published_columns(project)["week"][("2026-W48", course_iri(7))] == (7, 5 / 7)  # 104 and 108 gone, 113 in


def test_noise_and_threshold_apply_to_enrolled_learners(tmp_path, moodle, moodle_reader):
    """With the cell key method, a published count of enrolled learners is within max_noise of the true one, and
    the share is computed from the published values."""
    load_two_days(moodle)
    for user in range(300, 330):
        moodle.enrol(user, 7)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.configure(extra_top="min_cell_size = 2", privacy='method = "cell-key"\nmax_noise = 3')
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    rows = [row for row in project.serving() if row[1] == course_iri(7)]
    assert rows, project.serving()
    for row in rows:
        enrolled, share, active = row[-2], row[-1], row[2]
        assert 27 <= enrolled <= 33 and enrolled != 0
        assert share == (None if active is None else active / enrolled)


def test_without_the_enrolment_grants_the_run_succeeds_and_counts_none(tmp_path, moodle, moodle_reader, caplog):
    """The enrolment tables are optional: without SELECT on them the run says so, publishes no enrolled learners,
    and settles nothing (a later run with the grant counts the days still open)."""
    load_two_days(moodle)
    moodle.enrol(101, 7)
    moodle.enrol(102, 7)
    moodle.revoke("SELECT", "mdl_user_enrolments")
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    result = project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert "Enrolled learners were not counted" in result.stderr
    assert "until a run can read mdl_user_enrolments, mdl_enrol, mdl_role_assignments, mdl_context, mdl_role" \
        in result.stderr
    assert {row[-2:] for row in project.serving(site=True)} == {(None, None)}
    assert project.query("SELECT COUNT(*) FROM enrolled_periods") == [(0,)]
    check = project.invoke("check", now="2026-11-25T04:15:00+01:00")
    assert "no enrolled learners are published" in check.stdout + check.stderr
    moodle.grant("SELECT", "mdl_user_enrolments")
    project.invoke("run", now="2026-11-25T04:20:00+01:00", check=0)
    # The days already closed were never counted, so the first run that can read the tables counts them.
    assert project.serving()[0][-2:] == (2, 3 / 2)


def test_a_postgresql_store_of_schema_11_gets_the_columns_in_place_and_its_dashboards_keep_reading(
        tmp_path, moodle, moodle_reader, postgres_server):
    """Schema version 12 adds the enrolment columns at the end of every serving view, replaced in place (the by-name
    views too: after course_name): a role granted before the upgrade reads them, and a view a dashboard built over a
    by-name view neither stops the migration nor goes."""
    import psycopg

    from helpers.downgrade import before_enrolments
    from lms_refresh.store import tables
    from lms_refresh.store.postgres_schema import POSTGRESQL

    load_two_days(moodle)
    for user in (101, 102, 103):
        moodle.enrol(user, 7)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres_server)
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    database = project.database
    for sql in before_enrolments(POSTGRESQL) + [
            f"DELETE FROM lms_refresh.schema_version WHERE version >= {tables.ENROLMENTS_SINCE}",
            f"UPDATE lms_refresh.meta SET value = '{tables.ENROLMENTS_SINCE - 1}' WHERE key = 'schema_version'"]:
        postgres_server.admin(sql, database)
    postgres_server.admin("DO $$ BEGIN CREATE ROLE enrolment_dashboard LOGIN PASSWORD 'dash'; "
                          "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    for grant in ("GRANT USAGE ON SCHEMA lms_refresh_serving TO enrolment_dashboard",
                  "GRANT SELECT ON ALL TABLES IN SCHEMA lms_refresh_serving TO enrolment_dashboard",
                  "CREATE VIEW public.enrolment_chart AS SELECT day, course_name, active_learners "
                  "FROM lms_refresh_serving.daily_metrics_by_name",
                  "GRANT SELECT ON public.enrolment_chart TO enrolment_dashboard"):
        postgres_server.admin(grant, database)
    project.invoke("run", now="2026-11-25T04:20:00+01:00", check=0)  # upgrades, and reads the lookback again
    url = f"host=127.0.0.1 port={postgres_server.port} dbname={database} user=enrolment_dashboard password=dash"
    with psycopg.connect(url, autocommit=True) as db:
        assert db.execute("SELECT day::text, active_learners, enrolled_learners, active_share "
                          "FROM lms_refresh_serving.daily_metrics_by_name ORDER BY day").fetchall() == [
            ("2026-11-23", 3, 3, 1.0), ("2026-11-24", 3, None, None)]  # course 9 has no student
        columns = [row[0] for row in db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'lms_refresh_serving' AND "
            "table_name = 'daily_metrics_by_name' ORDER BY ordinal_position").fetchall()]
        assert columns[-3:] == ["course_name", "enrolled_learners", "active_share"]
        assert db.execute("SELECT enrolled_learners FROM lms_refresh_serving.weekly_metrics "
                          "ORDER BY course").fetchall() == [(3,), (None,)]
        assert db.execute("SELECT enrolled_learners FROM lms_refresh_serving.site_daily_metrics "
                          "ORDER BY day").fetchall() == [(3,), (3,)]  # the 24th: course 7's, enrolled though idle
        assert db.execute("SELECT active_learners FROM public.enrolment_chart").fetchall() == [(3,), (3,)]


def with_term(project, name, first, last):
    """The project's configuration with one [[terms]] table (replacing any)."""
    text = project.config.read_text().split("\n[[terms]]")[0].rstrip("\n") + "\n"
    project.config.write_text(text + f'\n[[terms]]\nname = "{name}"\nfirst_day = "{first}"\nlast_day = "{last}"\n')


def test_a_settled_term_whose_days_change_is_counted_again(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)  # course 7 active on the 23rd
    enrolled = Enrolled(moodle)
    enrolled.enrol(101, 7)
    enrolled.enrol(102, 7, start=at("2026-11-01T00:00:00+01:00"), end=at("2026-11-20T12:00:00+01:00"))
    enrolled.enrol(103, 7, start=at("2026-11-22T10:00:00+01:00"))
    enrolled.enrol(104, 7, start=at("2026-11-23T09:00:00+01:00"))
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    with_term(project, "Late autumn", "2026-11-20", "2026-11-23")
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    terms = {row[0]: row[-2:] for row in project.grain_rows("term") if row[3] == course_iri(7)}
    assert terms == {"Late autumn": (4, 3 / 4)} == {"Late autumn": (enrolled.published(7, "2026-11-20",
                                                                                           "2026-11-23"), 3 / 4)}
    assert ("term", "Late autumn", 1) in project.query("SELECT grain, period, settled FROM enrolled_periods")
    with_term(project, "Late autumn", "2026-11-22", "2026-11-23")  # 102's enrolment ended before: out
    project.invoke("run", now="2026-11-25T04:20:00+01:00", check=0)
    terms = {row[0]: row[-2:] for row in project.grain_rows("term") if row[3] == course_iri(7)}
    assert terms == {"Late autumn": (3, 3 / 3)}
    assert len(enrolled.recount(7, "2026-11-22", "2026-11-23")) == 3
