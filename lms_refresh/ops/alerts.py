"""What replaces cron's MAILTO, part two: `lms-refresh alert`, run by the OnFailure= unit (and
`lms-refresh alert-test`, one test alert through the same channels).

The alert names the unit, its exit status and what it means, the window of
the failed run and the last journal lines of the failed invocation — with
credentials and anything that looks like a learner identifier redacted.
"""

import datetime as dt
import json
import logging
import os
import socket
import stat
import subprocess
import tempfile
import time

from lms_refresh import logs
from lms_refresh.config import load_alerts, load_config
from lms_refresh.config.schema import DEFAULT_STATE_DIRECTORY
from lms_refresh.credentials import read_secret
from lms_refresh.disclosure.redaction import scrub_text, url_origin
from lms_refresh.errors import MEANINGS, ConfigError, NotConfiguredError, RefreshError, StateError
from lms_refresh.instants import from_cursor
from lms_refresh.ops.interruption import mark_alerted, unalerted
from lms_refresh.ops.monitoring import post, read_url

logger = logging.getLogger(__name__)

JOURNAL_LINES = 30

# What systemd's result says when the unit gave no exit status of its own (its main process never ran,
# or was killed): systemd.exec(5), $MONITOR_SERVICE_RESULT.
RESULTS = {
    "start-limit-hit": "systemd refused to start it: it was started too often in a short time (StartLimitBurst=)",
    "timeout": "killed for running longer than TimeoutStartSec=",
    "signal": "killed by a signal",
    "core-dump": "crashed (core dump)",
    "watchdog": "killed by the watchdog",
    "oom-kill": "killed by the kernel's out-of-memory killer",
}
UNKNOWN = "not an lms-refresh exit status (killed, timed out or crashed?)"


# The failed unit's last records may still be on their way into the journal when OnFailure=
# starts the alert (seen on a loaded machine): wait this long for its error record to show.
JOURNAL_WAIT = 5.0


def journal_lines(invocation, limit=JOURNAL_LINES, wait=JOURNAL_WAIT, *, clock=time.monotonic, sleep=time.sleep):
    """Return the last `limit` (priority, message, run id or None) records of one invocation, oldest first
    ([] without a journal), waiting up to `wait` seconds for a record at priority err or worse (a run
    that was killed has none: then what is there after the wait)."""
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
        lines.append((int(entry.get("PRIORITY", 6)), str(entry.get("MESSAGE", "")), entry.get("RUN_ID")))
    return list(reversed(lines))


def _last_error(lines):
    """The last record at priority err or worse: with no run row to read, the failure's own sentence."""
    errors = [line[1] for line in lines if line[0] <= 3]
    return errors[-1] if errors else ""


