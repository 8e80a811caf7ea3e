"""Moodle's enrolments: who is enrolled in which course, from when to when, read for the enrolled learners
(run/enrolment.py) from `{prefix}user_enrolments`, `{prefix}enrol`, `{prefix}role_assignments`,
`{prefix}context` and `{prefix}role`, read-only like the log.

An enrolment counts when the user's enrolment and its enrolment method are both active (`status` 0: a suspended
enrolment, or a disabled method, does not), it overlaps the local days asked for (Moodle's enrolment is active from
`timestart` until before `timeend`, 0 meaning open at that end), and the user holds, in the course's context
(`contextlevel` 50, `instanceid` the course id), a role whose short name or archetype is one of
`source.learner_roles` (by default the student archetype: teachers and managers enrolled in a course are not its
learners). The site course and the guest are never learners (as in the log mapping). Rows are read as they are
now: Moodle keeps no history of an enrolment's edits, and deletes the row of a deleted enrolment.

The statement is the same on PostgreSQL, MySQL and MariaDB but for its select list (PostgreSQL's packs a page into
one text, below); it is run once per page of `batch_size` user ids (a range of Moodle's indexes by user on
`user_enrolments` and `role_assignments`), so memory does not grow with the enrolments. Moodle has no index on the
enrolment dates: each run has the server read the enrolments of every user once, and only those overlapping the
days asked for leave it.
"""

import bisect
import datetime as dt
import logging
import zoneinfo

from lms_refresh.disclosure.pseudonyms import moodle_identifier
from lms_refresh.errors import ConfigError
from lms_refresh.sources.xapi import name_id

logger = logging.getLogger(__name__)

COURSE_CONTEXT = 50  # CONTEXT_COURSE
TABLES = ("user_enrolments", "enrol", "role_assignments", "context", "role")

_COLUMNS = "e.courseid, ue.userid, ue.timestart, ue.timeend"
# On PostgreSQL a page comes back as one text of "course,user,start,end" rows joined by ';': Debian's psycopg has
# no C extension, and converting 4 values a row took 20 µs a row (4.7 s of a nightly run at 250,000 enrolments).
# MySQLdb converts in C: its rows come as they are.
_PACKED = f"string_agg(concat_ws(',', {_COLUMNS}), ';')"
_QUERY = """SELECT {columns}
FROM {user_enrolments} ue
JOIN {enrol} e ON e.id = ue.enrolid
WHERE ue.status = 0 AND e.status = 0 AND e.courseid <> %s AND ue.userid <> %s
  AND ue.timestart < %s AND (ue.timeend = 0 OR ue.timeend > %s)
  AND EXISTS (SELECT 1 FROM {context} ctx
    JOIN {role_assignments} ra ON ra.contextid = ctx.id
    JOIN {role} r ON r.id = ra.roleid
    WHERE ctx.contextlevel = %s AND ctx.instanceid = e.courseid AND ra.userid = ue.userid
      AND (r.shortname IN ({roles}) OR r.archetype IN ({roles}))
      AND ra.userid >= %s AND ra.userid < %s)
  AND ue.userid >= %s AND ue.userid < %s"""
# A page is a range of user ids, on both sides of the role test (Moodle indexes user_enrolments and role_assignments
# by user first): the server joins the page's enrolments with the page's role assignments only. Pages of enrolment
# ids instead made PostgreSQL join every role assignment of the site for every page (1.35 s a page of 5,000 at
# 250,000 enrolments).
_RANGE = "SELECT min(userid), max(userid) FROM {user_enrolments}"


def tables(prefix):
    """The Moodle tables read for enrolments, with their prefix."""
    return tuple(prefix + table for table in TABLES)


def _statement(prefix, roles, packed=False):
    marks = ", ".join(["%s"] * len(roles))
    return _QUERY.format(columns=_PACKED if packed else _COLUMNS, roles=marks,
                         **{table: prefix + table for table in TABLES})


def _midnight(day, timezone):
    """The Unix time of the local midnight that begins `day` (ISO text) in `timezone`."""
    return int(dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), tzinfo=zoneinfo.ZoneInfo(timezone))
               .timestamp())


