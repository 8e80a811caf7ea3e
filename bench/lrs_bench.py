"""Benchmark: peak RSS and time of a refresh from a real LRS (Ralph) as the window's page count grows.

    python bench/lrs_bench.py [--statements 2000,20000]

For each count: a fresh Ralph LRS (tests/helpers/lrsserver.py; its virtualenv
.venv-ralph comes from tests/run.sh) is loaded with that many statements,
then one `lms-refresh run` reads them all through pages of 100 (Ralph's cap).
Peak RSS should not grow with the number of pages. Ralph's file-system backend
rescans its whole file for every page, so the LRS, not lms-refresh, sets the
pace here; the figure to read is the RSS.
"""

import argparse
import datetime as dt
import itertools
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
from helpers.lrsserver import RalphServer
from lms_refresh.demo.sample import _VERB_CHOICES, COURSES, statement
from refresh_bench import timed_run

UTC = dt.UTC


def statements(count, seed=1):
    rng = random.Random(seed)
    now = dt.datetime.now(UTC)
    courses = [c for c, _, _ in COURSES]
    for _ in range(count):
        moment = now - dt.timedelta(seconds=rng.randint(60, 2 * 86400))
        yield statement(rng, rng.randrange(5000), rng.choice(courses), moment=moment, stored=moment,
                        verb=rng.choice(_VERB_CHOICES))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", default="2000,20000", help="comma-separated statement counts")
    options = parser.parse_args()
    print(f"{'statements':>10} {'pages':>6} {'seconds':>8} {'statements/s':>13} {'peak RSS MiB':>13}")
    for count in (int(n) for n in options.statements.split(",")):
        server, root = RalphServer(), None
        try:
            # In chunks: the CLI is forked from this process, and a child's peak RSS
            # counts the parent's pages it was forked with.
            generated = statements(count)
            while chunk := list(itertools.islice(generated, 1000)):
                server.post(chunk)
            root = tempfile.mkdtemp(prefix="lmsr-lrs-bench-")
            config = os.path.join(root, "config.toml")
            with open(config, "w") as handle:
                handle.write(f'timezone = "Europe/Paris"\nstate_directory = "{root}/state"\n'
                             '[window]\nbootstrap_days = 7\nsafety_lag = "0s"\n'
                             f'[source]\ntype = "xapi-lrs"\nendpoint = "{server.endpoint}"\n'
                             f'username = "{server.USER}"\npassword_file = "{server.password_file}"\n'
                             'overlap = "3d"\ntimeout = "300s"\n')
            seconds, rss, _ = timed_run(config, dt.datetime.now(UTC), "run")
            print(f"{count:>10} {-(-count // 100):>6} {seconds:>8.2f} {count / seconds:>13,.0f} {rss:>13.1f}")
        finally:
            server.stop()
            if root:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
