"""The embedded SQLite metrics store.

One refresh is one transaction: staging upserts, partition replacement, the
watermark and the run-log row commit together or not at all. WAL mode lets
dashboards keep reading the previous state while a refresh writes.
"""

import hashlib
import json
import os
import sqlite3
import urllib.parse

from lms_refresh.errors import StateError, UnavailableError
from lms_refresh.store import SERVING_COLUMNS, SERVING_VIEW
from lms_refresh.store.schema import MIGRATIONS, SCHEMA_VERSION

_EVENT_INSERT = "INSERT OR IGNORE INTO staged_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

# Per learner first, then per cell: the inner GROUP BY follows the primary key, so
# distinct-learner counts need no sorting or per-group hash tables.
_RECOMPUTE = """
INSERT INTO daily_metrics
SELECT day, course_id, COUNT(*), SUM(n),
    SUM(attempts), SUM(attempts > 0), SUM(completions), SUM(completions > 0),
    SUM(passed), SUM(passed > 0), SUM(failed), SUM(failed > 0),
    SUM(score_sum), SUM(scores), SUM(scores > 0), SUM(duration), SUM(durations > 0)
FROM (
    SELECT day, course_id, actor, COUNT(*) AS n, SUM(is_attempt) AS attempts,
        SUM(is_completion) AS completions, SUM(is_passed) AS passed, SUM(is_failed) AS failed,
        SUM(score_micro) AS score_sum, COUNT(score_micro) AS scores,
        SUM(duration_ms) AS duration, COUNT(duration_ms) AS durations
    FROM staged_events WHERE day IN (SELECT value FROM json_each(?))
    GROUP BY day, course_id, actor)
GROUP BY day, course_id
"""

RUN_FIELDS = (
    "run_id", "kind", "started_at", "finished_at", "outcome", "exit_code", "window_since",
    "window_until", "statements_read", "staged", "voided", "quarantined", "partitions",
    "rows_written", "suppressed", "message",
)


def _damaged(path, error):
    return StateError(
        f"The store {path} cannot be used ({error}); it may be damaged — restore it from a backup, "
        "or move it aside and rebuild with 'lms-refresh backfill'."
    )


