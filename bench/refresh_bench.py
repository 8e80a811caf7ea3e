"""Benchmark: statements/s and peak RSS of real refreshes through the installed CLI.

    python bench/refresh_bench.py [--statements 1000000] [--per-day 20000] [--stores sqlite,postgresql]

PostgreSQL runs start a throwaway server (fsync on, as in production) from
Debian's postgresql package; run as root.

Scenarios (each a separate `lms-refresh` process, timed end to end from
export files to the committed serving table; peak RSS from wait4):
  full      one refresh of --statements statements spread over 30 days, then
            the naive yardstick (json.loads + executemany) on the same files
  inc       a one-day refresh (--per-day statements) on top of 7 and of 365 (--history) days of history at the same
            rate, twice each, alternated, and the ratio of their medians (issue 23: at most 1.15x): what
            the years behind a nightly run cost it. On SQLite, the pages of the store each timed run
            rewrote (bench/store_pages.py). With --settle N each history is first run N nights, a day
            each: a history built by one first run has its index on statement ids packed full, and
            the first nights on top of it split its pages
  terms     (--only terms) a one-day refresh on top of 365 days of history (--per-day statements a day),
            with two terms configured and without, back to back, twice each (a new history each time),
            and the ratio of their medians: what the terms cost a nightly run
  linear    (--only linear) full refreshes of --statements statements over 30 days and of ten times as
            many over 300 days (the same daily rate; the first 30 days are the same files), the ratio of
            their times per statement (issue 23: at most 1.15x), peak RSS, and the store's and the
            publication's size per million statements. At the default 1M, 10M statements are about
            9 GB of NDJSON in the work directory (--work puts it elsewhere).
"""

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import store_pages
from helpers.pgserver import PostgresServer
from lms_refresh.demo.sample import _VERB_CHOICES, COURSES, statement

UTC = dt.UTC
START = dt.datetime(2026, 6, 1, tzinfo=UTC)
CLI = [sys.executable, "-m", "lms_refresh"]


