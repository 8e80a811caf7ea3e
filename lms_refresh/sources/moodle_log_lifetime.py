"""How far back Moodle's standard log still goes: its oldest row, and `loglifetime`.

Moodle's nightly cleanup task deletes the log rows older than the setting `loglifetime` of the plugin
`logstore_standard` (days, in `{prefix}config_plugins`; 0 or unset: kept for ever). A first run whose
`bootstrap_days`, or a backfill or rebuild whose `--since`, reaches further back finds nothing there:
`check` says so of bootstrap_days, and a time window (backfill, rebuild) says how far back the log goes.
`{prefix}config_plugins` holds every plugin's settings, some of them secrets, so its SELECT is not among the
grants the source needs: without it, the oldest row alone says how far back the log goes.
"""

import datetime as dt
import logging

from lms_refresh import instants
from lms_refresh.errors import ConfigError, UnavailableError
from lms_refresh.sources import OK, WARNING, Finding

logger = logging.getLogger(__name__)


def lifetime_days(source):
    """Return Moodle's loglifetime in days: a positive int, 0 (kept for ever), or None if it cannot be read."""
    try:
        rows = source.query("SELECT value FROM {table} WHERE plugin = %s AND name = %s",
                            ("logstore_standard", "loglifetime"), table=f"{source.prefix}config_plugins")
    except (ConfigError, UnavailableError):
        return None
    value = str(rows[0][0]).strip() if rows and rows[0][0] is not None else "0"  # unset: Moodle's default, never
    return int(value) if value.isdigit() and int(value) <= 100_000 else None


def oldest(source):
    """Return the time of the log's oldest row (an aware datetime), or None if the log is empty."""
    first = source.query("SELECT min(timecreated) FROM {table} WHERE timecreated > 0")[0][0]
    try:
        return None if first is None else instants.from_unix(int(first), "timecreated")
    except instants.NotAnInstant:
        return None


def _kept(days):
    return "for ever (loglifetime 0)" if days == 0 else f"{days} days (loglifetime)"


def preflight(source, bootstrap_days):
    """Return the Finding about loglifetime against window.bootstrap_days."""
    days, table = lifetime_days(source), f"{source.prefix}config_plugins"
    if days is None:
        return [Finding(OK, f"how long Moodle keeps its log is not known ({table} is not readable, or its "
                            "logstore_standard loglifetime is not a number of days); bootstrap_days and backfills "
                            "are not checked against it")]
    if days and bootstrap_days > days:
        return [Finding(WARNING, f"Moodle deletes its log rows after {days} days (logstore_standard's loglifetime) "
                                 f"but window.bootstrap_days is {bootstrap_days}: a first run finds nothing older than "
                                 f"{days} days; lower bootstrap_days to {days} or keep Moodle's log longer")]
    return [Finding(OK, f"Moodle keeps its log {_kept(days)}; window.bootstrap_days ({bootstrap_days}) is within it")]


def note_time_window(source, since, now):
    """Log how far back the log goes for a window read by time from `since`; warn if the window starts earlier
    (`now`, the run's time, dates loglifetime's limit; None: only the oldest row does)."""
    first, days = oldest(source), lifetime_days(source)
    kept = "" if days is None else f", and Moodle keeps it {_kept(days)}"
    reach = "holds no rows" if first is None else f"goes back to {instants.to_cursor(first)}"
    logger.info("Moodle's log %s %s%s.", source.table, reach, kept)
    limits = [first] if first is not None else []
    if days and now is not None:
        limits.append(now - dt.timedelta(days=days))
    if limits and since < max(limits):
        logger.warning("The window starts at %s, further back than Moodle's log reaches (%s %s%s): nothing older than "
                       "its oldest row is read, and a rebuild keeps only the closed days before it.",
                       instants.to_cursor(since), source.table, reach, kept)
