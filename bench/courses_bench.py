"""Benchmark: what many courses cost a run (one statement each), and a night that touches one of them.

    python3 bench/courses_bench.py [--courses 50000] [--days 30] [--stores sqlite,postgresql] [--no-term]

Scenarios (each a separate `lms-refresh` process through the installed CLI, timed end to end; CPU time and peak RSS
from wait4):
  full      one first run of --courses courses with one statement each, spread over --days days, with a term
            covering those days and the next (README's promise: under 60 s and 200 MiB at 50,000 courses)
  nightly   then a run adding 5 statements of one course on the next day, which lies in the same week, month
            and term as many others: what a night costs a store of many courses (under 2 s at 50,000).

Each line gives the wall time and the CPU time of the run and its parsing workers: on a shared machine the CPU time
is the steadier figure.

PostgreSQL runs start a throwaway server from Debian's postgresql package (tests/helpers/pgserver.py).
"""

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from lms_refresh.demo.sample import _VERB_CHOICES, statement
from refresh_bench import CLI, START, configure


def write_courses(path, courses, days, seed=11):
    """One statement in each of `courses` courses, course c on day c mod `days` from START."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for course in range(courses):
            moment = START + dt.timedelta(days=course % days, seconds=rng.randint(0, 86399))
            line = statement(rng, rng.randrange(20000), f"C{course:06d}", moment=moment,
                             stored=moment + dt.timedelta(seconds=5), verb=rng.choice(_VERB_CHOICES))
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")


def write_night(path, day, count=5, seed=12):
    """`count` statements of course C000001 on `day` (days after START), by as many learners."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for learner in range(count):
            moment = START + dt.timedelta(days=day, hours=10, minutes=learner)
            line = statement(rng, learner, "C000001", moment=moment, stored=moment + dt.timedelta(seconds=5),
                             verb=rng.choice(_VERB_CHOICES))
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")


def timed_run(config, now, *args):
    """Run the CLI once; return (wall seconds, CPU seconds of it and its workers, peak RSS in MiB). On a shared
    machine the CPU time is the steadier figure: the wall time moves with everyone else's load."""
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(CLI + ["--config", config, "--now", now.isoformat()] + list(args), stderr=log)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.monotonic() - began
        if os.waitstatus_to_exitcode(status) != 0:
            log.seek(0)
            raise SystemExit(f"refresh failed:\n{log.read()}")
    # wait4's CPU times are the process's and those of its children it reaped (its pool's workers).
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _line(store, name, courses, timed):
    elapsed, cpu, rss = timed
    return (f"{store:<10} {name:<8} {courses:>7,} courses  {elapsed:8.2f} s wall  {cpu:8.2f} s CPU  "
            f"peak RSS {rss:6.1f} MiB")


def run(store, server, courses, days, term):
    with tempfile.TemporaryDirectory(prefix="courses-bench-") as root:
        source = os.path.join(root, "src")
        os.makedirs(source)
        write_courses(os.path.join(source, "a-courses.ndjson"), courses, days)
        first, last = START.date(), (START + dt.timedelta(days=days + 20)).date()
        terms = [("Term", first.isoformat(), last.isoformat())] if term else []
        config, _ = configure(root, source, server if store == "postgresql" else None, terms, days=days + 5)
        timed = timed_run(config, START + dt.timedelta(days=days), "run")
        print(_line(store, "full", courses, timed) + ("  (a term)" if term else ""), flush=True)
        write_night(os.path.join(source, "b-night.ndjson"), days)
        timed = timed_run(config, START + dt.timedelta(days=days + 1), "run")
        print(_line(store, "nightly", courses, timed), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--courses", type=int, default=50000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--stores", default="sqlite")
    parser.add_argument("--no-term", action="store_true")
    options = parser.parse_args()
    stores = options.stores.split(",")
    server = None
    if "postgresql" in stores:
        from helpers.pgserver import PostgresServer

        server = PostgresServer(durable=True)
    try:
        for store in stores:
            run(store, server, options.courses, options.days, not options.no_term)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
