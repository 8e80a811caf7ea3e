"""Metrics stores, behind one interface (`base.SqlStore` and the driver methods each store adds).

The store is described once (`tables`) and written per dialect (`dialect`, `sqlite_schema` for SQLite,
`postgres_schema` for PostgreSQL); `sqlite` and `postgres` are the drivers.
"""

from lms_refresh.errors import ConfigError


def load_driver(config):
    """Import the store's driver now: a SIGTERM during a slow import inside the run would be
    reported by the driver as an import failure instead of a clean stop."""
    if config.store.type == "postgresql":
        import lms_refresh.store.postgres  # noqa: F401 (unused: imported now for the reason above)


def open_store(config, environ, create, *, read_only=False, migrate=True, behind_ok=False):
    """Given a Config, return an opened store; `create=False` never creates one. A read-only store of an earlier
    schema version is refused unless `behind_ok` (then its `behind` says so: see base.SqlStore.check_version)."""
    if config.store.type == "sqlite":
        from lms_refresh.store.sqlite import SqliteStore

        return SqliteStore.open(config.store.path, create=create, read_only=read_only, migrate=migrate,
                                behind_ok=behind_ok)
    if config.store.type == "postgresql":
        from lms_refresh.store.postgres import PostgresStore

        return PostgresStore.open(config.store, environ, create=create, read_only=read_only, migrate=migrate,
                                  behind_ok=behind_ok)
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
