"""status, check, help texts, logging to the journal, progress."""

import json
import os
import subprocess
import sys

import click
import click.testing
import pytest

from helpers.paths import REPO
from helpers.statements import statement
from lms_refresh.cli import cli
from lms_refresh.store.sqlite_schema import SCHEMA_VERSION


@pytest.fixture
def project(sqlite_project):
    """These behaviours are about the local SQLite file, its directory or the CLI itself."""
    return sqlite_project


NOW = "2026-11-03T04:15:00+01:00"


def capture_journal(monkeypatch):
    """Route the journal handler's output into a list, as python-systemd's own tests do."""
    from systemd.journal import JournalHandler

    from lms_refresh import logs

    sent = []
    monkeypatch.setattr(logs, "journal_handler", lambda: JournalHandler(
        SYSLOG_IDENTIFIER=logs.IDENTIFIER, sender_function=lambda MESSAGE, **fields: sent.append((MESSAGE, fields))))
    return sent


@pytest.mark.parametrize("command", [None] + sorted(cli.commands))
def test_every_command_has_help_with_an_example(command):
    runner = click.testing.CliRunner()
    result = runner.invoke(cli, ([command] if command else []) + ["--help"])
    assert result.exit_code == 0
    assert "Example: lms-refresh" in result.output


def test_status_before_and_after_a_run(project):
    before = project.invoke("status", check=0).stdout
    assert "watermark:    none (the next run bootstraps)" in before and "not created yet" in before
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    report = json.loads(project.invoke("status", "--json", check=0).stdout)
    assert report["watermark"] == "2026-11-03T03:15:00.000000Z"
    assert report["lock"] == {"path": str(project.state / "refresh.lock"), "held": False, "holder": None}
    assert report["last_run"]["outcome"] == "success" and report["last_run"]["rows_written"] == 1
    assert report["last_run"]["window_until"] == "2026-11-03T03:15:00.000000Z"
    store = report["store"]
    assert store["exists"] and store["size_bytes"] > 0 and store["schema_version"] == SCHEMA_VERSION
    text = project.invoke("status", check=0).stdout
    assert "last success: success (exit 0) run" in text and "lock:         free" in text


def test_check_writes_nothing_and_reports_each_part(project):
    result = project.invoke("check", check=0)
    assert "ok  configuration" in result.stdout and "ok  source: 0 export file(s) readable" in result.stdout
    assert "will be created on the first run" in result.stdout
    assert not project.state.exists()
    project.source.rmdir()
    missing = project.invoke("check")
    assert missing.returncode == 69 and "does not exist" in missing.stderr


def test_journal_fields_are_structured_and_each_message_is_sent_once(project, monkeypatch):
    sent = capture_journal(monkeypatch)
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    result = project.invoke("run", now=NOW, env={"INVOCATION_ID": "0123456789abcdef"})  # as under systemd
    assert result.returncode == 0
    assert result.stderr == ""  # the journal only: stderr would reach the journal a second time
    committed = [fields for message, fields in sent if message.startswith("Refresh committed")]
    assert len(committed) == 1
    fields = committed[0]
    assert fields["SYSLOG_IDENTIFIER"] == "lms-refresh" and fields["PRIORITY"] == "6"
    assert fields["WINDOW_UNTIL"] == "2026-11-03T03:15:00.000000Z" and fields["ROWS_WRITTEN"] == 1
    assert fields["RUN_ID"] and fields["STATEMENTS_READ"] == 12
    messages = [message for message, _ in sent]
    assert len(messages) == len(set(messages))


def test_errors_go_to_the_journal_with_error_priority(project, monkeypatch):
    sent = capture_journal(monkeypatch)
    project.config.write_text("bogus = 1\n")
    result = project.invoke("run", env={"JOURNAL_STREAM": "8:1234"})
    assert result.returncode == 78 and result.stderr == ""
    assert [(f["PRIORITY"], f["EXIT_STATUS"]) for m, f in sent if "unknown key 'bogus'" in m] == [("3", 78)]


def test_without_systemd_logs_are_human_lines_on_stderr(project):
    project.write("a.ndjson", [statement()])
    result = project.invoke("run", now=NOW, check=0)
    assert " INFO Refresh committed: read 1 statement" in result.stderr
    assert result.stdout == ""


def test_sd_notify_status_reaches_the_notify_socket(project, tmp_path):
    import socket

    address = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(address)
        server.settimeout(10)
        project.write("a.ndjson", [statement()])
        project.invoke("run", now=NOW, env={"NOTIFY_SOCKET": address}, check=0)
        received = []
        server.settimeout(0.5)
        try:
            while True:
                received.append(server.recv(4096).decode())
        except TimeoutError:
            pass
    assert "STATUS=Recomputing 31 daily partitions" in received  # bootstrap_days = 30, so 31 local days
    assert received[-1] == "STATUS="


def test_version_is_one_number_in_the_program_the_python_package_and_the_debian_changelog():
    import re
    import tomllib

    root = REPO
    with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
        version = tomllib.load(handle)["project"]["version"]
    with open(os.path.join(root, "debian", "changelog")) as handle:
        first = handle.readline()
    assert re.match(rf"lms-refresh \({re.escape(version)}\) unstable; urgency=", first), first
    result = subprocess.run([sys.executable, "-m", "lms_refresh", "--version"], capture_output=True, text=True)
    assert result.stdout.strip() == f"lms-refresh, version {version}"
    with open(os.path.join(root, "README.md")) as handle:
        readme = handle.read()
    installing = readme.split("## Install on Debian 13 or 12", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"lms-refresh_([0-9][^_\s]*)_all\.deb", installing))  # what the build writes now
    assert named == {version}, named


def test_counts_agree_with_their_nouns(sqlite_project):
    """"rebuilt 1 partitions": every count printed with its noun agrees with it, in the run's summary, a dry run's,
    forget's and copy-store's."""
    project = sqlite_project
    project.write("a.ndjson", [statement()])
    window = ("--since", "2026-11-02T08:00:00Z", "--until", "2026-11-02T12:00:00Z")
    dry = project.invoke("backfill", *window, "--dry-run", now="2026-11-03T04:15:00Z", check=0)
    assert "read:        1 statement (0 would be quarantined)" in dry.stdout
    result = project.invoke("backfill", *window, now="2026-11-03T04:15:00Z", check=0)
    assert "Refresh committed: read 1 statement, staged 1, voided 0, quarantined 0; rebuilt 1 partition (" \
        in result.stderr, result.stderr
    forgot = project.invoke("forget", "--account-name", "u1", "--account-homepage", "https://lms.example.edu",
                            now="2026-11-03T05:00:00Z", check=0)
    assert "deleted: 1 staged event, 0 quarantined records" in forgot.stdout, forgot.stdout
    assert "rebuilt:     1 daily partition (" in forgot.stdout
