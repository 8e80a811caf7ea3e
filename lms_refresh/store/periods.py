"""The publication's periods besides the day: ISO weeks and calendar months of the local calendar.

Computed here in Python, never with SQLite's `%W` (which numbers weeks from the first Monday of
the calendar year, not the ISO week-year): 2026-12-31 and 2027-01-01 are both in 2026-W53.
A period is a (grain, label, first day, last day) with its days inclusive, as ISO dates.
"""

import datetime as dt
import zoneinfo

from lms_refresh import instants

GRAINS = ("week", "month")  # in the order the publication lists their tables
TABLE_OF = {"week": "weekly_metrics", "month": "monthly_metrics"}


def period_of(grain, day):
    """Return (label, first day, last day) of the `grain` period that holds `day` (ISO text or a date)."""
    date = dt.date.fromisoformat(day) if isinstance(day, str) else day
    if grain == "week":
        year, week, weekday = date.isocalendar()
        first = date - dt.timedelta(days=weekday - 1)
        return f"{year}-W{week:02d}", first.isoformat(), (first + dt.timedelta(days=6)).isoformat()
    if grain == "month":
        first = date.replace(day=1)
        following = (first + dt.timedelta(days=31)).replace(day=1)
        return f"{date.year:04d}-{date.month:02d}", first.isoformat(), (following - dt.timedelta(days=1)).isoformat()
    raise ValueError(f"unknown grain {grain!r}")


def periods_of(days):
    """Return {(grain, label): (first day, last day)} of every period that holds one of `days`."""
    found = {}
    for day in days:
        for grain in GRAINS:
            label, first, last = period_of(grain, day)
            found[(grain, label)] = (first, last)
    return found


def following(day):
    """Return the day after `day` (ISO text)."""
    return (dt.date.fromisoformat(day) + dt.timedelta(days=1)).isoformat()


def periods_between(grain, first, last):
    """Return the labels of the `grain` periods from the one holding day `first` to the one holding `last`."""
    labels, day, end = [], dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    while day <= end:
        label, _, period_end = period_of(grain, day)
        labels.append(label)
        day = dt.date.fromisoformat(period_end) + dt.timedelta(days=1)
    return labels


def bounds(grain, label):
    """Return (first day, last day) of the period `label` of `grain`."""
    if grain == "week":
        year, week = label.split("-W")
        first = dt.date.fromisocalendar(int(year), int(week), 1)
    else:
        first = dt.date.fromisoformat(label + "-01")
    return period_of(grain, first)[1:]


def closes_at(last_day, timezone):
    """Return the UTC instant (cursor text) at which a period whose last local day is `last_day` ends:
    the next local midnight in `timezone` (a DST change that day is the zone's)."""
    following = dt.date.fromisoformat(last_day) + dt.timedelta(days=1)
    return instants.to_cursor(dt.datetime.combine(following, dt.time(), tzinfo=zoneinfo.ZoneInfo(timezone)))


def first_kept_presence(horizon):
    """Return the first day whose learner presence retention keeps for a staging horizon `horizon`: the start of
    the earliest period holding the horizon, so that every period with a day still open is recounted whole."""
    return min(period_of(grain, horizon)[1] for grain in GRAINS)
