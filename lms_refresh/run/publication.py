"""The publication: the only thing dashboards read, and the published rows it copies.

`recompute` rebuilds days in the store and has lms_refresh.disclosure.policy
decide what is published of the cells they touch: the store aggregates and
keeps the rows it is given, disclosure decides, and this layer joins them.

On SQLite the serving rows are copied into their own database file after
each run's commit. The file holds the published rows and the parameters
they were computed with — no pseudonyms, staging, quarantine or key. It is
replaced atomically (lms_refresh/atomic.py), in rollback-journal mode (not
WAL), so that readers in another account need nothing but read access to
that one file.

Beside `daily_metrics`, table `courses` names the courses that have rows
there (store/course_names.py; its text was made safe by disclosure/names.py).

The file is written whole, by SQLite itself: the store's connection attaches
the new file and fills each table from its serving view with one INSERT ...
SELECT, no row passing through Python (the cost: docs/development.md, bench/publication_bench.py).

The file records a digest of what it holds (`store_digest`: its rows table by table in order, and the settings). A
run that committed but died before publishing leaves the previous file, whose digest then differs from the store's,
and the next run (even one with nothing to do) publishes again. Identical rows give a byte-identical file.

On PostgreSQL the publication is the view in schema `<schema>_serving`,
committed with the run itself.
"""

import contextlib
import errno
import hashlib
import logging
import marshal
import os
import sqlite3
import stat

from lms_refresh import atomic
from lms_refresh.disclosure import policy
from lms_refresh.disclosure.names import iri_label
from lms_refresh.errors import RefreshError, StateError, UnexpectedError, from_os_error
from lms_refresh.run import enrolment, period_publication, report_page
from lms_refresh.run.publication_group import group_id
from lms_refresh.store import open_store, periods, store_exists
from lms_refresh.store.sqlite import read_only_uri
from lms_refresh.store.sqlite_schema import SCHEMA_VERSION
from lms_refresh.store.tables import (
    BY_NAME,
    CATEGORY_COLUMNS,
    CATEGORY_PERIOD_SERVING_COLUMNS,
    CATEGORY_SERVING_COLUMNS,
    CATEGORY_TABLES,
    COURSE_COLUMNS,
    FRESHNESS_COLUMNS,
    PERIOD_SERVING_COLUMNS,
    SERVING_COLUMNS,
    SITE_PERIOD_SERVING_COLUMNS,
    SITE_SERVING_COLUMNS,
    SITE_TABLES,
    by_name_view,
)

logger = logging.getLogger(__name__)

# What a failure to publish means: it happens after the commit.
COMMITTED = "the store is committed, and the next run publishes it."

# The metric columns every row table has (the day's, each period's), after what names the row. `{schema}` is the
# file's schema name on the connection that writes it ("main", or the name it is attached under).
_METRICS = """active_learners INTEGER, statements INTEGER, attempts INTEGER, completions INTEGER,
    passed INTEGER, failed INTEGER, avg_scaled_score REAL, total_duration_seconds REAL, suppressed INTEGER NOT NULL"""
# Last, as in the store's views (store.tables.PERIOD_SERVING_COLUMNS).
_LEARNER_OUTCOMES = """completed_learners INTEGER, passed_learners INTEGER, failed_learners INTEGER,
    completed_share REAL, pass_rate REAL"""
_OUTCOMES = f"{_LEARNER_OUTCOMES}, enrolled_learners INTEGER, active_share REAL"  # a category has no enrolments
# A course table's rows are courses only, each declared a row of `courses` (a foreign key a dashboard's tool follows;
# SQLite checks it only where a writer turns foreign_keys on), under its natural key; the whole site's rows are in
# the site tables, one row per day or period, so that a SUM over a course table is a sum of courses.
_COURSE = "course TEXT NOT NULL REFERENCES courses (course)"
# Stored in key order (WITHOUT ROWID), as they are copied: the key costs no index of its own, nor a second copy of
# each key's text.
_TABLE = (f"CREATE TABLE {{schema}}.daily_metrics (day TEXT NOT NULL, {_COURSE}, {_METRICS}, {_OUTCOMES}, "
          "PRIMARY KEY (day, course)) WITHOUT ROWID")
