"""`lms-refresh alert-test`: one test alert through every [alerts] channel, against a real local webhook
receiver and a sendmail that keeps what it is given; per channel, whether it went out; the exit status
from the one table (0 every channel, 69 one failed, 78 none configured); no lock, no store, no watermark."""

import fcntl
import hashlib
import json
import socket

import pytest

from helpers.receiver import Receiver
from helpers.statements import statement


@pytest.fixture
def project(sqlite_project):
    """The command reads the configuration and the credentials only: the local store stands for any."""
    return sqlite_project


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.server.shutdown()


NOW = "2026-11-03T04:15:00+01:00"


def sendmail(tmp_path, script="cat > {mail}\n"):
    """A sendmail that keeps the mail it is handed in mail.txt (or runs `script`)."""
    stub = tmp_path / "sendmail"
    stub.write_text("#!/bin/sh\n" + script.format(mail=tmp_path / "mail.txt"))
    stub.chmod(0o755)
    return stub


def with_alerts(project, tmp_path, *, hook=None, mailer=None):
    lines = ['timeout = "5s"']
    if hook is not None:
        (tmp_path / "hook-url").write_text(hook + "\n")
        lines.append(f'webhook_url_file = "{tmp_path / "hook-url"}"')
    if mailer is not None:
        lines += ['mail_to = "data-team@example.edu"', f'sendmail = "{mailer}"']
    project.config.write_text(project.config.read_text() + "\n[alerts]\n" + "\n".join(lines) + "\n")


def test_every_channel_delivers_a_labelled_test_alert(project, receiver, tmp_path):
    mailer = sendmail(tmp_path)
    with_alerts(project, tmp_path, hook=f"{receiver.url}/hook?token=secret-token", mailer=mailer)
    result = project.cli("alert-test")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"delivered  mail through {mailer}",
        f"delivered  webhook in {tmp_path / 'hook-url'}",
        "The test alert went out through every channel (2); check that it arrived.",
    ]
    host = socket.gethostname()
    [(path, body)] = receiver.received
    assert path == "/hook?token=secret-token"
    alert = json.loads(body)
    # The fields of a real alert, so a relay is tested too; `test` tells them apart.
    assert alert["test"] is True and alert["host"] == host and alert["exit_status"] is None
    assert alert["result"] == "test" and alert["window"] is None and alert["journal"] == []
    assert alert["message"] == (f"This is a test alert from lms-refresh on {host}, sent by `lms-refresh alert-test` "
                                f"with the configuration {project.config}. Nothing failed: this channel works.")
    mail = (tmp_path / "mail.txt").read_text()
    assert mail.startswith("To: data-team@example.edu\n"
                           f"Subject: [lms-refresh] TEST alert from {host}: nothing failed\n"), mail
    assert alert["message"] in mail
    assert "secret-token" not in result.stdout + result.stderr


def test_one_failing_channel_is_named_and_exits_69(project, tmp_path):
    mailer = sendmail(tmp_path)
    with_alerts(project, tmp_path, hook="http://127.0.0.1:9/hook?token=secret-token", mailer=mailer)
    result = project.cli("alert-test")
    assert result.returncode == 69, (result.stdout, result.stderr)
    assert result.stdout.splitlines() == [f"delivered  mail through {mailer}",
                                          f"FAILED     webhook in {tmp_path / 'hook-url'}"]
    assert "Delivery to http://127.0.0.1:9 failed" in result.stderr
    assert ("The test alert did not go out through 1 of 2 channels: a failure would not be reported there; the "
            "warnings above say why.") in result.stderr
    assert "secret-token" not in result.stdout + result.stderr
    assert "TEST alert" in (tmp_path / "mail.txt").read_text()


def test_a_sendmail_that_fails_is_a_failed_channel(project, tmp_path):
    mailer = sendmail(tmp_path, "echo 'mail for data-team@example.edu refused' >&2\nexit 75\n")
    with_alerts(project, tmp_path, mailer=mailer)
    result = project.cli("alert-test")
    assert result.returncode == 69, (result.stdout, result.stderr)
    assert result.stdout.splitlines() == [f"FAILED     mail through {mailer}"]
    assert f"Sending the alert mail with {mailer} failed" in result.stderr
    assert "1 of 1 channel:" in result.stderr and "data-team@example.edu" not in result.stderr


def test_a_set_group_id_sendmail_fails_the_test_though_it_took_the_mail(project, tmp_path):
    """From a shell, postfix's set-group-ID sendmail queues the mail; under the alert unit (NoNewPrivileges=)
    it cannot, so a test that called it delivered would pass where the real alert is lost."""
    mailer = sendmail(tmp_path)
    mailer.chmod(0o2755)
    with_alerts(project, tmp_path, mailer=mailer)
    result = project.cli("alert-test")
    assert result.returncode == 69, (result.stdout, result.stderr)
    assert result.stdout.startswith(f"FAILED     mail through {mailer}: {mailer} took the mail here, but the alert "
                                    f"unit cannot run it: {mailer} is set-group-ID"), result.stdout
    assert "msmtp" in result.stdout and (tmp_path / "mail.txt").exists()


def test_no_channel_configured_exits_78_and_says_only_the_journal_hears(project, tmp_path):
    for extra in ("", '\n[alerts]\ntimeout = "5s"\nhealthchecks_url_file = "hc-url"\n'):
        project.config.write_text(project.config.read_text() + extra)
        result = project.cli("alert-test")
        assert result.returncode == 78, (result.stdout, result.stderr)
        assert (f"{project.config}: no alert channel is configured: a failure reaches only the journal. Set mail_to "
                "or webhook_url_file under [alerts]") in result.stderr
        assert result.stdout == ""


def test_a_configuration_broken_outside_alerts_is_tested_from_alerts_alone(project, receiver, tmp_path):
    """The real alert of a run that failed on a misspelt key goes out from [alerts] alone: so does the test."""
    with_alerts(project, tmp_path, hook=f"{receiver.url}/hook")
    project.config.write_text("min_cel_size = 5\n" + project.config.read_text())
    result = project.cli("alert-test")
    assert result.returncode == 0, result.stderr
    assert "The configuration is broken outside [alerts]" in result.stderr and "min_cel_size" in result.stderr
    assert json.loads(receiver.received[0][1])["test"] is True


def test_unreadable_alerts_settings_exit_78(project, tmp_path):
    project.config.write_text(project.config.read_text() + '\n[alerts]\nmail_to = 3\n')
    result = project.cli("alert-test")
    assert result.returncode == 78 and "alerts.mail_to" in result.stderr, result.stderr


def test_it_takes_no_lock_and_leaves_the_store_and_watermark_alone(project, receiver, tmp_path):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    with_alerts(project, tmp_path, hook=f"{receiver.url}/hook")
    watermark = json.loads(project.invoke("status", "--json", check=0).stdout)["watermark"]
    assert watermark
    before = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in project.state.iterdir()
              if path.is_file()}
    with open(project.state / "refresh.lock", "r+") as held:  # a run under way
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = project.cli("alert-test")
    assert result.returncode == 0, result.stderr
    assert len(receiver.received) == 1
    after = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in project.state.iterdir()
             if path.is_file()}
    assert after == before
    assert json.loads(project.invoke("status", "--json", check=0).stdout)["watermark"] == watermark


def test_a_real_alert_says_it_is_no_test(project, receiver, tmp_path):
    with_alerts(project, tmp_path, hook=f"{receiver.url}/hook")
    assert project.invoke("alert", "--exit-status", "69").returncode == 0
    alert = json.loads(receiver.received[0][1])
    assert alert["test"] is False and alert["exit_status"] == 69
