"""Runs that never finished, deliberate stops, manual starts and freshness (issue 21, items 4 and 5)."""

import datetime as dt
import json
import os
import socket
import time

import pytest

from helpers.project import Project
from helpers.statements import statement
from lms_refresh.ops import trigger
from lms_refresh.ops.interruption import MARKER, Marker, last, pending
from lms_refresh.ops.job import retried
from lms_refresh.ops.monitoring import Healthchecks, plugin_report
from lms_refresh.run.request import BACKFILL, Request

NOW = "2026-11-03T04:15:00+01:00"


def _populate(project, learners=12):
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(learners)])


def test_a_run_stopped_before_its_commit_keeps_its_marker_and_the_next_run_catches_it_up(sqlite_project):
    project = sqlite_project
    _populate(project)
    project.invoke("run", now="2026-11-02T12:00:00Z", check=0)  # the state directory exists from here on
    assert not (project.state / MARKER).exists()  # a run that ended by itself leaves none
    stopped = project.cli("run", now=NOW, env={"LMS_REFRESH_FAULT": "before-commit:term"})
    assert stopped.returncode == 143, stopped.stderr
    marker = json.loads((project.state / MARKER).read_text())
    assert marker["started_at"].startswith("2026-11-03T03:15") and marker["host"] == socket.gethostname()
    assert pending(str(project.state))["run_id"] == marker["run_id"]  # its process is gone
    report = json.loads(project.invoke("status", "--json", check=0).stdout)
    assert report["interrupted"]["run_id"] == marker["run_id"]
    assert "INTERRUPTED:  the run started 2026-11-03T03:15" in project.invoke("status", check=0).stdout
    caught_up = project.invoke("run", now="2026-11-03T05:00:00+01:00", check=0)
    assert ("The run started at 2026-11-03T03:15:00.000000Z (pid "
            f"{marker['pid']}) did not finish: the machine was shut down or crashed") in caught_up.stderr
    assert not (project.state / MARKER).exists()
    noticed = last(str(project.state))
    assert noticed["run_id"] == marker["run_id"] and noticed["noticed_at"].startswith("2026-11-03T04:00")
    status = project.invoke("status", check=0).stdout
    assert "interrupted:  the run started 2026-11-03T03:15:00.000000Z did not finish; caught up by" in status
    again = project.invoke("run", now="2026-11-03T06:00:00+01:00", check=0)
    assert "did not finish" not in again.stderr  # once


def test_a_stop_while_the_marker_is_written_leaves_it_written_and_the_run_is_caught_up(sqlite_project):
    project = sqlite_project
    _populate(project)
    project.invoke("run", now="2026-11-02T12:00:00Z", check=0)
    # Only the stop before the rename needs the hold-back (without it the temporary is dropped, no marker is
    # left); the one after it checks that a marker in place stays.
    for step in ("replace-written", "replace-renamed"):
        stopped = project.cli("run", now=NOW, env={"LMS_REFRESH_FAULT": f"{step}/{MARKER}:term"})
        assert stopped.returncode == 143 and "Stopped by SIGTERM" in stopped.stderr, (step, stopped.stderr)
        assert "Traceback" not in stopped.stderr, stopped.stderr
        assert json.loads((project.state / MARKER).read_text())["started_at"].startswith("2026-11-03T03:15"), step
        assert json.loads(project.invoke("status", "--json", check=0).stdout)["interrupted"], step
        caught_up = project.invoke("run", now="2026-11-03T05:00:00+01:00", check=0)
        assert "did not finish: the machine was shut down or crashed" in caught_up.stderr, (step, caught_up.stderr)
        assert not (project.state / MARKER).exists()


def test_a_failed_run_removes_its_marker_and_a_dry_run_or_backfill_writes_none(sqlite_project):
    project = sqlite_project
    _populate(project)
    project.invoke("run", now="2026-11-02T12:00:00Z", check=0)
    failed = project.cli("run", now=NOW, env={"LMS_REFRESH_FAULT": "before-commit:raise"})
    assert failed.returncode == 1 and not (project.state / MARKER).exists()
    project.invoke("run", "--dry-run", now=NOW, check=0)
    project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-02", now=NOW, check=0)
    assert not (project.state / MARKER).exists()