_PERIOD_TABLE = (f"CREATE TABLE {{schema}}.{{table}} (period TEXT NOT NULL, period_start TEXT NOT NULL, "
                 f"period_end TEXT NOT NULL, {_COURSE}, {_METRICS}, complete INTEGER NOT NULL, {_OUTCOMES}, "
                 "PRIMARY KEY (period, course)) WITHOUT ROWID")
_SITE_TABLE = (f"CREATE TABLE {{schema}}.site_daily_metrics (day TEXT NOT NULL PRIMARY KEY, {_METRICS}, "
               f"{_OUTCOMES}) WITHOUT ROWID")
_SITE_PERIOD_TABLE = (f"CREATE TABLE {{schema}}.{{table}} (period TEXT NOT NULL PRIMARY KEY, "
                      f"period_start TEXT NOT NULL, period_end TEXT NOT NULL, {_METRICS}, complete INTEGER NOT NULL, "
                      f"{_OUTCOMES}) WITHOUT ROWID")
_COURSES = """CREATE TABLE {schema}.courses (
    course TEXT NOT NULL PRIMARY KEY, name TEXT, short_name TEXT, category TEXT, start_date TEXT, end_date TEXT,
    course_name TEXT NOT NULL)"""
# The categories' tables (store/categories.py): named by their id, as the course tables by the course.
_CATEGORIES = """CREATE TABLE {schema}.categories (
    category_id INTEGER NOT NULL PRIMARY KEY, name TEXT, parent INTEGER, path TEXT NOT NULL, depth INTEGER NOT NULL)"""
_CATEGORY = "category_id INTEGER NOT NULL REFERENCES categories (category_id), category_name TEXT NOT NULL"
_CATEGORY_TABLE = (f"CREATE TABLE {{schema}}.category_daily_metrics (day TEXT NOT NULL, {_CATEGORY}, {_METRICS}, "
                   f"{_LEARNER_OUTCOMES}, PRIMARY KEY (day, category_id)) WITHOUT ROWID")
_CATEGORY_PERIOD_TABLE = (f"CREATE TABLE {{schema}}.{{table}} (period TEXT NOT NULL, period_start TEXT NOT NULL, "
                          f"period_end TEXT NOT NULL, {_CATEGORY}, {_METRICS}, complete INTEGER NOT NULL, "
                          f"{_LEARNER_OUTCOMES}, PRIMARY KEY (period, category_id)) WITHOUT ROWID")
_FRESHNESS = """CREATE TABLE {schema}.freshness (
    published_at TEXT, data_as_of TEXT, data_as_of_utc TEXT, last_success TEXT, timezone TEXT,
    schema_version INTEGER NOT NULL, min_cell_size INTEGER NOT NULL, method TEXT NOT NULL,
    max_noise INTEGER NOT NULL)"""
_BY_NAME = "CREATE VIEW {schema}.{view} AS{select}"
_ABOUT = """CREATE TABLE {schema}.publication (
    digest TEXT NOT NULL, min_cell_size INTEGER NOT NULL, method TEXT NOT NULL, max_noise INTEGER NOT NULL,
    variance REAL NOT NULL, withhold_zeros INTEGER NOT NULL)"""
_ATTACHED = "published"  # the new file's schema name on the store's connection while it is copied

