"""The Moodle source against a real PostgreSQL holding Moodle's own log table."""

import datetime as dt
import json

import pytest

from conftest import Project
from lrsserver import free_port

SITE = "https://moodle.example.edu"
PARIS = "Europe/Paris"

# logstore_standard_log as Moodle's installer creates it on PostgreSQL, from
# admin/tool/log/store/standard/db/install.xml: int(10) is BIGINT, int(1) SMALLINT,
# char NOT NULL gets DEFAULT '', and the index names are Moodle's generated ones.
MOODLE_DDL = """
CREATE TABLE mdl_logstore_standard_log (
    id BIGSERIAL,
    eventname VARCHAR(255) NOT NULL DEFAULT '',
    component VARCHAR(100) NOT NULL DEFAULT '',
    action VARCHAR(100) NOT NULL DEFAULT '',
    target VARCHAR(100) NOT NULL DEFAULT '',
    objecttable VARCHAR(50),
    objectid BIGINT,
    crud VARCHAR(1) NOT NULL DEFAULT '',
    edulevel SMALLINT NOT NULL,
    contextid BIGINT NOT NULL,
    contextlevel BIGINT NOT NULL,
    contextinstanceid BIGINT NOT NULL,
    userid BIGINT NOT NULL,
    courseid BIGINT,
    relateduserid BIGINT,
    anonymous SMALLINT NOT NULL DEFAULT 0,
    other TEXT,
    timecreated BIGINT NOT NULL,
    origin VARCHAR(10),
    ip VARCHAR(45),
    realuserid BIGINT,
    CONSTRAINT mdl_logsstanlog_id_pk PRIMARY KEY (id)
);
CREATE INDEX mdl_logsstanlog_tim_ix ON mdl_logstore_standard_log (timecreated);
CREATE INDEX mdl_logsstanlog_couanotim_ix ON mdl_logstore_standard_log (courseid, anonymous, timecreated);
CREATE INDEX mdl_logsstanlog_useconconcr_ix
    ON mdl_logstore_standard_log (userid, contextlevel, contextinstanceid, crud, edulevel, timecreated);
"""

# eventname -> (component, action, target, crud, edulevel), as Moodle logs them
KINDS = {
    "viewed": ("\\core\\event\\course_viewed", "core", "viewed", "course", "r", 2),
    "page": ("\\mod_page\\event\\course_module_viewed", "mod_page", "viewed", "course_module", "r", 2),
    "quiz": ("\\mod_quiz\\event\\attempt_submitted", "mod_quiz", "submitted", "attempt", "u", 2),
    "assign": ("\\mod_assign\\event\\assessable_submitted", "mod_assign", "submitted", "assessable", "u", 2),
    "cm_completion": ("\\core\\event\\course_module_completion_updated", "core", "updated",
                      "course_module_completion", "u", 2),
    "course_completed": ("\\core\\event\\course_completed", "core", "completed", "course", "u", 2),
    "graded": ("\\core\\event\\user_graded", "core", "graded", "user", "u", 1),
    "module_created": ("\\core\\event\\course_module_created", "core", "created", "course_module", "c", 1),
    "loggedin": ("\\core\\event\\user_loggedin", "core", "loggedin", "user", "r", 0),
    "feedback": ("\\mod_feedback\\event\\response_submitted", "mod_feedback", "submitted", "response", "c", 2),
}


def unix(text):
    return int(dt.datetime.fromisoformat(text).timestamp())


@pytest.fixture(scope="session")
def moodle_reader(postgres_server, tmp_path_factory):
    """A role that may only read Moodle's log, with its password in a file."""
    postgres_server.admin("CREATE ROLE moodle_reader LOGIN PASSWORD 'moodle-secret'")
    path = tmp_path_factory.mktemp("moodle") / "moodle-password"
    path.write_text("moodle-secret\n")
    return str(path)


class MoodleDatabase:
    def __init__(self, server):
        self.server = server
        self.name = server.new_database()
        server.admin(MOODLE_DDL, self.name)
        server.admin("GRANT SELECT ON mdl_logstore_standard_log TO moodle_reader", self.name)

    @property
    def url(self):
        return f"postgresql://moodle_reader@127.0.0.1:{self.server.port}/{self.name}"

    def log(self, kind, user, course, at, related=None, other=None, anonymous=0, realuser=None, id=None):
        """Insert one log row the way Moodle writes it; `id` set by hand simulates a late commit."""
        eventname, component, action, target, crud, edulevel = KINDS[kind]
        values = {
            "eventname": eventname, "component": component, "action": action, "target": target, "crud": crud,
            "edulevel": edulevel, "contextid": 100 + (course or 0), "contextlevel": 50, "contextinstanceid": course or 0,
            "userid": user, "courseid": course, "relateduserid": related, "anonymous": anonymous,
            "other": json.dumps(other) if other is not None else "null", "timecreated": unix(at),
            "origin": "web", "ip": "192.0.2.1", "realuserid": realuser,
        }
        if id is not None:
            values["id"] = id
        columns = ", ".join(values)
        literals = ", ".join("NULL" if v is None else str(v) if isinstance(v, int) else "'" + v.replace("'", "''") + "'"
                             for v in values.values())
        return self.server.admin(f"INSERT INTO mdl_logstore_standard_log ({columns}) VALUES ({literals}) RETURNING id",
                                 self.name)[0][0]


