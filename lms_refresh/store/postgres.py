"""The PostgreSQL metrics store: the SQLite store's guarantees, on a shared server.

One refresh is one transaction here too. Staging goes through COPY into a
temporary table, then one INSERT ... ON CONFLICT DO NOTHING (into an empty
store, COPY straight into staging: PostgresStore.begin_staging).

The run lock keeps two hosts (each with its own flock) from refreshing the same store at once. It is a
lock only the store's writer can take: a table lock on the store's `schema_version`, in a transaction of
a second session held open for the whole command. An advisory lock would not do: any role that can
connect may take any advisory lock, so a dashboards' read-only role could hold it and stop every run.
Only a role that may write the table may lock it in a mode stronger than reading (LOCK TABLE), the
mode chosen lets every read through (status, the dashboards' views, pg_dump), and the run's own
session never writes that table once the lock is taken (migrations come before it, see `open`).
"""

import contextlib
import functools
import logging
import re

import psycopg
from psycopg import sql

from lms_refresh import faults
from lms_refresh.disclosure.redaction import url_without_password
from lms_refresh.errors import ConfigError, StateError, UnavailableError
from lms_refresh.postgresql import connect, connection_error, first_line, unreachable
from lms_refresh.store.base import SqlStore
from lms_refresh.store.pg_bulk import PgBulk
from lms_refresh.store.pg_staging import PgStaging
from lms_refresh.store.postgres_schema import MIGRATIONS, POSTGRESQL, SCHEMA_VERSION
from lms_refresh.store.tables import (
    BY_NAME,
    CATEGORY_TABLES,
    CATEGORY_VIEWS,
    PERIOD_VIEWS,
    SITE_TABLES,
    TABLES,
    by_name_of,
    category_view,
    courses_view,
    freshness_view,
    period_view,
    serving_view,
    site_view,
)

logger = logging.getLogger(__name__)

LOCK_CLASS = 0x4C4D5352  # "LMSR"; LOCK_CLASS + 1: the first key of the advisory lock that serialises building a store
# The run lock's mode: it conflicts with itself and with writes to the table, and with no read.
RUN_LOCK_MODE = "SHARE ROW EXCLUSIVE"

