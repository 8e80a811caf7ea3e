"""Metrics stores, behind one interface (see `sqlite.SqliteStore` for the contract)."""

from lms_refresh.errors import ConfigError

SERVING_VIEW = "serving_daily_metrics"
SERVING_COLUMNS = (
    "day", "course", "active_learners", "statements", "attempts", "completions",
    "passed", "failed", "avg_scaled_score", "total_duration_seconds", "suppressed",
)


def open_store(config, create, read_only=False):
    """Given a Config, return an opened store; `create=False` never creates a file."""
    if config.store_type == "sqlite":
        from lms_refresh.store.sqlite import SqliteStore

        return SqliteStore.open(config.store_path, create=create, read_only=read_only)
    raise ConfigError(f"store type {config.store_type!r} is not supported")
