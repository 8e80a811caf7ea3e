"""Filling an empty table in bulk on PostgreSQL (a mixin of postgres.PostgresStore): a B-tree dropped while the
rows go in and built once after them, sorted; the table's statistics taken before the run reads it.

A first run, a backfill into an empty store or a rebuild from scratch writes whole tables in its one
transaction. A B-tree kept up row by row costs each row a descent, a page touched and a WAL record; built
after the rows, it costs one sort. And until an ANALYZE the planner sees a table as it was when last
analyzed, an empty one never: autovacuum's comes after the commit, too late for the run's own recompute,
which the planner then sorts on disk (it had counted on 165,000 staged rows of 1,000,000). On the
benchmark's full refresh (1M statements over 30 days, PostgreSQL 15 at its defaults, fsync on, the server's
statement log) the recompute took 7.58 s before and 4.84 s with both.

Dropping needs the table's owner and a moment with no other session on it (a lock within 2 s): a role
granted only DML, a table in use (or a session that waits for a table the run holds already: a deadlock,
which the server breaks by failing one side), an object of the operator's own that depends on the key, or
storage settings of the operator's own on the key, and the table is filled the usual way. A table that
stays empty (a quiet night on a store with no presence) is left alone. Nothing here is undone by hand on a
failure: the statement's error aborts the run's transaction, whose rollback restores what was dropped. A
dry run fills nothing in bulk (`rehearsal`): ANALYZE and the build of an index write the table's row count
into pg_class in place, which its rollback would not undo (the planner would count rows never committed).
A run that fails or is stopped after a fill leaves them so too (only the planner reads them; the next run's
fills take them again).
"""

import contextlib

import psycopg

from lms_refresh.store.tables import TABLES

_KEYS = {table.name: table.key for table in TABLES}
WAIT_FOR_TABLE = "2s"  # how long a drop waits for another session's lock before the table is filled as usual


# What gives a drop up, the transaction going on without it: another session's lock held past WAIT_FOR_TABLE, a
# lock cycle with another session, an object that depends on what would be dropped.
_GIVE_UP = (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected,
            psycopg.errors.DependentObjectsStillExist)


class PgBulk:
    """What PostgresStore does with a table it fills whole (`db`, `_ddl`, `execute`, `dialect`, `rehearsal` and
    `is_empty` come from it)."""

    def owns(self, table):
        """Whether this role may drop `table`'s indexes and analyze it (it owns the table, or is a member
        of its owner)."""
        return self.db.execute("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = %s::regclass",
                               (table,)).fetchone()[0]

    def _as_built(self, index):
        """Whether `index` has the storage the migrations gave it: a fillfactor or a tablespace of an operator's
        own would be lost by a build with the session's defaults, so such a key is kept up instead."""
        return self.db.execute("SELECT reloptions IS NULL AND reltablespace = 0 FROM pg_class WHERE oid = "
                               "%s::regclass", (index,)).fetchone()[0]

    def alone(self, statement):
        """Run `statement` (a drop on a table this role owns, for a fill in bulk) if it gets the table within
        WAIT_FOR_TABLE; return whether it ran. Waiting longer would stall the run, and queue every later reader
        behind it. Never in a rehearsal: the build after the fill would write row counts in place."""
        if self.rehearsal:
            return False
        timeout = self.db.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
        self.db.execute("SAVEPOINT alone")
        try:
            self.db.execute(f"SET LOCAL lock_timeout = '{WAIT_FOR_TABLE}'")
            self.db.execute(self._ddl(statement))
            ran = True
        except _GIVE_UP:
            self.db.execute("ROLLBACK TO SAVEPOINT alone")
            ran = False
        self.db.execute("RELEASE SAVEPOINT alone")
        self.db.execute("SELECT set_config('lock_timeout', %s, true)", (timeout,))
        return ran

    def analyze(self, table):
        """Take `table`'s statistics now, with this transaction's rows (ANALYZE counts them), if this role may."""
        if not self.rehearsal and self.owns(table):
            self.db.execute(f"ANALYZE {table}")

    @contextlib.contextmanager
    def filling(self, table, source, days):
        """A context for statements that only insert rows into `table` (no upsert, no look-up by its key), from
        the rows of `source` on `days` (`dialect.days_in`'s parameter); it gives whether `table` was empty. If
        it was and `source` has rows there, the table's primary key is dropped before and built after, and the
        table analyzed: PRESENCE into an empty learner_days (873,580 rows) took 3.14 s before and 1.49 s with
        the staging analyzed and the key dropped, plus 0.34 s for the key's build."""
        empty = self.is_empty(table)
        worth = empty and self.execute(
            f"SELECT EXISTS (SELECT 1 FROM {source} WHERE {self.dialect.days_in})", (days,)).fetchone()[0]
        dropped = (worth and self.owns(table) and self._as_built(f"{table}_pkey")
                   and self.alone(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey"))
        yield empty
        if dropped:
            self.db.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({', '.join(_KEYS[table])})")
            self.analyze(table)