# What the qmark-to-format conversion must look into or skip: string literals (with '' inside),
# quoted identifiers, dollar-quoted strings, comments, a placeholder, a percent sign.
_LEXEMES = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|\$(\w*)\$.*?\$\1\$|--[^\n]*|/\*.*?\*/|\?|%""", re.S)


@functools.lru_cache(maxsize=512)
def format_style(statement):
    """Return a statement written with `?` placeholders in psycopg's format style: each `?` outside
    literals, quoted identifiers and comments becomes `%s`, and every `%` (which psycopg would
    read as the start of a placeholder wherever it stands) is doubled."""
    def convert(match):
        return "%s" if match.group() == "?" else match.group().replace("%", "%%")

    return _LEXEMES.sub(convert, statement)


class PostgresStore(PgStaging, PgBulk, SqlStore):
    driver_error = psycopg.Error  # what `errors` turns into the domain's
    dialect = POSTGRESQL
    schema_target = SCHEMA_VERSION
    lock_session = None  # the second session whose open transaction holds the run lock (acquire_run_lock)

    def __init__(self, connection, location, schema, connect_again=None):
        super().__init__(connection, location)
        self.schema = schema
        self._connect_again = connect_again  # a new session to the same store, as the first was opened
        self.serving = self._ddl(POSTGRESQL.serving)
        self.serving_courses = self._ddl(POSTGRESQL.serving_courses)

    @classmethod
    def open(cls, settings, environ, create=True, *, read_only=False, migrate=True, behind_ok=False):
        """Connect to the store; migrate it unless `read_only` or `migrate=False`."""
        url = settings.url
        shown = url_without_password(url)
        def connect_again():
            return connect(url, settings.password_file, environ, what=f"The store {shown}", section="store",
                           connect_timeout=15)

        db = connect_again()
        store = cls(db, shown, settings.schema, connect_again)
        with store.errors():
            db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.schema)))
            version = store.check_version(strict=read_only, behind_ok=behind_ok)
            if version == 0 and not create and not read_only:
                # A dry run on a new database: build the schema inside the run's own
                # transaction, which the dry run rolls back with everything else.
                db.execute("BEGIN")
                store._build()
            elif version == 0 and migrate and not read_only:
                store._create()
            elif migrate and not read_only:
                store.migrate()
                if create:  # not a dry run: it writes nothing
                    store.restore_serving_view()
        return store

    def _build(self):
        for statements in MIGRATIONS:
            for statement in statements:
                self.db.execute(self._ddl(statement))
        self.set_meta("schema_version", SCHEMA_VERSION)
        self.db.execute(f"INSERT INTO {self.schema}.schema_version (version) SELECT generate_series(1, %s)",
                        (SCHEMA_VERSION,))

    def _create(self):
        """Build a new store's schema in one transaction, so no half-built store is ever visible."""
        with self.db.transaction():
            self._lock_for_building()
            if self.schema_version() == 0:  # another host may have built it while we waited
                self._build()
                faults.point("store-created")

    def _lock_for_building(self):
        """Make this transaction the only one building or upgrading the store's schema: the run lock's table lock
        once the store has one (it waits for another host's run to end), else an advisory lock (there is no
        store yet whose readers could hold it)."""
        if self.schema_version() > 0:
            self.db.execute(f"LOCK TABLE {self.schema}.schema_version IN {RUN_LOCK_MODE} MODE")
        else:
            self.db.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_CLASS + 1, self.schema))

    def _sql(self, statement):
        return format_style(statement)

    def describe(self):
        return f"{self.location} (schema {self.schema})"

    def serving_period_view(self, table):
        return self._ddl(POSTGRESQL.serving_of(table))

    def _ddl(self, statement):
        return statement.replace("{s}", self.schema)

    def schema_version(self):
        exists = self.db.execute("SELECT to_regclass(%s)", (f"{self.schema}.schema_version",)).fetchone()[0]
        if exists is None:
            if self.db.execute("SELECT to_regclass(%s)", (f"{self.schema}.meta",)).fetchone()[0] is not None:
                raise StateError(f"Schema {self.schema} in {self.location} is not an lms-refresh store.")
            return 0
        return self.db.execute(f"SELECT COALESCE(MAX(version), 0) FROM {self.schema}.schema_version").fetchone()[0]

    def migrate(self, target=SCHEMA_VERSION):
        """Apply the missing migrations up to `target`, each in its own transaction.

        The run lock's table lock, taken for each migration, makes two hosts upgrading at once take turns, and
        waits for another host's run to end. A store that needs nothing is not locked: every run opens it so.
        """
        while self.schema_version() < target:
            with self.db.transaction():
                self._lock_for_building()
                number = self.schema_version() + 1
                if number > target:
                    return
                for statement in MIGRATIONS[number - 1]:
                    self.db.execute(self._ddl(statement))
                self.db.execute(f"INSERT INTO {self.schema}.schema_version (version) VALUES (%s)", (number,))
                self.set_meta("schema_version", number)
                faults.point("migration-applied")
            faults.point("migration-committed")

    def translate(self, error):
        """Return the domain error a driver error means, or None if it is not the driver's."""
        if isinstance(error, psycopg.errors.InsufficientPrivilege):
            return ConfigError(f"The store {self.describe()} refused an operation: {first_line(error)}; "
                               "grant the refresh role ownership of its schemas.")
        if isinstance(error, (psycopg.errors.DiskFull, psycopg.errors.OutOfMemory)):
            return UnavailableError(f"The store {self.describe()} could not be written: the database server is out "
                                    f"of space ({first_line(error)}); nothing was committed.")
        if isinstance(error, psycopg.errors.ReadOnlySqlTransaction):
            return StateError(f"The store {self.describe()} is read-only ({first_line(error)}); point store.url "
                              "at the primary server.")
        if isinstance(error, psycopg.OperationalError):
            return connection_error(error, f"The store {self.location}", "store")
        if isinstance(error, psycopg.Error):
            if self.db.broken or self.db.closed:
                # A connection lost during a pipelined executemany surfaces as a plain DatabaseError.
                return unreachable(error, f"The store {self.location}")
            return StateError(f"The store {self.describe()} failed: {first_line(error)}; check its schema.")
        return None

    def acquire_run_lock(self):
        """Take the run lock (see the module's docstring) in a second session; return None, or who holds it."""
        table = f"{self.schema}.schema_version"
        session = self._connect_again()
        try:
            if session.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
                session.close()
                return None  # a dry run's new store, built in its own transaction: no other session sees it
            # The lock lasts as long as this transaction: a server's idle-in-transaction limit must not end it.
            session.execute("SET idle_in_transaction_session_timeout = 0")
            session.execute("BEGIN")
            session.execute(f"LOCK TABLE {table} IN {RUN_LOCK_MODE} MODE NOWAIT")
        except psycopg.errors.LockNotAvailable:
            session.close()
            return self._run_lock_holder(table)
        except BaseException:
            session.close()
            raise
        self.lock_session = session
        return None

    def _run_lock_holder(self, table):
        """Who holds the run lock: the application name (this program names itself) and address of its session."""
        holder = self.db.execute(
            "SELECT a.application_name, a.client_addr FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'relation' AND l.relation = to_regclass(%s) AND l.granted "
            "AND l.mode = 'ShareRowExclusiveLock'", (table,)).fetchone()
        if holder is None:
            return "another session"
        return f"{holder[0] or 'another session'}" + (f" from {holder[1]}" if holder[1] else "")

    def _verify_run_lock(self):
        """Refuse to commit once the session holding the run lock is gone (the server ended it): another host may
        be refreshing the store now."""
        try:
            self.lock_session.execute("SELECT 1")
        except psycopg.Error as error:
            raise unreachable(error, f"The session holding the run lock on the store {self.location}") from error

    def close(self):
        """Release the run lock, then close. Closing a socket does not wait for the server's session to end: a
        command started right after this one (a backfill after a run, the next test) could still find the lock
        held and give up. The rollback that releases it is answered before close returns."""
        session, self.lock_session = self.lock_session, None
        if session is not None:
            with contextlib.suppress(psycopg.Error):
                if not (session.closed or session.broken):
                    session.execute("ROLLBACK")
            session.close()
        self.db.close()

    def staging_held(self):
        return self.db.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass(%s) AND mode = 'AccessExclusiveLock' "
            "AND granted AND pid <> pg_backend_pid())", (f"{self.schema}.staged_events",)).fetchone()[0]

    def size_bytes(self):
        # pg_total_relation_size waits for a table's lock: a first run holds staged_events exclusively while it
        # stages without its index (pg_staging.py), and `status` must not wait for the run's end. Such a table
        # is counted by the catalog's page count (what its last VACUUM or ANALYZE saw) instead.
        return self.db.execute(
            "SELECT COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM pg_locks l WHERE l.relation = c.oid "
            "AND l.mode = 'AccessExclusiveLock' AND l.pid <> pg_backend_pid()) "
            "THEN c.relpages::bigint * current_setting('block_size')::bigint "
            "ELSE pg_total_relation_size(c.oid) END), 0)::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (self.schema,)).fetchone()[0]

    def missing_privileges(self):
        """Return what a run does that the connected role may not ("INSERT on lms_refresh.runs"), [] if nothing.

        has_table_privilege() with several privileges is true if any one is held: each is asked alone."""
        rows = self.db.execute(
            "SELECT c.relname, p.privilege FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p(privilege) "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname = ANY(%s) "
            "AND NOT has_table_privilege(c.oid, p.privilege) ORDER BY 1, 2",
            (self.schema, [table.name for table in TABLES])).fetchall()
        missing = [f"{privilege} on {self.schema}.{table}" for table, privilege in rows]
        # A serial column's sequence (runs.seq, quarantine.id): an INSERT without USAGE on it is refused.
        missing += [f"USAGE on sequence {self.schema}.{name}" for (name,) in self.db.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND CASE WHEN c.relkind = 'S' THEN NOT has_sequence_privilege(c.oid, 'USAGE') ELSE false END "  # in order
            "ORDER BY 1", (self.schema,))]
        if not self.db.execute("SELECT has_database_privilege(current_database(), 'TEMPORARY')").fetchone()[0]:
            missing.append("TEMPORARY on the database (staging goes through a temporary table)")
        return missing

    def _dashboard_views(self):
        """{name: SELECT} of every view the dashboards read: the days', each period's, the course names', the site's of
        each grain, the freshness, and each course table by name (after the views they read)."""
        views = {self.serving: serving_view(POSTGRESQL, SCHEMA_VERSION)}
        views.update((self.serving_period_view(table), period_view(POSTGRESQL, grain))
                     for grain, table in PERIOD_VIEWS.items())
        views[self.serving_courses] = courses_view(POSTGRESQL)
        views.update((self.serving_period_view(table), site_view(POSTGRESQL, grain))
                     for grain, table in SITE_TABLES.items())
        views[self.serving_period_view("freshness")] = freshness_view(POSTGRESQL)
        views.update((self.serving_period_view(name if name == "categories" else CATEGORY_TABLES[name]),
                      category_view(POSTGRESQL, name)) for name in CATEGORY_VIEWS)
        views.update((self.serving_period_view(by_name), by_name_of(POSTGRESQL, table))
                     for table, by_name in BY_NAME.items())
        return views

    def missing_views(self):
        """Return the names of the dashboards' views that are not there (dropped?), in their order."""
        return [name for name in self._dashboard_views()
                if not self.db.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]]

    def restore_serving_view(self):
        """Re-create the dashboards' views that were dropped (they hold nothing of their own); return True if any."""
        views, missing = self._dashboard_views(), self.missing_views()
        if not missing:
            return False
        with self.db.transaction():
            self.db.execute(self._ddl("CREATE SCHEMA IF NOT EXISTS {s}_serving"))
            for name in missing:
                self.db.execute(self._ddl(f"CREATE VIEW {name} AS{views[name]}"))
        logger.warning("The serving view %s was missing and has been re-created; give the dashboards' roles "
                       "access again with 'lms-refresh grant-reader ROLE'.", ", ".join(missing))
        return True

    def grant_reader(self, role):
        """Let `role` read the dashboards' views, and nothing else; return their names."""
        if role.lower() == "public":  # GRANT ... TO "public" grants every role of the cluster
            raise ConfigError("'public' stands for every role of the PostgreSQL cluster, not one: name the "
                              "dashboards' own role.")
        with self.errors():
            if self.db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
                raise ConfigError(f"There is no role {role!r} in the PostgreSQL cluster; create it (CREATE ROLE ... "
                                  "LOGIN) or name an existing one (role names are case-sensitive).")
            with self.db.transaction():
                serving = sql.Identifier(f"{self.schema}_serving")
                self.db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(serving, sql.Identifier(role)))
                self.db.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                    serving, sql.Identifier(role)))
        return list(self._dashboard_views())

    # -- one run's transaction ------------------------------------------------

    def begin(self):
        if self.db.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            self.db.execute("BEGIN")
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS incoming (LIKE staged_events) ON COMMIT DELETE ROWS")

    def commit(self):
        if self.lock_session is not None:
            self._verify_run_lock()
        self.db.execute("COMMIT")

    def rollback(self):
        status = psycopg.pq.TransactionStatus
        if not self.db.closed:
            state = self.db.info.transaction_status
            if state in (status.INTRANS, status.INERROR):
                self.db.execute("ROLLBACK")
            elif state != status.IDLE:
                # A stop request (SIGTERM) interrupted a statement mid-flight: the session
                # cannot take another command. Closing it makes the server roll back.
                self.db.close()
        self.forget_transaction()
        self._bulk = False  # the index dropped by begin_staging is back

    def rollback_quietly(self):
        """Roll back on the way out of a failure; a failing ROLLBACK must not replace the failure."""
        try:
            self.rollback()
        except psycopg.Error:
            with contextlib.suppress(psycopg.Error):
                self.db.close()  # the server rolls back a closed session's transaction
        self.forget_transaction()
