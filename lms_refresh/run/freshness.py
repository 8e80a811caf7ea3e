"""When the data is stale: the timer's schedule, whether the last successful refresh is recent enough for it, and
the store's freshness row that dashboards read (`record`).

One rule for `status`, `status --check` (lms_refresh.ops.monitoring) and the HTML report a run writes
(lms_refresh.run.after_commit), so that the page's STALE banner and the monitoring never disagree.
"""

import datetime as dt
import zoneinfo

from lms_refresh import instants

SCHEDULE_DAYS = range(5)  # Monday..Friday, as lms-refresh.timer's OnCalendar=
SCHEDULE_TIME = dt.time(4, 15)


def moment_text(moment):
    """An aware datetime as dashboards are shown it: ISO 8601 to the second, with its offset ("Z" for UTC)."""
    text = moment.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def record(store, config, *, now, finished, read_to_now, watermark=None, axis=None):
    """Write the store's freshness row (tables.py `freshness`) in the run's transaction, before its commit: every run
    that commits has published at `finished`; one that read up to its own `now` (`read_to_now`: a run or a rebuild)
    is also the last success, and its data is as of the `watermark` it reached on a time axis, or as of `now` on a
    log id's (Moodle's log, read whole as of the run's start). Times in UTC, and the data's also in `timezone`."""
    as_of, success = store.freshness()
    if read_to_now:
        moment = watermark if axis is not None and axis.name == "stored-time" and watermark is not None else now
        as_of, success = moment_text(moment.astimezone(dt.UTC)), moment_text(now.astimezone(dt.UTC))
    local = None
    if as_of is not None:
        local = moment_text(dt.datetime.fromisoformat(as_of.replace("Z", "+00:00")).astimezone(
            zoneinfo.ZoneInfo(config.timezone)))
    store.write_freshness(moment_text(finished.astimezone(dt.UTC)), local, as_of, success, config.timezone)


def last_scheduled_run(now, timezone, grace):
    """Return the latest weekday 04:15 (local) that a run should have finished after, `grace` included."""
    zone = zoneinfo.ZoneInfo(timezone)
    local = (now - dt.timedelta(seconds=grace)).astimezone(zone)
    day = local.date()
    while day.weekday() not in SCHEDULE_DAYS or dt.datetime.combine(day, SCHEDULE_TIME, zone) > local:
        day -= dt.timedelta(days=1)
    return dt.datetime.combine(day, SCHEDULE_TIME, zone)


def minute_text(moment):
    """An aware datetime as `status` shows it: ISO 8601 to the minute, with its offset."""
    return moment.isoformat(timespec="minutes")


def staleness(success, now, timezone, *, grace, shown=minute_text):
    """Given the run log's last successful refresh (a dict, or None), return None if it is recent enough for the
    schedule as of `now`, else `status`'s sentence saying why not, its times (aware datetimes) written by
    `shown` (the HTML report writes them as every other time of the page: report_html.local_time)."""
    expected = last_scheduled_run(now, timezone, grace)
    if success is None:
        return f"no successful refresh yet (one was due at {shown(expected)})"
    started = instants.from_cursor(success["started_at"], "time")
    if started > now + dt.timedelta(minutes=5):
        return (f"the last success is dated {shown(started)}, in the future: the clock was wrong then or is wrong "
                "now (see /usr/share/doc/lms-refresh/docs/admin/recovery.md)")
    if started < expected.astimezone(dt.UTC) - dt.timedelta(minutes=1):
        local = started.astimezone(expected.tzinfo)  # both times in the configured zone, comparable at a glance
        return (f"the last success started at {shown(local)}, before the run due at {shown(expected)} "
                f"(grace {grace // 60} min)")
    return None