# The file's row tables, in the order they are written and digested: (table, columns, order of its rows). The
# courses come first, as the metrics tables' rows refer to them.
_TABLES = (
    ("courses", COURSE_COLUMNS, "course"),
    ("daily_metrics", SERVING_COLUMNS, "day, course"),
    *((periods.TABLE_OF[grain], PERIOD_SERVING_COLUMNS, "period_start, period, course") for grain in periods.GRAINS),
    (SITE_TABLES["day"], SITE_SERVING_COLUMNS, "day"),
    *((SITE_TABLES[grain], SITE_PERIOD_SERVING_COLUMNS, "period_start, period") for grain in periods.GRAINS),
    ("categories", CATEGORY_COLUMNS, "category_id"),
    (CATEGORY_TABLES["day"], CATEGORY_SERVING_COLUMNS, "day, category_id"),
    *((CATEGORY_TABLES[grain], CATEGORY_PERIOD_SERVING_COLUMNS, "period_start, period, category_id")
      for grain in periods.GRAINS),
    ("freshness", FRESHNESS_COLUMNS, "schema_version"),
)
_DIGESTED = {"freshness": FRESHNESS_COLUMNS[1:]}  # published_at changes with every commit, not with what is shown
_ROW_TABLES = ("daily_metrics", *periods.TABLE_OF.values(), *SITE_TABLES.values())  # counted in the log line


def _view_of(store, table):
    """The store's serving view whose rows the publication's `table` holds."""
    if table == "daily_metrics":
        return store.serving
    if table == "courses":
        return store.serving_courses
    return store.serving_period_view(table)  # weekly_metrics ... category_term_metrics, freshness: serving_<table>


def store_digest(store, settings):
    """Return the digest of what a publication of the open SQLite `store` holds: `settings` (what its rows were
    computed with), then each of `_TABLES`' rows as its serving view has them, in order, by blocks of a fixed
    size, marshalled (every value as it is, a REAL to its last bit; format 2, which has no references, so the
    bytes do not depend on which objects Python happens to share). A renamed course publishes again."""
    digest = hashlib.sha256(repr(settings).encode())
    with store.errors():
        for table, columns, order in _TABLES:
            columns = _DIGESTED.get(table, columns)
            rows = store.execute(f"SELECT {', '.join(columns)} FROM {_view_of(store, table)} ORDER BY {order}")
            digest.update(f"\x1e{table}".encode())
            while batch := rows.fetchmany(4096):
                digest.update(marshal.dumps(batch, 2))
    return digest.hexdigest()


def published_digest(path):
    """Return the digest recorded in the publication at `path`, or None if there is none readable."""
    if not os.path.exists(path):
        return None
    try:
        with contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True)) as db:
            return db.execute("SELECT digest FROM publication").fetchone()[0]
    except (sqlite3.Error, TypeError):
        return None  # damaged or foreign: replaced by the next publication


def recompute(store, days, *, record_keys, config, now, periods_of=(), enrolments=None):
    """Rebuild the partitions of `days` in `store` from their staged events, and their weeks, months and terms
    (`config`'s), count their enrolled learners with the source's `enrolments` (None: it reads none; see
    run/enrolment.py), and publish again the courses they touch (all of them after a settings change) as the
    settings in force allow (a period is complete once `now` is past its end plus `config`'s safety lag); return
    (rows written, suppressed cells among the published rows of the days rebuilt)."""
    store.label_courses(iri_label)  # the courses this run met, and every course of a store upgraded to schema 10
    done = store.recompute(days, record_keys=record_keys, calendar=period_publication.calendar(config),
                           periods_of=periods_of)
    for name in done.uncounted_terms:
        logger.warning("The term %r is not counted: it begins before the oldest day whose learners the store still "
                       "keeps (retention.staging_days), so its distinct learners cannot be counted whole; give it a "
                       "first day the store keeps, or leave it as it was.", name, extra={"TERM": name})
    changed, counted = enrolment.count(store, enrolments, done.days, done.period_labels, done.calendar,
                                       timezone=config.timezone, cutoff=period_publication.cutoff(config, now))
    settings = policy.in_force(store)
    # Only what the rebuilt days and the enrolled cells counted change (disclosure.policy.republish), unless the
    # settings or the terms changed.
    policy.publish(store, done.courses | changed.get("day", set()), settings,
                   days=None if "day" in done.whole else set(done.days) | counted.get("day", set()))
    period_courses = {grain: set(done.period_courses.get(grain, ())) | changed.get(grain, set())
                      for grain in periods.GRAINS}
    rebuilt = {grain: set(done.period_labels.get(grain, ())) | counted.get(grain, set()) for grain in periods.GRAINS}
    period_publication.publish(store, period_courses, settings, config=config, now=now,
                               rebuilt=rebuilt, whole=done.whole, counted=done.calendar)
    # The categories' rows, by the same rules as a course's (store/categories.py counts their cells); categories
    # have no enrolled learners (the source's enrolments are a course's).
    categories = store.category_cells()
    policy.publish(categories, done.categories["day"], settings, days=None if "day" in done.whole else done.days)
    period_publication.publish(categories, {grain: done.categories.get(grain, ()) for grain in periods.GRAINS},
                               settings, config=config, now=now, rebuilt=done.period_labels, whole=done.whole,
                               counted=done.calendar)
    return done.rows_written, store.suppressed_on(done.days)


