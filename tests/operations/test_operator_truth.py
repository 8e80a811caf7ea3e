"""Operator commands and monitoring tell the truth (issue 20, class 5).

A watermark set by hand is not a run; every command that takes the lock says the
same thing about a held one; the failure alert reports this failure, not the
previous one; `check` fails where the run would; `status` sees a dropped view.
"""

import json
import os
import socket

import pytest

from helpers.project import Project
from helpers.statements import statement
from lms_refresh.ops.alerts import compose, failed_row
from lms_refresh.run.lock import RunLock

NOW = "2026-11-03T04:15:00+01:00"  # a Tuesday
LATER = "2026-11-03T06:15:00+01:00"


def learners(count, prefix="u", timestamp="2026-11-02T10:00:00Z"):
    return [statement(learner=f"{prefix}{i}", timestamp=timestamp) for i in range(count)]


def test_a_watermark_set_is_recorded_but_hides_no_failure_and_is_no_success(project):
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    project.write("b.ndjson", ["garbage"] * 5 + learners(1, "v", "2026-11-03T04:20:00Z"))
    assert project.invoke("run", now=LATER).returncode == 65
    project.invoke("watermark", "set", "2026-11-03T03:00", now=LATER, check=0)
    check = project.invoke("status", "--check", now=LATER)
    assert check.returncode == 1, check.stdout  # WARNING: the last run failed
    assert check.stdout.startswith("LMS-REFRESH WARNING - the last run (run, started ")
    assert "exit status 65" in check.stdout
    status = json.loads(project.invoke("status", "--json", now=LATER, check=0).stdout)
    assert (status["last_run"]["kind"], status["last_run"]["exit_code"]) == ("run", 65)
    assert status["last_success"]["started_at"].startswith("2026-11-03T03:15")
    assert status["watermark_set"]["kind"] == "watermark-set"
    assert status["watermark_set"]["window_until"] == "2026-11-03T02:00:00.000000Z"
    text = project.invoke("status", now=LATER, check=0).stdout
    assert "set by hand:  watermark from 2026-11-03T03:15:00.000000Z to 2026-11-03T02:00:00.000000Z at " \
           "2026-11-03T05:15:00.000000Z (watermark set; not a run)" in text
    assert project.runs()[-1][:3] == ("watermark-set", "watermark-set", 0)  # the run log keeps it


def test_a_watermark_set_after_a_success_stays_ok_and_does_not_refresh_staleness(project):
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    project.invoke("watermark", "set", "2026-11-03T03:00", now=LATER, check=0)
    assert project.invoke("status", "--check", now=LATER).returncode == 0
    # Two weekdays later with no run since: stale, whatever was set by hand meanwhile.
    project.invoke("watermark", "set", "2026-11-03T03:00", now="2026-11-05T06:00:00+01:00", check=0)
    stale = project.invoke("status", "--check", now="2026-11-05T07:00:00+01:00")
    assert stale.returncode == 2 and "stale" in stale.stdout


OPERATOR_COMMANDS = {
    "backfill": (["backfill", "--since", "2026-11-01", "--until", "2026-11-03"], "nothing was backfilled"),
    "rebuild": (["rebuild", "--since", "2026-11-01"], "nothing was rebuilt"),
    "forget": (["forget", "--account-homepage", "https://lms.example.edu", "--account-name", "u1"],
               "nothing was forgotten"),
    "watermark set": (["watermark", "set", "2026-11-02T04:00"], "the watermark was not moved"),
}


@pytest.mark.parametrize("command", sorted(OPERATOR_COMMANDS))
def test_every_operator_command_against_a_held_lock_exits_69_saying_nothing_was_done(project, command):
    args, undone = OPERATOR_COMMANDS[command]
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    served, runs = project.serving(), project.runs()
    holder = f"pid {os.getpid()} on {socket.gethostname()}"
    with RunLock(str(project.state / "refresh.lock")):
        result = project.invoke(*args, now=NOW)
        dry = project.invoke(*args, "--dry-run", now=NOW) if command in ("backfill", "rebuild", "forget") else None
        timer = project.invoke("run", now=NOW)
    assert result.returncode == 69, (result.stdout, result.stderr)
    assert f"Another refresh holds the lock (held by {holder}); {undone} — run lms-refresh {command} again " \
           "when it has finished." in result.stderr
    assert "nothing to do" not in result.stderr and "Traceback" not in result.stderr
    if dry is not None:
        assert dry.returncode == 69 and undone in dry.stderr
    # The timer's run alone exits 0: its next start does its work (the contract).
    assert timer.returncode == 0
    assert "Another refresh holds the lock" in timer.stderr and "nothing to do" in timer.stderr
    assert project.serving() == served and project.runs() == runs


