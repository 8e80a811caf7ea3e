"""The Moodle source against a real MariaDB holding Moodle's tables as its installer types them there, and the
same behaviours on PostgreSQL and MariaDB side by side: the same rows publish the same tables."""

import contextlib
import re
import sqlite3

import pytest

from helpers.moodle_mariadb import MariaDBMoodle
from helpers.moodledb import EXPECTED_TWO_DAYS, course_iri, load_two_days, moodle_project, unix
from helpers.ports import unused_port
from helpers.publication import publication
from lms_refresh.store import tables

NOW = "2026-11-25T04:15:00+01:00"


def _moodle(request, kind, **options):
    """(a new Moodle database of `kind`, the reader's password file)."""
    if kind == "mariadb":
        reader = request.getfixturevalue("mariadb_reader")  # the account first: the new database grants to it
        return MariaDBMoodle(request.getfixturevalue("mariadb_server"), **options), reader
    return request.getfixturevalue("moodle"), request.getfixturevalue("moodle_reader")


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgresql),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def any_moodle(request):
    """A Moodle database on each kind of server in turn, and its reader's password file."""
    return _moodle(request, request.param)


@pytest.fixture
def mariadb_moodle(request, mariadb_server):
    return _moodle(request, "mariadb")


def load_hostile(m):
    """Rows every Moodle database holds sooner or later, beyond load_two_days's."""
    a = "2026-11-23T15:00:00+01:00"
    m.log("viewed", 110, None, a)  # a log row without a course (a site-level event logged with NULL)
    # PHP-serialised `other`, as Moodle 2.x wrote it and upgraded sites keep: a pass, and a grade of 7.5 / 10.
    m.log("cm_completion", 111, 7, a, related=111,
          other='a:2:{s:13:"relateduserid";i:111;s:15:"completionstate";i:2;}')
    m.log("graded", 900, 7, a, related=111,
          other='a:3:{s:6:"itemid";i:5;s:10:"overridden";b:0;s:10:"finalgrade";d:7.5;}')
    m.log("viewed", 112, 7, a, other={"note": "été 😀 数学"})  # characters of every width, in LONGTEXT
    m.category(3, "Économie & gestion — 经济")
    m.course(7, "Mathématiques 😀 数学 L1", "MATH-L1", category=3, startdate=unix("2026-09-01T00:00:00+02:00"))
    m.course(9, "Ελληνικά", "GR-1", category=3)


def published(project):
    """Every table of the SQLite publication, rows sorted, without the run's own time and identity."""
    with contextlib.closing(sqlite3.connect(f"file:{publication(project)}?mode=ro", uri=True)) as db:
        names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        tables = {}
        for name in names:
            # The freshness row's published_at is when each run committed: the only value that is the run's own time.
            cursor = db.execute(f'SELECT * FROM "{name}"' if name != "freshness" else "SELECT data_as_of, "
                                "data_as_of_utc, last_success, timezone, schema_version FROM freshness")
            columns = [column[0] for column in cursor.description]
            rows = sorted(cursor.fetchall(), key=repr)
            tables[name] = (columns, rows)
    return tables


def test_mariadb_and_postgresql_holding_the_same_rows_publish_identical_tables(tmp_path, request):
    projects = []
    for kind in ("postgresql", "mariadb"):
        moodle, reader = _moodle(request, kind)
        load_two_days(moodle)
        load_hostile(moodle)
        moodle.log("viewed", 106, 7, "2026-11-23T18:00:00+01:00", id=23)  # ids 1..21, then 23
        project = moodle_project(tmp_path / kind, moodle, reader)
        project.invoke("run", now=NOW, check=0)
        moodle.log("page", 204, 9, "2026-11-24T12:30:00+01:00", id=22)  # committed late, below the watermark
        project.invoke("run", now="2026-11-26T04:15:00+01:00", check=0)
        assert project.meta()["watermark"] == "24"
        projects.append(project)
    postgresql, mariadb = (published(project) for project in projects)
    # Every table, the publication's digest of the whole included: the same bytes from either database.
    assert postgresql == mariadb and len(mariadb["daily_metrics"][1]) == 2 and len(mariadb["courses"][1]) == 2
    assert len(mariadb["site_daily_metrics"][1]) == 2 and mariadb["freshness"][1] == [
        ("2026-11-26T04:15:00+01:00", "2026-11-26T03:15:00Z", "2026-11-26T03:15:00Z", "Europe/Paris",
         tables.SCHEMA_VERSION)]
    assert projects[0].serving() == projects[1].serving()
    names = dict((row[0], row[1:4]) for row in published(projects[1])["courses"][1])
    assert names[course_iri(7)] == ("Mathématiques 😀 数学 L1", "MATH-L1", "Économie & gestion — 经济")
    assert names[course_iri(9)][0] == "Ελληνικά"


