"""The publication: the only thing dashboards read.

On SQLite the serving rows are copied into their own database file after
each run's commit. The file holds the published rows and the parameters
they were computed with — no pseudonyms, staging, quarantine or key. It is
written under a temporary name in its directory, fsynced and renamed over
the previous one, in rollback-journal mode (not WAL), so that readers in
another account need nothing but read access to that one file.

The file records a digest of what it holds. A run that committed but died
before publishing leaves the previous file, whose digest then differs from
the store's rows, and the next run (even one with nothing to do) publishes
again. Identical rows give a byte-identical file.

On PostgreSQL the publication is the view in schema `<schema>_serving`,
committed with the run itself.
"""

import contextlib
import grp
import hashlib
import logging
import os
import sqlite3

from lms_refresh.errors import ConfigError, StateError, UnavailableError
from lms_refresh.store import open_store, store_exists
from lms_refresh.store.tables import SERVING_COLUMNS

logger = logging.getLogger(__name__)

_TABLE = """CREATE TABLE daily_metrics (
    day TEXT NOT NULL, course TEXT NOT NULL, active_learners INTEGER, statements INTEGER, attempts INTEGER,
    completions INTEGER, passed INTEGER, failed INTEGER, avg_scaled_score REAL, total_duration_seconds REAL,
    suppressed INTEGER NOT NULL, PRIMARY KEY (day, course))"""
_ABOUT = """CREATE TABLE publication (
    digest TEXT NOT NULL, min_cell_size INTEGER NOT NULL, method TEXT NOT NULL, max_noise INTEGER NOT NULL,
    variance REAL NOT NULL, withhold_zeros INTEGER NOT NULL)"""


def digest(rows, settings):
    """Return the digest of what a publication holds: its rows and the settings they were computed with."""
    text = repr((tuple(rows), settings))
    return hashlib.sha256(text.encode()).hexdigest()


def published_digest(path):
    """Return the digest recorded in the publication at `path`, or None if there is none readable."""
    if not os.path.exists(path):
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute("SELECT digest FROM publication").fetchone()[0]
    except (sqlite3.Error, TypeError):
        return None  # damaged or foreign: replaced by the next publication


def read_state(config, environ):
    """Return (serving rows, privacy settings) from the store, read-only."""
    store = open_store(config, environ, create=False, read_only=True)
    try:
        with store.errors():
            return store.serving_rows(), store.privacy_settings()
    finally:
        store.close()


def publish_if_behind(config, environ, euid):
    """Publish the store's serving rows unless the publication already holds them; return True if written."""
    if config.store.type != "sqlite" or not store_exists(config, environ):
        return False
    rows, settings = read_state(config, environ)
    wanted = digest(rows, settings)
    path = config.publication.path
    if published_digest(path) == wanted:
        return False
    write_publication(path, config.publication.group, rows, settings=settings, wanted=wanted, euid=euid)
    logger.info("Published %d rows to %s", len(rows), path, extra={"PUBLICATION": path, "PUBLISHED_ROWS": len(rows)})
    return True


def _group_id(name):
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(f"The group {name!r} named by publication.group does not exist; create it or fix the key.")


def write_publication(path, group, rows, *, settings, wanted, euid):
    """Write the publication under a temporary name, fsync it and rename it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    gid = _group_id(group) if group else None
    temporary = f"{path}.tmp-{os.getpid()}"
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise StateError(f"Cannot write the publication {path}: {directory} is not a directory; the store is "
                         "committed and the next run publishes it once publication.path names a file in a directory.")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        if os.stat(directory).st_uid == euid:
            # Others may traverse the directory only when no group is named; the file's mode says the rest.
            os.chmod(directory, 0o750 if gid is not None else 0o755)
            if gid is not None:
                os.chown(directory, -1, gid)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        _write_database(temporary, rows, settings, wanted=wanted)
        os.chmod(temporary, 0o640 if gid is not None else 0o644)
        if gid is not None:
            os.chown(temporary, -1, gid)
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a power loss
        finally:
            os.close(fd)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if error.errno in (28, 122):  # ENOSPC, EDQUOT
            raise UnavailableError(f"Cannot write the publication {path} ({error.strerror}); the store is "
                                   "committed and the next run publishes it once there is room.")
        raise StateError(
            f"Cannot write the publication {path} ({error.strerror}); the store is committed and the next run "
            f"publishes it — make {directory} writable by the service user (a ReadWritePaths= drop-in), and "
            "for publication.group make that user a member of the group (SupplementaryGroups=).")


def _write_database(path, rows, settings, *, wanted):
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode = DELETE")  # readers without write access cannot use WAL
        db.execute("BEGIN")
        db.execute(_TABLE)
        db.execute(_ABOUT)
        db.executemany(f"INSERT INTO daily_metrics ({', '.join(SERVING_COLUMNS)}) "
                       f"VALUES ({', '.join('?' for _ in SERVING_COLUMNS)})", rows)
        db.execute("INSERT INTO publication VALUES (?, ?, ?, ?, ?, ?)", (
            wanted, settings.min_cell_size, settings.method, settings.max_noise, float(settings.variance),
            int(settings.withhold_zeros)))
        db.execute("COMMIT")


def describe(config, environ):
    """Return a JSON-ready dict: where the publication is, when it was last published, whether it is current."""
    if config.store.type != "sqlite":
        schema = config.store.schema
        return {"location": f"view {schema}_serving.daily_metrics in the store", "published_at": None,
                "current": True}
    path = config.publication.path
    info = {"location": path, "published_at": None, "current": False}
    if os.path.exists(path):
        import datetime as dt

        info["published_at"] = dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.timezone.utc).isoformat(
            timespec="seconds")
        if store_exists(config, environ):
            rows, settings = read_state(config, environ)
            info["current"] = published_digest(path) == digest(rows, settings)
    return info


def retire_publication(path):
    """Remove the SQLite publication at `path`, once its store has moved to PostgreSQL (whose view is the
    publication from then on): left in place it would be stale and still readable by every dashboard
    account. Return "removed", "absent", or "kept" for a file there that is not a publication."""
    if not os.path.lexists(path):
        return "absent"
    if published_digest(path) is None:
        return "kept"  # not ours (or unreadable): never delete what the program did not write
    os.unlink(path)
    return "removed"
