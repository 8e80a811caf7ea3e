"""A run is one Refresh: its outcome is (report, error), and one rule maps an error to its exit code and message.

In process, on SQLite: these are about what the engine hands back to the job
and the CLI, not about processes.
"""

import contextlib
import logging
import os
import signal

import pytest

from helpers.statements import statement
from lms_refresh import errors, faults
from lms_refresh.config import load_config
from lms_refresh.instants import parse_user_time
from lms_refresh.logs import Progress
from lms_refresh.ops.job import run_job
from lms_refresh.run.lock import RunLock
from lms_refresh.run.refresh import Refresh
from lms_refresh.run.request import Request

NOW = "2026-11-03T04:15:00+01:00"


@pytest.fixture
def project(sqlite_project):
    return sqlite_project


def refresh_of(project, request=None, now=NOW):
    config = load_config(str(project.config), {})
    return Refresh(config, request or Request(), parse_user_time(now, "UTC"), {}, os.geteuid(), Progress({}))


@contextlib.contextmanager
def armed(fault):
    """Inject `fault` (PHASE:ACTION, see lms_refresh.faults) into the runs of the block."""
    faults.arm({faults.ENVIRONMENT_VARIABLE: fault})
    try:
        yield
    finally:
        faults.arm({})


def run_rows(project):
    return project.query("SELECT run_id, outcome, exit_code, message FROM runs ORDER BY rowid")


@pytest.mark.parametrize("error, code, message", [
    (None, 0, ""),
    (errors.RefreshError("Something broke."), 1, "Something broke."),
    (errors.ConfigError("Fix the key."), 78, "Fix the key."),
    (errors.StateError("Restore the store."), 78, "Restore the store."),
    (errors.BadInputError("Fix the source."), 65, "Fix the source."),
    (errors.UnavailableError("Mount the share."), 69, "Mount the share."),
    (errors.Terminated("Stopped by SIGTERM."), 143, "Stopped by SIGTERM."),
    (KeyboardInterrupt(), 130, "KeyboardInterrupt: "),
    (ValueError("no such thing"), 1, "ValueError: no such thing"),
])
def test_exit_status_is_the_code_and_sentence_of_every_kind_of_ending(error, code, message):
    assert errors.exit_status(error) == (code, message)


def test_a_failed_run_hands_back_its_report_and_error_and_the_run_log_says_the_same(project):
    project.configure(extra_top="max_quarantine_share = 0.05")
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(3)] + ["{not json", "[]"])
    refresh = refresh_of(project)
    report, error = refresh.run()
    assert isinstance(error, errors.BadInputError) and "2 of 5 records in the window were malformed" in str(error)
    assert not hasattr(error, "report")  # the report travels in the outcome, not on the exception
    assert report is refresh.report and report.outcome == "failed"
    assert (report.statements_read, report.quarantined) == (5, 2)
    assert run_rows(project) == [(report.run_id, "failed", 65, str(error))]
    assert project.query("SELECT count(*) FROM quarantine WHERE run_id = ?", (report.run_id,)) == [(2,)]
    assert project.meta().get("watermark") is None  # rolled back


def test_an_unexpected_error_is_recorded_under_the_same_rule(project):
    project.write("a.ndjson", [statement()])
    with armed("before-commit:raise"):
        report, error = refresh_of(project).run()
    assert isinstance(error, faults.InjectedFault)
    assert run_rows(project) == [(report.run_id, "failed", 1, "InjectedFault: fault injected at before-commit")]
    assert project.serving() == []


def test_a_run_that_fails_before_it_takes_the_store_has_no_report(project):
    project.write("a.ndjson", [statement()])
    assert refresh_of(project).run().error is None
    project.store.unlink()  # the key and its note remain: the store was lost
    report, error = refresh_of(project, now="2026-11-04T04:15:00+01:00").run()
    assert report is None and isinstance(error, errors.StateError) and "is missing (or empty)" in str(error)


def test_a_held_lock_is_an_outcome_not_an_error(project):
    project.write("a.ndjson", [statement()])
    project.state.mkdir()
    with RunLock(str(project.state / "refresh.lock")):
        report, error = refresh_of(project).run()
    assert error is None and report.outcome == "lock-held"
    assert report.lock_holder == f"pid {os.getpid()} on {os.uname().nodename}"
    assert not project.has_store()