def test_a_legacy_utf8_database_reads_without_mojibake(tmp_path, request, mariadb_server):
    """Sites installed before Moodle 3.3 ran on MySQL's 3-byte utf8; the connection speaks utf8mb4 to both."""
    moodle, reader = _moodle(request, "mariadb", charset="utf8mb3", collation="utf8mb3_unicode_ci")
    assert moodle.sql("SELECT @@character_set_database") == [("utf8mb3",)]
    load_two_days(moodle)
    moodle.category(3, "Économie — 经济")
    moodle.course(7, "Mathématiques 数学 Ελληνικά", "MATH")
    project = moodle_project(tmp_path / "p", moodle, reader)
    project.invoke("run", now=NOW, check=0)
    assert project.serving() == EXPECTED_TWO_DAYS
    with contextlib.closing(sqlite3.connect(f"file:{publication(project)}?mode=ro", uri=True)) as db:
        assert db.execute("SELECT name FROM courses WHERE course = ?", (course_iri(7),)).fetchall() == [
            ("Mathématiques 数学 Ελληνικά",)]


def test_the_lookback_rereads_late_ids_and_a_restored_log_waits_for_new_ids(tmp_path, any_moodle):
    moodle, reader = any_moodle
    load_two_days(moodle)  # ids 1..17
    moodle.log("page", 205, 9, "2026-11-24T12:00:00+01:00", id=19)  # id 18 is taken by a transaction not yet done
    project = moodle_project(tmp_path / "p", moodle, reader, id_lookback=10)
    project.invoke("run", now=NOW, check=0)
    assert project.meta()["watermark"] == "20"
    moodle.log("page", 204, 9, "2026-11-24T12:30:00+01:00", id=18)  # the late commit, below the watermark
    project.invoke("run", now="2026-11-26T04:15:00+01:00", check=0)
    rows = {row[:2]: row for row in project.serving()}
    assert rows[("2026-11-24", course_iri(9))][2:4] == (5, 5) and project.runs()[-1][3:] == ("10", "20")
    # A database restored from a backup older than the watermark: warned, nothing read until ids pass it.
    moodle.sql("DELETE FROM mdl_logstore_standard_log WHERE id > 5")
    dump = project.dump()
    result = project.invoke("run", now="2026-11-27T04:15:00+01:00", check=0)
    assert "was the Moodle database restored from an older backup?" in result.stderr and project.dump() == dump


def test_a_lagging_replica_is_caught_up_by_the_lookback_and_beyond_it_by_a_backfill(tmp_path, any_moodle):
    """A replica applies the primary's commits late: rows appear there below the watermark after a run. Those
    within id_lookback of it are read by the next run; those further below only by a backfill of their days."""
    moodle, reader = any_moodle
    load_two_days(moodle)  # ids 1..17; on the 24th in course 9, learners 201..203
    on_the_24th = "2026-11-24T08:00:00+01:00"
    lagging = {18, 19, 30, 31}  # committed on the primary, not yet applied on the replica
    for number in set(range(20, 40)) - lagging:
        moodle.log("viewed", 300 + number, 9, on_the_24th, id=number)
    project = moodle_project(tmp_path / "p", moodle, reader, id_lookback=15)
    project.invoke("run", now=NOW, check=0)
    assert project.meta()["watermark"] == "40"

    def learners():
        return {row[:2]: row for row in project.serving()}[("2026-11-24", course_iri(9))][2]

    assert learners() == 3 + 18
    for number in sorted(lagging):  # the replica catches up
        moodle.log("viewed", 300 + number, 9, on_the_24th, id=number)
    project.invoke("run", now="2026-11-26T04:15:00+01:00", check=0)
    assert project.runs()[-1][3:] == ("25", "40")  # watermark 40 less the lookback of 15
    assert learners() == 3 + 18 + 2  # 30 and 31; 18 and 19 lay below the lookback
    project.invoke("backfill", "--since", "2026-11-24", "--until", "2026-11-25", now="2026-11-26T05:00:00+01:00",
                   check=0)
    assert learners() == 3 + 18 + 4 and project.meta()["watermark"] == "40"


