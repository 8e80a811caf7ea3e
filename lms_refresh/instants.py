"""Instants: the one range of times lms-refresh computes with, and their text forms.

Every time the program reads — a statement's `timestamp` and `stored`, Moodle's
`timecreated`, an LRS header, a cursor from the store, `--since`, `--until`,
`--now`, `watermark set` — goes through this module: it must be a real instant
(a month 1..12, a day its month has, an hour below 24, ...) in

    [FIRST, END) = [1970-01-01T00:00:00Z, 3000-01-01T00:00:00Z)

Why this range: Moodle's `timecreated` is Unix time, which starts at 1970; the
local day of any instant in it, in any zone, is a date Python can hold and step
past (the existence rule walks day by day; near year 9999 a zone east of UTC is
already past the last date, and converting a local 9999-12-31T23:00 west of
UTC overflows); and every cursor has exactly four digits of year, so the text
order of cursors is their time order (strftime writes year 999 as "999", which
sorts after "2026"). A source's record must also not lie in the future: a
statement's `timestamp` or a Moodle `timecreated` more than FUTURE_TOLERANCE
after the run's time is quarantined, which bounds every course's published
span by [1970, now + 2 days]. A `stored` after now is in no window yet: within
the tolerance it is read by the run whose window reaches it; beyond it, it is
quarantined as it is read (`lms_refresh.sources.records.Intake`), not left to
wait until the year its clock names.
"""

import datetime as dt
import re
import zoneinfo

from lms_refresh.errors import StateError

UTC = dt.UTC
FIRST = dt.datetime(1970, 1, 1, tzinfo=UTC)
END = dt.datetime(3000, 1, 1, tzinfo=UTC)  # exclusive
FIRST_YEAR, LAST_YEAR = FIRST.year, END.year - 1
END_UNIX = int(END.timestamp())
RANGE = "1970-01-01T00:00:00Z .. 2999-12-31T23:59:59Z"
# The local days an instant in range falls on, in any zone (UTC offsets stay within a day).
FIRST_DAY, LAST_DAY = "1969-12-31", "3000-01-01"
# How far a source's time may lie ahead of the run's clock: clock skew, a device's clock a day off, and a
# time sent in the wrong zone (at most 14 hours) stay within it.
FUTURE_TOLERANCE = dt.timedelta(days=2)
TOLERANCE_WORDS = "2 days"

# Cursor text: fixed-width UTC, microseconds; its text order is its time order.
CURSOR = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", re.ASCII)
UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d{1,6}))?Z", re.ASCII)
# A cheaper test of the usual form. It checks that the minute and second are at most 59 as well: in the match,
# that costs next to nothing, where a slice and a comparison after it cost a third of the match each (callgrind).
# ASCII: a Unicode digit is no digit of a time.
UTC_MILLIS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:[0-5]\d:[0-5]\d\.\d\d\dZ", re.ASCII)
_HOURS_KEPT = 100_000
_real_hours = set()  # "YYYY-MM-DDTHH" texts known to be real dates in range with a real hour (bounded)


class NotAnInstant(ValueError):
    """A time that is no real instant in [FIRST, END); the message says which and why."""


def _out_of_range(what, text):
    return NotAnInstant(f"{what} {text[:40]!r} is out of range")  # RANGE is in docs/sources/xapi-statements.md


def checked(moment, what="time", text=None):
    """Given an aware datetime, return it in UTC if it lies in [FIRST, END), else raise NotAnInstant."""
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-23:59, past the last time a datetime can hold
        utc = None
    if utc is None or not FIRST <= utc < END:
        raise _out_of_range(what, text if text is not None else moment.isoformat())
    return utc


