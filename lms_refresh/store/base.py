"""What the SQLite and PostgreSQL stores share: the run's bookkeeping and the metrics' rebuild, in SQL
written once (the store's `dialect` supplies what differs).

The store aggregates and keeps what it is given: it returns each cell's aggregates and record keys,
and stores the published rows and privacy settings it is handed. What is published of a cell is
decided by lms_refresh.disclosure.policy, which the run layer calls (run/publication.py).

Statements are written with `?` placeholders; a store whose driver wants another style converts
them in `_sql`. Driver-specific work (opening, migrating, staging in bulk) lives in each store.
"""

import contextlib
import json
import typing

from lms_refresh.errors import StateError
from lms_refresh.store import periods
from lms_refresh.store.categories import Categories
from lms_refresh.store.course_names import CourseNames
from lms_refresh.store.enrolled import Enrolled
from lms_refresh.store.erasure import Erasure
from lms_refresh.store.grains import Grains
from lms_refresh.store.published import Published
from lms_refresh.store.rebuild_check import RebuildCheck
from lms_refresh.store.run_log import RunLog
from lms_refresh.store.staging import Staging
from lms_refresh.store.tables import SERVING_COLUMNS, SITE_SERVING_COLUMNS, SITE_TABLES, column_names

PRIVACY_FIELDS = column_names("privacy_settings")[1:]  # after the id of the one row


class Recomputed(typing.NamedTuple):
    """What a recompute did: the metric rows it wrote, the days it rebuilt, the courses to publish again (their
    days, and {grain: courses} of their other periods), the configured terms it could not count (they begin
    before the learners' presence that retention kept), {grain: labels} of the other periods it rebuilt, the
    grains ("day" among them) whose courses are to be published whole, not only where rebuilt (a change of the
    privacy settings: all; of the terms: the terms), and the calendar of the periods it counted."""

    rows_written: int
    days: set
    courses: set
    period_courses: dict
    uncounted_terms: tuple = ()
    period_labels: dict = None
    whole: tuple = ()
    calendar: periods.Calendar = None  # the periods counted: the configured terms but those not counted
    categories: dict = None  # {grain ("day" among them): the category ids to publish again} (store/categories.py)


