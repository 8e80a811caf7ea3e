"""An independent, deliberately naive computation of the serving table from raw statements.

Used to check the engine end to end: mapping, voiding, late arrivals, local
days and suppression. It shares no code with lms_refresh's engine.
"""

import collections
import datetime as dt
import json
import zoneinfo

ADL = "http://adlnet.gov/expapi/verbs/"


def _iso(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _seconds(duration):
    import re

    h, m, s = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?", duration).groups()
    return int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)


def _verb(statement):
    return statement["verb"]["id"].rsplit("/", 1)[-1]


def _result(statement):
    return statement.get("result", {})


GROUPS = {  # the counted columns, in the serving table's order: whose statements each counts
    "attempts": lambda s: _verb(s) == "attempted",
    "completions": lambda s: _verb(s) == "completed" or _result(s).get("completion") is True,
    "passed": lambda s: _verb(s) == "passed" or _result(s).get("success") is True,
    "failed": lambda s: _verb(s) == "failed" or _result(s).get("success") is False,
}

# The statement counts whose distinct learners are published too (completed_learners, passed_learners,
# failed_learners), then the shares computed from those.
LEARNER_OUTCOMES = ("completions", "passed", "failed")
WITHHELD = (None,) * 8 + (1,) + (None,) * 7  # a withheld row's values after its key (`suppressed` is 1)
NO_ENROLMENT = (None, None)  # enrolled_learners and active_share of a source that reads no enrolments (xAPI)


def outcome_columns(active, counts, learners):
    """The learner outcome columns of a row whose published `active` learners and statement `counts` ({column:
    value or None}) are given, `learners(predicate)` its learners doing that: each learner count withheld with its
    statement count, then completed ÷ active and passed ÷ (passed + failed) learners (None: a term withheld, or 0)."""
    completed, passed, failed = (None if counts[name] is None else len(learners(GROUPS[name]))
                                 for name in LEARNER_OUTCOMES)
    share = None if completed is None else completed / active
    rate = None if passed is None or failed is None or passed + failed == 0 else passed / (passed + failed)
    return [completed, passed, failed, share, rate]


def expected_serving(lines, since, until, timezone, k):
    """Given NDJSON lines (all valid), return the serving rows for statements stored in [since, until)."""
    zone = zoneinfo.ZoneInfo(timezone)
    # One statement per id, as the product stages them: a line delivered twice counts once (the first
    # version; a conflicting second one is quarantined, never counted).
    first = {}
    for line in lines:
        statement = json.loads(line)
        first.setdefault(statement["id"], statement)
    statements = list(first.values())
    in_window = [s for s in statements if since <= _iso(s["stored"]) < until]
    voided = {s["object"]["id"] for s in in_window if s["verb"]["id"] == ADL + "voided"}
    cells = collections.defaultdict(list)
    for s in in_window:
        if s["verb"]["id"] == ADL + "voided" or s["id"] in voided:
            continue
        day = _iso(s["timestamp"]).astimezone(zone).date().isoformat()
        course = s["context"]["contextActivities"]["parent"][0]["id"]
        cells[(day, course)].append(s)
        cells[(day, None)].append(s)  # the whole site: every course's statements, each learner once
    rows = []
    for (day, course), items in cells.items():
        def learners(predicate, items=items):  # this cell's
            return {s["actor"]["account"]["name"] for s in items if predicate(s)}

        everyone = learners(lambda s: True)
        visible = len(everyone) >= k
        row = [day, course, len(everyone) if visible else None, len(items) if visible else None]
        suppressed = not visible
        for predicate in GROUPS.values():
            who = learners(predicate)
            ok = visible and (len(who) == 0 or len(who) >= k)
            suppressed |= 0 < len(who) < k
            row.append(sum(1 for s in items if predicate(s)) if ok else None)
        outcomes = outcome_columns(row[2], dict(zip(GROUPS, row[4:], strict=True)), learners) if visible else \
            [None] * 5
        scored = [s for s in items if "score" in _result(s)]
        score_ok = visible and len(learners(lambda s: "score" in _result(s))) >= k
        suppressed |= 0 < len(learners(lambda s: "score" in _result(s))) < k
        row.append(round(sum(s["result"]["score"]["scaled"] for s in scored) / len(scored), 6) if score_ok else None)
        timed = [s for s in items if "duration" in _result(s)]
        timed_learners = len(learners(lambda s: "duration" in _result(s)))
        suppressed |= 0 < timed_learners < k
        row.append(sum(round(_seconds(s["result"]["duration"]) * 1000) for s in timed) / 1000
                   if visible and timed_learners >= k else None)
        row.append(1 if suppressed else 0)
        # The learner outcome columns, then the enrolment ones last, as the publication has them.
        rows.append(tuple(row + outcomes) + NO_ENROLMENT)
    return _fill_spans(rows)


def _fill_spans(rows):
    """Publish every day from a course's first to its last visible day; the days between without a
    visible row are withheld rows, and days outside that span (or courses never visible) have no row."""
    by_course = collections.defaultdict(dict)
    for row in rows:
        by_course[row[1]][row[0]] = row
    filled = []
    for course, days in by_course.items():
        visible = sorted(day for day, row in days.items() if row[2] is not None)
        if not visible:
            continue
        day, last = dt.date.fromisoformat(visible[0]), dt.date.fromisoformat(visible[-1])
        while day <= last:
            text = day.isoformat()
            filled.append(days.get(text, (text, course) + WITHHELD))
            day += dt.timedelta(days=1)
    return sorted(filled, key=site_first)


def site_first(row):
    """The serving order: by day (or period), the site's row (course None) before the courses'."""
    return row[0], row[1] is not None, row[1] or ""
