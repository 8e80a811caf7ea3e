"""What replaces cron's MAILTO, part two: `lms-refresh alert`, run by the OnFailure= unit.

The alert names the unit, its exit status and what it means, the window of
the failed run and the last journal lines of the failed invocation — with
credentials and anything that looks like a learner identifier redacted.
"""

import json
import logging
import os
import re
import socket
import subprocess
import time

from lms_refresh import logs
from lms_refresh.config import load_alerts, load_config
from lms_refresh.errors import MEANINGS, ConfigError, RefreshError
from lms_refresh.credentials import read_secret
from lms_refresh.ops.monitoring import post, redact_url

logger = logging.getLogger(__name__)

JOURNAL_LINES = 30
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL_SECRET = re.compile(r"(\w+://)[^\s/@]*@")  # user:password@ in URLs


# The failed unit's last records may still be on their way into the journal when OnFailure=
# starts the alert (seen on a loaded machine): wait this long for its error record to show.
JOURNAL_WAIT = 5.0


def journal_lines(invocation, limit=JOURNAL_LINES, wait=JOURNAL_WAIT, *, clock=time.monotonic, sleep=time.sleep):
    """Return the last `limit` (priority, message) records of one invocation, oldest first ([] without a
    journal), waiting up to `wait` seconds for a record at priority err or worse (a run that was
    killed has none: then what is there after the wait)."""
    if not invocation:
        return []
    try:
        from systemd import journal
    except ImportError:
        return []
    deadline = clock() + wait
    while True:
        lines = _read_journal(journal, invocation, limit)
        if _last_error(lines) or clock() >= deadline:
            return lines
        sleep(0.2)


def _read_journal(journal, invocation, limit):
    reader = journal.Reader()
    reader.add_match(_SYSTEMD_INVOCATION_ID=invocation)
    reader.seek_tail()
    lines = []
    for _ in range(limit):
        entry = reader.get_previous()
        if not entry:
            break
        lines.append((int(entry.get("PRIORITY", 6)), str(entry.get("MESSAGE", ""))))
    return list(reversed(lines))


def _last_error(lines):
    """The last record at priority err or worse: with no run row to read, the failure's own sentence."""
    errors = [message for priority, message in lines if priority <= 3]
    return errors[-1] if errors else ""