def test_a_held_lock_for_a_rebuild_is_a_lock_held_record_with_exit_status_69(sqlite_project):
    import logging

    records = []

    class Capture(logging.Handler):
        def emit(self, record):
            records.append(vars(record))

    project = sqlite_project
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    handler = Capture(logging.DEBUG)
    logging.getLogger("lms_refresh").addHandler(handler)
    try:
        with RunLock(str(project.state / "refresh.lock")):
            assert project.invoke("rebuild", "--since", "2026-11-01", now=NOW).returncode == 69
    finally:
        logging.getLogger("lms_refresh").removeHandler(handler)
    [record] = [r for r in records if r.get("MESSAGE_ID")]
    assert (record["OUTCOME"], record["EXIT_STATUS"], record["RUN_KIND"]) == ("lock-held", 69, "rebuild")
    assert record["levelname"] == "ERROR" and record["LOCK_HOLDER"].startswith(f"pid {os.getpid()}")


# The alert picks the run-log row only when it is this failure's.
EARLIER = {"run_id": "r1", "exit_code": 78, "window_since": "a", "window_until": "b", "message": "earlier failure",
           "started_at": "2026-11-02T03:15:00.000000Z"}


def test_an_earlier_failure_is_not_taken_for_one_that_left_no_row():
    import datetime as dt

    unit_started = dt.datetime(2026, 11, 3, 3, 15, tzinfo=dt.UTC)
    assert failed_row(EARLIER, 78, run_ids=None, started=None) is EARLIER  # nothing says otherwise
    assert failed_row(EARLIER, 65, run_ids=None, started=None) is None  # another exit status
    assert failed_row(EARLIER, 78, run_ids=set(), started=None) is None  # its journal names no run: none began
    assert failed_row(EARLIER, 78, run_ids={"r2"}, started=None) is None  # ... or another run
    # This invocation's run (or a retry's).
    assert failed_row(EARLIER, 78, run_ids={"r1", "r0"}, started=None) is EARLIER
    assert failed_row(EARLIER, 78, run_ids=None, started=unit_started) is None  # it started a day before the unit did
    later = dict(EARLIER, started_at="2026-11-03T03:15:00.500000Z")
    assert failed_row(later, 78, run_ids={"r1"}, started=unit_started) is later
    lines = [(6, "Starting ..."), (3, "The state directory /var/lib/lms-refresh belongs to user 'nobody' ...", None)]
    alert = compose("lms-refresh.service", "78", "exit-code", invocation="abc", last_run=EARLIER, lines=lines,
                    secrets=[], run_ids=set(), started=unit_started)
    assert alert["window"] is None and alert["message"].startswith("The state directory")


def test_the_alert_for_a_failure_before_the_run_log_does_not_report_the_previous_one(sqlite_project, tmp_path):
    from helpers.receiver import Receiver

    receiver = Receiver()
    try:
        project = sqlite_project
        (tmp_path / "hook-url").write_text(f"{receiver.url}/hook\n")
        project.config.write_text(project.config.read_text()
                                  + f'\n[alerts]\nwebhook_url_file = "{tmp_path / "hook-url"}"\n')
        project.write("a.ndjson", ["garbage"] * 3)
        assert project.invoke("run", now=NOW).returncode == 65  # a failure with its row
        os.chown(project.state, 12345, 12345)  # the state directory's owner: refused before the run log
        refused = project.invoke("run", now=LATER)
        assert refused.returncode == 78 and "belongs to uid 12345, which has no account" in refused.stderr
        assert project.invoke("alert", "--exit-status", "78").returncode == 0
        alert = json.loads(receiver.received[-1][1])
        assert alert["exit_status"] == 78 and alert["window"] is None and "malformed" not in alert["message"]
    finally:
        receiver.server.shutdown()