def write_days(directory, first_day, days, per_day, seed, learners=20000):
    """Write `per_day` statements for each of `days` days (one file a day); return bytes written."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    courses = [c for c, _, _ in COURSES]
    total = 0
    for offset in range(first_day, first_day + days):
        day = START + dt.timedelta(days=offset)
        path = os.path.join(directory, f"export-{day:%Y-%m-%d}.ndjson")
        with open(path, "w", encoding="utf-8") as handle:
            for _ in range(per_day):
                moment = day + dt.timedelta(seconds=rng.randint(0, 86399), microseconds=rng.randint(0, 999999))
                # Compact separators, as LRSs serialise statements.
                line = json.dumps(statement(rng, rng.randrange(learners), rng.choice(courses), moment=moment,
                                            stored=moment + dt.timedelta(seconds=rng.randint(1, 60)),
                                            verb=rng.choice(_VERB_CHOICES)), separators=(",", ":"))
                handle.write(line + "\n")
                total += len(line) + 1
    return total


# Two terms covering most of the benchmark's year (it starts on 2026-06-01), as a university declares them.
TWO_TERMS = (("Autumn 2026", "2026-09-14", "2026-12-18"), ("Spring 2027", "2027-01-11", "2027-05-28"))


def configure(root, source, server, terms=(), days=3660):
    """Write a config for `source` with `terms`; on PostgreSQL (server given) in a new database. A first
    run reads `days` back: a timed full refresh passes its own days (each day of a first run's window is
    recomputed, events or not: 3,630 empty days cost a first run 0.75 s on SQLite, 2026-12-03).

    Return the config's path and the database's name (None on SQLite)."""
    config = os.path.join(root, "config.toml")
    store, database = "", None
    if server is not None:
        database = server.new_database()
        store = (f'[store]\ntype = "postgresql"\nurl = "{server.url(database)}"\n'
                 f'password_file = "{server.password_file}"\n')
    with open(config, "w") as handle:
        handle.write(f'timezone = "Europe/Paris"\nstate_directory = "{root}/state"\n'
                     f'max_quarantine_share = 0.0\n[window]\nbootstrap_days = {days}\nsafety_lag = "0s"\n'
                     f'[source]\ntype = "xapi-ndjson"\npath = "{source}"\n' + store
                     + "".join(f'[[terms]]\nname = "{name}"\nfirst_day = {first}\nlast_day = {last}\n'
                               for name, first, last in terms))
    return config, database


def timed_run(config, now, *args, command=CLI):
    """Run the CLI (`command`) once; return (seconds, peak RSS in MiB, stderr)."""
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:  # not a pipe: a run that writes more than it holds would block
        process = subprocess.Popen(command + ["--config", config, "--now", now.isoformat()] + list(args),
                                   stderr=log, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.monotonic() - began
        log.seek(0)
        err = log.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"refresh failed:\n{err}")
    return elapsed, usage.ru_maxrss / 1024, err


def naive_baseline(source, database):
    """The issue's yardstick, timed on the same files: per-line json.loads + executemany into a keyed table.

    It maps nothing, computes no metrics and commits once; on a noisy VM its rate
    moves with the machine, so the ratio to it is steadier than either figure.
    """
    import sqlite3

    began = time.monotonic()
    db = sqlite3.connect(database, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE staged (id TEXT PRIMARY KEY, stored TEXT, actor TEXT, verb TEXT, object TEXT)")
    db.execute("BEGIN")
    count = 0
    for name in sorted(os.listdir(source)):
        with open(os.path.join(source, name), encoding="utf-8") as handle:
            rows = []
            for line in handle:
                s = json.loads(line)
                rows.append((s["id"], s["stored"], json.dumps(s["actor"]), s["verb"]["id"], s["object"]["id"]))
                if len(rows) == 5000:
                    db.executemany("INSERT OR IGNORE INTO staged VALUES (?, ?, ?, ?, ?)", rows)
                    count, rows = count + len(rows), []
            db.executemany("INSERT OR IGNORE INTO staged VALUES (?, ?, ?, ?, ?)", rows)
            count += len(rows)
    db.execute("COMMIT")
    db.close()
    return count, time.monotonic() - began


def report(store, name, count, seconds, rss):
    print(f"{store:<10} {name:<8} {count:>9,} statements  {seconds:8.2f} s  {count / seconds:>9,.0f} statements/s  "
          f"peak RSS {rss:6.1f} MiB", flush=True)


def nightly(work, name, store, server, source, history, terms=(), settle=0):
    """Build `history` days from `source` in a new store, run `settle` nights (a day of `source`-next each),
    then time the night that adds the next day of `source`-next.

    Return (seconds, peak RSS in MiB, the pages that night rewrote on SQLite or ""); the store is removed
    afterwards."""
    root = os.path.join(work, name)
    os.makedirs(root)
    mine = os.path.join(root, "src")
    shutil.copytree(source, mine)
    config, _ = configure(root, mine, server if store == "postgresql" else None, terms)
    timed_run(config, START + dt.timedelta(days=history), "run")  # build the history
    nights = sorted(os.listdir(source + "-next"))[:settle + 1]  # one file a day, in day order
    for night, file_name in enumerate(nights):
        shutil.copy(os.path.join(source + "-next", file_name), mine)
        now = START + dt.timedelta(days=history + night + 1)
        if night < settle:
            timed_run(config, now, "run")
            continue
        database = os.path.join(root, "state", "metrics.sqlite")
        before = store_pages.page_digests(database) if store == "sqlite" else None
        seconds, rss, _ = timed_run(config, now, "run")
        pages = store_pages.rewritten(database, before) if before is not None else None
    shutil.rmtree(root)
    return seconds, rss, pages


def alternated(work, label, stores, server, per_day, variants, settle=0):
    """Time each of `variants` (name -> (source, history, terms)) twice per store, alternated, each after
    `settle` nights; print each run (and on SQLite the pages it rewrote) and the ratio of the last variant's
    median to the first's."""
    import statistics

    names = list(variants)
    for store in stores:
        times = {name: [] for name in names}
        for attempt in range(2):
            for name in names:
                source, history, terms = variants[name]
                seconds, rss, pages = nightly(work, f"{label}-{store}-{attempt}-{name.replace(' ', '-')}", store,
                                              server, source, history, terms, settle)
                report(store, f"inc-{history}", per_day, seconds, rss)
                after = f", after {settle} night{'s' * (settle > 1)}" if settle else ""
                print(f"{'':<10} ({name}{after})", flush=True)
                if pages is not None:
                    print(f"{'':<10} {store_pages.describe(pages, per_day)}", flush=True)
                times[name].append(seconds)
        ratio = statistics.median(times[names[-1]]) / statistics.median(times[names[0]])
        print(f"{store:<10} {label}: {names[-1]} / {names[0]}: {ratio:.2f}x (medians of 2)", flush=True)


def history_source(work, name, history, per_day, seed, nights=1):
    """Export files for `history` days at `per_day` a day, and the next `nights` days' beside them (name-next)."""
    source = os.path.join(work, name)
    write_days(source, 0, history, per_day, seed=seed)
    write_days(source + "-next", history, nights, per_day, seed=seed + 1000)
    return source


def terms_scenario(work, stores, server, per_day, history=365):
    """A nightly run on a year of history with TWO_TERMS and without, alternated; print each and the ratio."""
    source = history_source(work, "terms-src", history, per_day, seed=7)
    alternated(work, f"one-day run on {history} days", stores, server, per_day,
               {"no terms": (source, history, ()), "two terms": (source, history, TWO_TERMS)})