def test_mariadb_failures_exit_with_their_codes_in_one_sentence(tmp_path, mariadb_moodle, mariadb_server):
    moodle, reader = mariadb_moodle
    load_two_days(moodle)
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    fake = tmp_path / "nodriver" / "MySQLdb"  # a Python where the driver is not installed
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named MySQLdb')\n")
    with unused_port() as port:
        cases = [
            ({"password_file": str(wrong)}, None, 78, "refused the credentials (Access denied for user"),
            ({"url": f"mariadb://moodle_reader@127.0.0.1:{port}/{moodle.name}"}, None, 69, "is unreachable"),
            ({"url": f"mysql://moodle_reader@127.0.0.1:{mariadb_server.port}/nosuchdb"}, None, 78,
             "refused the database (Access denied for user"),
            ({"prefix": "mdl2_"}, None, 78, "refused to let us read mdl2_logstore_standard_log (SELECT command denied"),
            ({}, {"PYTHONPATH": str(fake.parent)}, 78,
             "needs the Python package MySQLdb, which cannot be imported: install the Debian package python3-mysqldb "
             "(apt install python3-mysqldb), or in a virtualenv pip install 'lms-refresh[mysql]'."),
        ]
        for number, (settings, env, code, message) in enumerate(cases):
            project = moodle_project(tmp_path / f"p{number}", moodle, reader, **settings)
            run = project.cli if env else project.invoke  # a driver taken away: a process of its own
            result = run("run", now=NOW, env=env)
            assert result.returncode == code and message in result.stderr, (settings, result.stderr)
            assert "Traceback" not in result.stderr and "moodle-secret" not in result.stderr
            assert project.serving() == [] and "watermark" not in (project.meta() if project.has_store() else {})
            assert run("check", env=env).returncode == code


def test_check_names_the_server_its_grants_and_a_read_only_session(tmp_path, mariadb_moodle, mariadb_server):
    moodle, reader = mariadb_moodle
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, reader)
    out = project.invoke("check", check=0).stdout
    assert f"Moodle database mariadb://moodle_reader@127.0.0.1:{mariadb_server.port}/{moodle.name}: reachable, " \
           "mdl_logstore_standard_log readable, newest log id 17" in out
    # The server's own version: 10.11 on Debian 12, 11.8 on Debian 13.
    [server] = [line for line in out.splitlines() if re.search(r"Moodle database server: MariaDB 1\d\.\d+", line)]
    assert "session read-only: yes, grants: USAGE ON *.*; " in server
    assert f"SELECT ON `{moodle.name}`.`mdl_logstore_standard_log`" in server and "PASSWORD" not in server
    assert "may write" not in out and not project.has_store()
    moodle.grant("INSERT, DELETE", "mdl_logstore_standard_log")
    out = project.invoke("check", check=0).stdout
    assert "warning: source.url's user may write mdl_logstore_standard_log" in out
    assert "session read-only: yes" in out
    project.invoke("run", now=NOW, check=0)
    assert project.serving() == EXPECTED_TWO_DAYS
    assert moodle.sql("SELECT COUNT(*) FROM mdl_logstore_standard_log") == [(17,)]


def test_the_session_refuses_to_write_whatever_the_grants(mariadb_moodle, tmp_path):
    from lms_refresh.errors import UnavailableError
    from lms_refresh.sources.moodle_database import open_database

    moodle, reader = mariadb_moodle
    moodle.grant("INSERT", "mdl_grade_items")
    database = open_database(moodle.url, reader, {}, 60)
    try:
        with pytest.raises(UnavailableError, match=r"failed \(Cannot execute statement in a READ ONLY transaction\)"):
            database.query("INSERT INTO mdl_grade_items (id) VALUES (99)", (), "mdl_grade_items", "log")
        assert database.may_write("mdl_grade_items") and not database.may_write("mdl_course")
    finally:
        database.close()
    assert moodle.sql("SELECT COUNT(*) FROM mdl_grade_items") == [(0,)]