class Enrolments:
    """The enrolments of one Moodle source (its `query`, prefix, site, time zone and mapper's learners)."""

    def __init__(self, source, roles):
        self.source, self.roles = source, tuple(roles)
        self._learners = {}  # Moodle user id -> (pseudonym, learner key): a learner is in several courses
        self._courses = {}  # Moodle course id -> the course's id in the store (a hash of its IRI)
        self.packed = not source.url.startswith(("mysql:", "mariadb:"))  # PostgreSQL's pages as one text

    def preflight(self):
        """The warnings about the enrolment tables: none if the statement can be run."""
        source = self.source
        try:
            bounds = (source.site_course_id, source.guest_user_id, 0, 0, COURSE_CONTEXT, *self.roles, *self.roles)
            self._page(_statement(source.prefix, self.roles, self.packed), bounds, 0, 0)
        except ConfigError as error:
            return [f"{error} Until then, no enrolled learners are published (GRANT SELECT ON "
                    f"{', '.join(tables(source.prefix))})."]
        return []

    def __call__(self, first, last):
        """Return the enrolments overlapping the local days `first` .. `last` (ISO text) as (course id, learner,
        learner key, first local day or None, last local day or None: open, or before `first` and after `last`) — or
        None, warned, if the tables cannot be read: no enrolled cell is counted then (none is settled as empty)."""
        source = self.source
        statement = _statement(source.prefix, self.roles, self.packed)
        days = _days(first, last)
        # The local midnight beginning each day, and the one ending the last: a time's day is one bisection.
        midnights = [_midnight(day, source.timezone) for day in days] + [
            _midnight(_next_day(last), source.timezone)]
        bounds = (source.site_course_id, source.guest_user_id, midnights[-1], midnights[0], COURSE_CONTEXT,
                  *self.roles, *self.roles)
        table, step = source.prefix + "user_enrolments", source.batch_size
        try:
            low, high = source.query(_RANGE.replace("{user_enrolments}", table), (), table=table)[0]
            if low is None:
                return iter(())  # no enrolment at all: every course's count is 0
            # The first page here: a table it cannot read is a warning, not the run's failure.
            rows = self._page(statement, bounds, low, low + step)
        except ConfigError as error:
            logger.warning("Enrolled learners were not counted (%s) The days and periods of this run keep none "
                           "until a run can read %s.", error, ", ".join(tables(source.prefix)))
            return None
        return self._all(statement, bounds, rows, low + step, high, step, days, midnights)

    def _page(self, statement, bounds, low, high):
        """The rows (course, user, timestart, timeend) of the enrolments of the users whose ids are in [low, high)."""
        source = self.source
        rows = source.query(statement, bounds + (low, high, low, high), table=source.prefix + "user_enrolments")
        if not self.packed:
            return rows
        text = rows[0][0] if rows else None  # BIGINT columns: digits and minus signs, joined by ',' and ';'
        return [tuple(map(int, row.split(","))) for row in text.split(";")] if text else []

    def _all(self, statement, bounds, rows, start, high, step, days, midnights):
        """The enrolments of `rows`, then of each page of `step` user ids from `start` through `high` (`batch_size`
        users: their enrolments, a few each)."""
        while True:
            for row in rows:
                enrolment = self._enrolment(row, days, midnights)
                if enrolment is not None:
                    yield enrolment
            if start > high:
                return
            rows, start = self._page(statement, bounds, start, start + step), start + step

    def _enrolment(self, row, days, midnights):
        """(course id, learner, key, first day, last day) of one row, or None if it names no learner or no time.
        The days are those of `days` (whose local midnights, and the one after, are `midnights`), None before the
        first and after the last: the statement read only the enrolments that overlap them."""
        course, user, start, end = row
        if type(course) is not int or type(user) is not int or course <= 0 or user <= 0:
            return None
        if type(start) is not int or type(end) is not int or start < 0 or end < 0 or 0 < end <= start:
            return None  # not Moodle's, or an enrolment that ends before it begins: never active
        first = days[bisect.bisect_right(midnights, start) - 1] if start >= midnights[0] else None
        # Active until before timeend: its last second's day.
        last = days[bisect.bisect_right(midnights, end - 1) - 1] if 0 < end <= midnights[-1] else None
        learner = self._learners.get(user)
        if learner is None:
            source = self.source
            actor = source.mapper.pseudonymise(moodle_identifier(source.site, user))
            learner = self._learners[user] = (actor, source.mapper.learner_key(actor))
        course_id = self._courses.get(course)
        if course_id is None:
            course_id = self._courses[course] = name_id(f"{self.source.site}/course/view.php?id={course}")
        return (course_id, *learner, first, last)


def _days(first, last):
    """The local days (ISO text) from `first` to `last`."""
    first, last = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    return [(first + dt.timedelta(days=offset)).isoformat() for offset in range((last - first).days + 1)]


def _next_day(day):
    """The local day after `day` (ISO text)."""
    return (dt.date.fromisoformat(day) + dt.timedelta(days=1)).isoformat()
