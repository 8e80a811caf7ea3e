"""Benchmark: the least the grains can cost a full SQLite refresh, against the refresh with the day cells only.

    python bench/grains_floor.py [--statements 1000000] [--rounds 3]

Issue 22 asks a full 1M refresh with the weeks, months and the site's rows to cost at most 15% more than with
the day cells only; grains_bench.py measures 1.22x on SQLite. This prints what the grains' work costs written as
lean as we know how, statement by statement, on the store a days-only refresh of grains_bench.py's files left
(--rounds times, medians), and its share of that refresh's own time:

  site days     each day's learners grouped by learner, with one packed sum of what they did (the presence
                already packed in a column of learner_days: its computing is not counted)
  weeks/months  each period's learners stored once per course (the presence that lets a nightly run count a
                period from the days it touches, not all of them: issue 22's point 3), one packed sum each,
                a month from its weeks already stored
  period cells  each period's cells counted from those rows, in key order
  site periods  each period's learners grouped by learner across the courses

with the sort settings the store uses (lms_refresh.store.sqlite). The store's own statements do more than
these (the counts kept unpacked for the terms, which may be longer than a packed field counts, and for
PostgreSQL). "counted only" is the same cells counted straight from learner_days, nothing stored: what the
grains would cost if a nightly run could afford to count a term from all its days.
"""

import argparse
import datetime as dt
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import grains_bench
import refresh_bench
from lms_refresh.store import periods, presence, sqlite as sqlite_store
from lms_refresh.store.tables import PRESENCE_FLAGS

_MODULUS = 2 ** 32
_FIELD = 9  # presence.py's packed fields


def _unpacked(column, place, bits=_FIELD):
    return f"(({column} >> {bits * place}) & {2 ** bits - 1})"


def _had(column, places, bits=_FIELD):
    return ", ".join(f"SUM(CASE WHEN {_unpacked(column, place, bits)} > 0 THEN 1 ELSE 0 END)" for place in places)


SITE_DAY = f"""SELECT COUNT(*), SUM(k) % {_MODULUS}, {_had("p", range(1, 7))}, MAX(c)
FROM (SELECT actor, MAX(learner_key) AS k, COUNT(*) AS c, SUM(presence) AS p FROM learner_days WHERE day = ?
      GROUP BY actor)"""
FILL = """INSERT INTO floor_periods SELECT ?, ?, course_id, actor, MAX(learner_key), SUM(presence) FROM ({rows})
GROUP BY course_id, actor ORDER BY course_id, actor"""
DAY_ROWS = "SELECT course_id, actor, learner_key, presence FROM learner_days WHERE day BETWEEN ? AND ?"
PERIOD_ROWS = "SELECT course_id, actor, learner_key, presence FROM floor_periods WHERE grain = ? AND period = ?"
CELLS = f"""SELECT course_id, COUNT(*), {_had("presence", range(1, 7))}, SUM(learner_key) % {_MODULUS}
FROM floor_periods WHERE grain = ? AND period = ? GROUP BY course_id"""
# A learner's flags across courses: whether each count is above 0, summed in 10-bit fields (at most 1,023 courses).
_ANY = " + ".join(f"(CASE WHEN {_unpacked('presence', place)} > 0 THEN {2 ** (10 * (place - 1))} ELSE 0 END)"
                  for place in range(1, 7))
SITE_PERIOD = f"""SELECT COUNT(*), SUM(k) % {_MODULUS}, {_had("h", range(6), bits=10)}, MAX(c)
FROM (SELECT actor, MAX(learner_key) AS k, COUNT(*) AS c, SUM({_ANY}) AS h FROM floor_periods
      WHERE grain = ? AND period = ? GROUP BY actor)"""
COUNTED = f"""SELECT course_id, COUNT(*), {_had("p", range(1, 7))}, SUM(k) % {_MODULUS}
FROM (SELECT course_id, actor, MAX(learner_key) AS k, SUM(presence) AS p FROM learner_days
      WHERE day BETWEEN ? AND ? GROUP BY course_id, actor) GROUP BY course_id"""


