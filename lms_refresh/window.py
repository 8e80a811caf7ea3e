"""Refresh windows: the explicit [since, until) interval a run reads, and the days it touches.

A window lies on an axis: the source's own arrival order. For xAPI it is the
`stored` time (aware UTC datetimes inside the engine, written as fixed-width
UTC cursor text whose text order is their time order, so sources can compare
them without parsing; `lms_refresh.instants` says what a time may be); for
Moodle's log it is the row id. The engine only
compares, stores and prints a watermark; the axis parses and formats it.
"""

import dataclasses
import datetime as dt
import zoneinfo

from lms_refresh import instants
from lms_refresh.errors import StateError


class TimeAxis:
    """Arrival times (xAPI `stored`): the windows `run` and `backfill` both use for xAPI sources."""

    name = "stored-time"

    @staticmethod
    def parse(text, what="watermark"):
        return instants.from_cursor(text, what)

    format = staticmethod(instants.to_cursor)

    @staticmethod
    def back(watermark, seconds):
        """Return the time `seconds` before `watermark` (where a run that reads back starts)."""
        return watermark - dt.timedelta(seconds=seconds)


class IdAxis:
    """An increasing record id (Moodle's log id), for sources whose arrival order is not a time."""

    name = "log-id"

    @staticmethod
    def parse(text, what="watermark"):
        if not isinstance(text, str) or not text.isdigit():
            raise StateError(
                f"The stored {what} {text!r} is not a log id; the store is damaged — restore it "
                "from a backup, or set the watermark with 'lms-refresh watermark set ID'."
            )
        return int(text)

    format = staticmethod(str)

    @staticmethod
    def back(watermark, ids):
        """Return the id `ids` before `watermark`, never below 0."""
        return max(watermark - ids, 0)


TIME, LOG_ID = TimeAxis(), IdAxis()


@dataclasses.dataclass(frozen=True)
class Window:
    """The half-open interval [since, until) a run reads, on its source's axis."""

    since: object
    until: object
    axis: object = TIME
    # How far a scheduled run started now would read (None: `until`). A backfill's `until` may lie behind the
    # watermark: what a source reads whatever its time (an export file's lines from where a run left an unfinished
    # one: sources/file_index.py) it reads up to here, or the scheduled runs, which start at the watermark, would
    # never read the lines between.
    reach: object = dataclasses.field(default=None, compare=False)  # no part of which window it is

    @property
    def reach_cursor(self):
        return self.axis.format(self.until if self.reach is None else self.reach)

    @property
    def empty(self):
        return self.since >= self.until

    @property
    def since_cursor(self):
        return self.axis.format(self.since)

    @property
    def until_cursor(self):
        return self.axis.format(self.until)

    def local_days(self, timezone):
        """Return the local calendar days (ISO text) that [since, until) touches.

        An id window touches no day by itself: the days are those of the records it holds.
        """
        if self.empty or self.axis is not TIME:
            return []
        zone = zoneinfo.ZoneInfo(timezone)
        first = self.since.astimezone(zone).date()
        last = (self.until - dt.timedelta(microseconds=1)).astimezone(zone).date()
        return [(first + dt.timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def upper_bound(now, safety_lag, complete_through):
    """Return the latest `until` a run may use: now less the lag, never past what the source has complete."""
    bound = now - dt.timedelta(seconds=safety_lag)
    if complete_through is not None and complete_through < bound:
        bound = complete_through
    return bound


def backfill_window(since, until, now, *, config, complete_through):
    """Given an operator's explicit window, return it clamped to what is complete."""
    bound = upper_bound(now, config.window.safety_lag, complete_through)
    return Window(since, min(until, bound), reach=bound)


def next_watermark(current, window, is_backfill, *, axis=TIME):
    """Return the watermark (on `axis`) after a successful run of `window`.

    A scheduled run moves it to `until`. A backfill never moves it backwards and
    moves it forward only when its window starts at or before the current
    watermark (so no gap is skipped) — or when there is no watermark yet. A
    backfill whose window is on another axis than the watermark (a time window
    over Moodle's id-ordered log) leaves it where it is.
    """
    if window.axis is not axis:
        return current
    if not is_backfill or current is None:
        return window.until if current is None or window.until > current else current
    if window.since <= current < window.until:
        return window.until
    return current