def _show(unit, *options):
    """Return `systemctl show` of one property of `unit` (its value, stripped), or None."""
    try:
        shown = subprocess.run(["systemctl", "show", *options, unit], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return shown.stdout.strip() if shown.returncode == 0 else None


def unit_exit_status(unit):
    """Return the unit's last main-process exit status as systemd reports it, or None.

    $MONITOR_EXIT_STATUS is not always the ExecStart= process's status (it may
    be absent, or name another process), so the alert asks systemd directly.
    """
    value = _show(unit, "-P", "ExecMainStatus")
    return value if value not in (None, "", "0") else None


def unit_started(unit):
    """Return when the unit's last main process started (aware datetime), or None if systemd cannot say."""
    value = _show(unit, "--timestamp=unix", "-P", "ExecMainStartTimestamp") or ""
    if not value.startswith("@") or not value[1:].isdigit() or value == "@0":
        return None
    return dt.datetime.fromtimestamp(int(value[1:]), dt.UTC)


# How much earlier than the unit's start a run-log row of it may say it started (clock granularity).
START_TOLERANCE = dt.timedelta(minutes=1)


def failed_row(last_run, exit_code, *, run_ids, started):
    """Return the store's last run-log row if it is the failure being reported, else None.

    A failure before the run log (a state directory owned by someone else, a broken configuration, a
    missing key) leaves no row, so the last row is then an earlier run's. Every piece of evidence there
    is must agree: the row failed; with the exit status systemd reports; its run id is in the failed
    invocation's journal (`run_ids`: None without a journal to read); it started after the unit did.
    """
    if not last_run or last_run.get("exit_code") == 0:
        return None
    if exit_code is not None and last_run.get("exit_code") != exit_code:
        return None
    if run_ids is not None and last_run.get("run_id") not in run_ids:
        return None
    if started is not None:
        try:
            row_started = from_cursor(last_run["started_at"], "run start")
        except (KeyError, ValueError, StateError):
            return None
        if row_started < started - START_TOLERANCE:
            return None
    return last_run


def compose(unit, exit_status, result, *, invocation, last_run, lines, secrets, run_ids=None, started=None):
    """Return the alert as a dict (the webhook body; the mail is made from it).

    `lines` are the failed invocation's (priority, message, ...) journal records; `run_ids` the run ids
    they name (None without a journal) and `started` when the unit started (None if unknown): the
    store's last run is the failure's only if they agree (see `failed_row`).
    """
    try:
        code = int(exit_status)
    except (TypeError, ValueError):
        code = None
    alert = {
        "test": False,
        "host": socket.gethostname(),
        "unit": unit,
        "result": result or "unknown",
        "exit_status": code,
        "meaning": MEANINGS.get(code) or RESULTS.get(result, UNKNOWN),
        "invocation_id": invocation or None,
        "window": None,
        "journal": [scrub_text(line[1], secrets) for line in lines],
        "message": scrub_text(_last_error(lines), secrets),
    }
    row = failed_row(last_run, code, run_ids=run_ids, started=started)
    if row is not None:
        alert["window"] = {"since": row["window_since"], "until": row["window_until"]}
        alert["message"] = scrub_text(row["message"], secrets)
    return alert


def mail_text(alert, recipient):
    if alert.get("test"):
        return "\n".join([f"To: {recipient}", f"Subject: [lms-refresh] TEST alert from {alert['host']}: nothing failed",
                          "Content-Type: text/plain; charset=utf-8", "", alert["message"], ""])
    window = alert["window"] or {}
    body = [
        f"{alert['unit']} failed on {alert['host']}: exit status {alert['exit_status']} ({alert['meaning']}).",
        f"Result: {alert['result']}",
        f"Window: {window.get('since')} .. {window.get('until')}",
        f"Message: {alert['message'] or '-'}",
        *([f"Earlier: the run started {alert['interrupted'].get('started_at')} did not finish (a shutdown, a crash "
           "or a stop) and could not alert; it was caught up by the run started "
           f"{alert['interrupted'].get('noticed_at')}."]
          if alert.get("interrupted") else []),
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


def mailer_problem(sendmail):
    """Return a sentence if the `sendmail` program (or postfix's postdrop, which its sendmail runs) is
    set-user-ID or set-group-ID, which lms-refresh-alert@.service keeps from working (NoNewPrivileges=, implied
    by any system call filter), else None."""
    real = os.path.realpath(sendmail)
    for program in (real, os.path.join(os.path.dirname(real), "postdrop")):
        try:
            info = os.stat(program)
        except OSError:
            continue
        if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
            return (f"{program} is set-{'user' if info.st_mode & stat.S_ISUID else 'group'}-ID (exim4's and postfix's "
                    "are), and lms-refresh-alert@.service, like any unit with a system call filter, lets no program "
                    "gain privileges; point alerts.sendmail at one that needs none, e.g. msmtp handing the mail to "
                    "the local mail server (apt install msmtp; /etc/msmtprc: 'account default', 'host localhost', "
                    "'port 25', 'from lms-refresh@HOSTNAME'; sendmail = \"/usr/bin/msmtp\"), or use a webhook")
    return None


def deliver(alert, settings, environ):
    """Send `alert` to every configured channel; return (delivered, attempted) counts."""
    sent = deliveries(alert, settings, environ)
    return sum(ok for _, ok in sent), len(sent)


def deliveries(alert, settings, environ):
    """Send `alert` to every configured channel, mail first; return [(channel, delivered)], one per channel."""
    sent = []
    if settings.mail_to:
        sent.append(("mail", _mail(alert, settings)))
    if settings.webhook_url_file:
        sent.append(("webhook", _webhook(alert, settings, environ)))
    return sent


def _mail(alert, settings):
    sendmail = settings.sendmail
    if not os.access(sendmail, os.X_OK):
        logger.warning("No %s to send the alert mail with; install a mail transfer agent.", sendmail)
        return False
    # Its output goes to a file, not a pipe: an MTA that queues the mail, exits 0 and leaves a delivery
    # process holding the pipe made run() wait for that child and report the mail failed.
    with tempfile.TemporaryFile() as said:
        try:
            subprocess.run([sendmail, "-t", "-oi"], input=mail_text(alert, settings.mail_to).encode(), check=True,
                           timeout=settings.timeout, stdout=said, stderr=said)
            return True
        except (subprocess.SubprocessError, OSError) as error:
            said.seek(0)
            words = said.read(500).decode("utf-8", "replace").strip()
            problem = mailer_problem(sendmail)
            logger.warning("Sending the alert mail with %s failed: %s%s%s", sendmail, error,
                           f" It said: {words}" if words else "", f" ({problem}.)" if problem else "")
            return False


def _webhook(alert, settings, environ):
    try:
        url = read_url(settings.webhook_url_file, environ, "alerts.webhook_url_file")
    except ConfigError as error:  # the mail may still go out
        logger.warning("The alert webhook is not sent: %s", error)
        return False
    if not post(url, json.dumps(alert).encode(), "application/json", timeout=settings.timeout):
        return False
    if alert.get("test"):  # no MESSAGE_ID: whoever counts the alerts sent in the journal counts failures only
        logger.info("Test alert delivered to %s", url_origin(url))
    else:
        logger.info("Alert delivered to %s", url_origin(url), extra=logs.fields(logs.ALERT_SENT))
    return True


def compose_test_alert(config_path):
    """Return a test alert (the webhook body; the mail is made from it): the fields of a real one, with `test`
    true, no exit status, and a message that says it is a test, from which host and which configuration."""
    host = socket.gethostname()
    path = os.path.abspath(config_path)
    return {
        "test": True,
        "host": host,
        "unit": "lms-refresh.service",
        "result": "test",
        "exit_status": None,
        "meaning": "a test alert: nothing failed",
        "invocation_id": None,
        "window": None,
        "journal": [],
        "message": (f"This is a test alert from lms-refresh on {host}, sent by `lms-refresh alert-test` with the "
                    f"configuration {path}. Nothing failed: this channel works."),
        "interrupted": None,
    }


def send_test_alert(config_path, environ):
    """Send a test alert to every [alerts] channel; return [(the channel, delivered, note or None)].

    A sendmail that the alert unit cannot run (set-user-ID or set-group-ID) counts as not delivered even if it
    took the mail here: a real alert would not go out through it. With no channel configured, raise ConfigError.
    It reads the configuration and the credentials only: no lock, no store, no state.
    """
    try:
        settings = load_config(config_path, environ).alerts
    except NotConfiguredError:  # no [source] yet: [alerts] may well be set up first
        settings = load_alerts(config_path)
    except ConfigError as broken:  # a run would fail on it, and its alert go out from [alerts] alone
        settings = load_alerts(config_path)
        logger.warning("The configuration is broken outside [alerts] (%s); a run fails on it, and its alert is "
                       "sent from [alerts] alone, as this test is.", broken)
    if not (settings.mail_to or settings.webhook_url_file):
        raise ConfigError(f"{os.path.abspath(config_path)}: no alert channel is configured: a failure reaches only "
                          "the journal. Set mail_to or webhook_url_file under [alerts] (see "
                          "/usr/share/doc/lms-refresh/docs/admin/alerts-and-monitoring.md).")
    logger.info("Sending a test alert to every [alerts] channel of %s", config_path)
    results = []
    for channel, delivered in deliveries(compose_test_alert(config_path), settings, environ):
        if channel == "webhook":
            results.append((f"webhook in {settings.webhook_url_file}", delivered, None))
            continue
        problem = mailer_problem(settings.sendmail) if delivered else None
        note = problem and f"{settings.sendmail} took the mail here, but the alert unit cannot run it: {problem}"
        results.append((f"mail through {settings.sendmail}", delivered and not problem, note))
    return results


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
        # A failure is never reported as exit status 0: a last run that succeeded says nothing of this one.
        exit_status = unit_exit_status(unit) or ((last_run or {}).get("exit_code") or None)
    logger.info("Alerting that %s failed (exit status %s, result %s)", unit, exit_status, result)
    lines = journal_lines(invocation)
    run_ids = {line[2] for line in lines if line[2]} if lines else None
    message = compose(unit, exit_status, result, invocation=invocation, last_run=last_run, lines=lines,
                      secrets=secrets, run_ids=run_ids, started=unit_started(unit))
    if broken is not None and not message["message"]:
        message["message"] = scrub_text(str(broken), secrets)
    # A run a shutdown interrupted could not alert then: the next alert says so, once.
    directory = (config.state_directory if config is not None
                 else environ.get("STATE_DIRECTORY", DEFAULT_STATE_DIRECTORY))
    message["interrupted"] = unalerted(directory)
    delivered, attempted = deliver(message, settings, environ)
    if delivered and message["interrupted"]:
        mark_alerted(directory, message["interrupted"])
    if attempted == 0:
        logger.warning("%s failed, but [alerts] in %s names no channel to tell.", unit, config_path)
    elif not delivered:
        logger.error("%s failed and no [alerts] channel could be reached; nobody was alerted.", unit,
                     extra=logs.fields(logs.ALERT_UNDELIVERED))
    return delivered, attempted
