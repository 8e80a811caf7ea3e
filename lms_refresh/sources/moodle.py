"""Moodle's standard log (`{prefix}logstore_standard_log`), read from its PostgreSQL, MySQL or MariaDB database.

The cursor is the log's `id`, not `timecreated`: Moodle's buffered log writer
inserts rows at the end of a request, after their `timecreated`, so a time
cursor would skip them. A scheduled run reads ids [watermark - id_lookback,
max(id) + 1); the lookback re-reads the last ids because a transaction that
took an id before the run began may commit after it (staging is keyed by
the log id, so re-reading is harmless). A first run starts at the first id
created within `bootstrap_days`; `backfill` reads a `timecreated` window and
leaves the id watermark alone.

Rows are read in id order, `batch_size` at a time (keyset paging), in a
read-only session, with the same statements on PostgreSQL, MySQL and MariaDB
(moodle_database.py). Which rows count, and as what, is the table in
docs/sources/moodle.md ("Moodle source"); `EVENTS` below is its code.
"""

import hashlib
import json
import logging
import math

from lms_refresh import instants, window as windows
from lms_refresh.disclosure.cell_key import NoRecordKeys
from lms_refresh.disclosure.pseudonyms import moodle_identifier
from lms_refresh.disclosure.redaction import url_without_password
from lms_refresh.errors import ConfigError
from lms_refresh.sources import OK, WARNING, BaseSource, Finding, moodle_courses, moodle_enrolments, moodle_log_lifetime
from lms_refresh.sources.moodle_database import open_database
from lms_refresh.sources.moodle_other import InvalidRow, completion_state, graded, scaled_micro
from lms_refresh.sources.records import EVENT, NOTHING, Intake, LocalDays, make_event
from lms_refresh.sources.xapi import ADL, name_id

logger = logging.getLogger(__name__)

COLUMNS = ("id", "eventname", "crud", "edulevel", "userid", "courseid", "relateduserid", "anonymous", "other",
           "timecreated", "realuserid")
PARTICIPATING = 2  # \core\event\base::LEVEL_PARTICIPATING: the learner's own activity
SCORED = ADL + "scored"

