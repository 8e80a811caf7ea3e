"""`copy-store --from-sqlite PATH`: carry a SQLite store's whole history into an empty PostgreSQL store.

A site that outgrows one host switches `[store]` to PostgreSQL. A first run
there would start over from `bootstrap_days`; this command instead copies
every table the store is described by (`store.tables.TABLES`: staged and
voided events, metrics, published rows, privacy settings, names, run log,
quarantine, source state, and meta with the watermark and the identity) in
one PostgreSQL transaction, under the run's flock and the store's advisory
lock, so the next run continues where the SQLite store stood. It refuses a
target that already holds anything. After the commit the old SQLite
publication (the file dashboards read) is removed — stale from then on, it
must not stay readable (`run.publication.retire_publication`) — and the
old store file is left as it was, for the operator to remove.
"""

import dataclasses
import logging
import os

from lms_refresh import faults
from lms_refresh.disclosure.pseudonyms import fingerprint, read_key
from lms_refresh.errors import ConfigError, StateError
from lms_refresh.run import identity, report_page, stopping
from lms_refresh.run.lock import LockHeld, RunLock, lock_held, locked_store, run_lock
from lms_refresh.run.publication import retire_publication
from lms_refresh.state_directory import LOCK_NAME
from lms_refresh.store import load_driver
from lms_refresh.store.tables import SERIAL, TABLES

logger = logging.getLogger(__name__)

BATCH_ROWS = 5000  # rows held at once: memory stays bounded whatever the store's size
# Tables whose rows make a store non-empty (meta and privacy settings are written by creating one).
CONTENT = ("staged_events", "voided_events", "daily_metrics", "published_metrics", "runs", "quarantine",
           "source_state", "courses", "verbs", "pending_days")


@dataclasses.dataclass
class CopyReport:
    """What was copied ({table: rows}), the watermark carried over, and what became of the old publication."""

    rows: dict
    watermark: str = None
    publication: str = ""  # "removed", "absent" or "kept" (not a publication)


def copy_from_sqlite(config, path, *, environ, euid):
    """Copy the SQLite store at `path` into the configured PostgreSQL store; return a CopyReport.

    Raises ConfigError (78) for a configuration that is not PostgreSQL or a path that holds no
    store, StateError (78) for a non-empty target, another key or other settings than the
    store's, UnavailableError (69) while a run holds a lock.
    """
    if config.store.type != "postgresql":
        raise ConfigError(f"copy-store copies into the PostgreSQL store of the configuration, but {config.origin} "
                          "has store.type = \"sqlite\"; set [store] type = \"postgresql\" and its url first.")
    from lms_refresh.store.sqlite import SqliteStore

    if not SqliteStore.present(path):
        raise ConfigError(f"{path} holds no lms-refresh store; give the SQLite store file (by default "
                          "<state directory>/metrics.sqlite) to --from-sqlite.")
    load_driver(config)
    try:
        with run_lock(config, euid), _old_store_lock(config, path), stopping.installed() as stop, \
                stop.during(STOPPED), locked_store(config, environ, create=True) as target:
            source = SqliteStore.open(path, create=False)  # an older store is upgraded, as its next run would
            try:
                with source.errors():
                    report = _copy(source, target, config, stop=stop)
            finally:
                source.close()
            identity.remember_store(config, read_key(config.key_file))
    except LockHeld as held:
        raise lock_held(held.holder, "nothing was copied", "copy-store") from None
    report.publication = retire_publication(config.publication.path)
    report_page.retire(config.report.path)
    logger.info("Copied the SQLite store %s into %s: %s; the old publication %s was %s.", path,
                   config.store_location, ", ".join(f"{n} {t}" for t, n in report.rows.items()),
                   config.publication.path, report.publication)
    return report


def _old_store_lock(config, path):
    """The flock of the old store's state directory too, if it has its own (another run could be using it)."""
    lock = os.path.join(os.path.dirname(os.path.abspath(path)), LOCK_NAME)
    ours = os.path.join(config.state_directory, LOCK_NAME)
    if os.path.exists(lock) and os.path.realpath(lock) != os.path.realpath(ours):
        return RunLock(lock)
    return _Nothing()


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _refuse(source, target, config, *, key):
    """Refuse a copy whose result the next run would refuse, or that would overwrite history."""
    found = {name: count for name in CONTENT
             if (count := target.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0])}
    if found or target.meta().get("watermark"):
        held = ", ".join(f"{count} rows in {name}" for name, count in found.items()) or "a watermark"
        raise StateError(
            f"The PostgreSQL store {target.describe()} is not empty ({held}); copy-store fills only an empty store. "
            f"If its rows are only what runs made since the switch, drop its schemas ({config.store.schema} and "
            f"{config.store.schema}_serving) and copy again: the next run re-reads from the copied watermark.")
    if source.schema_version() != target.schema_version():
        raise StateError(f"The SQLite store has schema version {source.schema_version()} and the PostgreSQL store "
                         f"{target.schema_version()}; run both with the same lms-refresh.")
    meta = source.meta()
    recorded = meta.get("key_fingerprint")
    if recorded is not None and (key is None or fingerprint(key) != recorded):
        raise StateError(f"The pseudonymisation key {config.key_file} is not the key the store {source.describe()} "
                         "was built with; copy that key here first (every host sharing a store needs the same one).")
    identity.verify_identity(config, meta, source.has_events())  # the next run would refuse it: say so now
    return meta


# Before the commit a stop rolls the copy back; after it, the copy stands and the command goes on to retire the
# old publication, as it would have (run/stopping.py).
STOPPED = "Stopped by SIGTERM before the copy was committed; nothing was copied."


def _copy(source, target, config, *, stop):
    meta = _refuse(source, target, config, key=read_key(config.key_file))
    rows = {}
    target.begin()
    try:
        for table in TABLES:
            if table.name == "meta":
                for key, value in meta.items():
                    if key != "schema_version":  # the target's own
                        target.set_meta(key, value)
                continue
            if table.name == "privacy_settings":
                target.execute("DELETE FROM privacy_settings")
            columns = [column.name for column in table.columns if column.type != SERIAL]  # renumbered in order
            order = " ORDER BY rowid" if table.logged else " ORDER BY id" if table.name == "quarantine" else ""
            cursor = source.execute(f"SELECT {', '.join(columns)} FROM {table.name}{order}")
            insert = f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
            count = 0
            while batch := cursor.fetchmany(BATCH_ROWS):
                target.executemany(insert, batch)
                count += len(batch)
            rows[table.name] = count
        faults.point("before-commit")
        with stop.commit():
            target.commit()
        faults.point("after-commit")
    except BaseException:
        target.rollback_quietly()
        raise
    return CopyReport(rows, meta.get("watermark"))