def read_digest(config, environ):
    """Return the store's `store_digest`, read-only."""
    store = open_store(config, environ, create=False, read_only=True)
    try:
        with store.errors():
            settings = policy.in_force(store)
        return store_digest(store, settings)
    finally:
        store.close()


def publish_if_behind(config, store, euid):
    """Publish the open `store`'s serving rows unless the publication already holds them, with the file
    mode and group `publication.group` asks for (a changed group applies at the next run); return True
    if written. Runs after the commit: every failure is a RefreshError whose sentence says so."""
    if config.store.type != "sqlite":
        retire_sqlite_publication(config)
        return False
    try:
        return _publish(config, store, euid)
    except RefreshError:
        raise
    except Exception as error:  # any failure: after the commit, whatever failed is named as such
        raise UnexpectedError(f"Unexpected failure while publishing ({type(error).__name__}: {error}); "
                              f"{COMMITTED}") from error


def _publish(config, store, euid):
    path, group = config.publication.path, config.publication.group
    gid = group_id(group, COMMITTED) if group else None
    with store.errors():
        settings = policy.in_force(store, missing_ok=True)
    if settings is None:  # no run stored any yet (the first failed): nothing was ever published, nothing is behind
        return False
    wanted = store_digest(store, settings)
    if published_digest(path) == wanted and _has_permissions(path, _mode(gid), gid):
        return False
    counts = {}
    _replace(path, gid, euid, lambda temporary: counts.update(_copy(store, temporary, settings, wanted)))
    days = counts.pop("daily_metrics") + counts.pop(SITE_TABLES["day"])
    periods_ = sum(counts[table] for table in _ROW_TABLES if table in counts)
    logger.info("Published %d rows to %s (and %d rows of weeks, months and terms)", days, path, periods_,
                extra={"PUBLICATION": path, "PUBLISHED_ROWS": days, "PUBLISHED_PERIOD_ROWS": periods_})
    return True


def retire_sqlite_publication(config):
    """On a PostgreSQL store, remove the SQLite publication a SQLite store left behind (switched without
    copy-store, which removes it itself), and the HTML report beside it: nothing writes them any more, and
    dashboards reading them (every account may) would see stale numbers. Only what this program wrote goes."""
    path = config.publication.path
    report_page.retire(config.report.path)
    try:
        outcome = retire_publication(path)
    except OSError as error:
        logger.warning("The SQLite publication %s is no longer written since the store is PostgreSQL, and could not "
                       "be removed (%s); remove it, dashboards read the store's serving view now.", path, error)
        return
    if outcome == "removed":
        logger.warning("Removed the SQLite publication %s: the store is PostgreSQL now and dashboards read its "
                       "serving view; the file would only have gone stale.", path, extra={"PUBLICATION": path})


def _mode(gid):
    return 0o640 if gid is not None else 0o644


def _has_permissions(path, mode, gid):
    try:
        info = os.stat(path)
    except OSError:
        return False
    return stat.S_IMODE(info.st_mode) == mode and (gid is None or info.st_gid == atomic.seen_gid(gid))


def write_publication(path, gid, rows, *, settings, wanted, euid, courses=()):
    """Replace the publication at `path` by one of `rows` (the days', {table: rows} of the other grains) and
    `courses` (the course names), readable by group `gid` (None: every account): a publication made without a
    store, as the report's tests and benchmark make one. A run copies its store's instead (`_copy`)."""
    _replace(path, gid, euid, lambda temporary: _write_rows(temporary, rows, settings, wanted=wanted,
                                                             courses=courses))