def test_a_dry_run_failure_is_handed_back_but_not_recorded(project):
    project.write("a.ndjson", [statement()])
    assert refresh_of(project).run().error is None
    project.write("b.ndjson", ["{not json"] * 3)
    report, error = refresh_of(project, Request(dry_run=True), now="2026-11-04T04:15:00+01:00").run()
    assert isinstance(error, errors.BadInputError) and report.quarantined == 3
    assert [row[1:3] for row in run_rows(project)] == [("success", 0)]


def test_each_retry_is_a_new_run_and_the_job_returns_the_last(project):
    project.configure(retry_attempts=3)
    project.source.rmdir()
    pauses = []
    refresh = refresh_of(project)
    report, error = run_job(refresh, sleep=pauses.append)
    assert isinstance(error, errors.UnavailableError) and "does not exist" in str(error)
    assert pauses == [1, 1]
    rows = run_rows(project)
    assert [row[1:] for row in rows] == [("failed", 69, str(error))] * 3
    assert len({row[0] for row in rows}) == 3 and refresh.report.run_id in {row[0] for row in rows}
    assert report is not refresh.report and report.run_id in {row[0] for row in rows}


def test_a_retry_after_a_full_disk_commits_and_is_the_jobs_outcome(project):
    project.write("a.ndjson", [statement()])
    project.configure(retry_attempts=2)
    elapsed = [0.0]

    def sleep(seconds):  # the job's own clock moves by the pause, and nothing else does
        elapsed[0] += seconds

    refresh = refresh_of(project)
    with armed("before-commit:enospc"):  # the first attempt's commit only
        report, error = run_job(refresh, sleep=sleep, clock=lambda: elapsed[0])
    assert error is None and report.outcome == "success" and report.statements_read == 1 and elapsed == [1.0]
    failed, committed = run_rows(project)
    assert failed[:3] == (refresh.report.run_id, "failed", 69) and "the disk is full" in failed[3]
    assert committed == (report.run_id, "success", 0, "")
    # The retry read up to its own "now", one pause after the first attempt's.
    assert report.rows_written == 1 and project.meta()["watermark"] == "2026-11-03T03:15:01.000000Z"


def test_a_stop_while_waiting_to_retry_ends_the_job_with_143(project, tmp_path):
    textfile = tmp_path / "lms_refresh.prom"
    project.configure(retry_attempts=2)
    project.config.write_text(project.config.read_text() + f'[monitoring]\ntextfile = "{textfile}"\n')
    project.source.rmdir()
    before = signal.getsignal(signal.SIGTERM)

    def sleep(seconds):  # systemctl stop while the job waits
        os.kill(os.getpid(), signal.SIGTERM)

    report, error = run_job(refresh_of(project), sleep=sleep)
    assert report is None and isinstance(error, errors.Terminated)
    # No run was under way while it waited: nothing was rolled back, and it does not say that anything was.
    assert errors.exit_status(error) == (143, "Stopped by SIGTERM while waiting to retry, between attempts: nothing "
                                              "was under way and nothing was committed.")
    assert "lms_refresh_last_exit_code 143.000000" in textfile.read_text()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_while_waiting_to_retry_after_a_committed_attempt_ends_the_pause_at_once(project):
    """The first attempt committed and failed to publish (69, retried): a stop in the pause was taken for one after
    the commit and waited the whole pause out (600 s by default), past systemd's stop timeout (the review)."""
    project.configure(retry_attempts=2)
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    slept = []

    def sleep(seconds):  # systemctl stop while the job waits; a pause that went on would return here
        slept.append(seconds)
        os.kill(os.getpid(), signal.SIGTERM)
        slept.append("woke")

    with armed("replace-written/serving.sqlite:enospc"):
        report, error = run_job(refresh_of(project), sleep=sleep)
    assert report is None and isinstance(error, errors.Terminated) and slept == [1.0]
    assert errors.exit_status(error) == (143, "Stopped by SIGTERM while waiting to retry, between attempts: nothing "
                                              "was under way and what the attempt before committed stands, and the "
                                              "next run publishes it.")
    assert [row[1:3] for row in run_rows(project)] == [("publish-failed", 69)]


