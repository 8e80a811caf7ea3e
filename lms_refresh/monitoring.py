"""What replaces cron's MAILTO, part one: Healthchecks pings, Prometheus textfile, staleness.

Nothing here may change a refresh's exit status: every delivery failure is
logged and swallowed. URLs with tokens are read from credential files and
never logged.
"""

import datetime as dt
import logging
import os
import re
import tempfile
import urllib.error
import urllib.request
import zoneinfo

from lms_refresh.window import TIME, from_cursor

logger = logging.getLogger(__name__)

SCHEDULE_DAYS = range(0, 5)  # Monday..Friday, as lms-refresh.timer's OnCalendar=
SCHEDULE_TIME = dt.time(4, 15)


def redact_url(url):
    """Return a URL safe to log: scheme and host only."""
    match = re.match(r"^(\w+://)(?:[^@/]*@)?([^/?#]+)", url or "")
    return f"{match.group(1)}{match.group(2)}/…" if match else "<url>"


def post(url, body, content_type, timeout):
    """POST `body` to `url`; return True on a 2xx answer, log and return False otherwise."""
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type,
                                                                             "User-Agent": "lms-refresh"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        logger.warning("Delivery to %s failed: %s", redact_url(url), reason)
        return False


class Healthchecks:
    """Healthchecks-style pings: URL/start, URL on success, URL/<exit status> on failure."""

    def __init__(self, url, timeout):
        self.url = url.rstrip("/") if url else None
        self.timeout = timeout

    def start(self):
        if self.url:
            post(self.url + "/start", b"", "text/plain", self.timeout)

    def finish(self, exit_code, message=""):
        if self.url:
            target = self.url if exit_code == 0 else f"{self.url}/{exit_code}"
            post(target, message.encode()[:10000], "text/plain", self.timeout)


def _epoch(cursor):
    return from_cursor(cursor, "time").timestamp() if cursor else None


def metrics_text(now, exit_code, duration, report, status, previous):
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
        ("lms_refresh_rows_written", "Metric rows written by the last refresh.", report.rows_written if committed else 0),
        ("lms_refresh_quarantined_records", "Records quarantined by the last refresh.", report.quarantined if report else 0),
        ("lms_refresh_suppressed_cells", "Rows with suppressed values written by the last refresh.",
         report.suppressed if committed else 0),
        ("lms_refresh_watermark_timestamp_seconds", "The watermark: source arrival time complete up to.", watermark),
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
    """Replace `path` atomically (temporary file in the same directory, then rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".lms_refresh.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # node_exporter runs as another user
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def last_scheduled_run(now, timezone, grace):
    """Return the latest weekday 04:15 (local) that a run should have finished after, `grace` included."""
    zone = zoneinfo.ZoneInfo(timezone)
    local = (now - dt.timedelta(seconds=grace)).astimezone(zone)
    day = local.date()
    for _ in range(8):
        candidate = dt.datetime.combine(day, SCHEDULE_TIME, zone)
        if day.weekday() in SCHEDULE_DAYS and candidate <= local:
            return candidate
        day -= dt.timedelta(days=1)
    raise AssertionError("no weekday in a week")


def staleness(status, now, timezone, grace):
    """Return None if the last success is recent enough for the schedule, else a sentence saying why not."""
    expected = last_scheduled_run(now, timezone, grace)
    success = status.get("last_success")
    if success is None:
        return f"no successful refresh yet (one was due at {expected.isoformat(timespec='minutes')})"
    started = from_cursor(success["started_at"], "time")
    if started > now + dt.timedelta(minutes=5):
        return (f"the last success is dated {started.isoformat(timespec='minutes')}, in the future: the clock was "
                "wrong then or is wrong now (see README, \"Recovery\")")
    if started < expected.astimezone(dt.timezone.utc) - dt.timedelta(minutes=1):
        return (f"the last success started at {started.isoformat(timespec='minutes')}, before the run due at "
                f"{expected.isoformat(timespec='minutes')} (grace {grace // 60} min)")
    return None
