"""Metrics stores, behind one interface (`base.SqlStore` and the dialect methods each store adds)."""

from lms_refresh.errors import ConfigError

SERVING_COLUMNS = (
    "day", "course", "active_learners", "statements", "attempts", "completions",
    "passed", "failed", "avg_scaled_score", "total_duration_seconds", "suppressed",
)


def serving_view_sql(view, schema_prefix, day, average, duration):
    """Return the CREATE VIEW of the serving layer, in one place for every store.

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
    if config.store_type == "postgresql":
        import lms_refresh.store.postgres  # noqa: F401


def open_store(config, environ, create, read_only=False, migrate=True):
    """Given a Config, return an opened store; `create=False` never creates one."""
    if config.store_type == "sqlite":
        from lms_refresh.store.sqlite import SqliteStore

        return SqliteStore.open(config.store_path, create=create, read_only=read_only, migrate=migrate)
    if config.store_type == "postgresql":
        from lms_refresh.store.postgres import PostgresStore

        return PostgresStore.open(config.store, environ, create=create, read_only=read_only, migrate=migrate)
    raise ConfigError(f"store type {config.store_type!r} is not supported")


def store_exists(config, environ):
    """Whether the store has been created: a migrated SQLite file (not an absent, empty or
    half-created one), or a database schema with our tables. Never creates or migrates."""
    if config.store_type == "sqlite":
        from lms_refresh.store.sqlite import SqliteStore

        return SqliteStore.present(config.store_path)
    store = open_store(config, environ, create=True, migrate=False)
    try:
        return store.schema_version() > 0
    finally:
        store.close()