def test_the_cli_logs_a_failed_run_with_its_report(project, monkeypatch):
    from systemd.journal import JournalHandler

    from lms_refresh import cli, logs

    sent = []
    monkeypatch.setattr(logs, "journal_handler", lambda: JournalHandler(
        SYSLOG_IDENTIFIER=logs.IDENTIFIER, sender_function=lambda MESSAGE, **fields: sent.append((MESSAGE, fields))))
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef")
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    project.configure(extra_top="max_quarantine_share = 0.05")
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(3)] + ["{not json", "[]"])
    try:
        with pytest.raises(SystemExit) as stopped:
            cli.main(["--config", str(project.config), "--now", NOW, "run"])
    finally:
        logging.getLogger().handlers.clear()
    assert stopped.value.code == 65
    (run_id, _, _, message), = run_rows(project)
    failed = [(text, fields) for text, fields in sent if fields.get("MESSAGE_ID") == logs.MESSAGE_IDS["run-failed"].hex]
    assert len(failed) == 1
    text, fields = failed[0]
    assert text == message and fields["PRIORITY"] == "3"
    assert (fields["RUN_ID"], fields["EXIT_STATUS"], fields["ERROR_KIND"]) == (run_id, 65, "BadInputError")
    assert (fields["OUTCOME"], fields["STATEMENTS_READ"], fields["QUARANTINED"]) == ("failure", 5, 2)


def test_a_stop_before_the_commit_is_a_failed_run_with_143(project):
    project.write("a.ndjson", [statement()])
    with armed("before-commit:term"):  # SIGTERM to this process, at that phase
        report, error = refresh_of(project).run()
    assert isinstance(error, errors.Terminated) and report.outcome == "failed"
    assert run_rows(project) == [(report.run_id, "failed", 143, str(error))]
    assert str(error) == "Stopped by SIGTERM; the run was rolled back and nothing was committed."
    assert project.meta().get("watermark") is None


def test_a_stop_after_the_commit_is_no_failure(project):
    project.write("a.ndjson", [statement()])
    with armed("after-commit:term"):
        report, error = refresh_of(project).run()
    assert error is None and report.outcome == "success" and report.statements_read == 1
    assert run_rows(project) == [(report.run_id, "success", 0, "")]
    assert project.meta()["watermark"] == "2026-11-03T03:15:00.000000Z"


def test_a_run_consults_the_stop_policy_in_force_instead_of_installing_its_own(project):
    """The process's entry (cli.main) installs the one SIGTERM policy; a run inside it, and the job, use that
    policy, so the entry's knows the run committed and a stop after it is no failure."""
    from lms_refresh.run import stopping

    project.write("a.ndjson", [statement()])
    before = signal.getsignal(signal.SIGTERM)
    with stopping.installed() as policy:
        handler = signal.getsignal(signal.SIGTERM)
        with armed("after-commit:term"):
            report, error = run_job(refresh_of(project))
        assert signal.getsignal(signal.SIGTERM) == handler  # inherited, not replaced and restored
    assert error is None and report.outcome == "success"
    assert policy.committed and policy.requested
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_keyboard_interrupt_is_the_runs_outcome_too(project):
    """^C at a terminal mid-run: rolled back and recorded (130) like any failure, and handed back, not raised."""
    project.write("a.ndjson", [statement()])

    class Interrupting:  # the progress line is where the run is when ^C lands
        def __call__(self, text, force=False):
            if text.startswith("Reading"):
                raise KeyboardInterrupt

        def done(self):
            pass

    refresh = refresh_of(project)
    refresh.progress = Interrupting()
    report, error = refresh.run()
    assert isinstance(error, KeyboardInterrupt) and report is refresh.report and report.outcome == "failed"
    assert errors.exit_status(error) == (130, "KeyboardInterrupt: ")
    assert [row[1:3] for row in run_rows(project)] == [("failed", 130)]
    assert project.serving() == []
