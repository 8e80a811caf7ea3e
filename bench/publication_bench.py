"""What writing the SQLite publication costs a run when the store holds many courses and a long history.

    .venv/bin/python bench/publication_bench.py [--courses 500] [--days 365] [--runs 5]

Builds a SQLite store whose published rows are those of `--courses` courses, every day of `--days` days and
their ISO weeks and months, and the whole site's (written straight into its published tables: what a refresh
would leave there), then times what a run does after its commit to publish them (run/publication.py:
`publish_if_behind`, the digest of the store's rows and the file written whole) with the file removed before
each run so that it is always behind. Prints the rows, the best and the median of `--runs`, and the file's size.
"""

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time

from lms_refresh.config import load_config
from lms_refresh.run.publication import publish_if_behind
from lms_refresh.store import open_store, periods

_PUBLISHED = "active_learners, statements, attempts, completions, passed, failed, avg_scaled_score, " \
             "total_duration_seconds, suppressed"


def build(store, courses, days):
    """Fill `store`'s published tables; return how many daily and period rows."""
    first = dt.date(2026, 1, 1)
    dates = [(first + dt.timedelta(days=offset)).isoformat() for offset in range(days)]
    store.begin()
    store.executemany("INSERT INTO courses (course_id, iri) VALUES (?, ?)",
                      [(number, f"https://moodle.example.edu/course/view.php?id={number + 1}")
                       for number in range(1, courses + 1)])
    values = (31, 412, 20, 5, 3, 2, 0.71, 3600.0, 0)
    store.executemany(f"INSERT INTO published_metrics (course_id, day, {_PUBLISHED}) VALUES (?, ?{', ?' * 9})",
                      [(course, day, *values) for course in range(courses + 1) for day in dates])
    period_rows = []
    for grain in periods.CALENDAR_GRAINS:
        spans = {periods.period_of(grain, day) for day in dates}
        period_rows += [(grain, course, label, start, end, *values, "2027-01-01T00:00:00.000000Z", 1)
                        for course in range(courses + 1) for label, start, end in sorted(spans)]
    store.executemany(f"INSERT INTO published_periods (grain, course_id, period, period_start, period_end, "
                      f"{_PUBLISHED}, closes_at, complete) VALUES (?, ?, ?, ?, ?{', ?' * 9}, ?, ?)", period_rows)
    store.commit()
    return (courses + 1) * days, len(period_rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--courses", type=int, default=500)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work:
        path = os.path.join(work, "config.toml")
        with open(path, "w") as handle:
            # The export directory beside the state, not around it (the configuration refuses a run writing in it).
            handle.write(f'state_directory = "{work}/state"\n[source]\ntype = "xapi-ndjson"\npath = "{work}/exports"\n')
        os.makedirs(os.path.join(work, "state"))
        os.makedirs(os.path.join(work, "exports"))
        config = load_config(path, {})
        store = open_store(config, {}, create=True)
        try:
            store.begin()
            store.execute("INSERT INTO privacy_settings VALUES (1, 10, 'cell-key', 3, 2.0, 0)")
            store.commit()
            daily, period = build(store, options.courses, options.days)
            times = []
            for _ in range(options.runs):
                if os.path.exists(config.publication.path):
                    os.unlink(config.publication.path)
                began = time.perf_counter()
                assert publish_if_behind(config, store, os.geteuid())
                times.append(time.perf_counter() - began)
            size = os.path.getsize(config.publication.path)
        finally:
            store.close()
    print(f"{options.courses} courses + the site, {options.days} days: {daily:,} daily rows, {period:,} weekly and "
          f"monthly rows; publication written in {min(times):.3f} s (best of {options.runs}), "
          f"median {statistics.median(times):.3f} s; {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
