"""What replaces cron's MAILTO, part one: Healthchecks pings, Prometheus textfile, staleness.

Nothing here may change a refresh's exit status: every delivery failure is
logged and swallowed. URLs with tokens are read from credential files and
never logged.
"""

import http.client
import logging
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zoneinfo

from lms_refresh import atomic
from lms_refresh.config.validators import url_problem
from lms_refresh.credentials import read_secret
from lms_refresh.disclosure.redaction import scrub_text, url_origin
from lms_refresh.errors import TERMINATED, THREAD_REFUSED, ConfigError, RefreshError
from lms_refresh.instants import from_cursor
from lms_refresh.run import freshness
from lms_refresh.window import TIME

logger = logging.getLogger(__name__)



def read_url(name, environ, key):
    """Return the http(s) URL in the credential `name` (the value of `key`), or raise ConfigError with one
    sentence that names the file and what is wrong — never the URL, which holds a token."""
    url = read_secret(name, environ)
    problem = url_problem(url)
    if problem:
        raise ConfigError(f"The URL in {name} ({key}) {problem}; write the whole URL, as the service gave it "
                          "(e.g. https://hc-ping.com/UUID), on one line.")
    return url


def post(url, body, content_type, *, timeout, pause=1.0):
    """POST `body` to `url`; return True on a 2xx answer, log and return False otherwise.

    An answer cut short or garbled (the connection reset, no HTTP) is tried once more after `pause` seconds, so
    that one hiccup of the receiver does not lose an alert; a refused connection or a timeout is not (it would
    only double the wait for a receiver that is down)."""
    for attempt in (1, 2):
        try:
            return _post_once(url, body, content_type, timeout=timeout)
        except (http.client.HTTPException, ConnectionResetError) as error:
            if attempt == 1:
                logger.info("Delivery to %s: its answer was cut short or garbled (%s); trying once more.",
                            url_origin(url), type(error).__name__)
                time.sleep(pause)
                continue
            if isinstance(error, ConnectionResetError):
                logger.warning("Delivery to %s failed: %s", url_origin(url), error)
            else:  # the URL is not to blame
                logger.warning("Delivery to %s failed: its answer was no complete HTTP response (%s).",
                               url_origin(url), type(error).__name__)
        except urllib.error.HTTPError as error:
            if 300 <= error.code < 400:  # not followed: a POST redirected as a GET loses its body
                target = urllib.parse.urljoin(url, error.headers.get("Location") or "")
                logger.warning("Delivery to %s failed: it answered %d, a redirect to %s, which is not followed "
                               "(a redirected POST loses its body); write the URL it redirects to in the file.",
                               url_origin(url), error.code, url_origin(target))
            else:
                logger.warning("Delivery to %s failed: %s", url_origin(url), error.reason)
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            logger.warning("Delivery to %s failed: %s", url_origin(url), reason)
        except Exception as error:  # any failure: urllib's words for a URL it cannot use quote it, token and all
            if isinstance(error, RuntimeError) and str(error) == THREAD_REFUSED:  # the exchange's thread, refused
                logger.warning("Delivery to %s failed: the system is short of threads, which count as processes (the "
                               "user's limit, ulimit -u, or the unit's TasksMax=) (%s).", url_origin(url), error)
            else:
                logger.warning("Delivery to %s failed: the URL is malformed.", url_origin(url))
        return False


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not an instruction: urllib would repeat a POST redirected by 301, 302 or 303
    as a GET without its body, and report the alert delivered."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _post_once(url, body, content_type, *, timeout):
    """POST once; `timeout` bounds the whole exchange, not only each read: a receiver that trickles its answer
    a byte at a time would otherwise hold the run (or the alert) as long as it likes."""
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type,
                                                                             "User-Agent": "lms-refresh"})
    outcome = {}

    def exchange():
        # An abandoned exchange outlives its wait: SIGTERM must never be delivered here, where the main thread's
        # mask (stopping.held_back: the commit, the shutdown marker) would not hold it back.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            with _OPENER.open(request, timeout=timeout) as response:
                outcome["ok"] = 200 <= response.status < 300
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    worker = threading.Thread(target=exchange, name="lms-refresh-delivery", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():  # abandoned: a daemon thread, gone with the process
        raise TimeoutError(f"no complete answer within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["ok"]


class Healthchecks:
    """Healthchecks-style pings: URL/start, URL on success, URL/<exit status> on failure."""

    def __init__(self, url, timeout):
        self.url = url.rstrip("/") if url else None
        self.timeout = timeout

    def start(self):
        if self.url:
            post(self.url + "/start", b"", "text/plain", timeout=self.timeout)

    def finish(self, exit_code, message=""):
        """Ping the end of a run; a run an operator (or a shutdown) stopped sends nothing: a stop is
        no failure to page about, and a stop that leaves the data stale is reported as staleness."""
        if self.url and exit_code != TERMINATED:
            target = self.url if exit_code == 0 else f"{self.url}/{exit_code}"
            post(target, scrub_text(message).encode()[:10000], "text/plain", timeout=self.timeout)

    def fail(self, message):
        """Ping a failure whatever the exit status (Healthchecks' /fail)."""
        if self.url:
            post(self.url + "/fail", scrub_text(message).encode()[:10000], "text/plain", timeout=self.timeout)


def _epoch(cursor):
    return from_cursor(cursor, "time").timestamp() if cursor else None


def metrics_text(now, exit_code, duration, *, report, status, previous):
    """Return the node_exporter textfile body for one run."""
    last_success = status.get("last_success") if status else None
    success_time = _epoch(last_success["finished_at"]) if last_success else previous.get(
        "lms_refresh_last_success_timestamp_seconds")
    if exit_code == 0 and (success_time is None or success_time < now.timestamp()):
        success_time = now.timestamp()
    if status and status.get("watermark") and status.get("cursor_kind") == TIME.name:
        watermark = _epoch(status["watermark"])
    elif status and status.get("watermark"):
        watermark = None  # a log id is no time; the gauge is left out rather than made up
    else:
        watermark = previous.get("lms_refresh_watermark_timestamp_seconds")
    committed = exit_code == 0 and report is not None
    values = [
        ("lms_refresh_last_run_timestamp_seconds", "Start of the last refresh (Unix time).", now.timestamp()),
        ("lms_refresh_last_success_timestamp_seconds", "End of the last successful refresh.", success_time),
        ("lms_refresh_last_exit_code", "Exit status of the last refresh.", exit_code),
        ("lms_refresh_last_duration_seconds", "Duration of the last refresh.", duration),
        ("lms_refresh_rows_written", "Metric rows written by the last refresh.",
         report.rows_written if committed else 0),
        ("lms_refresh_quarantined_records", "Records quarantined by the last refresh.",
         report.quarantined if report else 0),
        ("lms_refresh_suppressed_cells", "Rows with suppressed values written by the last refresh.",
         report.suppressed if committed else 0),
        ("lms_refresh_watermark_timestamp_seconds", "The watermark: source arrival time complete up to.", watermark),
        ("lms_refresh_report_failed", "1 if the HTML report could not be written, 0 if it was (absent: none asked).",
         None if not status or "report" not in status else int(status["report"]["failure"] is not None)),
    ]
    lines = []
    for name, text, value in values:
        if value is None:
            continue
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name} {float(value):.6f}"]
    return "\n".join(lines) + "\n"


def read_previous(path):
    """Return {metric: value} from an earlier textfile, or {}."""
    values = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and not line.startswith("#"):
                    values[parts[0]] = float(parts[1])
    except (OSError, ValueError):
        pass
    return values


def write_textfile(path, text):
    """Replace `path` atomically (see lms_refresh/atomic.py), readable by node_exporter's own account."""
    atomic.replace_bytes(path, text.encode("utf-8"), mode=0o644, outcome="the run's own result stands.")


def staleness(status, now, timezone, *, grace, shown=freshness.minute_text):
    """Return None if the status's last success is recent enough for the schedule, else a sentence saying why not
    (lms_refresh.run.freshness, the rule the report's page follows too), its times written by `shown`."""
    return freshness.staleness(status.get("last_success"), now, timezone, grace=grace, shown=shown)


# `status --check` follows the monitoring-plugin convention (Nagios, Icinga,
# Checkmk, Sensu): one line "NAME STATE - text | perfdata", exit 0..3 only.
PLUGIN_OK, PLUGIN_WARNING, PLUGIN_CRITICAL, PLUGIN_UNKNOWN = 0, 1, 2, 3
PLUGIN_STATES = {PLUGIN_OK: "OK", PLUGIN_WARNING: "WARNING", PLUGIN_CRITICAL: "CRITICAL", PLUGIN_UNKNOWN: "UNKNOWN"}
PLUGIN_NAME = "LMS-REFRESH"


def _plugin_text(text):
    # '|' starts the perfdata and a plugin's output is one line.
    return " ".join(str(text).replace("|", "/").split())


def plugin_line(code, text, perfdata=()):
    """Return one monitoring-plugin output line: 'LMS-REFRESH OK - text | label=value ...'."""
    line = f"{PLUGIN_NAME} {PLUGIN_STATES[code]} - {_plugin_text(scrub_text(str(text)))}"
    if perfdata:
        line += " | " + " ".join(f"{label}={value}" for label, value in perfdata)
    return line


def plugin_report(status, now, timezone, *, grace):
    """Given a status (collect_status) and the clock, return (exit code, line) for `status --check`.

    OK: fresh. WARNING: fresh, but a later run failed. CRITICAL: stale.
    UNKNOWN: there is no store yet, so nothing can be said about freshness.
    """
    if not status["store"]["exists"]:
        interrupted = status.get("interrupted")
        # A first run killed before its store took its name left only its marker: "no refresh has run" is untrue.
        ran = ("no refresh has run" if interrupted is None else
               f"the first run, started {interrupted.get('started_at', '?')}, did not finish (a shutdown, a crash or a "
               "stop) and is not caught up yet")
        return PLUGIN_UNKNOWN, plugin_line(
            PLUGIN_UNKNOWN, f"no store at {status['store']['location']} yet: {ran} "
                            f"(state directory {status['state_directory']})")
    zone = zoneinfo.ZoneInfo(timezone)
    last_run, success = status["last_run"], status["last_success"]
    perfdata = []
    if success is not None:
        started = from_cursor(success["started_at"], "time")
        perfdata.append(("last_success_age", f"{max(0, int((now - started).total_seconds()))}s;;;0"))
    if last_run is not None:
        perfdata += [("last_exit_code", f"{last_run['exit_code']};;;0"),
                     ("rows_written", f"{last_run['rows_written']};;;0"),
                     ("quarantined", f"{last_run['quarantined']};;;0")]
    perfdata += [("quarantine_kept", f"{status['quarantined_records']};;;0"),
                 ("store_size", f"{status['store']['size_bytes']}B;;;0")]
    stale = staleness(status, now, timezone, grace=grace)
    if stale:
        return PLUGIN_CRITICAL, plugin_line(PLUGIN_CRITICAL, f"stale: {stale}", perfdata)
    started_text = from_cursor(success["started_at"], "time").astimezone(zone).isoformat(timespec="minutes")
    text = f"last success started {started_text}, watermark {status['watermark']}"
    upgrade = status["store"].get("upgrade")
    if upgrade:  # the package was upgraded; its next run upgrades the store first, as it always does
        text += f"; the next run upgrades the store from schema version {upgrade['from']} to {upgrade['to']}"
    publication = status.get("publication") or {}
    if publication.get("missing"):
        verb = "are" if len(publication.get("missing_views", ())) > 1 else "is"
        return PLUGIN_WARNING, plugin_line(
            PLUGIN_WARNING, f"{publication['location']} {verb} missing (dropped?): dashboards read nothing until the "
                            f"next run re-creates it; {text}", perfdata)
    if status.get("interrupted") is not None:  # said, not paged: staleness pages if it is not caught up in time
        text = (f"{text}; the run started {status['interrupted'].get('started_at', '?')} did not finish (a shutdown, "
                "a crash or a stop) and is not caught up yet")
    # A failure stands until a success makes it good (store.unresolved_failure): not merely until a later
    # backfill of some old window succeeds.
    failure = status.get("unresolved_failure", last_run if last_run and last_run["exit_code"] != 0 else None)
    if failure is not None and failure["exit_code"] == TERMINATED:
        stopped = from_cursor(failure["started_at"], "time").astimezone(zone).isoformat(timespec="minutes")
        text = f"{text}; the last run ({failure['kind']}, started {stopped}) was stopped (143) before its commit"
    elif failure is not None:
        failed = from_cursor(failure["started_at"], "time").astimezone(zone).isoformat(timespec="minutes")
        which = "last run" if failure is last_run or failure == last_run else "last failed run"
        return PLUGIN_WARNING, plugin_line(
            PLUGIN_WARNING, f"the {which} ({failure['kind']}, started {failed}) failed with exit status "
                            f"{failure['exit_code']}: {failure['message']}; {text}", perfdata)
    report_failure = (status.get("report") or {}).get("failure")
    if report_failure:  # dashboards' web server shows a 404 or the page of an earlier run
        return PLUGIN_WARNING, plugin_line(
            PLUGIN_WARNING, f"the HTML report {report_failure.get('path')} could not be written "
                            f"({report_failure.get('message')}); {text}", perfdata)
    publication = status.get("publication")
    if publication and not publication["current"]:  # e.g. forget's republication failed after its commit
        return PLUGIN_WARNING, plugin_line(
            PLUGIN_WARNING, f"the publication {publication['location']} is behind the store (the next run "
                            f"publishes it); {text}", perfdata)
    return PLUGIN_OK, plugin_line(PLUGIN_OK, text, perfdata)


def plugin_check(read_status, now):
    """Return (exit code, line) for `status --check`; `read_status()` returns (status, timezone, grace).

    Whatever goes wrong while reading the state — a configuration error, an
    unreadable or damaged store, an unreachable database, a bug — is UNKNOWN
    (3) with its sentence: any other exit status would be read as a state of
    the data by the monitoring system (1 = WARNING, 2 = CRITICAL).
    """
    try:
        status, timezone, grace = read_status()
        return plugin_report(status, now, timezone, grace=grace)
    except Exception as error:  # any failure, see the docstring
        reason = str(error) if isinstance(error, RefreshError) else f"{type(error).__name__}: {error}"
        return PLUGIN_UNKNOWN, plugin_line(PLUGIN_UNKNOWN, f"cannot read the state: {reason}")
