"""Metrics stores, behind one interface (see `sqlite.SqliteStore` for the contract)."""

from lms_refresh.errors import ConfigError

SERVING_VIEW = "serving_daily_metrics"
SERVING_COLUMNS = (
    "day", "course", "active_learners", "statements", "attempts", "completions",
    "passed", "failed", "avg_scaled_score", "total_duration_seconds", "suppressed",
)


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
    """Whether the store has been created (for a database: whether it answers and has our schema)."""
    if config.store_type == "sqlite":
        import os

        return os.path.exists(config.store_path)
    store = open_store(config, environ, create=True, read_only=True)
    try:
        return store.schema_version() > 0
    finally:
        store.close()
