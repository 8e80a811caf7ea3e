"""The embedded SQLite metrics store.

One refresh is one transaction: staging upserts, partition replacement, the
watermark and the run-log row commit together or not at all. WAL mode lets
dashboards keep reading the previous state while a refresh writes.
"""

import contextlib
import os
import sqlite3
import urllib.parse

from lms_refresh import atomic, faults
from lms_refresh.errors import StateError, UnavailableError
from lms_refresh.sources.records import DAY, EVENT_ID
from lms_refresh.state_directory import run_as_hint, user_name
from lms_refresh.store.base import SqlStore
from lms_refresh.store.sqlite_schema import MIGRATIONS, SCHEMA_VERSION, SQLITE
from lms_refresh.store.staging import StageAgain
from lms_refresh.store.tables import INDEXES

_EVENT_INSERT = "INSERT OR IGNORE INTO staged_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_BY_KEY = "SELECT * FROM staged_events WHERE day = ? AND course_id = ? AND actor = ? AND event_id = ?"
_CACHE, _SORT_CACHE = -65536, -2048  # KiB: the page cache of a run, and while it sorts much (sorting, below)
# SQLite sorts what outgrows the cache in runs of the cache's size, each sorted by a helper thread while the next
# is read (PRAGMA threads): a large sort takes the machine's second core, which a refresh leaves idle once staged.
# The benchmark's full 1M (2 cores): the index on ids built in 0.49-0.51 s instead of 0.70 s, a week's
# presence filled in 175-183 ms instead of 193 ms, a month's in 460-469 ms instead of 526 ms; the id index of 5M
# in 2.4-2.6 s instead of 3.3 s. Only a sort that spills starts the threads, and one that cannot be started (a
# seccomp filter) does its work in the caller's thread (SQLite's threads.c): slower, never a failure.
_SORT_THREADS = 2
# The unique index on statement ids, which a run into an empty store builds once, after staging.
_ID_INDEX = next(index for index in INDEXES if index.name == "staged_events_event_id")

# Errors that a later attempt may not meet again: the store is busy or the disk full.
_TRANSIENT = ("locked", "busy", "disk", "unable to open", "full")


# What a write that found the disk full leaves free there, at most: SQLite's write-ahead log keeps the frames it
# wrote, so the store's disk stays full after the failure (a temporary file of SQLite's is removed with it).
_ROOM = 1 << 20


def _elsewhere_with_room(store, temporary):
    """Whether the store's file system has more room than a write that found it full would leave, and is not
    the one of the `temporary` directory: then it was that one that was full."""
    try:
        info, directory = os.statvfs(os.path.dirname(os.path.abspath(store))), os.stat(temporary)
        return info.f_bavail * info.f_frsize >= _ROOM and os.stat(store).st_dev != directory.st_dev
    except OSError:
        return False  # unknown: the store's own sentence stands


def _temporary_directory():
    """The directory SQLite writes its temporary files in on Unix (sqlite3's unixTempFileDir): SQLITE_TMPDIR,
    TMPDIR, /var/tmp, /usr/tmp, /tmp, the first that is a writable directory; None if none is."""
    for candidate in (os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), "/var/tmp", "/usr/tmp", "/tmp"):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return None


def _read_only_file_system(path):
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path)) or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _has_wal(path):
    try:
        return os.path.getsize(path + "-wal") > 0
    except OSError:
        return False


def _damaged(path, error):
    return StateError(
        f"The store {path} cannot be used ({error}); it may be damaged — restore it from a backup, "
        "or move it aside and re-create its history with 'lms-refresh rebuild --since DATE'."
    )


def read_only_uri(path):
    """The URI that opens the SQLite file at `path` read-only (with `uri=True`): the path made absolute and
    percent-encoded, since "?", "#" and "%" in a file name would otherwise be read as the URI's own."""
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"