def test_a_marker_of_a_live_run_this_boot_is_left_alone_and_one_of_an_earlier_boot_is_an_interruption(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    now = dt.datetime.now(dt.UTC)
    live = {"run_id": "r1", "started_at": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "pid": os.getppid(),
            "host": socket.gethostname()}
    (state / MARKER).write_text(json.dumps(live))
    assert pending(str(state)) is None  # running now
    ours = Marker(str(state), "r2", now)
    ours.begin()
    assert not ours.owned and json.loads((state / MARKER).read_text())["run_id"] == "r1"
    ours.end(stopped=False)
    assert json.loads((state / MARKER).read_text())["run_id"] == "r1"  # not ours to remove
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    before_boot = dt.datetime.fromtimestamp(booted - 3600, dt.UTC)
    (state / MARKER).write_text(json.dumps(dict(live, started_at=before_boot.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))))
    assert pending(str(state))["run_id"] == "r1"  # the same pid number in a later boot is another process
    (state / MARKER).write_text("{damaged")
    assert pending(str(state)) == {}  # a damaged marker is an interruption all the same


def test_only_a_timers_start_or_a_terminal_retries_and_a_manual_systemctl_start_fails_fast():
    scheduled = Request()
    by_timer = lambda environ: ("lms-refresh.timer", None)  # noqa: E731
    by_hand = lambda environ: (None, None)  # noqa: E731
    assert retried(scheduled, {}, by_hand)  # a terminal: each retry is a line on stderr
    assert retried(scheduled, {"INVOCATION_ID": "x"}, by_timer)
    # systemd 252 and 257 pass a timer's TRIGGER_UNIT on to later starts by hand: it decides nothing.
    assert not retried(scheduled, {"INVOCATION_ID": "x", "TRIGGER_UNIT": "lms-refresh.timer"}, by_hand)
    assert not retried(scheduled, {"JOURNAL_STREAM": "8:9"}, lambda environ: (None, "no bus"))
    assert not retried(Request(dry_run=True), {}, by_timer)
    assert not retried(Request(BACKFILL, since=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)), {}, by_timer)


# What systemd 252 showed (tests/system, a oneshot under a test timer): a start by hand, a timer's, two by hand,
# a timer's, one by hand; every start after the first timer's had TRIGGER_UNIT and the first elapse's
# TRIGGER_TIMER_MONOTONIC_USEC in its environment.
STARTS = [  # (InactiveEnter (the previous end), InactiveExit (this start), the timer's last elapse, a timer's?)
    (0, 584689020, 0, False),
    (0, 587039288, 587019055, True),
    (587333677, 588645354, 587019055, False),
    (588885458, 589964754, 587019055, False),
    (590264731, 592377794, 592359544, True),
    (592656626, 593816746, 592359544, False),
]


@pytest.mark.parametrize("previous_end, began, elapsed, expected", STARTS)
def test_a_timers_start_is_told_by_systemds_timestamps_of_this_start(previous_end, began, elapsed, expected):
    properties = {
        ("/org/freedesktop/systemd1/unit/lms_2drefresh_2eservice", "InvocationID"): list(bytes.fromhex("ab" * 16)),
        ("/org/freedesktop/systemd1/unit/lms_2drefresh_2eservice", "InactiveExitTimestampMonotonic"): began,
        ("/org/freedesktop/systemd1/unit/lms_2drefresh_2eservice", "InactiveEnterTimestampMonotonic"): previous_end,
        ("/org/freedesktop/systemd1/unit/lms_2drefresh_2eservice", "TriggeredBy"): [
            "lms-refresh-catch-up.timer", "lms-refresh.timer"],
        ("/org/freedesktop/systemd1/unit/lms_2drefresh_2dcatch_2dup_2etimer", "LastTriggerUSecMonotonic"): 0,
        ("/org/freedesktop/systemd1/unit/lms_2drefresh_2etimer", "LastTriggerUSecMonotonic"): elapsed,
    }
    environ = {"INVOCATION_ID": "ab" * 16, "TRIGGER_UNIT": "lms-refresh.timer"}
    timer, unknown = trigger.timer_started(environ, lambda path, interface, name: properties[path, name],
                                           unit="lms-refresh.service")
    assert unknown is None and timer == ("lms-refresh.timer" if expected else None)
    # Another activation's properties (the unit restarted meanwhile) decide nothing.
    other = dict(environ, INVOCATION_ID="cd" * 16)
    assert trigger.timer_started(other, lambda path, interface, name: properties[path, name],
                                 unit="lms-refresh.service")[0] is None


