"""Alerts, Healthchecks pings, the Prometheus textfile and `status --check`."""

import json
import os

import pytest

from helpers.receiver import Receiver
from helpers.statements import statement
from lms_refresh.config.sections import Alerts
from lms_refresh.disclosure.redaction import scrub_text
from lms_refresh.ops.alerts import compose, deliver


@pytest.fixture
def project(sqlite_project):
    """These behaviours are about the local SQLite file, its directory or the CLI itself."""
    return sqlite_project


NOW = "2026-11-03T04:15:00+01:00"  # a Tuesday


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.server.shutdown()


def monitored(project, receiver, tmp_path, **extra):
    (tmp_path / "hc-url").write_text(f"{receiver.url}/ping/secret-token\n")
    (tmp_path / "hook-url").write_text(f"{receiver.url}/hook?token=secret-token\n")
    lines = [f'textfile = "{tmp_path / "lms_refresh.prom"}"']
    alerts = [f'healthchecks_url_file = "{tmp_path / "hc-url"}"', f'webhook_url_file = "{tmp_path / "hook-url"}"']
    alerts += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    project.config.write_text(project.config.read_text() + "\n[monitoring]\n" + "\n".join(lines)
                              + "\n[alerts]\n" + "\n".join(alerts) + "\n")
    return tmp_path / "lms_refresh.prom"


def parse_prom(path):
    from prometheus_client.parser import text_string_to_metric_families

    return {family.name: family.samples[0].value for family in text_string_to_metric_families(path.read_text())}


def test_healthchecks_pings_and_textfile_follow_each_run(project, receiver, tmp_path):
    prom = monitored(project, receiver, tmp_path)
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    assert receiver.paths() == ["/ping/secret-token/start", "/ping/secret-token"]
    first = parse_prom(prom)
    assert first["lms_refresh_last_exit_code"] == 0 and first["lms_refresh_rows_written"] == 1
    assert first["lms_refresh_watermark_timestamp_seconds"] == 1793675700.0  # 2026-11-03T03:15Z
    assert first["lms_refresh_last_success_timestamp_seconds"] >= first["lms_refresh_last_run_timestamp_seconds"]
    assert sorted(first) == sorted([
        "lms_refresh_last_run_timestamp_seconds", "lms_refresh_last_success_timestamp_seconds",
        "lms_refresh_last_exit_code", "lms_refresh_last_duration_seconds", "lms_refresh_rows_written",
        "lms_refresh_quarantined_records", "lms_refresh_suppressed_cells", "lms_refresh_watermark_timestamp_seconds"]
        # whether the HTML report was written: a SQLite publication's only
        + ([] if project.postgres else ["lms_refresh_report_failed"]))
    assert first.get("lms_refresh_report_failed", 0) == 0

    project.write("b.ndjson", ["garbage"] * 5 + [statement(timestamp="2026-11-03T10:00:00Z")])
    assert project.invoke("run", now="2026-11-04T04:15:00+01:00").returncode == 65
    assert receiver.paths()[2:] == ["/ping/secret-token/start", "/ping/secret-token/65"]
    assert b"malformed" in receiver.received[-1][1]
    second = parse_prom(prom)
    assert second["lms_refresh_last_exit_code"] == 65 and second["lms_refresh_quarantined_records"] == 5
    assert second["lms_refresh_last_success_timestamp_seconds"] == first["lms_refresh_last_success_timestamp_seconds"]
    assert second["lms_refresh_watermark_timestamp_seconds"] == first["lms_refresh_watermark_timestamp_seconds"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".lms_refresh")] == []  # no temp files left

    project.source.rename(tmp_path / "gone")
    assert project.invoke("run", now="2026-11-05T04:15:00+01:00").returncode == 69
    assert receiver.paths()[4:] == ["/ping/secret-token/start", "/ping/secret-token/69"]
    assert parse_prom(prom)["lms_refresh_last_exit_code"] == 69


def test_backfill_and_dry_run_do_not_ping(project, receiver, tmp_path):
    monitored(project, receiver, tmp_path)
    project.invoke("run", "--dry-run", now=NOW, check=0)
    project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-02", now=NOW, check=0)
    assert receiver.paths() == []


