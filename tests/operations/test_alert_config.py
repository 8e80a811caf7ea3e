"""The failure alert survives a broken configuration (the real-systemd version is in tests/system)."""

import json

import pytest

from helpers.receiver import Receiver
from lms_refresh.config import Alerts, load_alerts
from lms_refresh.errors import ConfigError
from lms_refresh.ops.alerts import compose, deliver

ENV = {"MONITOR_UNIT": "lms-refresh.service", "MONITOR_EXIT_STATUS": "78", "MONITOR_SERVICE_RESULT": "exit-code"}


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.server.shutdown()


def with_webhook(project, tmp_path, receiver, top="", alerts=""):
    (tmp_path / "hook-url").write_text(f"{receiver.url}/hook/secret-token\n")
    project.config.write_text(top + project.config.read_text()
                              + f'\n[alerts]\nwebhook_url_file = "{tmp_path / "hook-url"}"\n' + alerts)


def test_a_misspelt_key_fails_the_run_but_still_alerts(sqlite_project, tmp_path, receiver):
    with_webhook(sqlite_project, tmp_path, receiver, top="min_cel_size = 5\n")
    run = sqlite_project.invoke("run")
    assert run.returncode == 78 and "unknown key 'min_cel_size'" in run.stderr
    result = sqlite_project.invoke("alert", env=ENV)
    assert result.returncode == 0, result.stderr
    assert "alerting from its [alerts] table alone" in result.stderr
    [(path, body)] = receiver.received
    alert = json.loads(body)
    assert path == "/hook/secret-token" and alert["exit_status"] == 78 and alert["unit"] == "lms-refresh.service"
    assert "configuration or state error" in alert["meaning"] and alert["window"] is None
    assert "unknown key 'min_cel_size'" in alert["message"]  # no journal here: the configuration's own error
    assert "secret-token" not in body.decode() and "secret-token" not in result.stderr


@pytest.mark.parametrize("top, alerts, says", [
    ("this is = not toml\n", "", "is not valid TOML"),
    ("", 'timeout = "soon"\n', "key 'alerts.timeout' is invalid"),
    ("", "colour = 1\n", "unknown key 'alerts.colour'"),
])
def test_unreadable_alert_settings_say_nobody_was_alerted(sqlite_project, tmp_path, receiver, top, alerts, says):
    with_webhook(sqlite_project, tmp_path, receiver, top=top, alerts=alerts)
    result = sqlite_project.invoke("alert", env=ENV)
    assert result.returncode == 78
    assert " ERROR lms-refresh.service failed (exit status 78) and nobody was alerted. No alert could be sent: " \
           "the [alerts] settings cannot be read (" in result.stderr
    assert says in result.stderr and str(sqlite_project.config) in result.stderr
    assert receiver.received == []


def test_a_missing_configuration_file_says_nobody_was_alerted(sqlite_project):
    sqlite_project.config.unlink()
    result = sqlite_project.invoke("alert", env=ENV)
    assert result.returncode == 78 and "nobody was alerted" in result.stderr
    assert f"No configuration file at {sqlite_project.config}" in result.stderr


def test_alert_settings_are_read_on_their_own(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('min_cel_size = 5\n[window]\nsafety_lag = "x"\n[alerts]\nmail_to = "team@example.edu"\n')
    settings = load_alerts(str(path))
    assert settings.mail_to == "team@example.edu" and settings.timeout == 10 and settings.webhook_url_file is None
    path.write_text('[alerts]\nmail_to = 3\n')
    with pytest.raises(ConfigError, match="key 'alerts.mail_to' expected str"):
        load_alerts(str(path))


def test_without_a_run_row_the_message_is_the_last_error_of_the_failed_invocation():
    lines = [(6, "Refreshing ..."), (3, "config.toml: unknown key 'min_cel_size' (known: ...)."), (4, "a warning")]
    alert = compose("lms-refresh.service", "78", "exit-code", invocation="abc", last_run=None, lines=lines, secrets=[])
    assert alert["message"] == "config.toml: unknown key 'min_cel_size' (known: ...)."
    assert alert["journal"] == [message for _, message in lines]


def test_an_unreadable_webhook_file_does_not_stop_the_mail(tmp_path):
    captured = tmp_path / "mail.txt"
    stub = tmp_path / "sendmail"
    stub.write_text(f"#!/bin/sh\ncat > {captured}\n")
    stub.chmod(0o755)
    alert = compose("lms-refresh.service", "78", "exit-code", invocation=None, last_run=None, lines=[], secrets=[])
    settings = Alerts(mail_to="team@example.edu", sendmail=str(stub), timeout=5,
                      webhook_url_file=str(tmp_path / "absent"), healthchecks_url_file=None)
    assert deliver(alert, settings, {}) == (1, 2)
    assert "exit status 78" in captured.read_text()


def test_an_earlier_success_is_not_taken_for_the_failed_run():
    success = {"window_since": "a", "window_until": "b", "message": "", "exit_code": 0}
    lines = [(3, "The pseudonymisation key /var/lib/lms-refresh/pseudonymisation.key is missing ...")]
    alert = compose("lms-refresh.service", "78", "exit-code", invocation="abc", last_run=success, lines=lines,
                    secrets=[])
    assert alert["window"] is None and alert["message"].startswith("The pseudonymisation key")


def test_the_alert_waits_a_bounded_time_for_the_failed_runs_error_record():
    """OnFailure= may start the alert before the failed unit's last records are in the journal: it looks
    again until an error record shows, for at most JOURNAL_WAIT seconds (here an invocation with no
    records at all, on a fake clock)."""
    from lms_refresh.ops.alerts import JOURNAL_WAIT, journal_lines

    now, sleeps = [0.0], []

    def sleep(seconds):
        sleeps.append(seconds)
        now[0] += seconds

    assert journal_lines("0" * 32, clock=lambda: now[0], sleep=sleep) == []
    assert JOURNAL_WAIT <= now[0] < JOURNAL_WAIT + 0.5 and len(sleeps) >= 2
    assert journal_lines("", clock=lambda: now[0], sleep=sleep) == [] and now[0] < JOURNAL_WAIT + 0.5  # no wait
