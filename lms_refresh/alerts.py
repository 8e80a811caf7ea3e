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

from lms_refresh.errors import MEANINGS
from lms_refresh.credentials import read_secret
from lms_refresh.monitoring import post, redact_url

logger = logging.getLogger(__name__)

JOURNAL_LINES = 30
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL_SECRET = re.compile(r"(\w+://)[^\s/@]*@")  # user:password@ in URLs


def journal_lines(invocation, limit=JOURNAL_LINES):
    """Return the last `limit` messages of one invocation, oldest first ([] without a journal)."""
    if not invocation:
        return []
    try:
        from systemd import journal
    except ImportError:
        return []
    reader = journal.Reader()
    reader.add_match(_SYSTEMD_INVOCATION_ID=invocation)
    reader.seek_tail()
    lines = []
    for _ in range(limit):
        entry = reader.get_previous()
        if not entry:
            break
        lines.append(str(entry.get("MESSAGE", "")))
    return list(reversed(lines))


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


def compose(unit, exit_status, result, invocation, last_run, lines, secrets):
    """Return the alert as a dict (the webhook body; the mail is made from it)."""
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
        "message": "",
        "journal": [redact(line, secrets) for line in lines],
    }
    if last_run:
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
    recipient = settings.get("mail_to")
    if recipient:
        attempted += 1
        sendmail = settings["sendmail"]
        if not os.access(sendmail, os.X_OK):
            logger.warning("No %s to send the alert mail with; install a mail transfer agent.", sendmail)
        else:
            try:
                subprocess.run([sendmail, "-t", "-oi"], input=mail_text(alert, recipient).encode(), check=True,
                               timeout=settings["timeout"], capture_output=True)
                delivered += 1
            except (subprocess.SubprocessError, OSError) as error:
                logger.warning("Sending the alert mail with %s failed: %s", sendmail, error)
    if settings.get("webhook_url_file"):
        attempted += 1
        url = read_secret(settings["webhook_url_file"], environ)
        if post(url, json.dumps(alert).encode(), "application/json", settings["timeout"]):
            delivered += 1
            logger.info("Alert delivered to %s", redact_url(url))
    return delivered, attempted