def test_unreachable_ping_never_changes_the_exit_status(project, tmp_path):
    (tmp_path / "hc-url").write_text("http://127.0.0.1:9/ping/secret-token\n")  # nothing listens on port 9
    project.config.write_text(project.config.read_text()
                              + f'\n[alerts]\nhealthchecks_url_file = "{tmp_path / "hc-url"}"\n')
    project.write("a.ndjson", [statement()])
    result = project.invoke("run", now=NOW)
    assert result.returncode == 0
    assert "Delivery to http://127.0.0.1:9 failed" in result.stderr and "secret-token" not in result.stderr


def test_alert_content_has_meaning_window_journal_and_no_secrets():
    last_run = {"window_since": "2026-11-02T03:15:00.000000Z", "window_until": "2026-11-03T03:15:00.000000Z",
                "message": "5 of 6 records were malformed", "exit_code": 65}
    lines = [(6, "Refreshing ..."), (3, "fetch https://user:hunter2@lrs.example.edu failed for alice@example.edu"),
             (6, "token s3cr3t-token leaked")]
    alert = compose("lms-refresh.service", "65", "exit-code", invocation="abc", last_run=last_run, lines=lines,
                    secrets=["s3cr3t-token"])
    assert alert["exit_status"] == 65 and "bad input beyond the configured tolerance" in alert["meaning"]
    assert alert["window"] == {"since": "2026-11-02T03:15:00.000000Z", "until": "2026-11-03T03:15:00.000000Z"}
    text = json.dumps(alert)
    assert "hunter2" not in text and "alice@example.edu" not in text and "s3cr3t-token" not in text
    assert "https://[redacted]@lrs.example.edu" in text
    assert scrub_text("mailto:bob@uni.example") == "mailto:[redacted]"


def test_sendmail_receives_the_alert(tmp_path):
    captured = tmp_path / "mail.txt"
    stub = tmp_path / "sendmail"
    stub.write_text(f"#!/bin/sh\necho \"$@\" > {captured}.args\ncat > {captured}\n")
    stub.chmod(0o755)
    alert = compose("lms-refresh.service", "69", "exit-code", invocation=None, last_run=None, lines=[], secrets=[])
    settings = Alerts(mail_to="data-team@example.edu", sendmail=str(stub), webhook_url_file=None, timeout=5,
                      healthchecks_url_file=None)
    assert deliver(alert, settings, {}) == (1, 1)
    mail = captured.read_text()
    assert mail.startswith("To: data-team@example.edu\nSubject: [lms-refresh] lms-refresh.service failed on ")
    assert "exit status 69 (source or store unreachable, or a full disk (transient))" in mail
    assert (tmp_path / "mail.txt.args").read_text().split() == ["-t", "-oi"]


def test_alert_command_posts_json_to_the_webhook(project, receiver, tmp_path):
    monitored(project, receiver, tmp_path)
    project.write("a.ndjson", ["garbage"] * 3)
    assert project.invoke("run", now=NOW).returncode == 65
    receiver.received.clear()
    result = project.invoke("alert", env={"MONITOR_UNIT": "lms-refresh.service", "MONITOR_EXIT_STATUS": "65",
                                       "MONITOR_SERVICE_RESULT": "exit-code"})
    assert result.returncode == 0, result.stderr
    [(path, body)] = receiver.received
    assert path == "/hook?token=secret-token"
    alert = json.loads(body)
    assert alert["unit"] == "lms-refresh.service" and alert["exit_status"] == 65 and alert["result"] == "exit-code"
    assert alert["window"]["until"] == "2026-11-03T03:15:00.000000Z" and "malformed" in alert["message"]
    assert "secret-token" not in body.decode() and "secret-token" not in result.stderr


def test_an_alert_without_an_exit_status_never_reports_0_after_a_successful_last_run(project, receiver, tmp_path):
    # A unit that failed before its main process ran (a condition, a start limit) leaves systemd's exit
    # status at 0 and the store's last run a success: neither is this failure's status.
    monitored(project, receiver, tmp_path)
    assert project.invoke("run", now=NOW).returncode == 0
    receiver.received.clear()
    result = project.invoke("alert", env={"MONITOR_UNIT": "lms-refresh.service", "MONITOR_EXIT_STATUS": "0",
                                       "MONITOR_SERVICE_RESULT": "start-limit-hit"})
    assert result.returncode == 0, result.stderr
    [(_, body)] = receiver.received
    alert = json.loads(body)
    assert alert["exit_status"] is None and alert["result"] == "start-limit-hit" and alert["window"] is None, alert
    assert alert["meaning"].startswith("systemd refused to start it: it was started too often"), alert