class SqliteStore(SqlStore):
    driver_error = sqlite3.DatabaseError  # what `errors` turns into the domain's
    dialect = SQLITE
    serving = SQLITE.serving
    serving_courses = SQLITE.serving_courses
    schema_target = SCHEMA_VERSION

    @property
    def path(self):
        return self.location

    @staticmethod
    def present(path):
        """Whether `path` holds a store: False when it is absent, empty, or a database with no tables
        (what an interrupted creation by an older lms-refresh left), True for anything else."""
        try:
            if os.path.getsize(path) == 0:
                return False
        except FileNotFoundError:
            return False
        try:
            db = sqlite3.connect(read_only_uri(path), uri=True)
            try:
                return db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] > 0
            finally:
                db.close()
        except sqlite3.DatabaseError:
            return True  # something is there; opening it says what is wrong with it

    @classmethod
    def open(cls, path, create, read_only=False, *, migrate=True, behind_ok=False):
        """Open (and unless told otherwise create and migrate) the store at `path`.

        With create=False a missing store is an empty in-memory one, so a dry
        run or a check never leaves a file behind. A new store is built under a
        temporary name and renamed into place once fully migrated.
        """
        exists = cls.present(path)
        if not exists and create and migrate and not read_only:
            cls._create(path)
            exists = True
        if not exists and not create:
            target = ":memory:"
        elif read_only:
            # On a read-only file system nobody can change the file, and SQLite cannot create the WAL's
            # index (-shm) that a reader otherwise needs: read it as immutable (unless a WAL is there to read).
            immutable = "&immutable=1" if _read_only_file_system(path) and not _has_wal(path) else ""
            target = read_only_uri(path) + immutable
        else:
            target = path
        try:
            db = sqlite3.connect(target, isolation_level=None, uri=read_only and exists, timeout=30)
        except sqlite3.OperationalError as error:
            raise UnavailableError(f"Cannot open the store {path}: {error}.") from error
        store = cls(db, path if target != ":memory:" else ":memory:")
        try:
            store._configure(wal=target != ":memory:" and not read_only)
            store.check_version(strict=read_only and exists, behind_ok=behind_ok)
            if migrate and not read_only:
                store.migrate()
        except sqlite3.DatabaseError as error:
            db.close()
            raise store.translate(error) from error
        return store

    def _configure(self, wal):
        self.db.execute("PRAGMA busy_timeout = 30000")
        # What forget and retention delete is overwritten, not left in free pages: Debian builds SQLite with this
        # on, upstream's default is off (a pip install elsewhere), and an erased learner's rows must not stay.
        self.db.execute("PRAGMA secure_delete = ON")
        if wal:
            self.db.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL stays consistent on power loss; at worst the last run is
            # undone along with its watermark, and the next run redoes it.
            self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute(f"PRAGMA cache_size = {_CACHE}")
        self.db.execute(f"PRAGMA threads = {_SORT_THREADS}")

    @classmethod
    def _create(cls, path):
        """Build a fully migrated store beside `path` and rename it into place (so a crash
        meanwhile leaves no half-built store under the store's name; see lms_refresh/atomic.py)."""
        with atomic.replacing(path, mode=0o640, what=f"the store {path}") as temporary:
            db = sqlite3.connect(temporary, isolation_level=None)
            store = cls(db, temporary)
            try:
                store._configure(wal=True)
                store.migrate()
                faults.point("store-created")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.DatabaseError as error:
                raise store.translate(error) from error
            finally:
                db.close()  # the last connection: SQLite folds the WAL into the file and removes it
            for stale in (path + "-wal", path + "-shm"):  # never replay an old file's log onto the new one
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(stale)

    def describe(self):
        return self.path

    def missing_views(self):
        """Return [the serving view] if it is not there (what the publication file is made from), else []."""
        there = self.db.execute("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = ?)",
                                (self.serving,)).fetchone()[0]
        return [] if there else [self.serving]

    def schema_version(self):
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return 0
        if "meta" not in tables:
            raise StateError(f"{self.path} is a SQLite database but not an lms-refresh store; check store.path.")
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or not row[0].isdigit():
            raise _damaged(self.path, "no schema version")
        return int(row[0])

    def migrate(self, target=SCHEMA_VERSION):
        """Apply the missing migrations up to `target`, each in its own transaction."""
        for number in range(self.schema_version() + 1, target + 1):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for statement in MIGRATIONS[number - 1]:
                    self.db.execute(statement)
                self.set_meta("schema_version", number)
                faults.point("migration-applied")
                self.db.execute("COMMIT")
            except BaseException:
                self.rollback_quietly()
                raise
            faults.point("migration-committed")

    def translate(self, error):
        """Return the domain error a driver error means (None if it is not the driver's):
        a full disk or a busy store is transient (69), a read-only file system is named,
        anything else is a damaged store (78)."""
        if not isinstance(error, sqlite3.DatabaseError):
            return None
        text = str(error)
        if isinstance(error, sqlite3.OperationalError) and "full" in text:
            temporary = _temporary_directory()
            if temporary is not None and _elsewhere_with_room(self.path, temporary):
                return UnavailableError(
                    f"SQLite's temporary files in {temporary} found that disk full ({error}) while the store "
                    f"{self.path} was written, though the store's own disk has room; free some space there, or point "
                    "SQLITE_TMPDIR (or TMPDIR) at a larger file system — nothing was committed.")
            return UnavailableError(f"The store {self.path} could not be written: the disk is full ({error}); "
                                    "free some space — nothing was committed.")
        if "readonly" in text or "read-only" in text or isinstance(error, sqlite3.OperationalError) and \
                "unable to open" in text:
            if _read_only_file_system(self.path):
                return StateError(f"The store {self.path} is on a read-only file system ({error}); remount it "
                                  "read-write (or point store.path at a writable place).")
            directory = os.path.dirname(os.path.abspath(self.path))
            if os.path.isdir(directory) and not os.access(directory, os.W_OK):  # a WAL reader writes -shm there
                owner = user_name(os.stat(directory).st_uid)
                return StateError(f"The store {self.path} cannot be opened by '{user_name(os.geteuid())}' ({error}): "
                                  f"even to read it, SQLite writes {os.path.basename(self.path)}-shm beside it, in "
                                  f"{directory}, which belongs to user '{owner}': {run_as_hint(owner)}.")
        if isinstance(error, sqlite3.OperationalError) and any(word in text for word in _TRANSIENT):
            return UnavailableError(f"The store {self.path} could not be written ({error}); nothing was committed.")
        return _damaged(self.path, error)

    def size_bytes(self):
        if self.path == ":memory:":
            return 0
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    # -- one run's transaction ------------------------------------------------

    def begin(self):
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self):
        self.db.execute("COMMIT")

    def rollback(self):
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        self.forget_transaction()
        self._bulk = False  # the index dropped by begin_staging is back

    def rollback_quietly(self):
        """Roll back on the way out of a failure; a failing ROLLBACK must not replace the failure."""
        with contextlib.suppress(sqlite3.Error):
            self.rollback()
        self.forget_transaction()

    def insert_events(self, events):
        """Insert the rows whose statement id is new; return how many were."""
        # As plain tuples: sqlite3 binds an Event's fields through the generic sequence protocol, at a
        # third more instructions per row than a copy to a tuple costs (a plain tuple is not copied).
        return self.db.executemany(_EVENT_INSERT, map(tuple, events)).rowcount

    # Staging into an empty store (a first run, a backfill of years, a rebuild from scratch) inserts without
    # the unique index on statement ids, and builds it once at the end, sorted. Kept up row by row, that
    # index of random ids outgrows the page cache past a few million statements, and every insert then
    # reads and writes back a page of it: the time per statement grew by half from 1M to 10M.
    # Without the index the staging key (day, course, learner, statement id) still refuses a statement
    # again under the same key (a re-delivery; a second version, quarantined). One id under two keys
    # fails the index's build: the run is staged again with the index in place (StageAgain).
    @contextlib.contextmanager
    def sorting(self):
        """SQLite sorts in memory runs as large as the page cache, on top of it: a smaller cache while a large
        sort runs (the index build below, a period's presence grouped: grains.py) keeps the run's peak RSS where
        staging left it (168 MiB at 1M statements with 64 MiB runs, for the index build), and its runs small
        enough to be sorted by helper threads (_SORT_THREADS)."""
        self.db.execute(f"PRAGMA cache_size = {_SORT_CACHE}")
        try:
            yield
        finally:
            self.db.execute(f"PRAGMA cache_size = {_CACHE}")

    def begin_staging(self):
        """Drop the unique index on statement ids if staging is empty (it is built by finish_staging)."""
        self._bulk = self.bulk_staging and not self.db.execute(
            "SELECT EXISTS (SELECT 1 FROM staged_events)").fetchone()[0]
        if self._bulk:
            self.db.execute(f"DROP INDEX {_ID_INDEX.name}")

    def staged_versions(self, events):
        """Return {event_id: staged row} for those of the `events`' ids that are staged."""
        if self._bulk:  # no index on ids yet: a row refused was refused by its staging key
            return {row[3]: row for event in events for row in self.db.execute(_BY_KEY, event[DAY:EVENT_ID + 1])}
        ids, found = list({event[EVENT_ID] for event in events}), {}
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            found.update((row[3], row) for row in self.db.execute(
                f"SELECT * FROM staged_events WHERE event_id IN ({', '.join('?' * len(part))})", part))
        return found

    def finish_staging(self):
        """Build the index on statement ids if begin_staging dropped it (StageAgain if an id is staged under two
        keys), then delete the targets of this run's voiding statements; return the days they were in."""
        if self._bulk:
            self._bulk = False
            try:
                with self.sorting():
                    self.db.execute(self.dialect.create_index(_ID_INDEX))
            except sqlite3.IntegrityError as error:
                self.bulk_staging = False
                raise StageAgain(f"a statement id came under two staging keys ({error})") from error
        if not self._void_targets:
            return set()
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS void_targets (event_id BLOB PRIMARY KEY)")
        self.db.execute("DELETE FROM temp.void_targets")
        self.db.executemany("INSERT OR IGNORE INTO temp.void_targets VALUES (?)", [(t,) for t in self._void_targets])
        # One scan of staging for all of a run's voids, instead of an index on every event.
        days = {r[0] for r in self.db.execute(
            "DELETE FROM staged_events WHERE event_id IN (SELECT event_id FROM temp.void_targets) RETURNING day")}
        self._void_targets.clear()
        return days
