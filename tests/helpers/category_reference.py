"""The independent recount of the categories' rows (store/categories.py), from the activity a test wrote and the
category tree it set up, computing nothing with the code under test; and what a dashboard reads of them.

Exact mode only (`method = "none"`): a category's cell of a day, ISO week, month or term counts its distinct learners
over the courses of the category and of every category below it, its statements and its attempts (withheld when 1 to
k - 1 learners made them); its rows run from its first to its last cell of at least k learners, the others between
withheld whole, as a course's do."""

import contextlib
import datetime as dt
import sqlite3

from helpers.publication import publication

TABLES = {"day": "category_daily_metrics", "week": "category_weekly_metrics", "month": "category_monthly_metrics",
          "term": "category_term_metrics"}


def _label_of(grain, term):
    if grain == "day":
        return lambda day: day.isoformat()
    if grain == "week":
        return lambda day: "{}-W{:02d}".format(*day.isocalendar()[:2])
    if grain == "month":
        return lambda day: day.strftime("%Y-%m")
    name, first, last = term
    return lambda day: name if first <= day.isoformat() <= last else None


def recount(activity, members, grain, k, term=None):
    """{(label, category): (learners, statements, attempts) or (None, None, None) where withheld} of `grain`, given
    `activity` [(learner, course, local day as a date, whether it is an attempt)] and `members` {category: the courses
    it counts, its sub-categories' among them}."""
    label_of, cells = _label_of(grain, term), {}
    for learner, course, day, attempt in activity:
        label = label_of(day)
        if label is None:
            continue
        for category, courses in members.items():
            if course in courses:
                learners, statements, attempters, attempts = cells.get((label, category), (set(), 0, set(), 0))
                cells[(label, category)] = (learners | {learner}, statements + 1,
                                            attempters | ({learner} if attempt else set()), attempts + attempt)
    days = sorted(day for _, _, day, _ in activity)
    labels = sorted({label_of(days[0] + dt.timedelta(days=n)) for n in range((days[-1] - days[0]).days + 1)} - {None})
    published = {}
    for category in members:
        visible = [label for label in labels if len(cells.get((label, category), (set(),))[0]) >= k]
        for label in (label for label in labels if visible and visible[0] <= label <= visible[-1]):
            learners, statements, attempters, attempts = cells.get((label, category), (set(), 0, set(), 0))
            published[(label, category)] = (None, None, None) if len(learners) < k else (
                len(learners), statements, None if 0 < len(attempters) < k else attempts)
    return published


def read(project, statement):
    """Run `statement` as a dashboard does: on the SQLite publication file, or in PostgreSQL's serving schema (dates
    as ISO text)."""
    if not project.postgres:
        with contextlib.closing(sqlite3.connect(f"file:{publication(project)}?mode=ro", uri=True)) as db:
            return db.execute(statement).fetchall()
    store = project.open_store()
    try:
        store.db.execute(f"SET search_path TO {store.schema}_serving")
        return [tuple(value.isoformat() if isinstance(value, dt.date) else value for value in row)
                for row in store.db.execute(statement).fetchall()]
    finally:
        store.close()


def published(project, grain):
    """{(label, category id): (active learners, statements, attempts)} of `grain`'s category table, and {category id:
    category_name} as its rows show them."""
    label = "day" if grain == "day" else "period"
    rows = read(project, f"SELECT {label}, category_id, category_name, active_learners, statements, attempts "
                         f"FROM {TABLES[grain]} ORDER BY {label}, category_id")
    return ({(label, category): tuple(values) for label, category, _, *values in rows},
            {category: name for _, category, name, *_ in rows})