@pytest.fixture
def moodle(postgres_server, moodle_reader):
    return MoodleDatabase(postgres_server)


def moodle_project(root, moodle, reader_password, postgres=None, **settings):
    source = {"type": "moodle", "url": moodle.url, "password_file": reader_password, "site_url": SITE,
              "id_lookback": 50, "batch_size": 3}  # tiny pages, so paging is exercised
    source.update(settings)
    project = Project(root, postgres, source=source)
    project.configure(extra_top="min_cell_size = 2")
    return project


def completion(state, user):
    return {"relateduserid": user, "overrideby": None, "completionstate": state}


def course_iri(course):
    return f"{SITE}/course/view.php?id={course}"


def load_two_days(m):
    """Rows for two local days in two courses, with every kind of row the mapping excludes."""
    a = "2026-11-23T10:00:00+01:00"
    m.log("viewed", 101, 7, a)
    m.log("quiz", 101, 7, a, related=101)
    m.log("quiz", 102, 7, a, related=102)
    m.log("assign", 102, 7, a)
    m.log("cm_completion", 103, 7, a, related=103, other=completion(1, 103))
    m.log("cm_completion", 101, 7, a, related=101, other=completion(2, 101))
    m.log("graded", 900, 7, a, related=102, other={"itemid": 5, "overridden": False, "finalgrade": 8.0})
    # Not learner activity: a teacher's edit, anonymous feedback, not logged in, the guest,
    # "logged in as", the site course, a site-level login.
    m.log("module_created", 900, 7, a)
    m.log("feedback", 104, 7, a, anonymous=1)
    m.log("viewed", 0, 7, a)
    m.log("viewed", 1, 7, a)
    m.log("viewed", 105, 7, a, realuser=2)
    m.log("viewed", 101, 1, a)
    m.log("loggedin", 101, 0, a)
    b = "2026-11-24T09:00:00+01:00"
    m.log("cm_completion", 201, 9, b, related=201, other=completion(3, 201))
    m.log("course_completed", 202, 9, b, related=202)
    m.log("page", 203, 9, "2026-11-23T23:30:00+00:00")  # 00:30 on the 24th in Paris


EXPECTED_TWO_DAYS = [
    # day, course, learners, statements, attempts, completions, passed, failed, score, duration, suppressed
    ("2026-11-23", course_iri(7), 3, 7, 3, 2, None, 0, None, None, 1),  # one passed learner < 2
    ("2026-11-24", course_iri(9), 3, 3, 0, 2, 0, None, None, None, 1),  # one failed learner < 2
]


