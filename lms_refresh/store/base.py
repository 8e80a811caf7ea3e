"""What the SQLite and PostgreSQL stores share: the run's bookkeeping in plain SQL.

Statements are written with `?` placeholders; a store whose driver wants
another style converts them in `_sql`. Dialect-specific work (opening,
migrating, staging in bulk, rebuilding partitions) lives in each store.
"""

import hashlib
import json

from lms_refresh.errors import StateError
from lms_refresh.store import SERVING_COLUMNS

RUN_FIELDS = (
    "run_id", "kind", "started_at", "finished_at", "outcome", "exit_code", "window_since",
    "window_until", "statements_read", "staged", "voided", "quarantined", "partitions",
    "rows_written", "suppressed", "message", "version",
)


class SqlStore:
    placeholder = "?"
    serving = "serving_daily_metrics"
    run_order = "seq"

    def __init__(self, connection, location):
        self.db = connection
        self.location = location
        self._voided = None
        self._void_targets = set()
        self._conflicts = []

    def _sql(self, statement):
        return statement if self.placeholder == "?" else statement.replace("?", self.placeholder)

    def execute(self, statement, parameters=()):
        return self.db.execute(self._sql(statement), parameters)

    def executemany(self, statement, rows):
        cursor = self.db.cursor()
        cursor.executemany(self._sql(statement), rows)
        return cursor

    def check_version(self, strict):
        """Refuse a store newer than this code (and, if `strict`, one that still needs migrating)."""
        version = self.schema_version()
        if version > self.schema_target:
            raise StateError(
                f"The store {self.describe()} has schema version {version}, newer than this lms-refresh "
                f"understands ({self.schema_target}); upgrade lms-refresh."
            )
        if strict and 0 < version < self.schema_target:
            raise StateError(f"The store {self.describe()} has schema version {version}; the next run upgrades it.")
        return version

    # -- reading -------------------------------------------------------------

    def meta(self):
        return dict(self.execute("SELECT key, value FROM meta").fetchall())

    def has_events(self):
        return bool(self.execute("SELECT EXISTS (SELECT 1 FROM staged_events)").fetchone()[0])

    def source_index(self):
        return {key: json.loads(value) for key, value in self.execute("SELECT key, value FROM source_state").fetchall()}

    def serving_rows(self):
        """Return the serving view's rows, ordered, with days as ISO text in every store."""
        columns = ", ".join(SERVING_COLUMNS)
        rows = self.execute(f"SELECT {columns} FROM {self.serving} ORDER BY day, course").fetchall()
        return [(str(row[0]),) + tuple(row[1:]) for row in rows]

    def quarantine_count(self):
        return self.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]

    def last_runs(self):
        """Return (last run, last successful run) as dicts, or None for each."""
        columns = ", ".join(RUN_FIELDS)
        last = self.execute(f"SELECT {columns} FROM runs ORDER BY {self.run_order} DESC LIMIT 1").fetchone()
        success = self.execute(
            f"SELECT {columns} FROM runs WHERE exit_code = 0 AND kind IN ('run', 'backfill', 'rebuild') "
            f"ORDER BY {self.run_order} DESC LIMIT 1").fetchone()
        return tuple(dict(zip(RUN_FIELDS, row)) if row else None for row in (last, success))

    # -- one run's transaction ------------------------------------------------

    def set_meta(self, key, value):
        self.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, str(value)))

    def record_names(self, names):
        for (kind, number), iri in names.items():
            table = "courses" if kind == "course" else "verbs"
            self.execute(f"INSERT INTO {table} VALUES (?, ?) ON CONFLICT DO NOTHING", (number, iri))

    def record_voids(self, voids):
        """Record voiding statements; return the set of every voided id known (for filtering events)."""
        if self._voided is None:
            # Voids are rare; their ids are kept in memory so each event is checked cheaply.
            self._voided = {bytes(row[0]) for row in self.execute("SELECT event_id FROM voided_events").fetchall()}
        for target, voiding, stored in voids:
            self.execute("INSERT INTO voided_events (event_id, voided_by, stored) VALUES (?, ?, ?) "
                         "ON CONFLICT DO NOTHING", (target, voiding, stored))
            self._voided.add(target)
            self._void_targets.add(target)
        return self._voided

    def stage(self, events, voids, names):
        """Upsert events, record voids and new course/verb names; return the days the events touch.

        Voided targets are removed by `finish_staging`, once per run, so a target
        staged earlier in the same run (or in an earlier run) goes too.
        """
        self.record_names(names)
        voided = self.record_voids(voids)
        if voided:
            events = [row for row in events if row[3] not in voided]
        if events and self.insert_events(events) < len(events):
            self._find_conflicts(events)
        return {row[0] for row in events}

    def _find_conflicts(self, events):
        """Some rows were not inserted: keep aside those whose id is staged with other content.

        A statement id counts once (the unique index on event_id makes sure); a second
        version that differs from the staged one is quarantined, never counted.
        """
        staged = self.staged_versions({row[3] for row in events})
        for row in events:
            kept = staged.get(row[3])
            if kept is not None and tuple(kept) != tuple(row):
                self._conflicts.append(row)

    def take_conflicts(self):
        """Return and forget the conflicting versions found since the last call."""
        conflicts, self._conflicts = self._conflicts, []
        return conflicts

    def pending_days(self):
        """Days whose metrics a migration left to be rebuilt (it removed double-staged statements)."""
        return {row[0] for row in self.execute("SELECT day FROM pending_days").fetchall()}

    def reset_derived(self):
        """Empty everything derived from the source (a rebuild refills it in the same transaction);
        the run log and the quarantine stay."""
        for table in ("daily_metrics", "staged_events", "voided_events", "courses", "verbs", "source_state",
                      "pending_days"):
            self.execute(f"DELETE FROM {table}")
        self.execute("DELETE FROM meta WHERE key NOT IN ('schema_version', 'min_cell_size')")
        self.forget_transaction()

    def quarantine(self, run_id, rows, now_text):
        """Record quarantined records (once per origin and content)."""
        self.executemany(
            "INSERT INTO quarantine (run_id, origin, reason, raw, digest, recorded_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (origin, digest) DO NOTHING",
            [(run_id, o, reason, raw, hashlib.sha256(raw.encode()).hexdigest(), now_text) for o, reason, raw in rows],
        )

    def save_source_state(self, state):
        if state:
            self.executemany("INSERT INTO source_state (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                             [(key, json.dumps(value)) for key, value in state.items()])

    def record_run(self, run):
        placeholders = ", ".join("?" for _ in RUN_FIELDS)
        self.execute(f"INSERT INTO runs ({', '.join(RUN_FIELDS)}) VALUES ({placeholders})",
                     [run[field] for field in RUN_FIELDS])

    def forget_transaction(self):
        """Voids learned inside a rolled-back transaction are gone with it."""
        self._voided = None
        self._void_targets.clear()
        self._conflicts = []

    def acquire_run_lock(self):
        """Return None once this store is locked for the run, else who holds it (flock is enough here)."""
        return None

    def close(self):
        self.db.close()