def to_cursor(moment):
    """Given an aware datetime, return its fixed-width UTC cursor text (four-digit year, microseconds)."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def cursor_moment(text):
    """Given cursor text, return its aware UTC datetime, or None if it is no cursor of an instant in range."""
    if type(text) is not str or not CURSOR.fullmatch(text):
        return None
    try:
        moment = dt.datetime.fromisoformat(text[:26]).replace(tzinfo=UTC)
    except ValueError:  # month 13, 31 November, hour 25
        return None
    return moment if FIRST <= moment < END else None


def from_cursor(text, what="watermark"):
    """Given cursor text from the store, return an aware UTC datetime or raise StateError."""
    moment = cursor_moment(text)
    if moment is None:
        raise StateError(
            f"The stored {what} {text!r} is not a valid time; the store is damaged — restore it "
            "from a backup, or set the watermark with 'lms-refresh watermark set TIME'."
        )
    return moment


def _real_time_of_day(text):
    """Given text in UTC_TIME's form, tell whether its date is real and in range and its time of day real.

    Its first 13 characters (date and hour) are remembered once checked, so the usual case is one set
    lookup and two comparisons (iso_cursor inlines the lookup: its UTC_MILLIS checks the minute and second)."""
    if not (text[14:16] <= "59" and text[17:19] <= "59"):
        return False  # a leap second (":60") is read by parse_iso
    hour = text[:13]
    if hour in _real_hours:
        return True
    if not "00" <= text[11:13] <= "23":
        return False
    try:
        year = dt.date.fromisoformat(text[:10]).year
    except ValueError:
        return False
    if not FIRST_YEAR <= year <= LAST_YEAR:
        return False
    if len(_real_hours) >= _HOURS_KEPT:
        _real_hours.clear()
    _real_hours.add(hour)
    return True


MAX_ISO_LENGTH = 64  # characters: "2026-11-02T10:00:00.123456789+05:30" has 35


def parse_iso(text, what):
    """Return the aware datetime (UTC when it has no offset) of an ISO 8601 time in range, or raise NotAnInstant.

    A leap second (23:59:60) is read as the second before it; `-00:00` (RFC 3339's
    "offset unknown") as UTC, as Python does.
    """
    if not isinstance(text, str):
        raise NotAnInstant(f"{what} is not a string")
    if len(text) > MAX_ISO_LENGTH or not (text.isascii() and text.isprintable()):
        # fromisoformat takes some of these ("...Z\0", a tab before the Z, any number of fraction digits);
        # the text is kept as sent (staging's `occurred`), where a NUL would stop PostgreSQL's COPY.
        raise NotAnInstant(f"{what} {text[:40]!r} is not an ISO 8601 time")
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:  # not the form, or no real time in it: month 13, 31 November, hour 25
        moment = None
        if text[16:19] == ":60":
            try:
                moment = dt.datetime.fromisoformat(text[:17] + "59" + text[19:])
            except ValueError:
                pass
        if moment is None:
            raise NotAnInstant(f"{what} {text[:40]!r} is not an ISO 8601 time") from None
    if "T" not in text and "t" not in text and " " not in text:
        # A date alone names no instant, so its local day depends on a zone nobody gave.
        raise NotAnInstant(f"{what} {text[:40]!r} has no time of day")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # xAPI: a time without offset is read as UTC
    checked(moment, what, text)
    return moment


def iso_cursor(text, what="stored"):
    """Given an ISO 8601 time, return its cursor text or raise NotAnInstant (the usual UTC forms without parsing)."""
    if type(text) is str and len(text) == 24 and UTC_MILLIS.fullmatch(text) and text[:13] in _real_hours:
        return text[:23] + "000Z"  # the form LRSs write: UTC with milliseconds, in an hour already checked
    if isinstance(text, str) and text.endswith("Z"):
        match = UTC_TIME.fullmatch(text)
        if match and _real_time_of_day(text):  # already UTC: only the fraction needs padding to six digits
            fraction = match.group(1) or ""
            return f"{text[:19]}.{fraction:0<6}Z"
    return to_cursor(parse_iso(text, what))


def from_unix(seconds, what="time"):
    """Given Unix seconds (an int), return the aware UTC datetime, or raise NotAnInstant outside the range."""
    if type(seconds) is not int or not 0 <= seconds < END_UNIX:
        raise NotAnInstant(f"{what} {seconds!r} is not a Unix time in range ({RANGE})")
    return dt.datetime.fromtimestamp(seconds, UTC)


def future_limit(now):
    """Return the latest instant a source's record may carry at a run at `now`: never past the range's last
    instant (a run within 2 days of its end would otherwise have a limit that is no cursor of an instant)."""
    return min(now + FUTURE_TOLERANCE, END - dt.timedelta(microseconds=1))


def parse_user_time(text, timezone):
    """Given an ISO date or datetime from the command line, return it in UTC, or raise NotAnInstant.

    A date means local midnight; a datetime without an offset is local time in
    the configured zone. The message is one sentence.
    """
    try:
        moment = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise NotAnInstant(f"{text!r} is not an ISO date or datetime (e.g. 2026-11-02 or 2026-11-02T04:15)") from None
    local = moment.tzinfo is None
    if local:
        moment = moment.replace(tzinfo=zoneinfo.ZoneInfo(timezone))
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:00 west of UTC: past the last time a datetime can hold
        utc = None
    if utc is None or not FIRST <= utc < END:
        shown = f"{text!r}" + (f" in {timezone}" if local else "") + ("" if utc is None else f" ({to_cursor(utc)})")
        raise NotAnInstant(f"{shown} is outside the times lms-refresh handles ({RANGE})")
    return utc
