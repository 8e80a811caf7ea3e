"""Benchmark: what the weeks, months, terms and the site's rows cost a full refresh (issue 22: at most 15%).

    python bench/grains_bench.py [--statements 1000000] [--rounds 3] [--stores sqlite]

Times the same full refresh (--statements over 30 days, refresh_bench.py's files) with the code as it is and
with the day cells only, alternated, --rounds times each, and prints the ratio of the medians. "Days only" is
the same code in the same kind of process, with the grains taken out of it where it runs: no period holds a
day (periods.Calendar.periods_of finds none, so no presence is moved into weeks, months or terms and no
period cell is counted) and the site's day cells are not counted (grains.SITE_DAY and SITE_DAY_EXACT do
nothing). What it publishes is not a product; only its time is compared. PostgreSQL (--stores postgresql)
starts a throwaway server with fsync on, as refresh_bench.py does; run as root.
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

# The CLI's own entry point, after the grains are taken out (run with `python -c`).
DAYS_ONLY = """
from lms_refresh.store import grains, periods
periods.Calendar.periods_of = lambda self, days: {}
grains.SITE_DAY = grains.SITE_DAY_EXACT = "SELECT ?, ?, ?"
from lms_refresh.cli import main
main()
"""
VARIANTS = {"with the grains": [sys.executable, "-m", "lms_refresh"],
            "days only": [sys.executable, "-c", DAYS_ONLY]}


# What each variant must hold after its run, so that a renamed seam cannot turn "days only" into the whole
# refresh unnoticed: the period cells, and the site's day cells.
GRAIN_ROWS = ("SELECT (SELECT count(*) FROM period_metrics), "
              "(SELECT count(*) FROM daily_metrics WHERE course_id = 0)")  # tables.SITE


def grain_rows(root, server, database):
    """(period cells, the site's day cells) in the store of the project at `root` (PostgreSQL: `database`)."""
    if server is None:
        import sqlite3

        db = sqlite3.connect(f"file:{os.path.join(root, 'state', 'metrics.sqlite')}?mode=ro", uri=True)
        try:
            return db.execute(GRAIN_ROWS).fetchone()
        finally:
            db.close()
    return tuple(server.admin(GRAIN_ROWS.replace("FROM ", "FROM lms_refresh."), database)[0])


def checked(name, rows):
    """Refuse a run that did not do what its variant says."""
    if (name == "days only") != (rows == (0, 0)):
        raise SystemExit(f"the {name!r} run left {rows[0]} period cells and {rows[1]} site day cells")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="sqlite")
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="lmsr-grains-")
    os.chmod(work, 0o755)
    stores = options.stores.split(",")
    server = PostgresServer(durable=True) if "postgresql" in stores else None
    try:
        days = 30
        per_day = options.statements // days
        source = os.path.join(work, "src")
        refresh_bench.write_days(source, 0, days, per_day, seed=1)
        count, now = per_day * days, refresh_bench.START + dt.timedelta(days=days + 1)
        for store in stores:
            times = {name: [] for name in VARIANTS}
            for attempt in range(options.rounds):
                for name, command in VARIANTS.items():
                    root = os.path.join(work, f"{store}-{attempt}-{name.replace(' ', '-')}")
                    os.makedirs(root)
                    on = server if store == "postgresql" else None
                    config, database = refresh_bench.configure(root, source, on, days=days + 2)
                    seconds, rss, _ = refresh_bench.timed_run(config, now, "run", command=command)
                    checked(name, grain_rows(root, on, database))
                    times[name].append(seconds)
                    print(f"{store:<10} {name:<16} {count:>9,} statements  {seconds:8.2f} s  "
                          f"{count / seconds:>9,.0f} statements/s  peak RSS {rss:6.1f} MiB", flush=True)
                    shutil.rmtree(root)
            medians = {name: statistics.median(seconds) for name, seconds in times.items()}
            print(f"{store:<10} with the grains / days only: {medians['with the grains'] / medians['days only']:.2f}x "
                  f"(medians of {options.rounds}: {medians['with the grains']:.2f} s and {medians['days only']:.2f} s)",
                  flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