def test_check_fails_for_a_publication_group_that_does_not_exist(sqlite_project):
    project = sqlite_project
    project.config.write_text(project.config.read_text() + '\n[publication]\ngroup = "no-such-group-here"\n')
    result = project.invoke("check", now=NOW)
    assert result.returncode == 78
    assert ("The group 'no-such-group-here' named by publication.group does not exist; create it or fix the key "
            "— a run would refuse to start (78) for the same reason." in result.stderr), result.stderr
    assert "the store is committed" not in result.stderr  # check commits nothing
    run = project.invoke("run", now=NOW)
    assert run.returncode == 78  # as the run itself, before it starts
    assert "does not exist; create it or fix the key — nothing was done." in run.stderr, run.stderr


def test_check_passes_a_publication_group_that_exists(sqlite_project):
    import grp

    name = grp.getgrgid(os.getegid()).gr_name
    project = sqlite_project
    project.config.write_text(project.config.read_text() + f'\n[publication]\ngroup = "{name}"\n')
    result = project.invoke("check", now=NOW, check=0)
    # The run's own group: every new file gets it, no setgid directory is needed.
    assert f"ok  publication.group {name} (gid {os.getegid()}): " in result.stdout, result.stdout


@pytest.fixture
def pg_project(tmp_path, postgres_server):
    return Project(tmp_path / "a", postgres_server)


@pytest.mark.parametrize("grants, missing", [
    ("SELECT", "INSERT on lms_refresh.courses"),
    ("SELECT, INSERT", "DELETE on lms_refresh.daily_metrics"),  # INSERT alone made the old check say "can write"
    ("SELECT, INSERT, DELETE", "UPDATE on lms_refresh.meta"),
    # Every table, but not the serial columns' sequences: check said "may write every table", each run failed (78).
    ("SELECT, INSERT, UPDATE, DELETE", "USAGE on sequence lms_refresh.quarantine_id_seq, USAGE on sequence "
                                       "lms_refresh.runs_seq_seq"),
])
def test_check_fails_for_a_postgresql_role_that_cannot_write(pg_project, postgres_server, tmp_path, grants, missing):
    project, server = pg_project, postgres_server
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    role = f"weak_{len(grants)}"
    server.admin(f"DO $$ BEGIN CREATE ROLE {role} LOGIN PASSWORD 'weak'; EXCEPTION WHEN duplicate_object THEN "
                 "NULL; END $$")
    server.admin(f"GRANT USAGE ON SCHEMA lms_refresh TO {role}", project.database)
    server.admin(f"GRANT {grants} ON ALL TABLES IN SCHEMA lms_refresh TO {role}", project.database)
    (tmp_path / "weak-password").write_text("weak\n")
    project.config.write_text(project.config.read_text().replace("lms_refresh@", f"{role}@")
                              .replace(server.password_file, str(tmp_path / "weak-password")))
    result = project.invoke("check", now=NOW)
    assert result.returncode == 78, result.stdout
    assert "is reachable, but its role may not " in result.stderr and missing in result.stderr
    assert "so a run would fail" in result.stderr and " ok " not in result.stdout.replace("\n", " ")[-60:]


def test_a_role_granted_the_tables_and_their_sequences_passes_check_and_runs(pg_project, postgres_server, tmp_path):
    project, server = pg_project, postgres_server
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    server.admin("DO $$ BEGIN CREATE ROLE dml_only LOGIN PASSWORD 'dml'; EXCEPTION WHEN duplicate_object THEN "
                 "NULL; END $$")
    for grant in ("USAGE ON SCHEMA lms_refresh", "USAGE ON SCHEMA lms_refresh_serving",
                  "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA lms_refresh",
                  "USAGE ON ALL SEQUENCES IN SCHEMA lms_refresh"):
        server.admin(f"GRANT {grant} TO dml_only", project.database)
    (tmp_path / "dml-password").write_text("dml\n")
    project.config.write_text(project.config.read_text().replace("lms_refresh@", "dml_only@")
                              .replace(server.password_file, str(tmp_path / "dml-password")))
    assert "; its role may write every table" in project.invoke("check", now=NOW, check=0).stdout
    project.write("b.ndjson", learners(12))
    project.invoke("run", now="2026-11-04T04:15:00Z", check=0)


def test_check_says_what_the_owner_may_do(pg_project):
    pg_project.invoke("run", now=NOW, check=0)
    assert "; its role may write every table" in pg_project.invoke("check", now=NOW, check=0).stdout