def test_alert_exits_1_when_every_channel_fails(project, tmp_path):
    (tmp_path / "hook-url").write_text("http://127.0.0.1:9/hook\n")
    project.config.write_text(project.config.read_text()
                              + f'\n[alerts]\nwebhook_url_file = "{tmp_path / "hook-url"}"\n')
    assert project.invoke("alert", "--exit-status", "69").returncode == 1


def test_scheduled_runs_retry_an_unreachable_source_then_exit_69(project, receiver, tmp_path):
    project.configure(retry_attempts=2)
    prom = monitored(project, receiver, tmp_path)
    project.source.rmdir()
    result = project.invoke("run", now=NOW)
    assert result.returncode == 69
    assert "does not exist (is the export share mounted?). Retrying in 1 s (attempt 2 of 2)." in result.stderr
    assert receiver.paths() == ["/ping/secret-token/start", "/ping/secret-token/69"]  # one start, one end
    assert parse_prom(prom)["lms_refresh_last_exit_code"] == 69
    backfill = project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-02", now=NOW)
    assert backfill.returncode == 69 and "Retrying" not in backfill.stderr  # an operator's command fails at once


def test_a_retry_that_finds_the_source_back_succeeds(project):
    from lms_refresh.config import load_config
    from lms_refresh.instants import parse_user_time
    from lms_refresh.logs import Progress
    from lms_refresh.ops.job import run_job
    from lms_refresh.run.refresh import Refresh
    from lms_refresh.run.request import Request

    project.configure(retry_attempts=3)
    project.source.rename(project.root / "away")
    pauses = []

    def sleep(seconds):  # the share comes back while the job waits
        pauses.append(seconds)
        (project.root / "away").rename(project.source)
        project.write("a.ndjson", [statement()])

    config = load_config(str(project.config), {})
    report, error = run_job(Refresh(config, Request(), parse_user_time(NOW, "UTC"), {}, os.geteuid(), Progress({})),
                            sleep=sleep)
    assert error is None and report.outcome == "success" and report.statements_read == 1 and pauses == [1]


def test_status_check_says_when_data_is_stale(project):
    project.write("a.ndjson", [statement()])
    never = project.invoke("status", "--check", now=NOW)  # no store yet: nothing to say about freshness
    assert never.returncode == 3 and never.stdout.startswith("LMS-REFRESH UNKNOWN - no store at ")
    project.invoke("run", now=NOW, check=0)  # Tuesday 04:15
    assert project.invoke("status", "--check", now="2026-11-03T12:00:00+01:00").returncode == 0
    assert project.invoke("status", "--check", now="2026-11-04T05:00:00+01:00").returncode == 0  # within the grace
    stale = project.invoke("status", "--check", now="2026-11-04T06:30:00+01:00")  # Wednesday's run is missing
    assert stale.returncode == 2 and "before the run due at 2026-11-04T04:15+01:00" in stale.stdout
    friday = project.invoke("status", "--check", now="2026-11-06T04:15:00+01:00")
    assert friday.returncode == 2
    project.invoke("run", now="2026-11-06T04:15:00+01:00", check=0)
    assert project.invoke("status", "--check", now="2026-11-09T03:00:00+01:00").returncode == 0  # the weekend
    assert json.loads(project.invoke("status", "--json", now="2026-11-09T03:00:00+01:00").stdout)["stale"] is None


def test_a_delivery_thread_never_takes_sigterm_so_the_main_threads_hold_back_holds(monkeypatch):
    """A ping or alert is posted from a thread of its own, which a slow receiver can leave behind alive. The
    commit and the shutdown marker hold SIGTERM back by blocking it in the main thread only: a thread that did
    not block it too would take the signal, and the stop would run in the middle of the commit."""
    import signal

    from lms_refresh.ops import monitoring

    masks = []

    class Opener:
        def open(self, request, timeout):
            masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))  # this thread's mask, unchanged
            raise ConnectionRefusedError("no receiver")

    monkeypatch.setattr(monitoring, "_OPENER", Opener())
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the test's own thread
    assert monitoring.post("http://127.0.0.1:9/", b"", "text/plain", timeout=5) is False
    assert masks and signal.SIGTERM in masks[0], masks
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the caller's mask unchanged
