"""The embedded SQLite metrics store.

One refresh is one transaction: staging upserts, partition replacement, the
watermark and the run-log row commit together or not at all. WAL mode lets
dashboards keep reading the previous state while a refresh writes.
"""

import contextlib
import json
import os
import sqlite3
import urllib.parse

from lms_refresh.errors import StateError, UnavailableError
from lms_refresh.store.base import SqlStore
from lms_refresh.store.schema import MIGRATIONS, SCHEMA_VERSION

_EVENT_INSERT = "INSERT OR IGNORE INTO staged_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

# One pass per cell. "Learners with an attempt" and the like are distinct counts of
# the actor over the rows that have one (the flags are 0 or 1). SQLite does this
# faster, and in less memory, than a per-learner subquery whose output it would
# sort again for the per-cell grouping.
_RECOMPUTE = """
INSERT INTO daily_metrics
SELECT day, course_id, COUNT(DISTINCT actor), COUNT(*),
    SUM(is_attempt), COUNT(DISTINCT CASE WHEN is_attempt THEN actor END),
    SUM(is_completion), COUNT(DISTINCT CASE WHEN is_completion THEN actor END),
    SUM(is_passed), COUNT(DISTINCT CASE WHEN is_passed THEN actor END),
    SUM(is_failed), COUNT(DISTINCT CASE WHEN is_failed THEN actor END),
    SUM(score_micro), COUNT(score_micro), COUNT(DISTINCT CASE WHEN score_micro IS NOT NULL THEN actor END),
    SUM(duration_ms), COUNT(DISTINCT CASE WHEN duration_ms IS NOT NULL THEN actor END),
    0, SUM(record_key) % 4294967296, SUM(is_attempt * record_key) % 4294967296,
    SUM(is_completion * record_key) % 4294967296, SUM(is_passed * record_key) % 4294967296,
    SUM(is_failed * record_key) % 4294967296,
    COALESCE(SUM(CASE WHEN score_micro IS NOT NULL THEN record_key END) % 4294967296, 0),
    COUNT(duration_ms), COALESCE(SUM(CASE WHEN duration_ms IS NOT NULL THEN record_key END) % 4294967296, 0)
FROM staged_events WHERE day IN (SELECT value FROM json_each(?))
GROUP BY day, course_id
"""

# A cell's learner key sums each distinct learner's key once; the staging key is ordered by
# (day, course, actor), so this is one range scan per day.
_LEARNER_KEYS = """
UPDATE daily_metrics SET learner_key = k.total FROM (
    SELECT day, course_id, SUM(learner_key) % 4294967296 AS total FROM (
        SELECT DISTINCT day, course_id, actor, learner_key FROM staged_events
        WHERE day IN (SELECT value FROM json_each(?))) GROUP BY day, course_id) AS k
WHERE daily_metrics.day = k.day AND daily_metrics.course_id = k.course_id
"""

# Errors that a later attempt may not meet again: the store is busy or the disk full.
_TRANSIENT = ("locked", "busy", "disk", "unable to open", "full")


def _damaged(path, error):
    return StateError(
        f"The store {path} cannot be used ({error}); it may be damaged — restore it from a backup, "
        "or move it aside and rebuild with 'lms-refresh backfill'."
    )


class SqliteStore(SqlStore):
    run_order = "rowid"
    schema_target = SCHEMA_VERSION

    @property
    def path(self):
        return self.location

    @classmethod
    def open(cls, path, create, read_only=False, migrate=True):
        """Open (and unless told otherwise create and migrate) the store at `path`.

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
            store.check_version(strict=read_only and exists)
            if migrate and not read_only:
                store.migrate()
        except sqlite3.DatabaseError as error:
            db.close()
            raise _damaged(path, error)
        return store

    def describe(self):
        return self.path

    def schema_version(self):
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return 0
        if "meta" not in tables:
            raise StateError(f"{self.path} is a SQLite database but not an lms-refresh store; check store.path.")
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or not row[0].isdigit():
            raise _damaged(self.path, "no schema version")
        return int(row[0])

    def migrate(self, target=SCHEMA_VERSION):
        """Apply the missing migrations up to `target`, each in its own transaction."""
        for number in range(self.schema_version() + 1, target + 1):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for statement in MIGRATIONS[number - 1]:
                    self.db.execute(statement)
                self.set_meta("schema_version", number)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def errors(self):
        """Turn driver errors into the domain's: transient ones 69, the rest a damaged store (78)."""
        try:
            yield
        except sqlite3.OperationalError as error:
            if any(word in str(error) for word in _TRANSIENT):
                raise UnavailableError(f"The store {self.path} could not be written ({error}); nothing was committed.")
            raise _damaged(self.path, error)
        except sqlite3.DatabaseError as error:
            raise _damaged(self.path, error)

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
        self.forget_transaction()

    def insert_events(self, events):
        self.db.executemany(_EVENT_INSERT, events)

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

    def rebuild_partitions(self, days):
        """Delete and rebuild the metrics of `days` from all staged events of those days; return the rows written."""
        days_json = json.dumps(sorted(days))
        self.db.execute("DELETE FROM daily_metrics WHERE day IN (SELECT value FROM json_each(?))", (days_json,))
        written = self.db.execute(_RECOMPUTE, (days_json,)).rowcount
        self.db.execute(_LEARNER_KEYS, (days_json,))
        return written
