"""An independent, deliberately naive recount of the weeks' and months' published rows from raw statements.

It shares no code with lms_refresh: a period is found by walking the calendar (a week starts on the
Monday on or before the day, its label is that Thursday's year and week number), its learners are the
set of actor names over all its days (over all courses too for the site's row, course None), and rows
are gap-filled from a course's (or the site's) first to its last visible period. Exact mode only (`method = "none"`).
"""

import collections
import datetime as dt
import json
import zoneinfo

from helpers.reference import GROUPS, NO_ENROLMENT, WITHHELD, _iso, _result, _seconds, outcome_columns


def week_of(day):
    monday = day - dt.timedelta(days=day.weekday())
    thursday = monday + dt.timedelta(days=3)  # ISO 8601: a week belongs to the year of its Thursday
    number = (thursday - dt.date(thursday.year, 1, 1)).days // 7 + 1
    return f"{thursday.year}-W{number:02d}", monday, monday + dt.timedelta(days=6)


def month_of(day):
    first = day.replace(day=1)
    following = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return f"{day.year:04d}-{day.month:02d}", first, following - dt.timedelta(days=1)


def local_day(statement, zone):
    return _iso(statement["timestamp"]).astimezone(zone).date()


def expected_periods(statements, timezone, k, grain, closed_before=None, terms=()):
    """Return the rows of `grain` ("week", "month" or "term": `terms` as (name, first day, last day), ISO text)
    for `statements` (dicts or NDJSON lines, all counted), as the serving view orders them; `complete` is 1 when
    the period's end (local midnight after its last day) is at or before `closed_before` (an aware datetime;
    None: every period complete)."""
    zone = zoneinfo.ZoneInfo(timezone)
    if grain == "term":  # every term that holds the day, in calendar order
        ordered = sorted(((name, dt.date.fromisoformat(first), dt.date.fromisoformat(last))
                          for name, first, last in terms), key=lambda term: (term[1], term[2], term[0]))

        def holding(day):
            return [term for term in ordered if term[1] <= day <= term[2]]
    else:
        def holding(day):
            return [(week_of if grain == "week" else month_of)(day)]

        ordered = None
    cells = collections.defaultdict(list)
    for item in statements:
        statement = json.loads(item) if isinstance(item, str) else item
        course = statement["context"]["contextActivities"]["parent"][0]["id"]
        for period in holding(local_day(statement, zone)):
            for cell in (course, None):  # None: the whole site, every course's statements
                cells[(period, cell)].append(statement)
    by_course = collections.defaultdict(dict)
    for (period, course), items in cells.items():
        by_course[course][period] = _row(items, k)
    rows = []
    for course, found in by_course.items():
        visible = [period for period, row in found.items() if row[0] is not None]
        if not visible:
            continue
        if ordered is None:  # walk the calendar from the first visible period to the last
            span, period = [], min(visible, key=lambda p: p[1])
            while period[1] <= max(p[1] for p in visible):
                span.append(period)
                period = holding(period[2] + dt.timedelta(days=1))[0]
        else:
            places = sorted(ordered.index(period) for period in visible)
            span = ordered[places[0]:places[-1] + 1]
        for period in span:
            values = found.get(period, WITHHELD)
            end = dt.datetime.combine(period[2] + dt.timedelta(days=1), dt.time(), tzinfo=zone)
            complete = int(closed_before is None or end <= closed_before)
            rows.append((period[0], period[1].isoformat(), period[2].isoformat(), course) + values[:9] + (complete,)
                        + values[9:])  # the learner outcome and enrolment columns last, as the publication has them
    return sorted(rows, key=lambda row: (row[1], row[0], row[3] is not None, row[3] or ""))  # the site first


def _row(items, k):
    def learners(predicate):
        return {s["actor"]["account"]["name"] for s in items if predicate(s)}

    if len(learners(lambda s: True)) < k:
        return WITHHELD
    row, suppressed = [len(learners(lambda s: True)), len(items)], False
    for predicate in GROUPS.values():
        who = learners(predicate)
        suppressed |= 0 < len(who) < k
        row.append(sum(1 for s in items if predicate(s)) if len(who) == 0 or len(who) >= k else None)
    outcomes = outcome_columns(row[0], dict(zip(GROUPS, row[2:], strict=True)), learners)
    for field in ("score", "duration"):
        who = learners(lambda s, field=field: field in _result(s))
        suppressed |= 0 < len(who) < k
        chosen = [s for s in items if field in _result(s)]
        if len(who) < k:
            row.append(None)
        elif field == "score":
            row.append(round(sum(s["result"]["score"]["scaled"] for s in chosen) / len(chosen), 6))
        else:
            row.append(sum(round(_seconds(s["result"]["duration"]) * 1000) for s in chosen) / 1000)
    return tuple(row) + (int(suppressed),) + tuple(outcomes) + NO_ENROLMENT  # xAPI: no enrolment columns' values