def inc_scenario(work, stores, server, per_day, settle=0, history=365):
    """A nightly run on 7 and on `history` days of history at the same daily rate (after `settle` nights on
    each), alternated; print each and the ratio."""
    short = history_source(work, "inc7-src", 7, per_day, seed=70, nights=settle + 1)
    long = history_source(work, f"inc{history}-src", history, per_day, seed=365, nights=settle + 1)
    alternated(work, "one-day run", stores, server, per_day,
               {"7 days of history": (short, 7, ()), f"{history} days of history": (long, history, ())}, settle)


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(top, name)) for top, _, names in os.walk(path) for name in names)


def store_sizes(root, server, database):
    """Bytes of the store and of the publication after a run. On PostgreSQL the store is the database
    (the publication's tables included) and the publication is its *_metrics and courses tables."""
    if server is None:
        return tree_bytes(os.path.join(root, "state")), tree_bytes(os.path.join(root, "state-publication"))
    total = server.admin(f"SELECT pg_database_size('{database}')", database)[0][0]
    published = server.admin("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                             "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
                             "AND (c.relname LIKE '%metrics' OR c.relname = 'courses') "
                             "AND n.nspname NOT IN ('pg_catalog', 'information_schema')", database)[0][0]
    return total, int(published)


def linear_scenario(work, stores, server, statements):
    """Full refreshes of `statements` over 30 days and of ten times as many over 300 days, at the same
    daily rate: print each, the ratio of their times per statement and the sizes per million statements."""
    per_day = statements // 30
    large = os.path.join(work, "linear-src")
    size = write_days(large, 0, 300, per_day, seed=10)
    small = os.path.join(work, "linear-small-src")
    os.makedirs(small)
    for name in sorted(os.listdir(large))[:30]:  # the same files: hard links
        os.link(os.path.join(large, name), os.path.join(small, name))
    print(f"generated {per_day * 300:,} statements, {size / (per_day * 300):.0f} bytes each on average "
          f"({size / 2**30:.1f} GiB)", flush=True)
    for store in stores:
        per_statement = {}
        for days, source in ((30, small), (300, large)):
            count = per_day * days
            root = os.path.join(work, f"linear-{store}-{days}")
            os.makedirs(root)
            config, database = configure(root, source, server if store == "postgresql" else None, days=days + 2)
            seconds, rss, _ = timed_run(config, START + dt.timedelta(days=days + 1), "run")
            report(store, f"full-{days}d", count, seconds, rss)
            stored, published = store_sizes(root, server if store == "postgresql" else None, database)
            million = count / 1e6
            print(f"{'':<10} store {stored / million / 2**20:,.1f} MiB and publication "
                  f"{published / million / 2**20:,.2f} MiB per million statements", flush=True)
            per_statement[days] = seconds / count
            shutil.rmtree(root)
        print(f"{store:<10} time per statement, {per_day * 300:,} / {per_day * 30:,}: "
              f"{per_statement[300] / per_statement[30]:.2f}x", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=1_000_000)
    parser.add_argument("--per-day", type=int, default=20_000)
    parser.add_argument("--work", default=None, help="work directory (default: a temporary one, removed)")
    parser.add_argument("--only", choices=["full", "inc", "terms", "linear"], default=None)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--settle", type=int, default=0, help="inc: nights run on each history before the timed one")
    parser.add_argument("--history", type=int, default=365, help="inc: the long history's days (against 7)")
    options = parser.parse_args()
    work = options.work or tempfile.mkdtemp(prefix="lmsr-bench-")
    os.makedirs(work, exist_ok=True)  # a --work directory that does not exist yet is made
    os.chmod(work, 0o755)
    stores = options.stores.split(",")
    server = PostgresServer(durable=True) if "postgresql" in stores else None
    try:
        if options.only in (None, "full"):
            days = 30
            per_day = options.statements // days
            source = os.path.join(work, "full-src")
            size = write_days(source, 0, days, per_day, seed=1)
            count = per_day * days
            print(f"generated {count:,} statements, {size / count:.0f} bytes each on average", flush=True)
            for store in stores:
                root = os.path.join(work, f"full-{store}")
                os.makedirs(root)
                config, _ = configure(root, source, server if store == "postgresql" else None, days=days + 2)
                seconds, rss, _ = timed_run(config, START + dt.timedelta(days=days + 1), "run")
                report(store, "full", count, seconds, rss)
            naive_count, naive_seconds = naive_baseline(source, os.path.join(work, "naive.sqlite"))
            print(f"{'naive':<10} {'full':<8} {naive_count:>9,} statements  {naive_seconds:8.2f} s  "
                  f"{naive_count / naive_seconds:>9,.0f} statements/s  (json.loads + executemany, one process: "
                  "the issue's yardstick, ~36,000/s on this kind of machine)", flush=True)
        if options.only in (None, "inc"):
            inc_scenario(work, stores, server, options.per_day, options.settle, options.history)
        if options.only == "terms":
            terms_scenario(work, stores, server, options.per_day)
        if options.only == "linear":
            linear_scenario(work, stores, server, options.statements)
    finally:
        if server is not None:
            server.stop()
        if not options.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
