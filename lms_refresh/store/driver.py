"""What each store driver (`sqlite.SqliteStore`, `postgres.PostgresStore`) adds to `base.SqlStore`:
the declared contract between the SQL written once and the database it runs on.

`base.SqlStore` calls these and nothing else of a driver; tests/store/test_every_store_alike.py checks that
both drivers define every method with the signature declared here.
"""

import typing


class Driver(typing.Protocol):
    """A database connection that `base.SqlStore` can keep a metrics store in."""

    dialect: typing.ClassVar[object]  # a dialect.Dialect: the store's description written as its SQL
    schema_target: typing.ClassVar[int]  # the schema version this code writes

    def describe(self) -> str:
        """The store as messages name it (a path, or a URL without its password)."""

    def schema_version(self) -> int:
        """The store's schema version; 0 for an empty database."""

    def migrate(self, target: int = ...) -> None:
        """Apply the missing migrations up to `target`, each in its own transaction."""

    def translate(self, error: Exception) -> Exception | None:
        """The domain error (errors.RefreshError) a driver error means, or None if it is not the driver's."""

    def size_bytes(self) -> int:
        """The space the store takes, for the run's report."""

    def begin(self) -> None:
        """Start the run's one transaction."""

    def commit(self) -> None:
        """Commit it."""

    def rollback(self) -> None:
        """Roll it back, forgetting what the transaction staged."""

    def rollback_quietly(self) -> None:
        """Roll back on the way out of a failure: a failing ROLLBACK must not replace the failure."""

    def insert_events(self, events: typing.Iterable) -> int:
        """Insert the staged rows whose statement id is new; return how many were."""

    def begin_staging(self) -> None:
        """Get ready to stage the run's batches (each store its own way: SQLite, into an empty store, without
        the index on statement ids)."""

    def staged_versions(self, events: typing.Sequence) -> dict:
        """{event_id: staged row} for those of the `events`' statement ids that are staged."""

    def finish_staging(self) -> set:
        """End the run's staging: delete the targets of its voiding statements; return the local days they were in.
        SQLite may raise staging.StageAgain (see begin_staging)."""

    def acquire_run_lock(self) -> object | None:
        """Take the store's own run lock; None once taken, else who holds it."""