def test_check_weighs_bootstrap_days_against_moodles_loglifetime(tmp_path, any_moodle):
    moodle, reader = any_moodle
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, reader)  # bootstrap_days = 30
    out = project.invoke("check", check=0).stdout
    assert "how long Moodle keeps its log is not known (mdl_config_plugins is not readable" in out
    moodle.log_lifetime(10)
    out = project.invoke("check", check=0).stdout
    assert ("warning: Moodle deletes its log rows after 10 days (logstore_standard's loglifetime) but "
            "window.bootstrap_days is 30: a first run finds nothing older than 10 days") in out
    project.configure(extra_top="min_cell_size = 2", bootstrap_days=7)
    out = project.invoke("check", check=0).stdout
    assert "Moodle keeps its log 10 days (loglifetime); window.bootstrap_days (7) is within it" in out


def test_a_backfill_or_rebuild_says_how_far_back_the_log_goes(tmp_path, any_moodle):
    moodle, reader = any_moodle
    load_two_days(moodle)  # the oldest row: 2026-11-23 10:00 in Paris
    moodle.log_lifetime(365)
    project = moodle_project(tmp_path / "p", moodle, reader)
    result = project.invoke("backfill", "--since", "2026-11-23T12:00", "--until", "2026-11-25", now=NOW, check=0)
    assert ("Moodle's log mdl_logstore_standard_log goes back to 2026-11-23T09:00:00.000000Z, and Moodle keeps it "
            "365 days (loglifetime).") in result.stderr
    assert "further back" not in result.stderr
    result = project.invoke("rebuild", "--since", "2026-11-01", now=NOW, check=0)
    assert ("The window starts at 2026-10-31T23:00:00.000000Z, further back than Moodle's log reaches "
            "(mdl_logstore_standard_log goes back to 2026-11-23T09:00:00.000000Z, and Moodle keeps it 365 days "
            "(loglifetime)): nothing older than its oldest row is read") in result.stderr
    assert project.serving() == EXPECTED_TWO_DAYS


def test_a_grant_on_the_whole_server_or_a_database_pattern_counts_as_writable(mariadb_moodle, mariadb_server):
    """Write grants reach the log table from *.*, from a LIKE pattern naming the database, or on the table itself;
    one on another database or another table does not."""
    from lms_refresh.sources.moodle_database import open_database

    moodle, reader = mariadb_moodle
    database = open_database(moodle.url, reader, {}, 60)
    log = "mdl_logstore_standard_log"
    cases = [("UPDATE ON `nomoodle`.*", False), (f"DELETE ON `{moodle.name}x`.*", False),
             (f"INSERT ON `{moodle.name}`.`mdl_course`", False), (f"UPDATE (`other`) ON `{moodle.name}`.`{log}`", True),
             ("ALL PRIVILEGES ON `t%`.*", True), ("DELETE ON *.*", True)]
    try:
        for grant, writable in cases:
            privileges, _, target = grant.partition(" ON ")
            mariadb_server.admin(f"GRANT {privileges} ON {target} TO moodle_reader@'%'")
            try:
                database.close()
                assert database.may_write(log) is writable, grant
            finally:
                mariadb_server.admin(f"REVOKE {privileges} ON {target} FROM moodle_reader@'%'")
    finally:
        database.close()


def test_a_statement_past_the_timeout_exits_69_and_commits_nothing(tmp_path, mariadb_moodle, mariadb_server):
    """The log locked by another session (a long ALTER, a backup's lock): the session's max_statement_time ends
    the read after source.timeout, not the server's lock_wait_timeout (a year by default)."""
    import MySQLdb

    moodle, reader = mariadb_moodle
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, reader, timeout="1s")
    holder = MySQLdb.connect(unix_socket=mariadb_server.socket, user="root", db=moodle.name)
    try:
        holder.cursor().execute("LOCK TABLES mdl_logstore_standard_log WRITE")
        result = project.invoke("run", now=NOW)
    finally:
        holder.close()
    assert result.returncode == 69, result.stderr
    assert "is unreachable or dropped the connection, or timed out (Query execution was interrupted " \
           "(max_statement_time exceeded))" in result.stderr
    assert project.serving() == [] and "watermark" not in (project.meta() if project.has_store() else {})
