"""Journal records: a stable MESSAGE_ID per kind, OUTCOME and counters only on the record that ends a run.

The CLI runs in this process and the records are taken from the logging
system as the journal handler would send them (the same `extra` fields);
tests/system checks the same fields in a real journal.
"""

import logging
import os
import socket

import pytest

from helpers.statements import statement
from lms_refresh import logs
from lms_refresh.cli import main
from lms_refresh.run.lock import RunLock

NOW = "2026-11-03T04:15:00+01:00"


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def run_cli(sqlite_project, monkeypatch):
    """Run the CLI in this process; return (exit code, [(kind name, record fields)]) of its lms_refresh records."""
    for name in ("JOURNAL_STREAM", "INVOCATION_ID", "STATE_DIRECTORY", "NOTIFY_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    names = {message_id.hex: name for name, message_id in logs.MESSAGE_IDS.items()}
    root = logging.getLogger()
    saved = list(root.handlers), root.level

    def run(*args, now=NOW):
        capture = Capture()
        logger = logging.getLogger("lms_refresh")
        logger.addHandler(capture)
        try:
            with pytest.raises(SystemExit) as exit:
                main(["--config", str(sqlite_project.config), "--now", now, *args])
        finally:
            logger.removeHandler(capture)
        return exit.value.code, [(names.get(getattr(r, "MESSAGE_ID", None)), vars(r)) for r in capture.records]

    yield run
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def kinds(records):
    return [kind for kind, _ in records if kind]


def test_a_run_has_a_start_record_without_outcome_and_one_finished_record(sqlite_project, run_cli):
    sqlite_project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    code, records = run_cli("run")
    assert code == 0 and kinds(records) == ["run-started", "run-finished"]
    started, finished = (fields for kind, fields in records if kind)
    assert "OUTCOME" not in started and "STATEMENTS_READ" not in started and "ROWS_WRITTEN" not in started
    assert started["RUN_ID"] == finished["RUN_ID"] and started["WINDOW_UNTIL"] == "2026-11-03T03:15:00.000000Z"
    assert finished["OUTCOME"] == "success" and finished["STATEMENTS_READ"] == 12 and finished["ROWS_WRITTEN"] == 1
    assert [fields for _, fields in records if fields.get("OUTCOME") == "success"] == [finished]
    assert finished["MESSAGE_ID"] == "ef029f020e6c4148adce1996c67f5a7f"

    code, records = run_cli("run")  # the same moment again: an empty window
    assert code == 0 and kinds(records) == ["nothing-to-do"]
    assert records[-1][1]["OUTCOME"] == "nothing-to-do"

    code, records = run_cli("run", "--dry-run", now="2026-11-04T04:15:00+01:00")
    assert code == 0 and kinds(records) == ["run-started", "dry-run-finished"]
    assert records[-1][1]["OUTCOME"] == "dry-run"


def test_quarantine_and_failure_records(sqlite_project, run_cli):
    sqlite_project.write("a.ndjson", ["garbage"] * 5 + [statement()])
    code, records = run_cli("run")
    assert code == 65 and kinds(records) == ["run-started", "quarantine", "run-failed"]
    quarantine, failed = (fields for kind, fields in records if kind in ("quarantine", "run-failed"))
    assert quarantine["levelno"] == logging.WARNING and quarantine["QUARANTINED"] == 5
    assert "OUTCOME" not in quarantine
    assert failed["levelno"] == logging.ERROR and failed["OUTCOME"] == "failure" and failed["EXIT_STATUS"] == 65
    assert failed["RUN_ID"] == quarantine["RUN_ID"] and failed["STATEMENTS_READ"] == 6


def test_a_configuration_error_of_a_run_is_a_run_failed_record(sqlite_project, run_cli):
    sqlite_project.config.write_text("min_cel_size = 5\n" + sqlite_project.config.read_text())
    code, records = run_cli("backfill", "--since", "2026-11-01", "--until", "2026-11-02")
    assert code == 78 and kinds(records) == ["run-failed"]
    assert records[0][1]["OUTCOME"] == "failure" and records[0][1]["EXIT_STATUS"] == 78
    code, records = run_cli("status")  # not a run: an error, but no run-failed record
    assert code == 78 and kinds(records) == []


def test_lock_held_record(sqlite_project, run_cli):
    sqlite_project.write("a.ndjson", [statement()])
    sqlite_project.state.mkdir()
    with RunLock(str(sqlite_project.state / "refresh.lock")):
        code, records = run_cli("run")
    assert code == 0 and kinds(records) == ["lock-held"]
    fields = records[0][1]
    assert fields["OUTCOME"] == "lock-held" and fields["LOCK_HOLDER"] == f"pid {os.getpid()} on {socket.gethostname()}"
    assert fields["msg"] % fields["args"] == \
        f"Another refresh holds the lock (held by pid {os.getpid()} on {socket.gethostname()}); nothing to do."


def test_message_ids_are_distinct_uuids_and_every_outcome_has_one():
    ids = [message_id.hex for message_id in logs.MESSAGE_IDS.values()]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)
    assert set(logs.OUTCOMES) <= set(logs.MESSAGE_IDS)