class SqliteStore:
    def __init__(self, connection, path):
        self.db = connection
        self.path = path
        self._voided = None
        self._void_targets = set()

    @classmethod
    def open(cls, path, create, read_only=False):
        """Open (and if needed create or migrate) the store at `path`.

        With create=False a missing store is an empty in-memory one, so a dry
        run or a check never leaves a file behind.
        """
        exists = os.path.exists(path)
        if exists and os.path.getsize(path) == 0:
            raise StateError(
                f"The store {path} exists but is empty (a truncated file?); move it aside to start over."
            )
        if not exists and not create:
            target = ":memory:"
        elif read_only:
            target = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        else:
            target = path
        try:
            db = sqlite3.connect(target, isolation_level=None, uri=read_only and exists, timeout=30)
        except sqlite3.OperationalError as error:
            raise UnavailableError(f"Cannot open the store {path}: {error}.")
        store = cls(db, path if target != ":memory:" else ":memory:")
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            if target != ":memory:" and not read_only:
                db.execute("PRAGMA journal_mode = WAL")
                # WAL + NORMAL stays consistent on power loss; at worst the last run is
                # undone along with its watermark, and the next run redoes it.
                db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA cache_size = -65536")
            store._migrate(read_only)
        except sqlite3.DatabaseError as error:
            db.close()
            raise _damaged(path, error)
        return store

    def _schema_version(self):
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return 0
        if "meta" not in tables:
            raise StateError(f"{self.path} is a SQLite database but not an lms-refresh store; check store.path.")
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or not row[0].isdigit():
            raise _damaged(self.path, "no schema version")
        return int(row[0])

    def _migrate(self, read_only):
        version = self._schema_version()
        if version > SCHEMA_VERSION:
            raise StateError(
                f"The store {self.path} has schema version {version}, newer than this lms-refresh "
                f"understands ({SCHEMA_VERSION}); upgrade lms-refresh."
            )
        if version < SCHEMA_VERSION and read_only:
            raise StateError(f"The store {self.path} needs an upgrade; the next run will apply it.")
        for number in range(version + 1, SCHEMA_VERSION + 1):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for statement in MIGRATIONS[number - 1]:
                    self.db.execute(statement)
                self.db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(number),),
                )
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    # -- reading -------------------------------------------------------------

    def meta(self):
        return dict(self.db.execute("SELECT key, value FROM meta"))

    def has_events(self):
        return self.db.execute("SELECT EXISTS (SELECT 1 FROM staged_events)").fetchone()[0] == 1

    def source_index(self):
        return {key: json.loads(value) for key, value in self.db.execute("SELECT key, value FROM source_state")}

    def serving_rows(self):
        columns = ", ".join(SERVING_COLUMNS)
        return self.db.execute(f"SELECT {columns} FROM {SERVING_VIEW} ORDER BY day, course").fetchall()

    def last_runs(self):
        """Return (last run, last successful run) as dicts, or None for each."""
        columns = ", ".join(RUN_FIELDS)
        last = self.db.execute(f"SELECT {columns} FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()
        success = self.db.execute(
            f"SELECT {columns} FROM runs WHERE exit_code = 0 ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        as_dict = lambda row: dict(zip(RUN_FIELDS, row)) if row else None  # noqa: E731
        return as_dict(last), as_dict(success)

    def size_bytes(self):
        if self.path == ":memory:":
            return 0
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    # -- one run's transaction ------------------------------------------------

    def begin(self):
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self):
        self.db.execute("COMMIT")

    def rollback(self):
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        # Voids learned inside the transaction are gone with it.
        self._voided = None
        self._void_targets.clear()

    def set_meta(self, key, value):
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, str(value)),
        )

    def stage(self, events, voids, names):
        """Upsert events, record voids and new course/verb names; return the days the events touch.

        Voided targets are removed by `finish_staging`, once per run, so a target
        staged earlier in the same run (or in an earlier run) goes too.
        """
        for (kind, number), iri in names.items():
            table = "courses" if kind == "course" else "verbs"
            self.db.execute(f"INSERT INTO {table} VALUES (?, ?) ON CONFLICT DO NOTHING", (number, iri))
        if self._voided is None:
            # Voids are rare; their ids are kept in memory so each event is checked cheaply.
            self._voided = {row[0] for row in self.db.execute("SELECT event_id FROM voided_events")}
        voided = self._voided
        for target, voiding, stored in voids:
            self.db.execute(
                "INSERT INTO voided_events (event_id, voided_by, stored) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (target, voiding, stored),
            )
            voided.add(target)
            self._void_targets.add(target)
        if voided:
            events = [row for row in events if row[3] not in voided]
        self.db.executemany(_EVENT_INSERT, events)
        return {row[0] for row in events}

    def finish_staging(self):
        """Delete the targets of this run's voiding statements; return the days they were in."""
        if not self._void_targets:
            return set()
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS void_targets (event_id BLOB PRIMARY KEY)")
        self.db.execute("DELETE FROM temp.void_targets")
        self.db.executemany("INSERT OR IGNORE INTO temp.void_targets VALUES (?)", [(t,) for t in self._void_targets])
        # One scan of staging for all of a run's voids, instead of an index on every event.
        days = {r[0] for r in self.db.execute(
            "DELETE FROM staged_events WHERE event_id IN (SELECT event_id FROM temp.void_targets) RETURNING day")}
        self._void_targets.clear()
        return days

    def quarantine(self, run_id, rows, now_text):
        """Record quarantined records (once per origin and content)."""
        self.db.executemany(
            "INSERT INTO quarantine (run_id, origin, reason, raw, digest, recorded_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (origin, digest) DO NOTHING",
            [(run_id, o, reason, raw, hashlib.sha256(raw.encode()).hexdigest(), now_text) for o, reason, raw in rows],
        )

    def save_source_state(self, state):
        self.db.executemany(
            "INSERT INTO source_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [(key, json.dumps(value)) for key, value in state.items()],
        )

    def recompute(self, days):
        """Delete and rebuild the partitions of `days` from all staged events of those days.

        Returns (rows written, suppressed cells among them).
        """
        days_json = json.dumps(sorted(days))
        self.db.execute("DELETE FROM daily_metrics WHERE day IN (SELECT value FROM json_each(?))", (days_json,))
        written = self.db.execute(_RECOMPUTE, (days_json,)).rowcount
        suppressed = self.db.execute(
            f"SELECT COUNT(*) FROM {SERVING_VIEW} WHERE suppressed = 1 AND day IN (SELECT value FROM json_each(?))",
            (days_json,),
        ).fetchone()[0]
        return written, suppressed

    def record_run(self, run):
        placeholders = ", ".join("?" for _ in RUN_FIELDS)
        self.db.execute(
            f"INSERT INTO runs ({', '.join(RUN_FIELDS)}) VALUES ({placeholders})",
            [run[field] for field in RUN_FIELDS],
        )

    def close(self):
        self.db.close()