def test_a_start_whose_trigger_cannot_be_asked_is_one_by_hand(tmp_path):
    def unreachable(path, interface, name):
        raise FileNotFoundError(2, "No such file or directory", "busctl")

    timer, unknown = trigger.timer_started({"INVOCATION_ID": "x"}, unreachable, unit="lms-refresh.service")
    assert timer is None and "systemd could not be asked over the system bus (FileNotFoundError" in unknown
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("0::/system.slice/lms-refresh.service\n")
    assert trigger.own_unit(str(cgroup)) == "lms-refresh.service"
    cgroup.write_text("0::/user.slice/user-0.slice/session-3.scope\n")
    assert trigger.own_unit(str(cgroup)) is None
    assert trigger.bus_path("lms-refresh-alert@x.service") == (
        "/org/freedesktop/systemd1/unit/lms_2drefresh_2dalert_40x_2eservice")


def test_a_manual_systemctl_start_says_it_is_not_retried_and_exits_69_at_once(sqlite_project):
    project = sqlite_project
    project.configure(retry_attempts=3)
    project.source.rmdir()
    result = project.cli("run", now=NOW, env={"INVOCATION_ID": "0123", "JOURNAL_STREAM": ""})
    assert result.returncode == 69


def test_a_stop_sends_no_failure_ping_and_is_no_warning(monkeypatch):
    import lms_refresh.ops.monitoring as monitoring

    sent = []
    monkeypatch.setattr(monitoring, "post", lambda url, body, kind, timeout: sent.append(url) or True)
    pings = Healthchecks("https://hc.example/ping/abc", 5)
    pings.finish(143, "Stopped by SIGTERM")
    assert sent == []
    pings.finish(69, "unreachable")
    assert sent == ["https://hc.example/ping/abc/69"]
    run = {"kind": "run", "started_at": "2026-11-03T03:15:00.000000Z", "finished_at": "2026-11-03T03:16:00.000000Z",
           "exit_code": 0, "rows_written": 5, "quarantined": 0, "message": None, "outcome": "success"}
    status = {"store": {"exists": True, "size_bytes": 1, "location": "x"}, "state_directory": "s", "watermark": "w",
              "quarantined_records": 0, "last_success": run, "interrupted": None,
              "last_run": dict(run, exit_code=143, outcome="failed", message="Stopped by SIGTERM")}
    now = dt.datetime(2026, 11, 3, 5, 0, tzinfo=dt.UTC)
    code, line = plugin_report(status, now, "Europe/Paris", grace=7200)
    assert code == 0 and "was stopped (143) before its commit" in line and "rolled back" not in line, line
    status["last_run"] = dict(run, exit_code=69, outcome="failed", message="unreachable")
    assert plugin_report(status, now, "Europe/Paris", grace=7200)[0] == 1