def test_moodle_metrics_match_hand_computed_ones(tmp_path, moodle, moodle_reader, store_kind, request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres)
    project.cli("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert project.serving() == EXPECTED_TWO_DAYS
    assert project.meta()["watermark"] == "18" and project.meta()["cursor_kind"] == "log-id"
    assert project.runs()[-1] == ("run", "success", 0, "1", "18")


def test_rows_written_after_their_time_and_late_commits_are_picked_up(tmp_path, moodle, moodle_reader):
    """The buffered writer inserts rows after their timecreated; a transaction may commit an older id late."""
    load_two_days(moodle)  # ids 1..17
    # A request's transaction takes id 18 but commits only after the next run has begun.
    assert moodle.server.admin("SELECT nextval('mdl_logstore_standard_log_id_seq')", moodle.name) == [(18,)]
    moodle.log("page", 205, 9, "2026-11-24T12:00:00+01:00")  # id 19
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, id_lookback=10)
    project.cli("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert project.meta()["watermark"] == "20"
    moodle.log("page", 204, 9, "2026-11-24T12:30:00+01:00", id=18)  # the late commit, below the watermark
    # Written on the 25th (id 20), but it happened on the 23rd: the 23rd is recomputed.
    moodle.log("viewed", 106, 7, "2026-11-23T18:00:00+01:00")
    project.cli("run", now="2026-11-26T04:15:00+01:00", check=0)
    rows = {row[:2]: row for row in project.serving()}
    assert rows[("2026-11-23", course_iri(7))][2:4] == (4, 8)
    assert rows[("2026-11-24", course_iri(9))][2:4] == (5, 5)
    assert project.runs()[-1][3:] == ("10", "21")  # watermark 20 less the lookback of 10
    # Re-reading the lookback twice more changes nothing.
    dump = project.dump()
    project.cli("run", now="2026-11-27T04:15:00+01:00", check=0)
    assert project.dump() == dump
    once = moodle_project(tmp_path / "once", moodle, moodle_reader)
    once.cli("run", now="2026-11-27T04:15:00+01:00", check=0)
    assert once.dump() == dump


def test_backfill_reads_by_time_and_leaves_the_id_watermark(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.cli("backfill", "--since", "2026-11-24", "--until", "2026-11-25", now="2026-11-25T04:15:00+01:00",
                check=0)
    assert project.serving() == EXPECTED_TWO_DAYS[1:] and "watermark" not in project.meta()
    project.cli("run", now="2026-11-25T04:15:00+01:00", check=0)
    project.cli("backfill", "--since", "2026-11-23", "--until", "2026-11-25", now="2026-11-25T04:16:00+01:00",
                check=0)
    assert project.serving() == EXPECTED_TWO_DAYS and project.meta()["watermark"] == "18"
    status = project.cli("status", check=0).stdout
    assert "watermark:    18 (log-id)" in status


def test_bootstrap_starts_at_the_first_row_within_bootstrap_days(tmp_path, moodle, moodle_reader):
    moodle.log("viewed", 301, 7, "2026-09-01T10:00:00+02:00")
    moodle.log("viewed", 302, 7, "2026-09-01T10:00:00+02:00")
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.cli("run", now="2026-11-25T04:15:00+01:00", check=0)  # bootstrap_days = 30
    assert project.serving() == EXPECTED_TWO_DAYS
    assert project.runs()[-1][3:] == ("3", "20")


def test_moodle_failures_exit_with_their_codes_and_commit_nothing(tmp_path, moodle, moodle_reader, postgres_server):
    load_two_days(moodle)
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    cases = [
        ({"password_file": str(wrong)}, 78, "refused the credentials"),
        ({"url": f"postgresql://moodle_reader@127.0.0.1:{free_port()}/{moodle.name}"}, 69, "is unreachable"),
        ({"prefix": "mdl2_"}, 78, "has no table mdl2_logstore_standard_log; check source.prefix"),
    ]
    for number, (settings, code, message) in enumerate(cases):
        project = moodle_project(tmp_path / f"p{number}", moodle, moodle_reader, **settings)
        result = project.cli("run", now="2026-11-25T04:15:00+01:00")
        assert result.returncode == code and message in result.stderr, (settings, result.stderr)
        assert "moodle-secret" not in result.stderr and "nope" not in result.stderr
        assert project.serving() == [] and "watermark" not in (project.meta() if project.has_store() else {})
        assert project.cli("check").returncode == code


def test_check_reads_without_writing_and_warns_about_a_writable_role(tmp_path, moodle, moodle_reader,
                                                                      postgres_server):
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    out = project.cli("check", check=0).stdout
    assert f"Moodle database postgresql://moodle_reader@127.0.0.1:{postgres_server.port}/{moodle.name}: " \
           "reachable, mdl_logstore_standard_log readable, newest log id 17" in out
    assert "may write" not in out and not project.has_store()
    postgres_server.admin("GRANT INSERT ON mdl_logstore_standard_log TO moodle_reader", moodle.name)
    assert "warning: source.url's user may write mdl_logstore_standard_log" in project.cli("check", check=0).stdout
    project.cli("run", now="2026-11-25T04:15:00+01:00", check=0)  # and the session itself stays read-only
    assert postgres_server.admin("SELECT COUNT(*) FROM mdl_logstore_standard_log", moodle.name) == [(17,)]


def test_a_store_follows_one_kind_of_cursor(tmp_path, moodle, moodle_reader):
    project = Project(tmp_path / "p")
    project.cli("run", now="2026-11-25T04:15:00+01:00", check=0)  # an (empty) xAPI run: a time watermark
    project.source_settings = {"type": "moodle", "url": moodle.url, "password_file": moodle_reader,
                               "site_url": SITE}
    project.configure()
    result = project.cli("run", now="2026-11-25T04:16:00+01:00")
    assert result.returncode == 78
    assert "The store's watermark is a stored-time cursor but source type 'moodle' counts by log-id" in result.stderr
