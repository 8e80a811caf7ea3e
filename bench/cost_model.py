"""Benchmark: CPU instructions per statement of each step of a refresh, against the naive yardstick.

    python bench/cost_model.py [--statements 2000]

Needs valgrind (`apt install valgrind`). Wall-clock figures on a shared VM move by
±20% from one minute to the next; instruction counts do not. Each workload runs
under callgrind twice, over N and over 2N statements of the benchmark's own
generator, and the difference divided by N is its cost per statement in steady
state (start-up, imports and warm caches cancel out). PYTHONHASHSEED is fixed so
that dict layouts, and so the counts, repeat exactly.

Workloads (each also does what the one before it does; the differences are printed):
  naive      per-line json.loads + executemany into a keyed table (bench/refresh_bench.py)
  parse+map  what a parsing worker does: lms_refresh.sources.ndjson_worker.parse_lines with the real mapper
  stage      what the staging process does with those rows: SqliteStore.insert_events
  recompute  rebuilding the day partitions those rows touch, from the staged events

With both cores busy all the time, a refresh's rate is at most
2 x (machine speed) / (its instructions per statement); the naive yardstick's is
1 x (machine speed) / (its own), at the same instructions per cycle.
"""

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# One script, run as `python - WORKLOAD FILE COUNT`; COUNT statements of FILE go through WORKLOAD.
WORKLOAD = r"""
import json, os, sqlite3, sys, tempfile
sys.path.insert(0, os.path.join(sys.argv[4], ".."))
workload, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "rb") as handle:
    lines = handle.read().splitlines()[:count]
work = tempfile.mkdtemp()
if workload == "naive":
    db = sqlite3.connect(os.path.join(work, "naive.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE staged (id TEXT PRIMARY KEY, stored TEXT, actor TEXT, verb TEXT, object TEXT)")
    db.execute("BEGIN")
    rows = []
    for line in lines:
        s = json.loads(line)
        rows.append((s["id"], s["stored"], json.dumps(s["actor"]), s["verb"]["id"], s["object"]["id"]))
    db.executemany("INSERT OR IGNORE INTO staged VALUES (?, ?, ?, ?, ?)", rows)
    db.execute("COMMIT")
else:
    from lms_refresh.disclosure.cell_key import RecordKeys
    from lms_refresh.disclosure.pseudonyms import Pseudonymiser
    from lms_refresh.sources import ndjson_worker as ndjson
    from lms_refresh.sources.xapi import StatementMapper
    from lms_refresh.store.sqlite import SqliteStore
    mapper = StatementMapper("Europe/Paris", Pseudonymiser(b"k" * 32), r"^(.+?/course/[^/?#]+)")
    since, until = "2000-01-01T00:00:00.000000Z", "2100-01-01T00:00:00.000000Z"
    # The mapper's caches (days, pseudonyms, names) are warm in a real run; warm them here too.
    # Each workload below does what the one before it does, and one step more.
    ndjson.parse_lines(mapper, enumerate(lines, 1), since, until=until, result=ndjson.ChunkResult())
    if workload != "warm":
        result = ndjson.parse_lines(mapper, enumerate(lines, 1), since, until=until, result=ndjson.ChunkResult())
        events = result.batch.events
    if workload in ("stage", "recompute"):
        store = SqliteStore.open(os.path.join(work, "metrics.sqlite"), create=True)
        store.begin()
        keys = RecordKeys(b"k" * 32)
        store.insert_events(keys.add(events))
        if workload == "recompute":
            from lms_refresh.disclosure.policy import PrivacySettings
            store.set_privacy(10, PrivacySettings(10))  # what each run stores before it recomputes
            store.recompute({row[0] for row in events}, record_keys=keys)
        store.commit()
"""


def instructions(workload, path, count):
    """Return the instructions callgrind counts for one run of `workload` over `count` statements."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-",
         workload, path, str(count), HERE],
        input=WORKLOAD, capture_output=True, text=True, env=env, check=True)
    match = re.search(r"Collected : (\d+)", result.stderr)
    if not match:
        raise SystemExit(f"callgrind printed no count:\n{result.stderr[-2000:]}")
    return int(match.group(1))


def per_statement(workload, path, count):
    return (instructions(workload, path, 2 * count) - instructions(workload, path, count)) / count


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=2000)
    options = parser.parse_args()
    sys.path.insert(0, HERE)
    from refresh_bench import write_days

    with tempfile.TemporaryDirectory() as work:
        # 2N statements on one day: the shape of one export file of the full benchmark.
        write_days(work, 0, 1, 2 * options.statements, seed=1)
        path = os.path.join(work, os.listdir(work)[0])
        naive = per_statement("naive", path, options.statements)
        steps = [per_statement(w, path, options.statements) for w in ("warm", "parse+map", "stage", "recompute")]
        parse, stage, recompute = (later - earlier for earlier, later in itertools.pairwise(steps))
    ours = parse + stage + recompute
    print(f"naive yardstick  {naive:>9,.0f} instructions/statement (one process)")
    print(f"parse+map        {parse:>9,.0f}   (parsing workers)")
    print(f"stage            {stage:>9,.0f}   (the staging process)")
    print(f"recompute        {recompute:>9,.0f}   (the staging process, after staging)")
    print(f"refresh total    {ours:>9,.0f}   = {ours / naive:.2f} x the yardstick")
    print(f"best case on 2 cores, both busy throughout: {2 * naive / ours:.2f} x the yardstick's rate "
          f"(80,000/s with the yardstick at 36,000/s needs {80 / 36:.2f} x, "
          f"i.e. at most {naive * 2 * 36 / 80:,.0f} instructions/statement)")


if __name__ == "__main__":
    main()