def test_a_dropped_courses_view_alone_is_reported_by_status_and_check(pg_project, postgres_server):
    pg_project.write("a.ndjson", learners(12))
    pg_project.invoke("run", now=NOW, check=0)
    postgres_server.admin("DROP VIEW lms_refresh_serving.courses", pg_project.database)
    status = json.loads(pg_project.invoke("status", "--json", now=NOW, check=0).stdout)["publication"]
    assert (status["current"], status["missing_views"]) == (False, ["lms_refresh_serving.courses"])
    assert "publication:  view lms_refresh_serving.courses in the store is MISSING (dropped?)" in pg_project.invoke(
        "status", now=NOW, check=0).stdout
    plugin = pg_project.invoke("status", "--check", now=NOW)
    assert plugin.returncode == 1 and plugin.stdout.startswith(
        "LMS-REFRESH WARNING - view lms_refresh_serving.courses in the store is missing (dropped?)")
    assert "the serving view lms_refresh_serving.courses is missing (dropped?)" in pg_project.invoke(
        "check", now=NOW, check=0).stdout
    rerun = pg_project.invoke("run", now=LATER, check=0)
    assert "The serving view lms_refresh_serving.courses was missing and has been re-created" in rerun.stderr
    assert json.loads(pg_project.invoke("status", "--json", now=LATER, check=0).stdout)["publication"]["current"]


def test_a_dropped_serving_view_is_reported_and_the_next_run_re_creates_it(pg_project, postgres_server):
    project = pg_project
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    served = project.serving()
    postgres_server.admin("DROP VIEW lms_refresh_serving.daily_metrics", project.database)
    postgres_server.admin("DROP VIEW lms_refresh_serving.weekly_metrics", project.database)
    status = json.loads(project.invoke("status", "--json", now=NOW, check=0).stdout)
    assert status["publication"]["current"] is False and status["publication"]["missing"] is True
    text = project.invoke("status", now=NOW, check=0).stdout
    assert "views lms_refresh_serving.daily_metrics, lms_refresh_serving.weekly_metrics in the store are MISSING" \
        in text
    plugin = project.invoke("status", "--check", now=NOW)
    assert plugin.returncode == 1 and plugin.stdout.startswith(
        "LMS-REFRESH WARNING - views lms_refresh_serving.daily_metrics, lms_refresh_serving.weekly_metrics in the "
        "store are missing (dropped?)")
    check = project.invoke("check", now=NOW, check=0)
    assert ("note  store: warning: the serving views lms_refresh_serving.daily_metrics, "
            "lms_refresh_serving.weekly_metrics are missing (dropped?)") in check.stdout
    rerun = project.invoke("run", now=LATER, check=0)
    assert "re-created" in rerun.stderr and "grant-reader" in rerun.stderr
    assert "lms_refresh_serving.daily_metrics, lms_refresh_serving.weekly_metrics was missing" in rerun.stderr
    assert project.serving() == served
    assert project.query("SELECT period, course IS NULL FROM lms_refresh_serving.weekly_metrics") == [
        ("2026-W45", False)]  # the course's row; the site's is in site_weekly_metrics
    assert project.query("SELECT period FROM lms_refresh_serving.site_weekly_metrics") == [("2026-W45",)]
    assert json.loads(project.invoke("status", "--json", now=LATER, check=0).stdout)["publication"]["current"] is True


@pytest.mark.parametrize("phase", ["before-commit", "after-commit"])
def test_a_stop_during_a_watermark_set_says_whether_it_moved(project, phase):
    """`systemctl stop` (SIGTERM) reaching `watermark set`: before its commit nothing moved, and it says so (143);
    after it the new watermark stands and the command ends with 0. It said "Stopped by SIGTERM." either way (143)."""
    from lms_refresh import faults

    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    before = project.meta()["watermark"]
    result = project.cli("watermark", "set", "2026-11-03T03:00", now=LATER,
                         env={faults.ENVIRONMENT_VARIABLE: f"{phase}:term"})
    if phase == "before-commit":
        assert result.returncode == 143, result.stderr
        assert "Stopped by SIGTERM before the new watermark was committed; the watermark was not moved." \
            in result.stderr
        assert project.meta()["watermark"] == before and project.runs()[-1][0] == "run"
    else:
        assert result.returncode == 0, result.stderr
        assert "SIGTERM after the commit; the command finishes, and what it committed stands." in result.stderr
        assert project.meta()["watermark"] == "2026-11-03T02:00:00.000000Z" != before
        assert project.runs()[-1][:3] == ("watermark-set", "watermark-set", 0)


