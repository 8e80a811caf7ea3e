"""Benchmark: what course categories cost a full refresh and a nightly run.

    python bench/categories_bench.py [--statements 1000000] [--rounds 3] [--stores sqlite]

Times the same full refresh (--statements over 30 days, refresh_bench.py's files: its six courses) with and
without a [[categories]] mapping that puts every course in a category, two of them one level down (so that each
learner-day counts in one or two categories), alternated, --rounds times each, then the night after it (one more
day) of each; prints the ratios of the medians. A category's cells are counted from the courses' presence and
cells (store/categories.py): their cost follows the learner-days and learner-periods, not the statements.
PostgreSQL (--stores postgresql) starts a throwaway server, as refresh_bench.py does; run as root.
"""

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import refresh_bench
from helpers.pgserver import PostgresServer

MAPPING = """
[[categories]]
name = "Sciences"
courses = ["*/course/CHEM*", "*/course/PHYS*"]

[[categories]]
name = "Life sciences"
parent = "Sciences"
courses = ["*/course/BIO*"]

[[categories]]
name = "Humanities"
courses = ["*/course/HIST*"]

[[categories]]
name = "Law"
parent = "Humanities"
courses = ["*/course/LAW*"]

[[categories]]
name = "Mathematics"
courses = ["*/course/MATH*"]
"""
VARIANTS = ("with categories", "without")


def category_cells(root, server, database):
    """The category cells in the store of the project at `root` (PostgreSQL: `database`)."""
    query = "SELECT (SELECT count(*) FROM category_day_cells) + (SELECT count(*) FROM category_period_cells)"
    if server is None:
        import sqlite3

        db = sqlite3.connect(f"file:{os.path.join(root, 'state', 'metrics.sqlite')}?mode=ro", uri=True)
        try:
            return db.execute(query).fetchone()[0]
        finally:
            db.close()
    return server.admin(query.replace("FROM ", "FROM lms_refresh."), database)[0][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="sqlite")
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="lmsr-categories-")
    os.chmod(work, 0o755)
    stores = options.stores.split(",")
    server = PostgresServer(durable=True) if "postgresql" in stores else None
    try:
        days = 30
        per_day = options.statements // days
        source = os.path.join(work, "src")
        refresh_bench.write_days(source, 0, days, per_day, seed=1)
        refresh_bench.write_days(source + "-next", days, 1, per_day, seed=2)
        count, now = per_day * days, refresh_bench.START + dt.timedelta(days=days + 1)
        for store in stores:
            times = {(name, kind): [] for name in VARIANTS for kind in ("full", "night")}
            for attempt in range(options.rounds):
                for name in VARIANTS:
                    root = os.path.join(work, f"{store}-{attempt}-{name.replace(' ', '-')}")
                    os.makedirs(root)
                    mine = os.path.join(root, "src")
                    shutil.copytree(source, mine)
                    on = server if store == "postgresql" else None
                    config, database = refresh_bench.configure(root, mine, on, days=days + 2)
                    if name == "with categories":
                        with open(config, "a") as handle:
                            handle.write(MAPPING)
                    seconds, rss, _ = refresh_bench.timed_run(config, now, "run")
                    cells = category_cells(root, on, database)
                    if (cells > 0) != (name == "with categories"):
                        raise SystemExit(f"the {name!r} run left {cells} category cells")
                    times[(name, "full")].append(seconds)
                    print(f"{store:<10} {name:<16} full  {count:>9,} statements  {seconds:8.2f} s  "
                          f"peak RSS {rss:6.1f} MiB  {cells:,} category cells", flush=True)
                    for file_name in os.listdir(source + "-next"):
                        shutil.copy(os.path.join(source + "-next", file_name), mine)
                    seconds, rss, _ = refresh_bench.timed_run(config, now + dt.timedelta(days=1), "run")
                    times[(name, "night")].append(seconds)
                    print(f"{store:<10} {name:<16} night {per_day:>9,} statements  {seconds:8.2f} s  "
                          f"peak RSS {rss:6.1f} MiB", flush=True)
                    shutil.rmtree(root)
            for kind in ("full", "night"):
                medians = [statistics.median(times[(name, kind)]) for name in VARIANTS]
                print(f"{store:<10} {kind}: with categories / without: {medians[0] / medians[1]:.2f}x (medians of "
                      f"{options.rounds}: {medians[0]:.2f} s and {medians[1]:.2f} s)", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