# eventname -> (whose activity it is, verb IRI, is_attempt, is_completion). Completion
# updates take their verb and pass/fail from other.completionstate (see moodle_other.completion_state).
EVENTS = {
    "\\mod_quiz\\event\\attempt_submitted": ("relateduserid", ADL + "attempted", 1, 0),
    "\\mod_assign\\event\\assessable_submitted": ("userid", ADL + "attempted", 1, 0),
    "\\core\\event\\course_module_completion_updated": ("relateduserid", None, 0, 0),
    "\\core\\event\\course_completed": ("relateduserid", ADL + "completed", 0, 1),
    "\\core\\event\\user_graded": ("relateduserid", SCORED, 0, 0),
}
GRADED = "\\core\\event\\user_graded"
# other.completionstate (COMPLETION_INCOMPLETE, _COMPLETE, _COMPLETE_PASS, _COMPLETE_FAIL) ->
# (verb, is_completion, is_passed, is_failed)
COMPLETION_STATES = {
    0: (None, 0, 0, 0),
    1: (ADL + "completed", 1, 0, 0),
    2: (ADL + "passed", 1, 1, 0),
    3: (ADL + "failed", 1, 0, 1),
}
class RowMapper:
    """Turn log rows into ('event', Event) (see `lms_refresh.sources.records`), or NOTHING."""

    def __init__(self, timezone, pseudonymise, site_url, *, site_course_id, guest_user_id, now=None,
                 record_keys=None):
        self.pseudonymise = pseudonymise
        self._event_key, self._learner_key = (record_keys or NoRecordKeys).keyers()  # as xapi's mapper
        self.learner_key = self._learner_key  # an enrolled learner's (moodle_enrolments.py)
        # A timecreated after this (Unix seconds) is in the future; None: no run's clock to compare with.
        self.latest = None if now is None else int(instants.future_limit(now).timestamp())
        self.site = site_url.rstrip("/")
        self.excluded_courses = {None, 0, site_course_id}
        self.excluded_users = {None, 0, guest_user_id}
        self.names = {}
        self._days = LocalDays(timezone)
        self.grade_ranges = {}  # grade item id -> (grademin, grademax), filled by the source

    def map(self, row, cursor=None):
        """Return ('event', Event) for a row, or NOTHING if the row is not learner activity in a course.

        `cursor` is not used: a row's place in the log is its id, which the query bounds.
        """
        (log_id, eventname, crud, edulevel, userid, courseid, relateduserid, anonymous, other,
         timecreated, realuserid) = row
        if courseid in self.excluded_courses or anonymous or realuserid is not None:
            return NOTHING  # site-level, anonymous, or an administrator "logged in as" the learner
        known = EVENTS.get(eventname)
        if known is None:
            if edulevel != PARTICIPATING:
                return NOTHING  # teaching and other events are not the learner's activity
            whose, verb, attempt, completion, passed, failed = "userid", eventname, 0, 0, 0, 0
        else:
            whose, verb, attempt, completion = known
            passed = failed = 0
            if verb is None:
                verb, completion, passed, failed = COMPLETION_STATES.get(completion_state(other), (None, 0, 0, 0))
                verb = verb or eventname
        user = relateduserid if whose == "relateduserid" else userid
        if user is None:
            raise InvalidRow(f"{eventname} has no {whose}")
        if user in self.excluded_users:
            return NOTHING  # not logged in, or the guest account
        # Moodle's ids are positive: a negative one was written by someone else, and would be a course or a learner
        # of its own ("view.php?id=-5").
        for column, value in (("courseid", courseid), (whose, user)):
            if type(value) is not int or value < 0:
                raise InvalidRow(f"{column} {value!r} is not a Moodle id")
        if type(timecreated) is not int or timecreated <= 0:  # 0: Moodle's "never"
            raise InvalidRow(f"timecreated {timecreated!r} is not a Unix time")
        try:
            moment = instants.from_unix(timecreated, "timecreated")
        except instants.NotAnInstant as error:
            raise InvalidRow(str(error)) from None
        if self.latest is not None and timecreated > self.latest:
            raise InvalidRow(f"timecreated {timecreated} ({instants.to_cursor(moment)}) lies in the future, more than "
                             f"{instants.TOLERANCE_WORDS} after this run's time: the Moodle server's clock was wrong")
        day = self._days.get(timecreated // 60) or self._days.add(timecreated // 60, moment)
        course = f"{self.site}/course/view.php?id={courseid}"
        course_key, verb_key = name_id(course), name_id(verb)
        self.names[("course", course_key)] = course
        self.names[("verb", verb_key)] = verb
        cursor = instants.to_cursor(moment)
        event_id = hashlib.blake2b(f"{self.site}|log|{log_id}".encode(), digest_size=16).digest()
        actor = self.pseudonymise(moodle_identifier(self.site, user))
        score = scaled_micro(*self._grade(other)) if verb == SCORED else None
        return EVENT, make_event(
            day=day, course_id=course_key, actor=actor, event_id=event_id, stored=cursor, occurred=cursor,
            verb_id=verb_key, is_attempt=attempt, is_completion=completion, is_passed=passed, is_failed=failed,
            score_micro=score, duration_ms=None, record_key=self._event_key(event_id),
            learner_key=self._learner_key(actor),
        )

    def _grade(self, other):
        item, final = graded(other)
        return final, self.grade_ranges.get(item)

    def take_new_names(self):
        names, self.names = self.names, {}
        return names


class MoodleSource(BaseSource):
    name = "moodle"
    axis = windows.LOG_ID

    def __init__(self, settings, timezone, pseudonymise, *, environ, now=None, language="en", record_keys=None,
                 bootstrap_days=None):
        self.url, self.prefix, self.site = settings.url, settings.prefix, settings.site_url.rstrip("/")
        self.site_course_id, self.timezone, self.language = settings.site_course_id, timezone, language
        self.guest_user_id = settings.guest_user_id
        self.password_file = settings.password_file
        self.table = f"{settings.prefix}logstore_standard_log"
        self.grade_items = f"{settings.prefix}grade_items"
        self._grades_readable = True
        self.id_lookback = settings.id_lookback
        self.batch_size = settings.batch_size
        self.timeout = settings.timeout
        self.mapper = RowMapper(timezone, pseudonymise, settings.site_url, site_course_id=settings.site_course_id,
                                guest_user_id=settings.guest_user_id, now=now, record_keys=record_keys)
        self.environ = environ
        self.bootstrap_days, self.now = bootstrap_days, now
        self._db = None
        self.enrolments = moodle_enrolments.Enrolments(self, settings.learner_roles)  # run/enrolment.py's

    def describe(self):
        return f"Moodle's log {self.table} at {url_without_password(self.url)}"

    # -- database ------------------------------------------------------------

    def query(self, statement, parameters=(), table=None):
        """Run one read-only query on `table` (the log by default); return its rows.

        Driver errors become the domain's, naming Moodle and the table.
        """
        table = table or self.table
        if self._db is None:
            self._db = open_database(self.url, self.password_file, self.environ, self.timeout)
        return self._db.query(statement.replace("{table}", table), parameters, table, self.table)

    def close(self):
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- windows (see BaseSource: ids, not times; a backfill reads a timecreated window) --

    def run_until(self, now, config):
        """A scheduled run reads through the newest id: ids are in the order rows were committed, not times."""
        return (self.query("SELECT max(id) FROM {table}")[0][0] or 0) + 1

    def first_since(self, moment, until):
        """A first run starts at the first id created at or after `moment` (none yet: at `until`)."""
        first = self.query("SELECT min(id) FROM {table} WHERE timecreated >= %s", (math.ceil(moment.timestamp()),))
        return until if first[0][0] is None else first[0][0]

    def lookback(self, config):
        return self.id_lookback

    def run_window(self, watermark, now, config):
        window = super().run_window(watermark, now, config)
        if watermark is not None and watermark > window.until:
            logger.warning(
                "The newest id of %s (%d) is below the watermark (%d): was the Moodle database restored "
                "from an older backup? Nothing is read until new rows pass the watermark; "
                "'lms-refresh backfill' re-reads by time.", self.table, window.until - 1, watermark)
        return window

    def batches(self, window):
        """Yield Batches of the window's rows, in id order, `batch_size` rows per query."""
        if window.axis is windows.LOG_ID:
            condition, bounds = "id >= %s AND id < %s", (window.since, window.until)
        else:  # a backfill, a rebuild, an upgrade's re-read: first, how far back the log goes
            moodle_log_lifetime.note_time_window(self, window.since, self.now)
            condition = "timecreated >= %s AND timecreated < %s"
            bounds = (math.ceil(window.since.timestamp()), math.ceil(window.until.timestamp()))
        statement = (f"SELECT {', '.join(COLUMNS)} FROM {{table}} WHERE {condition} AND id > %s "
                     "ORDER BY id LIMIT %s")
        last, rows = -1, [None] * self.batch_size
        while len(rows) == self.batch_size:
            rows = self.query(statement, bounds + (last, self.batch_size))
            if rows:
                yield self._map(rows)
                last = rows[-1][0]

    def standing_names(self):
        """The courses' names, from Moodle's course tables: a rename is published without a new log row."""
        return moodle_courses.names_batch(self).names

    def standing_categories(self):
        """The course categories, from Moodle's course tables: a course moved counts in its new category from then."""
        return moodle_courses.category_tree(self)

    def _read_grade_ranges(self, rows):
        """Learn the range of every grade item the page's user_graded rows name and the mapper lacks.

        Without SELECT on grade_items, grades still count as events, without a score (warned once).
        """
        known = self.mapper.grade_ranges
        wanted = {graded(row[8])[0] for row in rows if row[1] == GRADED} - set(known) - {None}
        if not wanted or not self._grades_readable:
            return
        try:
            wanted = sorted(wanted)  # ints (graded keeps no other): one statement for every database
            marks = ", ".join(["%s"] * len(wanted))
            found = self.query(f"SELECT id, grademin, grademax FROM {{table}} WHERE id IN ({marks})", tuple(wanted),
                               table=self.grade_items)
        except ConfigError as error:
            self._grades_readable = False
            logger.warning("%s Until then, grades count without a score.", error)
            return
        known.update(dict.fromkeys(wanted))  # an item deleted since: asked once, scored as None
        known.update((item, (float(low), float(high))) for item, low, high in found)

    def _where(self, number, row):
        """A quarantined row: by its log id, with every column (whole: the redactor reads it as JSON)."""
        return f"{self.table} id {row[0]}", json.dumps(dict(zip(COLUMNS, row, strict=True)), default=str)

    def _map(self, rows):
        self._read_grade_ranges(rows)
        batch = Intake(self.mapper, self._where).map_all(enumerate(rows, 1))
        batch.read = len(rows)  # every row of the page is in the window, learner activity or not
        return batch

    # -- check ---------------------------------------------------------------

    def preflight(self):
        """Reach the database, read the log's columns and newest id, and say if the role could write (Findings)."""
        self.query(f"SELECT {', '.join(COLUMNS)} FROM {{table}} LIMIT 0")
        newest = self.query("SELECT max(id) FROM {table}")[0][0]
        findings = [Finding(OK, f"Moodle database {url_without_password(self.url)}: reachable, {self.table} readable, "
                                f"newest log id {newest if newest is not None else 'none (the log is empty)'}")]
        findings.append(Finding(OK, f"Moodle database server: {self._db.server(self.table)}"))
        writable = self._db.may_write(self.table)
        try:
            self.query("SELECT id, grademin, grademax FROM {table} LIMIT 0", table=self.grade_items)
        except ConfigError as error:
            findings.append(Finding(WARNING, f"{error} Until then, grades count without a score."))
        findings += moodle_courses.preflight(self)
        findings += [Finding(WARNING, warning) for warning in self.enrolments.preflight()]
        if self.bootstrap_days is not None:
            findings += moodle_log_lifetime.preflight(self, self.bootstrap_days)
        if writable:
            findings.append(Finding(WARNING, f"source.url's user may write {self.table}; lms-refresh only reads "
                                             "(its session is read-only), but an account with SELECT only is safer"))
        return findings