class SqlStore(Staging, Erasure, Grains, Categories, Published, Enrolled, RebuildCheck, RunLog, CourseNames):
    """A metrics store in SQL written once; a subclass is a `driver.Driver` (sqlite.py, postgres.py)."""

    dialect = None  # a store.dialect.Dialect
    # Into an empty store, each store stages without the unique index on statement ids and builds it at the end
    # (its begin_staging says how); a statement id under two staging keys then fails the build (StageAgain).
    _bulk = False  # the index is not there: this run is staging into an empty store
    bulk_staging = True  # False once a run had to stage again: its second try keeps the index
    # A dry run's: its transaction is rolled back, so nothing may be written that a rollback would not undo
    # (PostgreSQL's bulk paths write row counts into its catalog in place: pg_bulk.py).
    rehearsal = False

    def __init__(self, connection, location):
        self.db = connection
        self.location = location
        self._voided = None
        self._void_targets = set()
        self._conflicts = []
        self._republish_all = False
        self.behind = None  # (its schema version, this code's): a store read as it is, before the next run upgrades it

    @property
    def run_order(self):
        """What orders the run log's rows."""
        return self.dialect.insertion_order

    def _sql(self, statement):
        """Return `statement`, written with `?` placeholders, in the driver's parameter style."""
        return statement

    def execute(self, statement, parameters=()):
        return self.db.execute(self._sql(statement), parameters)

    def sorting(self):
        """A context for one statement that sorts many rows (a store may give the sort memory of its own)."""
        return contextlib.nullcontext()

    def is_empty(self, table):
        return not self.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]

    def filling(self, table, source, days):
        """A context for statements that only insert rows into `table` (no upsert, no look-up by its key), from
        the rows of `source` on `days`: it gives whether `table` was empty. A store may fill an empty table in
        bulk (pg_bulk.py)."""
        return contextlib.nullcontext(self.is_empty(table))

    def executemany(self, statement, rows):
        cursor = self.db.cursor()
        cursor.executemany(self._sql(statement), rows)
        return cursor

    def check_version(self, strict, behind_ok=False):
        """Refuse a store newer than this code (and, if `strict`, one that still needs migrating, unless
        `behind_ok`: then `behind` says so, for a reader that reads only what every version has)."""
        version = self.schema_version()
        if version > self.schema_target:
            raise StateError(
                f"The store {self.describe()} has schema version {version}, newer than this lms-refresh "
                f"understands ({self.schema_target}); upgrade lms-refresh."
            )
        if strict and 0 < version < self.schema_target:
            if not behind_ok:
                raise StateError(f"The store {self.describe()} has schema version {version}; the next run upgrades "
                                 "it.")
            self.behind = (version, self.schema_target)
        return version

    # -- reading -------------------------------------------------------------

    def meta(self):
        return dict(self.execute("SELECT key, value FROM meta").fetchall())

    def has_events(self):
        return bool(self.execute("SELECT EXISTS (SELECT 1 FROM staged_events)").fetchone()[0])

    def staging_held(self):
        """Whether another session holds staged_events whole (a first run staging without its index), so that a
        read of it would wait for that run's end: never on SQLite, whose readers do not wait for a writer."""
        return False

    def source_state_of(self, keys):
        """Return {key: saved value} for those of `keys` the source state holds (asked in batches by a
        source whose state grows with its input, such as the export files' index)."""
        keys, found = list(keys), {}
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            rows = self.execute(f"SELECT key, value FROM source_state WHERE key IN ({', '.join('?' for _ in part)})",
                                part).fetchall()
            found.update((key, json.loads(value)) for key, value in rows)
        return found

    def serving_rows(self):
        """Return the serving view's rows and the site's (course None, first in each day), ordered, with days as ISO
        text in every store."""
        columns = ", ".join(SERVING_COLUMNS)
        rows = self.execute(f"SELECT {columns} FROM {self.serving}").fetchall()
        site = self.execute(f"SELECT {', '.join(SITE_SERVING_COLUMNS)} "
                            f"FROM {self.serving_period_view(SITE_TABLES['day'])}")
        rows += [(row[0], None, *row[1:]) for row in site.fetchall()]
        rows = [(str(row[0]),) + tuple(row[1:]) for row in rows]
        return sorted(rows, key=lambda row: (row[0], row[1] is not None, row[1] or ""))

    def quarantine_count(self):
        return self.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]

    # -- one run's transaction ------------------------------------------------

    def set_meta(self, key, value):
        self.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, str(value)))

    def days_between(self, first, before):
        """Return (first, last) of the days with metrics from `first` to before `before`, or None."""
        row = self.execute("SELECT MIN(day), MAX(day) FROM daily_metrics WHERE day >= ? AND day < ?",
                           (first, before)).fetchone()
        return None if row[0] is None else (row[0], row[1])

    def pending_days(self):
        """Days whose metrics a migration left to be rebuilt (it removed double-staged statements)."""
        return {row[0] for row in self.execute("SELECT day FROM pending_days").fetchall()}

    def clear_pending_days(self):
        """The pending days were rebuilt in this transaction."""
        self.execute("DELETE FROM pending_days")

    def reset_derived(self, horizon=None):
        """Empty everything derived from the source (a rebuild refills it in the same transaction);
        the run log and the quarantine stay, and so does every day before `horizon` (the staging horizon's
        closed days, whose events are gone, or the days before a rebuild's first day, whose events stay): as
        it was published, with the learners' presence its weeks, months and terms are counted from."""
        if horizon is None:
            for table in ("staged_events", "voided_events", "verbs", "pending_days"):
                self.execute(f"DELETE FROM {table}")
        else:  # the kept days' events keep their verbs, and their voids keep a voided statement out
            for table in ("staged_events", "pending_days"):
                self.execute(f"DELETE FROM {table} WHERE day >= ?", (horizon,))
        self.execute("DELETE FROM source_state")
        self.reset_periods(horizon)
        self.reset_enrolled(horizon)
        for table in ("published_metrics", "daily_metrics", "category_day_cells", "published_category_days"):
            self.execute(f"DELETE FROM {table} WHERE day >= ?", (horizon or "",))
        if horizon is None:
            self.execute("DELETE FROM courses")
        else:
            self.execute("DELETE FROM courses WHERE course_id NOT IN (SELECT course_id FROM daily_metrics)")
        self.execute("DELETE FROM course_names WHERE course_id NOT IN (SELECT course_id FROM courses)")  # with them
        self.execute("DELETE FROM course_labels WHERE course_id NOT IN (SELECT course_id FROM courses)")
        for table in ("course_categories", "category_courses"):
            self.execute(f"DELETE FROM {table} WHERE course_id NOT IN (SELECT course_id FROM courses)")
        self.execute("DELETE FROM meta WHERE key IN ('watermark', 'cursor_kind', 'timezone', 'key_fingerprint') "
                     "OR substr(key, 1, 9) = 'identity.'")
        self.forget_transaction()
        self._republish_all = True

    def quarantine(self, run_id, rows, now_text, *, redactor):
        """Record quarantined (origin, reason, raw) records, once per origin and content; return those of `rows`
        that a successful run has quarantined already (read again: by Moodle's id lookback, a changed export
        file read whole), which count once — not again in every run that reads them.

        Every record goes through `redactor` (a `redaction.Redactor`) here, the one
        place quarantined records are written: no identifier of a person is stored.
        A record first kept by a failed run (its evidence) belongs to the first successful run that
        quarantines it, so that it is counted by that one.
        """
        written = [(run_id,) + redactor.row(origin, reason, raw) + (now_text,) for origin, reason, raw in rows]
        again = [record for record, row in zip(rows, written, strict=True) if self.execute(
            "SELECT 1 FROM quarantine JOIN runs ON runs.run_id = quarantine.run_id AND runs.outcome = 'success' "
            "WHERE quarantine.origin = ? AND quarantine.digest = ?", (row[1], row[4])).fetchone()]
        self.executemany(
            "INSERT INTO quarantine (run_id, origin, reason, raw, digest, recorded_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (origin, digest) DO UPDATE SET run_id = excluded.run_id "
            "WHERE quarantine.run_id NOT IN (SELECT run_id FROM runs WHERE outcome = 'success')",
            written,
        )
        return again

    def save_source_state(self, state):
        if state:
            self.executemany("INSERT INTO source_state (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                             [(key, json.dumps(value)) for key, value in state.items()])

    # -- the publication's inputs and its rows (decided by lms_refresh.disclosure.policy) --------

    def privacy_settings(self, missing_ok=False):
        """Return the privacy settings in force as stored, {field: value} of the one row of privacy_settings,
        the only place the threshold is kept (disclosure.policy.in_force types and checks them). Without
        it nothing may be published (fail closed): a StateError, or None if `missing_ok` (for a report)."""
        row = self.execute(f"SELECT {', '.join(PRIVACY_FIELDS)} FROM privacy_settings").fetchone()
        if row is None:
            if missing_ok:
                return None
            raise StateError(f"The store {self.describe()} has no privacy settings; nothing was published. "
                             "Run lms-refresh again to store them from the configuration.")
        values = dict(zip(PRIVACY_FIELDS, row, strict=True))
        values["withhold_zeros"] = bool(values["withhold_zeros"])
        return values

    def set_privacy(self, min_cell_size, settings):
        """Store the threshold and the noise settings of `settings` (a [privacy] section or a
        PrivacySettings); a change republishes every course."""
        new = {"min_cell_size": min_cell_size, "method": settings.method, "max_noise": settings.max_noise,
               "variance": float(settings.variance), "withhold_zeros": bool(settings.withhold_zeros)}
        if self.privacy_settings(missing_ok=True) != new:
            self.execute("DELETE FROM privacy_settings")
            self.execute(f"INSERT INTO privacy_settings (id, {', '.join(PRIVACY_FIELDS)}) VALUES (1, ?, ?, ?, ?, ?)",
                         [int(new[field]) if field == "withhold_zeros" else new[field] for field in PRIVACY_FIELDS])
            self._republish_all = True
        if self.execute("DELETE FROM meta WHERE key = 'republish'").rowcount:
            self._republish_all = True  # a migration changed how the published rows are computed (tables.DATA_STEPS)
        # Schema versions 1 and 2 kept the threshold as text in meta as well: that copy would no
        # longer follow the settings in force, so it goes.
        self.execute("DELETE FROM meta WHERE key = 'min_cell_size'")

    def fill_record_keys(self, record_keys):
        """Give rows staged before schema version 3 their record keys; return True if there were any."""
        if self.execute("SELECT value FROM meta WHERE key = 'record_keys'").fetchone() is None:
            return False
        rows = self.execute("SELECT day, course_id, actor, event_id FROM staged_events "
                            "WHERE record_key IS NULL").fetchall()
        self.executemany(
            "UPDATE staged_events SET record_key = ?, learner_key = ? "
            "WHERE day = ? AND course_id = ? AND actor = ? AND event_id = ?",
            [(record_keys.event(e), record_keys.learner(a), d, c, a, e) for d, c, a, e in rows])
        self.execute("DELETE FROM meta WHERE key = 'record_keys'")
        return True

    def all_days(self):
        return {row[0] for row in self.execute("SELECT DISTINCT day FROM staged_events").fetchall()} | {
            row[0] for row in self.execute("SELECT DISTINCT day FROM daily_metrics").fetchall()}

    def courses_on(self, days):
        """Return {day: the course ids with a metrics row on it} of those of `days` that have one."""
        found = {}
        for day, course in self.execute(f"SELECT day, course_id FROM daily_metrics WHERE {self.dialect.days_in}",
                                        (self.dialect.day_set(days),)).fetchall():
            found.setdefault(day, set()).add(course)
        return found

    def _courses_to_publish(self, courses):
        """`courses`, or every course once the privacy settings changed."""
        if not self._republish_all:
            return courses
        self._republish_all = False
        return {row[0] for row in self.execute("SELECT course_id FROM published_metrics UNION "
                                               "SELECT course_id FROM daily_metrics").fetchall()}

    def recompute(self, days, *, record_keys, calendar, periods_of=()):
        """Delete and rebuild the partitions of `days` from all staged events of those days, and the periods of
        `calendar` (a periods.Calendar) that hold them; return what it did (a Recomputed: the courses they touch,
        or all after a settings change, are to be published; every term's after a change of the terms)."""
        if self.fill_record_keys(record_keys):
            days = set(days) | self.all_days()  # an upgraded store: every day gets its cell keys
        horizon = self.meta().get("staging_horizon")  # see lms_refresh.run.retention
        if horizon is not None:
            days = {day for day in days if day >= horizon}  # a closed day is never rebuilt from what is left
        before, everything = self.courses_on(days), self._republish_all
        recounted = self.sync_terms(calendar)  # first: the days' presence then moves in and out of these terms
        uncounted = [] if recounted is None else recounted.pop(None, [])
        # A term that cannot be counted whole gets no presence and no cell, now or later (sync_terms).
        calendar = calendar.without(uncounted)
        written = self.rebuild_partitions(days, calendar)
        touched = {day: before.get(day, set()) | courses for day, courses in self.courses_on(days).items()}
        touched.update((day, courses) for day, courses in before.items() if day not in touched)
        grains = periods.GRAINS if everything else () if recounted is None else ("term",)
        # `periods_of`: days whose presence changed without their events (a learner forgotten on a closed day):
        # their periods with a day still open are counted again; the days themselves, and periods wholly closed,
        # stay as they are.
        also = {period: bounds for period, bounds in calendar.periods_of(periods_of).items()
                if horizon is None or bounds[1] >= horizon}
        also.update(recounted or {})
        period_courses, labels = self.rebuild_periods(days, calendar, everything=grains, also=also, touched=touched)
        whole = ("day",) + grains if everything else grains
        categories = self.rebuild_category_cells(*self.category_days(days, labels), whole)
        return Recomputed(written, days, self._courses_to_publish(set().union(*touched.values())), period_courses,
                          tuple(uncounted), labels, whole, calendar, categories)

    def forget_transaction(self):
        """Voids learned inside a rolled-back transaction are gone with it."""
        self._voided = None
        self._void_targets.clear()
        self._conflicts = []
        self._republish_all = False

    @contextlib.contextmanager
    def errors(self):
        """Turn the driver's errors inside the block into the domain's (see each store's `translate`)."""
        try:
            yield
        except self.driver_error as error:
            raise self.translate(error) from error

    def acquire_run_lock(self):
        """Return None once this store is locked for the run, else who holds it (flock is enough here)."""
        return None

    def close(self):
        self.db.close()