def unit_exit_status(unit):
    """Return the unit's last main-process exit status as systemd reports it, or None.

    $MONITOR_EXIT_STATUS is not always the ExecStart= process's status (it may
    be absent, or name another process), so the alert asks systemd directly.
    """
    try:
        shown = subprocess.run(["systemctl", "show", "-P", "ExecMainStatus", unit], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    value = shown.stdout.strip()
    return value if shown.returncode == 0 and value not in ("", "0") else None


def redact(text, secrets):
    """Remove credential values, URL passwords and e-mail-like identifiers from `text`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    text = _URL_SECRET.sub(r"\1<redacted>@", text)
    return _EMAIL.sub("<redacted>", text)


def compose(unit, exit_status, result, *, invocation, last_run, lines, secrets):
    """Return the alert as a dict (the webhook body; the mail is made from it).

    `lines` are the failed invocation's (priority, message) journal records.
    """
    try:
        code = int(exit_status)
    except (TypeError, ValueError):
        code = None
    alert = {
        "host": socket.gethostname(),
        "unit": unit,
        "result": result or "unknown",
        "exit_status": code,
        "meaning": MEANINGS.get(code, "not an lms-refresh exit status (killed, timed out or crashed?)"),
        "invocation_id": invocation or None,
        "window": None,
        "journal": [redact(message, secrets) for _, message in lines],
        "message": redact(_last_error(lines), secrets),
    }
    # A failure before the run's transaction (a missing key, an unreachable store) leaves no
    # row: the last row is then an earlier success, whose window and empty message would mislead.
    if last_run and last_run.get("exit_code") != 0:
        alert["window"] = {"since": last_run["window_since"], "until": last_run["window_until"]}
        alert["message"] = redact(last_run["message"], secrets)
    return alert


def mail_text(alert, recipient):
    window = alert["window"] or {}
    body = [
        f"{alert['unit']} failed on {alert['host']}: exit status {alert['exit_status']} ({alert['meaning']}).",
        f"Result: {alert['result']}",
        f"Window: {window.get('since')} .. {window.get('until')}",
        f"Message: {alert['message'] or '-'}",
        "",
        f"Last journal lines (journalctl _SYSTEMD_INVOCATION_ID={alert['invocation_id']}):",
        *alert["journal"],
    ]
    headers = [
        f"To: {recipient}",
        f"Subject: [lms-refresh] {alert['unit']} failed on {alert['host']}: exit {alert['exit_status']}",
        "Content-Type: text/plain; charset=utf-8",
    ]
    return "\n".join(headers) + "\n\n" + "\n".join(body) + "\n"


def deliver(alert, settings, environ):
    """Send `alert` to every configured channel; return (delivered, attempted) counts."""
    attempted = delivered = 0
    recipient = settings.mail_to
    if recipient:
        attempted += 1
        sendmail = settings.sendmail
        if not os.access(sendmail, os.X_OK):
            logger.warning("No %s to send the alert mail with; install a mail transfer agent.", sendmail)
        else:
            try:
                subprocess.run([sendmail, "-t", "-oi"], input=mail_text(alert, recipient).encode(), check=True,
                               timeout=settings.timeout, capture_output=True)
                delivered += 1
            except (subprocess.SubprocessError, OSError) as error:
                logger.warning("Sending the alert mail with %s failed: %s", sendmail, error)
    if settings.webhook_url_file:
        attempted += 1
        try:
            url = read_secret(settings.webhook_url_file, environ)
        except ConfigError as error:  # the mail may still go out
            logger.warning("The alert webhook is not sent: %s", error)
        else:
            if post(url, json.dumps(alert).encode(), "application/json", timeout=settings.timeout):
                delivered += 1
                logger.info("Alert delivered to %s", redact_url(url), extra=logs.fields(logs.ALERT_SENT))
    return delivered, attempted


def alert_settings(config_path, environ):
    """Return (the [alerts] settings, the whole Config or None, the configuration's error or None).

    A broken configuration (a misspelt key: the very failure being reported)
    still alerts, from the [alerts] table alone. If even that table cannot be
    read, nobody can be told: raise a ConfigError that says so, which is logged
    at priority err in the journal.
    """
    try:
        config = load_config(config_path, environ)
        return config.alerts, config, None
    except ConfigError as error:
        broken = error
    try:
        settings = load_alerts(config_path)
    except ConfigError as error:
        raise ConfigError(f"No alert could be sent: the [alerts] settings cannot be read ({error})") from None
    logger.warning("The configuration is broken (%s); alerting from its [alerts] table alone, without the "
                   "failed run's window.", broken)
    return settings, None, broken


def send_alert(config_path, unit, exit_status, *, result, invocation, environ, last_run_of):
    """Report that `unit` failed to every [alerts] channel; return (delivered, attempted).

    `last_run_of(config)` returns the store's last run row (for the window and
    message), or raises RefreshError.
    """
    try:
        settings, config, broken = alert_settings(config_path, environ)
    except ConfigError as error:
        status = exit_status if exit_status not in (None, "", "0") else unit_exit_status(unit)
        raise ConfigError(f"{unit} failed (exit status {status or 'unknown'}) and nobody was alerted. "
                          f"{error}") from None
    last_run = None
    if config is not None:
        try:
            last_run = last_run_of(config)
        except RefreshError as error:
            logger.warning("The alert goes without the run's window: %s", error)
    secrets = []
    for name in ("webhook_url_file", "healthchecks_url_file"):
        try:
            secrets.append(read_secret(getattr(settings, name), environ))
        except ConfigError:
            pass
    if not exit_status or exit_status == "0":
        exit_status = unit_exit_status(unit) or (last_run or {}).get("exit_code")
    logger.info("Alerting that %s failed (exit status %s, result %s)", unit, exit_status, result)
    lines = journal_lines(invocation)
    message = compose(unit, exit_status, result, invocation=invocation, last_run=last_run, lines=lines, secrets=secrets)
    if broken is not None and not message["message"]:
        message["message"] = redact(str(broken), secrets)
    delivered, attempted = deliver(message, settings, environ)
    if attempted == 0:
        logger.warning("%s failed, but [alerts] in %s names no channel to tell.", unit, config_path)
    elif not delivered:
        logger.error("%s failed and no [alerts] channel could be reached; nobody was alerted.", unit,
                     extra=logs.fields(logs.ALERT_UNDELIVERED))
    return delivered, attempted
