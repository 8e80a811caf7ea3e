"""PostgreSQL's staging (a mixin of postgres.PostgresStore): each batch as COPY text into a temporary table, then
merged by statement id with one INSERT ... ON CONFLICT; into an empty store, copied straight into staged_events.

The SQL that decides what a batch means (voids, conflicts, redeliveries) is the stores' shared staging.Staging;
this is only how the rows reach the server.
"""

import psycopg

from lms_refresh.postgresql import first_line
from lms_refresh.sources.records import EVENT_ID
from lms_refresh.store.pg_copy import staged_text
from lms_refresh.store.staging import StageAgain
from lms_refresh.store.tables import INDEXES

_ID_INDEX = next(index for index in INDEXES if index.name == "staged_events_event_id")


class PgStaging:
    """What PostgresStore does with a batch of rows (`db`, `dialect`, `_ddl`, `_bulk`, `bulk_staging`,
    `_void_targets` and pg_bulk.PgBulk's methods come from it)."""

    _began_empty = False  # staging was empty at begin_staging: finish_staging analyzes it (if it staged rows)
    _staged_rows = 0

    def insert_events(self, events):
        text = staged_text(events)  # not psycopg's write_row: see pg_copy.py
        if self._bulk and self._copied_straight(text):
            inserted = len(events)
        else:
            with self.db.cursor().copy("COPY pg_temp.incoming FROM STDIN") as copy:
                copy.write(text)
            # One arbiter, the unique event_id (a clash of the key is one of it): a third less per row than
            # checking both unique indexes, and less than half for rows staged already.
            inserted = self.db.execute(
                "INSERT INTO staged_events SELECT * FROM pg_temp.incoming ON CONFLICT (event_id) DO NOTHING").rowcount
            self.db.execute("TRUNCATE pg_temp.incoming")
        self._staged_rows += inserted
        return inserted

    # Staging into an empty store (a first run, a backfill, a rebuild from scratch) copies each batch straight
    # into staged_events, without the unique index on statement ids, and builds that index once, sorted: the
    # INSERT ... ON CONFLICT from the temporary table checks the index row by row and writes every row twice.
    # 1M rows in batches of 10,000 (fsync on): 13.1 s that way, 5.7 s so, the index's build
    # included. A batch that the staging key refuses (a statement delivered twice under the same key) is put
    # back, the index is built there and then, and the run stages as every later run does from that batch on;
    # one statement id under two keys fails the build, and the run is read again with the index (StageAgain).
    # Dropping the index needs the table's owner and a moment with no other session on the table (pg_bulk.py): a
    # role granted only DML, or a table in use for 2 s, stages the usual way. Either way, staging that began
    # empty is analyzed at the end (pg_bulk.py), 0.20 s for the benchmark's 1M rows: its day cells, which read
    # staging and presence, took 0.45 s with both analyzed instead of 1.18 s.
    def begin_staging(self):
        """Drop the unique index on statement ids if staging is empty and this role may (built again by
        finish_staging, or by the first batch that the staging key refuses)."""
        self._bulk, self._staged_rows = False, 0
        self._began_empty = self.is_empty("staged_events")
        if self.bulk_staging and self._began_empty and self.owns("staged_events"):
            self._bulk = self.alone(f"DROP INDEX {self.dialect.name(_ID_INDEX.name)}")

    def _copied_straight(self, text):
        """COPY `text` into staged_events; False if the staging key refused a row (then nothing is copied, and
        the index on statement ids is built)."""
        self.db.execute("SAVEPOINT bulk_batch")
        try:
            with self.db.cursor().copy("COPY staged_events FROM STDIN") as copy:
                copy.write(text)
        except psycopg.errors.UniqueViolation:
            self.db.execute("ROLLBACK TO SAVEPOINT bulk_batch")
            self.db.execute("RELEASE SAVEPOINT bulk_batch")
            self._build_id_index()
            return False
        self.db.execute("RELEASE SAVEPOINT bulk_batch")
        return True

    def _build_id_index(self):
        self._bulk = False
        try:
            self.db.execute(self._ddl(self.dialect.create_index(_ID_INDEX)))
        except psycopg.errors.UniqueViolation as error:
            self.bulk_staging = False
            raise StageAgain(f"a statement id came under two staging keys ({first_line(error)})") from error

    def staged_versions(self, events):
        """Return {event_id: staged row} for those of the `events`' ids that are staged."""
        ids = list({event[EVENT_ID] for event in events})
        rows = self.db.execute("SELECT * FROM staged_events WHERE event_id = ANY(%s)", (ids,))
        return {bytes(row[3]): row for row in rows}

    def finish_staging(self):
        """Build the index on statement ids if begin_staging dropped it (StageAgain if an id is staged under two
        keys), then delete the targets of this run's voiding statements; return the days they were in."""
        if self._bulk:
            self._build_id_index()
        if self._began_empty and self._staged_rows:
            self.analyze("staged_events")
        if not self._void_targets:
            return set()
        days = {row[0] for row in self.db.execute(
            "DELETE FROM staged_events WHERE event_id = ANY(%s) RETURNING day", (list(self._void_targets),))}
        self._void_targets.clear()
        return days
