"""The SQLite store's schema, as ordered migrations.

Migration N brings a store from version N-1 to N. Each runs in its own
transaction together with the version bump, so a crash leaves either version.
"""

from lms_refresh.store import PRIVACY_MIGRATION, PUBLISHED_VIEW, serving_view_sql, typed_checks

_SERVING_VIEW = serving_view_sql(
    "serving_daily_metrics", "", day="m.day",
    average="ROUND(m.score_sum_micro * 1.0 / m.score_count / 1000000.0, 6)",
    duration="m.duration_ms / 1000.0",
)

MIGRATIONS = [
    # 1: the first schema
    [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
        "INSERT INTO meta (key, value) VALUES ('min_cell_size', '10')",
        # Ids are 64-bit hashes of the IRIs (see sources.xapi.name_id).
        "CREATE TABLE courses (course_id INTEGER PRIMARY KEY, iri TEXT NOT NULL UNIQUE)",
        "CREATE TABLE verbs (verb_id INTEGER PRIMARY KEY, iri TEXT NOT NULL UNIQUE)",
        # Canonical events, clustered by partition so a day is rebuilt from one contiguous
        # range. The key ends with the source's own id; the columns before it are functions
        # of that (immutable) record, so pulling a record twice is a no-op.
        """CREATE TABLE staged_events (
            day TEXT NOT NULL, course_id INTEGER NOT NULL, actor INTEGER NOT NULL,
            event_id BLOB NOT NULL, stored TEXT NOT NULL, occurred TEXT NOT NULL,
            verb_id INTEGER NOT NULL, is_attempt INTEGER NOT NULL, is_completion INTEGER NOT NULL,
            is_passed INTEGER NOT NULL, is_failed INTEGER NOT NULL,
            score_micro INTEGER, duration_ms INTEGER,
            PRIMARY KEY (day, course_id, actor, event_id)) WITHOUT ROWID""",
        # Voided ids stay here so a re-pulled target is never staged again.
        """CREATE TABLE voided_events (
            event_id BLOB PRIMARY KEY, voided_by BLOB NOT NULL, stored TEXT NOT NULL) WITHOUT ROWID""",
        """CREATE TABLE daily_metrics (
            day TEXT NOT NULL, course_id INTEGER NOT NULL, learners INTEGER NOT NULL,
            statements INTEGER NOT NULL, attempts INTEGER NOT NULL, attempt_learners INTEGER NOT NULL,
            completions INTEGER NOT NULL, completion_learners INTEGER NOT NULL,
            passed INTEGER NOT NULL, passed_learners INTEGER NOT NULL,
            failed INTEGER NOT NULL, failed_learners INTEGER NOT NULL,
            score_sum_micro INTEGER, score_count INTEGER NOT NULL, score_learners INTEGER NOT NULL,
            duration_ms INTEGER, duration_learners INTEGER NOT NULL,
            PRIMARY KEY (day, course_id)) WITHOUT ROWID""",
        _SERVING_VIEW,
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, kind TEXT NOT NULL, started_at TEXT NOT NULL,
            finished_at TEXT NOT NULL, outcome TEXT NOT NULL, exit_code INTEGER NOT NULL,
            window_since TEXT, window_until TEXT, statements_read INTEGER NOT NULL DEFAULT 0,
            staged INTEGER NOT NULL DEFAULT 0, voided INTEGER NOT NULL DEFAULT 0,
            quarantined INTEGER NOT NULL DEFAULT 0, partitions INTEGER NOT NULL DEFAULT 0,
            rows_written INTEGER NOT NULL DEFAULT 0, suppressed INTEGER NOT NULL DEFAULT 0,
            message TEXT NOT NULL DEFAULT '')""",
        """CREATE TABLE quarantine (
            id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, origin TEXT NOT NULL,
            reason TEXT NOT NULL, raw TEXT NOT NULL, digest TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            UNIQUE (origin, digest))""",
        "CREATE TABLE source_state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    ],
    # 2: which lms-refresh version wrote each run-log row
    [
        "ALTER TABLE runs ADD COLUMN version TEXT NOT NULL DEFAULT ''",
    ],
    # 3: record keys (cell key method), the published rows, the typed privacy settings
    [statement.format(s="", integer="INTEGER", real="REAL", day="p.day",
                      without_rowid=" WITHOUT ROWID",
                      **typed_checks(sqlite=True))
     for statement in PRIVACY_MIGRATION] + ["DROP VIEW serving_daily_metrics", PUBLISHED_VIEW.format(
        view="serving_daily_metrics", s="", day="p.day")],
    # 4: a statement id counts once. Earlier stores could hold one id under two
    # (day, course, learner) keys; all but the first copy go, and their days are
    # rebuilt by the next run (pending_days).
    [
        "CREATE TABLE IF NOT EXISTS pending_days (day TEXT PRIMARY KEY) WITHOUT ROWID",
        "CREATE INDEX IF NOT EXISTS staged_events_id_scan ON staged_events (event_id)",
        """INSERT OR IGNORE INTO pending_days SELECT s.day FROM staged_events s JOIN staged_events t
            ON t.event_id = s.event_id AND (t.day, t.course_id, t.actor) <> (s.day, s.course_id, s.actor)""",
        """DELETE FROM staged_events WHERE (day, course_id, actor, event_id) IN (
            SELECT s.day, s.course_id, s.actor, s.event_id FROM staged_events s JOIN staged_events t
            ON t.event_id = s.event_id AND (t.day, t.course_id, t.actor) < (s.day, s.course_id, s.actor))""",
        "DROP INDEX staged_events_id_scan",
        "CREATE UNIQUE INDEX IF NOT EXISTS staged_events_event_id ON staged_events (event_id)",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)