def floor(path):
    """Time the lean statements on the store at `path` (rolled back): ({step: seconds}, {(grain or "day", period
    or day, course id, None for the site): (learners, the six flags' learners, the learner key sum)})."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute(f"PRAGMA threads = {sqlite_store._SORT_THREADS}")
        db.execute("BEGIN")
        db.execute("ALTER TABLE learner_days ADD COLUMN presence INTEGER NOT NULL DEFAULT 0")
        db.execute(f"UPDATE learner_days SET presence = {presence.pack(('1',) + PRESENCE_FLAGS)}")
        db.execute("CREATE TABLE floor_periods (grain TEXT, period TEXT, course_id INTEGER, actor INTEGER, learner_key "
                   "INTEGER, presence INTEGER, PRIMARY KEY (grain, period, course_id, actor)) WITHOUT ROWID")
        days = [row[0] for row in db.execute("SELECT DISTINCT day FROM learner_days ORDER BY day")]
        found = periods.Calendar().periods_of(set(days))
        spent = dict.fromkeys(("site days", "weeks/months", "period cells", "site periods", "counted only"), 0.0)
        cells = {}

        def timed(step, statement, parameters, cache=sqlite_store._CACHE):
            db.execute(f"PRAGMA cache_size = {cache}")
            began = time.perf_counter()
            rows = db.execute(statement, parameters).fetchall()
            spent[step] += time.perf_counter() - began
            return rows

        def site(row):  # COUNT(*), key sum, six flags, widest: in the order of the course cells
            return (row[0], *row[2:8], row[1])

        for day in days:
            cells[("day", day, None)] = site(timed("site days", SITE_DAY, (day,))[0])
        stored = {}  # week label: its (first, last) days, stored
        for (grain, label), (first, last) in sorted(found.items(), key=lambda item: periods.GRAINS.index(item[0][0])):
            timed("counted only", COUNTED, (first, last))
            weeks = [(week, bounds) for week, bounds in stored.items() if first <= bounds[0] and bounds[1] <= last]
            rows, parameters, covered = [], [grain, label], set()
            for week, (start, end) in weeks:
                rows.append(PERIOD_ROWS)
                parameters += ["week", week]
                covered.update(day for day in days if start <= day <= end)
            for day in sorted(set(day for day in days if first <= day <= last) - covered):
                rows.append(DAY_ROWS)
                parameters += [day, day]
            timed("weeks/months", FILL.format(rows=" UNION ALL ".join(rows)), parameters, sqlite_store._SORT_CACHE)
            if grain == "week":
                stored[label] = (first, last)
            for course, *counts in timed("period cells", CELLS, (grain, label)):
                cells[(grain, label, course)] = tuple(counts)
            cells[(grain, label, None)] = site(timed("site periods", SITE_PERIOD, (grain, label))[0])
        db.execute("ROLLBACK")
        return spent, cells
    finally:
        db.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="lmsr-floor-")
    try:
        days = 30
        per_day = options.statements // days
        source = os.path.join(work, "src")
        refresh_bench.write_days(source, 0, days, per_day, seed=1)
        now = refresh_bench.START + dt.timedelta(days=days + 1)
        refreshes, floors = [], []
        for attempt in range(options.rounds):
            root = os.path.join(work, f"days-only-{attempt}")
            os.makedirs(root)
            config, _ = refresh_bench.configure(root, source, None, days=days + 2)
            seconds, _, _ = refresh_bench.timed_run(config, now, "run", command=grains_bench.VARIANTS["days only"])
            grains_bench.checked("days only", grains_bench.grain_rows(root, None, None))
            refreshes.append(seconds)
            floors.append(floor(os.path.join(root, "state", "metrics.sqlite"))[0])
            shutil.rmtree(root)
        refresh = statistics.median(refreshes)
        print(f"days-only refresh of {per_day * days:,} statements: {refresh:.2f} s (median of {options.rounds})")
        total = 0.0
        for step in floors[0]:
            seconds = statistics.median(spent[step] for spent in floors)
            if step != "counted only":
                total += seconds
            print(f"  {step:<14} {seconds:6.2f} s  {seconds / refresh:6.1%}")
        print(f"  {'the grains':<14} {total:6.2f} s  {total / refresh:6.1%} of the days-only refresh (issue 22: 15%)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
