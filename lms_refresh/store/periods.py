"""The publication's periods besides the day: ISO weeks and calendar months of the local calendar, and the
academic terms the configuration declares (`[[terms]]`).

Computed here in Python, never with SQLite's `%W` (which numbers weeks from the first Monday of
the calendar year, not the ISO week-year): 2026-12-31 and 2027-01-01 are both in 2026-W53.
A period is a (grain, label, first day, last day) with its days inclusive, as ISO dates. A week or a
month follows from any of its days; a term is what the configuration says it is, so the periods of a day
are asked of a `Calendar` made with the terms in force. Terms may overlap: a day is in every term that
holds it, and in none outside them.
"""

import datetime as dt
import zoneinfo

from lms_refresh import instants

GRAINS = ("week", "month", "term")  # in the order the publication lists their tables
TABLE_OF = {"week": "weekly_metrics", "month": "monthly_metrics", "term": "term_metrics"}
CALENDAR_GRAINS = ("week", "month")  # the grains every day belongs to, whatever the configuration says


def period_of(grain, day):
    """Return (label, first day, last day) of the week or month (`grain`) that holds `day` (ISO text or a date)."""
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


def following(day):
    """Return the day after `day` (ISO text)."""
    return (dt.date.fromisoformat(day) + dt.timedelta(days=1)).isoformat()


def periods_between(grain, first, last):
    """Return the labels of the week or month periods from the one holding day `first` to the one holding `last`."""
    labels, day, end = [], dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    while day <= end:
        label, _, period_end = period_of(grain, day)
        labels.append(label)
        day = dt.date.fromisoformat(period_end) + dt.timedelta(days=1)
    return labels


def length(first, last):
    """Return how many days there are from `first` to `last` (ISO text), both included."""
    return (dt.date.fromisoformat(last) - dt.date.fromisoformat(first)).days + 1


def closes_at(last_day, timezone):
    """Return the UTC instant (cursor text) at which a period whose last local day is `last_day` ends:
    the next local midnight in `timezone` (a DST change that day is the zone's)."""
    following = dt.date.fromisoformat(last_day) + dt.timedelta(days=1)
    return instants.to_cursor(dt.datetime.combine(following, dt.time(), tzinfo=zoneinfo.ZoneInfo(timezone)))


class Calendar:
    """The periods of every grain, with `terms` ((name, first day, last day), ISO text, from the configuration)."""

    def __init__(self, terms=()):
        # In calendar order: a course's terms are published from its first to its last visible one in it.
        self.terms = tuple(sorted((tuple(term) for term in terms), key=lambda term: (term[1], term[2], term[0])))
        self._term_bounds = {name: (first, last) for name, first, last in self.terms}

    def without(self, names):
        """This calendar without the terms named in `names`."""
        return Calendar(term for term in self.terms if term[0] not in names)

    def periods_of(self, days):
        """Return {(grain, label): (first day, last day)} of every period that holds one of `days`."""
        found = {}
        for day in days:
            for grain in CALENDAR_GRAINS:
                label, first, last = period_of(grain, day)
                found[(grain, label)] = (first, last)
            for name, first, last in self.terms:
                if first <= day <= last:
                    found[("term", name)] = (first, last)
        return found

    def bounds(self, grain, label):
        """Return (first day, last day) of the period `label` of `grain`."""
        if grain == "term":
            return self._term_bounds[label]
        if grain == "week":
            year, week = label.split("-W")
            first = dt.date.fromisocalendar(int(year), int(week), 1)
        else:
            first = dt.date.fromisoformat(label + "-01")
        return period_of(grain, first)[1:]

    def span(self, grain, labels):
        """Return, in calendar order, every label of `grain` from the earliest to the latest of `labels`."""
        if grain == "term":
            order = [name for name, _, _ in self.terms]
            places = sorted(order.index(label) for label in labels if label in self._term_bounds)
            return order[places[0]:places[-1] + 1] if places else []
        labels = sorted(labels)  # YYYY-Www and YYYY-MM sort as their periods do
        return periods_between(grain, self.bounds(grain, labels[0])[0], self.bounds(grain, labels[-1])[0])

    def first_kept_presence(self, horizon):
        """Return the first day whose learner presence retention keeps for a staging horizon `horizon`: the start
        of the earliest period holding the horizon, so that every period with a day still open is recounted whole."""
        starts = [period_of(grain, horizon)[1] for grain in CALENDAR_GRAINS]
        return min(starts + [first for _, first, last in self.terms if first <= horizon <= last])

    def fingerprint(self):
        """The terms as text, to tell whether the store's term rows were counted with these."""
        return repr(self.terms)