@pytest.mark.parametrize("written_at", ["1", "0.1.0's", "previous"])
def test_between_a_package_upgrade_and_the_next_run_check_status_and_the_plugin_say_ok(project, written_at):
    """A store of an earlier schema version (the first; 0.1.0's, which the system test upgrades from under the real
    units; the one before this code's) with a fresh successful run in its log, as an earlier release left it: the
    next run upgrades it, which is nothing wrong (they exited 78, the plugin said UNKNOWN); then the run does."""
    from lms_refresh.config import load_config
    from lms_refresh.store import open_store
    from lms_refresh.store.tables import SCHEMA_VERSION, TABLES

    version = {"1": 1, "0.1.0's": 2, "previous": SCHEMA_VERSION - 1}[written_at]
    project.configure()
    project.state.mkdir()
    store = open_store(load_config(str(project.config), {}), {}, create=True, migrate=False)
    store.migrate(target=version)
    columns = [column.name for column in next(t for t in TABLES if t.name == "runs").columns_at(version)]
    values = {"run_id": "r1", "kind": "run", "started_at": "2026-11-03T03:10:00.000000Z",
              "finished_at": "2026-11-03T03:11:00.000000Z", "outcome": "success", "exit_code": 0,
              "window_since": "2026-11-02T03:10:00.000000Z", "window_until": "2026-11-03T03:10:00.000000Z",
              "statements_read": 5, "staged": 5, "voided": 0, "quarantined": 0, "partitions": 1, "rows_written": 2,
              "suppressed": 0, "message": "", "version": "0.1.0"}
    store.begin()
    store.execute(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                  [values[name] for name in columns])
    store.execute("INSERT INTO meta (key, value) VALUES ('watermark', '2026-11-03T03:10:00.000000Z')")
    store.commit()
    store.close()
    upgrades = f"the next run upgrades it from schema version {version} to {SCHEMA_VERSION}"
    check = project.invoke("check", now=NOW)
    assert check.returncode == 0 and f"ok  store: {upgrades}" in check.stdout, (check.stdout, check.stderr)
    status = project.invoke("status", now=NOW)
    assert status.returncode == 0 and f"schema v{version}); the next run upgrades it to schema v{SCHEMA_VERSION}" \
        in status.stdout and "last success: success (exit 0) run started 2026-11-03T03:10:00" in status.stdout, status
    assert json.loads(project.invoke("status", "--json", now=NOW, check=0).stdout)["store"]["upgrade"] == {
        "from": version, "to": SCHEMA_VERSION}
    plugin = project.invoke("status", "--check", now=NOW)
    assert plugin.returncode == 0 and plugin.stdout.startswith("LMS-REFRESH OK - last success started ") and (
        f"the next run upgrades the store from schema version {version} to {SCHEMA_VERSION}" in plugin.stdout), plugin
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(3)])
    project.invoke("run", now=NOW, check=0)
    after = project.invoke("status", now=NOW, check=0).stdout
    assert f"schema v{SCHEMA_VERSION})" in after and "upgrades it" not in after


def test_check_warns_of_a_set_id_sendmail_the_alert_unit_cannot_run(sqlite_project, tmp_path):
    """The alert unit lets no program gain privileges (NoNewPrivileges=, implied by its system call filter):
    exim4's set-user-ID and postfix's set-group-ID mail submission fail under it, and check says so before a
    failure shows it, naming a sendmail that needs no privilege."""
    from lms_refresh.ops.alerts import mailer_problem

    sendmail = tmp_path / "sendmail"
    sendmail.write_text("#!/bin/sh\ncat >/dev/null\n")
    sendmail.chmod(0o755)
    assert mailer_problem(str(sendmail)) is None
    project = sqlite_project
    project.config.write_text(project.config.read_text() + f'\n[alerts]\nmail_to = "ops@example.edu"\n'
                                                           f'sendmail = "{sendmail}"\n')
    assert "alert mail" not in project.invoke("check", now=NOW, check=0).stdout
    for mode, kind in ((0o4755, "user"), (0o2755, "group")):
        sendmail.chmod(mode)
        result = project.invoke("check", now=NOW, check=0)
        assert (f"the alert mail would fail under the alert unit: {sendmail} is set-{kind}-ID (exim4's and "
                "postfix's are), and lms-refresh-alert@.service, like any unit with a system call filter, lets no "
                "program gain privileges; point alerts.sendmail at one that needs none, e.g. msmtp" in result.stdout
                ), result.stdout