def test_a_backfill_of_an_old_window_does_not_make_a_stale_store_fresh(project):
    _populate(project)
    project.invoke("run", now="2026-11-02T12:00:00Z", check=0)
    stale = project.invoke("status", "--check", now="2026-11-04T12:00:00Z")
    assert stale.returncode == 2, stale.stdout
    project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-02", now="2026-11-04T12:00:00Z", check=0)
    still = project.invoke("status", "--check", now="2026-11-04T12:05:00Z")
    assert still.returncode == 2 and "stale" in still.stdout, still.stdout
    report = json.loads(project.invoke("status", "--json", now="2026-11-04T12:05:00Z", check=0).stdout)
    assert report["last_run"]["kind"] == "backfill" and report["last_success"]["kind"] == "run"
    project.invoke("run", now="2026-11-04T12:10:00Z", check=0)
    assert project.invoke("status", "--check", now="2026-11-04T12:15:00Z").returncode == 0


def test_switching_to_postgresql_removes_the_stale_world_readable_sqlite_publication(tmp_path, postgres_server):
    project = Project(tmp_path / "p")
    _populate(project)
    project.invoke("run", now="2026-11-02T12:00:00Z", check=0)
    publication = tmp_path / "p" / "state-publication" / "serving.sqlite"
    report = publication.parent / "report.html"  # a web server pointed there served it as the dashboard
    assert publication.exists() and publication.stat().st_mode & 0o004 and report.exists()
    other = publication.parent / "index.html"
    other.write_text("<!DOCTYPE html><title>the site's own page</title>")  # not ours: it stays
    database = postgres_server.new_database()
    project.config.write_text(project.config.read_text() + (
        f'[store]\ntype = "postgresql"\nurl = "{postgres_server.url(database)}"\n'
        f'password_file = "{postgres_server.password_file}"\n'))
    result = project.invoke("run", now="2026-11-02T13:00:00Z", check=0)
    assert not publication.exists() and not report.exists() and other.exists()
    assert (f"Removed the SQLite publication {publication}: the store is PostgreSQL now and dashboards read its "
            "serving view") in result.stderr
    assert f"Removed the HTML report {report}: the store is PostgreSQL now" in result.stderr
    assert "Removed" not in project.invoke("run", now="2026-11-02T14:00:00Z", check=0).stderr


def test_only_a_report_this_program_wrote_is_retired(tmp_path):
    from helpers.report_page import build
    from lms_refresh.run import report_page

    ours, theirs, fifo = tmp_path / "report.html", tmp_path / "theirs.html", tmp_path / "fifo"
    report_page.write_report(build(tmp_path / "serving.sqlite", {}, []), str(ours), {"written": "2026-11-02T12:00:00Z"},
                             today="2026-11-02")
    theirs.write_text(ours.read_text()[:100])  # cut short: not a page of ours
    os.mkfifo(fifo)
    assert [report_page.retire(str(path)) for path in (ours, theirs, fifo, tmp_path / "absent")] == [
        "removed", "kept", "kept", "absent"]
    assert not ours.exists() and theirs.exists() and fifo.exists()