def _replace(path, gid, euid, fill):
    """Replace the publication at `path` (see lms_refresh/atomic.py) by the file `fill(temporary path)` writes,
    readable by group `gid` (a group id, or None for every account)."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise StateError(f"Cannot write the publication {path}: {directory} is not a directory; the store is "
                         "committed and the next run publishes it once publication.path names a file in a directory.")
    what = f"the publication {path}"
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        info = os.stat(directory)
        if gid is None and info.st_uid == euid and stat.S_IMODE(info.st_mode) != 0o755:
            # Every account reads the publication when no group is named: a directory a group narrowed (its
            # setgid bit too) is opened again. A named group's directory is the administrator's (require_group).
            os.chmod(directory, 0o755)
        group = None if gid is None else atomic.seen_gid(gid)
        with atomic.replacing(path, mode=_mode(gid), group=group, what=what, outcome=COMMITTED) as temporary:
            try:
                fill(temporary)
            except sqlite3.Error as error:
                failure = _as_os_error(error, temporary)
                if failure is None:
                    raise  # a bug of ours, not the disk's: publish_if_behind names it unexpected, with its traceback
                raise failure from error
    except OSError as error:
        domain = from_os_error(error, what, COMMITTED)
        if domain is not None:
            raise domain from error
        raise StateError(
            f"Cannot write the publication {path} ({error.strerror}); the store is committed and the next run "
            f"publishes it — make {directory} writable by the service user (a ReadWritePaths= drop-in).") from error


# SQLite's primary result codes that say the file or the device under it failed, not the statement. Any other
# (SQLITE_ERROR: a statement SQLite refused; a constraint; a misuse; a ProgrammingError, which has no code) is a bug
# of ours, and telling it as a failed disk would send the operator to the kernel's log for nothing.
_DISK_CODES = (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY,
               sqlite3.SQLITE_PERM)


def _as_os_error(error, path):
    """The OSError a SQLite error writing the publication stands for (SQLite names no errno), or None if it
    stands for none: it is no failure of the file, the file system or the device."""
    code = getattr(error, "sqlite_errorcode", None)  # the extended code (SQLITE_IOERR_WRITE...): its low byte
    if not isinstance(error, sqlite3.OperationalError) or code is None or code & 0xFF not in _DISK_CODES:
        return None
    if code & 0xFF == sqlite3.SQLITE_FULL:
        return OSError(errno.ENOSPC, f"{error}", path)
    read_only = bool(os.statvfs(os.path.dirname(path)).f_flag & os.ST_RDONLY)
    if read_only:
        return OSError(errno.EROFS, f"{error}", path)
    return OSError(errno.EIO if code & 0xFF == sqlite3.SQLITE_IOERR else errno.EACCES, f"{error}", path)


def _create(execute, schema):
    """Create the publication's tables and views in the (empty) file that is `schema` on `execute`'s connection."""
    execute(_COURSES.format(schema=schema))
    execute(_TABLE.format(schema=schema))
    execute(_SITE_TABLE.format(schema=schema))
    for grain in periods.GRAINS:
        execute(_PERIOD_TABLE.format(schema=schema, table=periods.TABLE_OF[grain]))
        execute(_SITE_PERIOD_TABLE.format(schema=schema, table=SITE_TABLES[grain]))
    execute(_CATEGORIES.format(schema=schema))
    execute(_CATEGORY_TABLE.format(schema=schema))
    for grain in periods.GRAINS:
        execute(_CATEGORY_PERIOD_TABLE.format(schema=schema, table=CATEGORY_TABLES[grain]))
    execute(_FRESHNESS.format(schema=schema))
    for table, view in BY_NAME.items():  # a view names the tables of its own file without a schema
        execute(_BY_NAME.format(schema=schema, view=view, select=by_name_view(table, "courses", table)))
    execute(_ABOUT.format(schema=schema))


def _finish(execute, schema, settings, wanted):
    """Record `wanted` and the settings in the filled file that is `schema`."""
    execute(f"INSERT INTO {schema}.publication VALUES (?, ?, ?, ?, ?, ?)", (
        wanted, settings.min_cell_size, settings.method, settings.max_noise, float(settings.variance),
        int(settings.withhold_zeros)))


def _copy(store, path, settings, wanted):
    """Fill the new publication file at `path` from the open SQLite `store`'s serving views, table by table in
    one INSERT ... SELECT each, in one transaction of the file's; return {table: rows copied}. The run holds
    its lock, so the views hold what `wanted` (their digest) was computed from."""
    copied = {}
    store.execute(f"ATTACH DATABASE ? AS {_ATTACHED}", (path,))
    try:
        store.execute(f"PRAGMA {_ATTACHED}.journal_mode = DELETE")  # readers without write access cannot use WAL
        store.execute("BEGIN")
        _create(store.execute, _ATTACHED)
        for table, columns, order in _TABLES:
            names = ", ".join(columns)
            copied[table] = store.execute(f"INSERT INTO {_ATTACHED}.{table} ({names}) SELECT {names} "
                                          f"FROM {_view_of(store, table)} ORDER BY {order}").rowcount
        _finish(store.execute, _ATTACHED, settings, wanted)
        store.execute("COMMIT")
    finally:
        with contextlib.suppress(sqlite3.Error):  # after the COMMIT there is nothing to roll back
            store.execute("ROLLBACK")
        with contextlib.suppress(sqlite3.Error):  # a failure to detach must not hide the one that led here
            store.execute(f"DETACH DATABASE {_ATTACHED}")
    for table in ("courses", "freshness", "categories", *CATEGORY_TABLES.values()):
        copied.pop(table)
    return copied


def _write_rows(path, rows, settings, *, wanted, courses):
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode = DELETE")  # readers without write access cannot use WAL
        db.execute("BEGIN")
        _create(db.execute, "main")
        given = {"courses": [(*course, course[1] or iri_label(course[0])) for course in courses],
                 **_apart("day", "daily_metrics", rows[0], 1)}
        for grain in periods.GRAINS:
            given.update(_apart(grain, periods.TABLE_OF[grain], rows[1].get(periods.TABLE_OF[grain], ()), 3))
        given["freshness"] = [(None, None, None, None, None, SCHEMA_VERSION, settings.min_cell_size, settings.method,
                               settings.max_noise)]
        for table, columns, _ in _TABLES:
            db.executemany(f"INSERT INTO {table} ({', '.join(columns)}) "
                           f"VALUES ({', '.join('?' for _ in columns)})", given.get(table, ()))
        _finish(db.execute, "main", settings, wanted)
        db.execute("COMMIT")


def _apart(grain, table, rows, at):
    """{table: the courses' rows, its site table: the site's (course None at index `at`, which they lose)}."""
    rows = list(rows)
    return {table: [row for row in rows if row[at] is not None],
            SITE_TABLES[grain]: [row[:at] + row[at + 1:] for row in rows if row[at] is None]}


def describe(config, environ, missing_views=()):
    """Return a JSON-ready dict: where the publication is, when it was last published, whether it is current
    (on PostgreSQL, whether its views are all there: none in `missing_views`, which it names)."""
    if config.store.type != "sqlite":
        schema, missing = config.store.schema, list(missing_views)
        location = (f"view{'s' if len(missing) > 1 else ''} {', '.join(missing)} in the store" if missing
                    else f"view {schema}_serving.daily_metrics in the store")
        return {"location": location, "published_at": None, "current": not missing, "missing": bool(missing),
                "missing_views": missing}
    path = config.publication.path
    info = {"location": path, "published_at": None, "current": False}
    if os.path.exists(path):
        import datetime as dt

        info["published_at"] = dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.UTC).isoformat(
            timespec="seconds")
        if store_exists(config, environ):
            info["current"] = published_digest(path) == read_digest(config, environ)
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
