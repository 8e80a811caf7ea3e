"""The PostgreSQL store's schema, as ordered migrations (formatted with the schema name).

Everything lives in schema `{s}`; dashboards read the view in `{s}_serving`,
which is all a read-only role is granted (see `grant-reader`). The view runs
with its owner's rights, so such a role reads metrics without any access to
staging or pseudonymised actors.
"""

from lms_refresh.store import PRIVACY_MIGRATION, PUBLISHED_VIEW, serving_view_sql, typed_checks

_SERVING_VIEW = serving_view_sql(
    "{s}_serving.daily_metrics", "{s}.", day="m.day::date",
    average="ROUND(m.score_sum_micro::numeric / m.score_count / 1000000, 6)::float8",
    duration="(m.duration_ms / 1000.0)::float8",
)

MIGRATIONS = [
    # 1: the first schema (the same tables as the SQLite store's)
    [
        "CREATE SCHEMA IF NOT EXISTS {s}",
        "CREATE SCHEMA IF NOT EXISTS {s}_serving",
        "CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
        "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)",
        "INSERT INTO {s}.meta (key, value) VALUES ('min_cell_size', '10')",
        "CREATE TABLE {s}.courses (course_id bigint PRIMARY KEY, iri text NOT NULL UNIQUE)",
        "CREATE TABLE {s}.verbs (verb_id bigint PRIMARY KEY, iri text NOT NULL UNIQUE)",
        """CREATE TABLE {s}.staged_events (
            day text NOT NULL, course_id bigint NOT NULL, actor bigint NOT NULL, event_id bytea NOT NULL,
            stored text NOT NULL, occurred text NOT NULL, verb_id bigint NOT NULL,
            is_attempt smallint NOT NULL, is_completion smallint NOT NULL, is_passed smallint NOT NULL,
            is_failed smallint NOT NULL, score_micro bigint, duration_ms bigint,
            PRIMARY KEY (day, course_id, actor, event_id))""",
        "CREATE TABLE {s}.voided_events (event_id bytea PRIMARY KEY, voided_by bytea NOT NULL, stored text NOT NULL)",
        """CREATE TABLE {s}.daily_metrics (
            day text NOT NULL, course_id bigint NOT NULL, learners integer NOT NULL,
            statements integer NOT NULL, attempts integer NOT NULL, attempt_learners integer NOT NULL,
            completions integer NOT NULL, completion_learners integer NOT NULL,
            passed integer NOT NULL, passed_learners integer NOT NULL,
            failed integer NOT NULL, failed_learners integer NOT NULL,
            score_sum_micro bigint, score_count integer NOT NULL, score_learners integer NOT NULL,
            duration_ms bigint, duration_learners integer NOT NULL,
            PRIMARY KEY (day, course_id))""",
        _SERVING_VIEW,
        """CREATE TABLE {s}.runs (
            seq bigserial PRIMARY KEY, run_id text NOT NULL UNIQUE, kind text NOT NULL,
            started_at text NOT NULL, finished_at text NOT NULL, outcome text NOT NULL,
            exit_code integer NOT NULL, window_since text, window_until text,
            statements_read bigint NOT NULL DEFAULT 0, staged bigint NOT NULL DEFAULT 0,
            voided bigint NOT NULL DEFAULT 0, quarantined bigint NOT NULL DEFAULT 0,
            partitions integer NOT NULL DEFAULT 0, rows_written bigint NOT NULL DEFAULT 0,
            suppressed bigint NOT NULL DEFAULT 0, message text NOT NULL DEFAULT '')""",
        """CREATE TABLE {s}.quarantine (
            id bigserial PRIMARY KEY, run_id text NOT NULL, origin text NOT NULL, reason text NOT NULL,
            raw text NOT NULL, digest text NOT NULL, recorded_at text NOT NULL, UNIQUE (origin, digest))""",
        "CREATE TABLE {s}.source_state (key text PRIMARY KEY, value text NOT NULL)",
    ],
    # 2: which lms-refresh version wrote each run-log row
    [
        "ALTER TABLE {s}.runs ADD COLUMN version text NOT NULL DEFAULT ''",
    ],
    # 3: record keys (cell key method), the published rows, the typed privacy settings
    [statement.format(s="{s}.", integer="bigint", real="float8", without_rowid="", **typed_checks(sqlite=False))
     for statement in PRIVACY_MIGRATION] + ["DROP VIEW {s}_serving.daily_metrics", PUBLISHED_VIEW.format(
        view="{s}_serving.daily_metrics", s="{s}.", day="p.day::date")],
    # 4: a statement id counts once (see the SQLite store's migration 4)
    [
        "CREATE TABLE IF NOT EXISTS {s}.pending_days (day text PRIMARY KEY)",
        "CREATE INDEX IF NOT EXISTS staged_events_id_scan ON {s}.staged_events (event_id)",
        """INSERT INTO {s}.pending_days SELECT DISTINCT s.day FROM {s}.staged_events s JOIN {s}.staged_events t
            ON t.event_id = s.event_id AND (t.day, t.course_id, t.actor) <> (s.day, s.course_id, s.actor)""",
        """DELETE FROM {s}.staged_events WHERE (day, course_id, actor, event_id) IN (
            SELECT s.day, s.course_id, s.actor, s.event_id FROM {s}.staged_events s JOIN {s}.staged_events t
            ON t.event_id = s.event_id AND (t.day, t.course_id, t.actor) < (s.day, s.course_id, s.actor))""",
        "DROP INDEX {s}.staged_events_id_scan",
        "CREATE UNIQUE INDEX IF NOT EXISTS staged_events_event_id ON {s}.staged_events (event_id)",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)