def test_a_live_run_whose_marker_is_dated_before_this_boot_is_left_alone(tmp_path):
    """A run started while the clock was behind (a bad RTC, a run at boot), the clock stepped forward since: its
    marker's time lies before this boot, and the next run declared it dead while it held the lock, noted a false
    interruption, then removed the marker, so the run's own death was never caught up (the review). The process
    that wrote the marker is recognised by its start, not by the wall clock."""
    import subprocess

    from lms_refresh.ops.interruption import _process_start

    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    before_boot = dt.datetime.fromtimestamp(booted - 3600, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    live = subprocess.Popen(["sleep", "60"])
    try:
        marker = {"run_id": "r1", "started_at": before_boot, "pid": live.pid, "host": socket.gethostname(),
                  "process_start": _process_start(live.pid)}
        (tmp_path / MARKER).write_text(json.dumps(marker))
        assert pending(str(tmp_path)) is None
        ours = Marker(str(tmp_path), "r2", dt.datetime.now(dt.UTC))
        ours.begin()
        assert not ours.owned and not (tmp_path / "last-interruption").exists()
        ours.end(stopped=False)
        assert json.loads((tmp_path / MARKER).read_text())["run_id"] == "r1"
        # Another process under the same pid number (a later boot): another start.
        (tmp_path / MARKER).write_text(json.dumps(dict(marker, process_start=marker["process_start"] + 1)))
        assert pending(str(tmp_path))["run_id"] == "r1"
    finally:
        live.kill()
        live.wait()
    (tmp_path / MARKER).write_text(json.dumps(marker))
    assert pending(str(tmp_path))["run_id"] == "r1"  # killed: an interruption


def test_a_marker_whose_pid_is_the_checking_process_itself_is_no_live_run(tmp_path):
    """After a reboot the same pid number can come back, even as the run that checks."""
    now = dt.datetime.now(dt.UTC)
    (tmp_path / MARKER).write_text(json.dumps({"run_id": "r1", "started_at": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                                               "pid": os.getpid(), "host": socket.gethostname()}))
    assert pending(str(tmp_path))["run_id"] == "r1"


def test_the_next_alert_reports_an_interruption_once(sqlite_project):
    from lms_refresh.ops.alerts import mail_text
    from lms_refresh.ops.interruption import mark_alerted, unalerted

    project = sqlite_project
    _populate(project)
    project.invoke("run", now="2026-11-02T12:00:00Z", check=0)
    assert project.cli("run", now=NOW, env={"LMS_REFRESH_FAULT": "before-commit:term"}).returncode == 143
    project.invoke("run", now="2026-11-03T05:00:00+01:00", check=0)  # notices it
    noticed = unalerted(str(project.state))
    assert noticed["started_at"] == "2026-11-03T03:15:00.000000Z" and noticed["noticed_at"].startswith("2026-11-03T04")
    assert unalerted(str(project.state)) == noticed  # not reported yet
    mark_alerted(str(project.state), noticed)
    assert unalerted(str(project.state)) is None  # reported once
    alert = {"unit": "lms-refresh.service", "host": "h", "exit_status": 65, "meaning": "bad input",
             "result": "exit-code", "window": None, "message": "m", "invocation_id": "i", "journal": [],
             "interrupted": noticed}
    text = mail_text(alert, "team@example.edu")
    assert ("Earlier: the run started 2026-11-03T03:15:00.000000Z did not finish (a shutdown, a crash or a stop) and "
            "could not alert; it was caught up by the run started 2026-11-03T04") in text
    assert "Earlier" not in mail_text(dict(alert, interrupted=None), "team@example.edu")


def test_an_alert_that_reached_nobody_leaves_the_interruption_to_the_next_one(sqlite_project, tmp_path):
    """An alert whose every channel failed marked the interruption reported: the next alert, delivered, left it out,
    so nobody ever heard of it."""
    from helpers.receiver import Receiver

    project = sqlite_project
    _populate(project)
    project.invoke("run", now="2026-11-02T12:00:00Z", check=0)
    assert project.cli("run", now=NOW, env={"LMS_REFRESH_FAULT": "before-commit:term"}).returncode == 143
    project.invoke("run", now="2026-11-03T05:00:00+01:00", check=0)  # notices it
    hook = tmp_path / "hook-url"
    hook.write_text("http://127.0.0.1:9/hook\n")  # nothing listens on port 9
    project.config.write_text(project.config.read_text() + f'\n[alerts]\nwebhook_url_file = "{hook}"\ntimeout = "2s"\n')
    failed = project.invoke("alert", "--exit-status", "69")
    assert failed.returncode == 1 and "no [alerts] channel could be reached; nobody was alerted" in failed.stderr
    receiver = Receiver()
    try:
        hook.write_text(f"{receiver.url}/hook\n")
        assert project.invoke("alert", "--exit-status", "69").returncode == 0
        assert project.invoke("alert", "--exit-status", "69").returncode == 0
        first, second = (json.loads(body) for _, body in receiver.received)
    finally:
        receiver.server.shutdown()
    assert first["interrupted"]["started_at"] == "2026-11-03T03:15:00.000000Z"
    assert second["interrupted"] is None  # delivered once, then said no more
