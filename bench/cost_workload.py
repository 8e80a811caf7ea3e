"""What bench/cost_model.py runs under callgrind: the first COUNT statements of FILE through each
step of a refresh, in the order a run takes them, in one process.

    python3 cost_workload.py FILE COUNT naive=1|0 [statements=1] [floors=1]   # beside a copy of lms_refresh/

Each part ends with a call of os.getppid(), which nothing else here calls: the model runs this
under `valgrind --tool=callgrind --dump-before=getppid`, so callgrind writes one count per part,
in the order of PARTS. Run it in an empty directory: the store is created in the current one.

With statements=1, the recompute is cut further: a mark before and after each SQL statement it
executes, so that callgrind counts each statement apart from the Python between them; the
statements' places in the code (file:function:line, in the order executed) are printed last,
and PRESENCE's place (learner_days' rows, lms_refresh/store/grains.py) once more as "presence: ...".

With floors=1, FLOOR_PARTS follow: the pieces of work a refresh cannot do without, each alone
on the same statements (see `floors`).
"""

import datetime
import json
import os
import sqlite3
import sys
import types

# The parts, in order. "setup" (start-up, imports, opening the store) and "warm" (a first pass
# that fills the mapper's caches, as earlier chunks of a real run do) are not steps of the model:
# they are counted apart so that the steps after them hold only their own work.
PARTS = ("setup", "warm", "parse+map", "stage", "recompute", "commit", "naive")
# With floors=1, after them: each floor, and before it (in parentheses, not a floor) what sets its data up.
FLOOR_PARTS = ("(floors' data)", "decode", "record keys", "marshal dumps", "marshal loads", "(floor store)",
               "staged insert")
MARK = os.getppid  # the one call callgrind dumps its counts at (--dump-before=getppid)
KEY = b"k" * 32
WINDOW = ("2000-01-01T00:00:00.000000Z", "2100-01-01T00:00:00.000000Z")


def first_lines(path, count):
    """Return (the first `count` lines of `path`, the offset just past them)."""
    with open(path, "rb") as handle:
        data = handle.read()
    end = 0
    for _ in range(count):
        end = data.index(b"\n", end) + 1
    return data[:end].splitlines(), end


def naive(lines):
    """The yardstick: per-line json.loads and executemany into a keyed table (bench/refresh_bench.py)."""
    db = sqlite3.connect("naive.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE staged (id TEXT PRIMARY KEY, stored TEXT, actor TEXT, verb TEXT, object TEXT)")
    db.execute("BEGIN")
    rows = []
    for line in lines:
        s = json.loads(line)
        rows.append((s["id"], s["stored"], json.dumps(s["actor"]), s["verb"]["id"], s["object"]["id"]))
    db.executemany("INSERT OR IGNORE INTO staged VALUES (?, ?, ?, ?, ?)", rows)
    db.execute("COMMIT")
    db.close()


class Fetched:
    """A query's rows, read whole while its statement is counted: what callers of execute use of a cursor."""

    def __init__(self, cursor):
        self.rows, self.rowcount = cursor.fetchall(), cursor.rowcount

    def fetchall(self):
        return self.rows

    def fetchone(self):
        return self.rows[0] if self.rows else None

    def __iter__(self):
        return iter(self.rows)


def marking(store, places):
    """Make `store` mark (MARK) before and after each statement it executes (a query's rows read whole
    between the two), and append to `places` where in the code each was executed from, with the statement."""
    execute = store.execute

    def marked(statement, parameters=()):
        MARK()
        cursor = execute(statement, parameters)
        if cursor.description is not None:
            cursor = Fetched(cursor)
        MARK()
        caller = sys._getframe(1)
        places.append((f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_code.co_name}:{caller.f_lineno}",
                       statement))
        return cursor
    store.execute = marked


