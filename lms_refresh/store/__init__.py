"""Metrics stores, behind one interface (`base.SqlStore` and the dialect methods each store adds)."""

from lms_refresh.errors import ConfigError

SERVING_COLUMNS = (
    "day", "course", "active_learners", "statements", "attempts", "completions",
    "passed", "failed", "avg_scaled_score", "total_duration_seconds", "suppressed",
)


# Schema version 3 (both stores; formatted with the dialect's names and types).
PRIVACY_MIGRATION = [
    # The cell key method's record keys, computed in Python with the secret key at staging
    # time. NULL only in rows staged before this version; the next run fills them in.
    "ALTER TABLE {s}staged_events ADD COLUMN record_key {integer}",
    "ALTER TABLE {s}staged_events ADD COLUMN learner_key {integer}",
    "INSERT INTO {s}meta (key, value) VALUES ('record_keys', 'missing')",
] + [f"ALTER TABLE {{s}}daily_metrics ADD COLUMN {column} {{integer}} NOT NULL DEFAULT 0" for column in (
    "learner_key", "statement_key", "attempt_key", "completion_key", "passed_key", "failed_key", "score_key",
    "duration_count", "duration_key")] + [
    # The publication rebuilds a course's whole span: its rows must be one range away.
    "CREATE INDEX daily_metrics_by_course ON {s}daily_metrics (course_id, day)",
    # What is published: suppressed, perturbed and gap-filled in Python (lms_refresh.privacy).
    """CREATE TABLE {s}published_metrics (
        course_id {integer} NOT NULL, day TEXT NOT NULL, active_learners {integer}, statements {integer},
        attempts {integer}, completions {integer}, passed {integer}, failed {integer},
        avg_scaled_score {real}, total_duration_seconds {real}, suppressed {integer} NOT NULL,
        PRIMARY KEY (course_id, day)){without_rowid}""",
    # The threshold and the noise in a typed row: a value that is not a positive integer is
    # refused by the CHECK, so nothing can switch suppression off by writing text into meta.
    """CREATE TABLE {s}privacy_settings (
        id {integer} PRIMARY KEY CHECK (id = 1),
        min_cell_size {integer} NOT NULL CHECK ({t_min}min_cell_size >= 1),
        method TEXT NOT NULL CHECK (method IN ('cell-key', 'none')),
        max_noise {integer} NOT NULL CHECK ({t_noise}max_noise BETWEEN 0 AND 100),
        variance {real} NOT NULL CHECK ({t_variance}variance >= 0),
        withhold_zeros {integer} NOT NULL CHECK ({t_zeros}withhold_zeros IN (0, 1)))""",
]



def typed_checks(sqlite):
    """The CHECK prefixes that make SQLite refuse a value of the wrong type (PostgreSQL's types already do)."""
    if not sqlite:
        return {"t_min": "", "t_noise": "", "t_variance": "", "t_zeros": ""}
    return {"t_min": "typeof(min_cell_size) = 'integer' AND ", "t_noise": "typeof(max_noise) = 'integer' AND ",
            "t_variance": "typeof(variance) = 'real' AND ", "t_zeros": "typeof(withhold_zeros) = 'integer' AND "}


# The serving view from schema version 3 on: the published rows, nothing computed in SQL.
PUBLISHED_VIEW = """
CREATE VIEW {view} AS
SELECT {day} AS day, c.iri AS course, p.active_learners, p.statements, p.attempts, p.completions,
  p.passed, p.failed, p.avg_scaled_score, p.total_duration_seconds, p.suppressed
FROM {s}published_metrics AS p
JOIN {s}courses AS c USING (course_id)
"""


def serving_view_sql(view, schema_prefix, day, average, duration):
    """Return the CREATE VIEW of the serving layer up to schema version 2, in one place for every store.

    Suppression lives in the view, reading min_cell_size from meta, so changing
    the setting re-suppresses every published day at once. A value is withheld
    when 0 < (distinct learners it derives from) < min_cell_size; a whole row is
    withheld when the day's active learners are fewer than min_cell_size.
    `day`, `average` and `duration` are the dialect's expressions for those columns.
    """
    def value(learners, expression):
        return f"CASE WHEN m.learners >= k AND (m.{learners} = 0 OR m.{learners} >= k) THEN {expression} END"

    withheld = " OR ".join(f"m.{column} BETWEEN 1 AND k - 1" for column in (
        "attempt_learners", "completion_learners", "passed_learners", "failed_learners", "score_learners",
        "duration_learners"))
    return f"""
CREATE VIEW {view} AS
SELECT {day} AS day, c.iri AS course,
  CASE WHEN m.learners >= k THEN m.learners END AS active_learners,
  CASE WHEN m.learners >= k THEN m.statements END AS statements,
  {value("attempt_learners", "m.attempts")} AS attempts,
  {value("completion_learners", "m.completions")} AS completions,
  {value("passed_learners", "m.passed")} AS passed,
  {value("failed_learners", "m.failed")} AS failed,
  CASE WHEN m.learners >= k AND m.score_learners >= k THEN {average} END AS avg_scaled_score,
  CASE WHEN m.learners >= k AND m.duration_learners >= k THEN {duration} END AS total_duration_seconds,
  CASE WHEN m.learners < k OR {withheld} THEN 1 ELSE 0 END AS suppressed
FROM {schema_prefix}daily_metrics AS m
JOIN {schema_prefix}courses AS c USING (course_id)
CROSS JOIN (SELECT CAST(value AS INTEGER) AS k FROM {schema_prefix}meta WHERE key = 'min_cell_size') AS settings
"""


def load_driver(config):
    """Import the store's driver now: a SIGTERM during a slow import inside the run would be
    reported by the driver as an import failure instead of a clean stop."""
    if config.store.type == "postgresql":
        import lms_refresh.store.postgres  # noqa: F401


def open_store(config, environ, create, read_only=False, migrate=True):
    """Given a Config, return an opened store; `create=False` never creates one."""
    if config.store.type == "sqlite":
        from lms_refresh.store.sqlite import SqliteStore

        return SqliteStore.open(config.store.path, create=create, read_only=read_only, migrate=migrate)
    if config.store.type == "postgresql":
        from lms_refresh.store.postgres import PostgresStore

        return PostgresStore.open(config.store, environ, create=create, read_only=read_only, migrate=migrate)
    raise ConfigError(f"store type {config.store.type!r} is not supported")


def store_exists(config, environ):
    """Whether the store has been created: a migrated SQLite file (not an absent, empty or
    half-created one), or a database schema with our tables. Never creates or migrates."""
    if config.store.type == "sqlite":
        from lms_refresh.store.sqlite import SqliteStore

        return SqliteStore.present(config.store.path)
    store = open_store(config, environ, create=True, migrate=False)
    try:
        return store.schema_version() > 0
    finally:
        store.close()