def floors(lines, rows, keys):
    """Count (a mark after each: FLOOR_PARTS) what a refresh must do per statement at the least, each piece alone on
    the sample's own data: decode its `lines` (the worker's decoder), compute the record keys of its `rows` (the
    mapped events, as plain tuples: what the worker sends and Store.stage inserts) with `keys` (the mapper's, its
    learners' keys cached as the mapper's are), marshal them (a worker) and back (the staging process), and insert
    them into an empty staged_events of a new store, in one transaction, without conflict checks."""
    import marshal

    from lms_refresh.sources import json_decoding
    from lms_refresh.sources.records import EVENT_FIELDS, EVENT_ID
    from lms_refresh.store.sqlite import SqliteStore

    decode, (event_key, learner_key) = json_decoding.line_decoder(), keys.keyers()
    actor = EVENT_FIELDS.index("actor")
    ids, actors = [row[EVENT_ID] for row in rows], [row[actor] for row in rows]
    MARK()  # (floors' data)
    for _ in map(decode, lines):
        pass
    MARK()  # decode
    for _ in map(event_key, ids):
        pass
    for _ in map(learner_key, actors):
        pass
    MARK()  # record keys
    sent = marshal.dumps(rows)
    MARK()  # marshal dumps
    marshal.loads(sent)
    MARK()  # marshal loads
    store = SqliteStore.open("floor.sqlite", create=True)  # staged_events and its unique index on event_id, empty
    store.begin()
    insert = f"INSERT INTO staged_events VALUES ({', '.join('?' * len(EVENT_FIELDS))})"
    MARK()  # (floor store)
    store.db.executemany(insert, rows)
    MARK()  # staged insert
    store.rollback()
    store.close()


def main(path, count, with_naive, by_statement=False, with_floors=False):
    from lms_refresh.disclosure.cell_key import RecordKeys
    from lms_refresh.disclosure.policy import PrivacySettings
    from lms_refresh.disclosure.pseudonyms import Pseudonymiser
    from lms_refresh.sources import json_decoding, ndjson_worker as worker
    from lms_refresh.sources.xapi import StatementMapper
    from lms_refresh.store.sqlite import SqliteStore

    print(f"json parser: {json_decoding.parser}")  # cost_model.py reports it with the counts
    lines, end = first_lines(path, count)
    chunk, reading = worker.Chunk(path, 0, end), worker.Reading(*WINDOW)
    keys = RecordKeys(KEY)  # the run's: the mapper computes each event's record keys, in the parsing workers
    worker._worker_mapper = StatementMapper("Europe/Paris", Pseudonymiser(KEY), r"^(.+?/course/[^/?#]+)",
                                            record_keys=keys)
    store = SqliteStore.open("metrics.sqlite", create=True)
    store.begin()
    store.set_privacy(10, PrivacySettings(10))  # what each run stores before it recomputes
    MARK()  # setup
    worker._worker_read(chunk, reading)
    MARK()  # warm
    # A parsing worker: read the chunk's lines, map them (with their record keys), marshal the rows for the parent.
    result = worker._worker_read(chunk, reading)
    MARK()  # parse+map
    # The staging process: the worker's rows (their record keys computed there) staged as they come, with the names.
    batch = worker._unmarshal(result).batch
    days = store.stage(batch.events, batch.voids, batch.names) | store.finish_staging()
    MARK()  # stage
    # Rebuild the partitions of the days staged, their weeks and months, and the published rows of their
    # courses (what the disclosure policy allows of their cells), as a run does: run/publication.py's recompute.
    # Imported here rather than with the others: loading the run layer's modules before parse+map
    # moved that step's count by 1.1% (112,412 against 111,092), by memory layout alone.
    from lms_refresh.run import publication

    # The settings the weeks, months and terms read (whether a period is complete; the terms: none), as a Config
    # holds them.
    config = types.SimpleNamespace(timezone="Europe/Paris", window=types.SimpleNamespace(safety_lag=300), terms=())
    places = []
    if by_statement:
        marking(store, places)
    publication.recompute(store, days, record_keys=keys, config=config,
                          now=datetime.datetime(2026, 6, 3, 4, 15, tzinfo=datetime.UTC))
    MARK()  # recompute
    store.__dict__.pop("execute", None)
    store.commit()
    MARK()  # commit
    if with_naive:
        naive(lines)
        MARK()  # naive
    if with_floors:
        floors(lines, batch.events, keys)
    store.close()
    from lms_refresh.store import grains

    for place, _ in places:
        print(f"statement: {place}")
    presence = grains.PRESENCE.format(days_in=store.dialect.days_in)  # as rebuild_partitions executes it
    for place in {place for place, statement in places if statement == presence}:
        print(f"presence: {place}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "naive=1", "statements=1" in sys.argv[4:],
         "floors=1" in sys.argv[4:])
