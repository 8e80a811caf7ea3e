"""What the stores share for rebuilding days and their weeks and months (lms_refresh.store.periods), in SQL.

A day is rebuilt from its staged events: each of its learners once per course with what they did
(learner_days), then its cells (daily_metrics), their learners counted from those rows. Every week
and month keeps each of its learners once per course too (learner_periods: on how many of its days
they were active, and did each thing), kept up to date by the rebuilt days alone — their old
presence subtracted, the new added — so a period's cell is counted from its own rows in one ordered
pass, never from its staged events nor from all its days: its distinct learners (and those with an
attempt, a completion, a pass, a fail, a score, a duration) and its learner key (each learner's key
once), and its event counts and record keys' sums from daily_metrics (sums of sums are sums; key sums
modulo 2**32). A run that rebuilds a day so rebuilds that day's week and month and no other, and its
cost follows the days it touches.

The whole site is one more course of the cells (tables.SITE), counted from the courses' presence with each
learner once (one more ordering of a rebuilt day's or period's learners, by learner), never summed.
"""

import contextlib
import json

from lms_refresh import instants
from lms_refresh.store import periods, presence
from lms_refresh.store.tables import (
    MAGNITUDE_SCALES,
    OUTCOME_LEARNER_KEYS,
    PERIOD_COUNTS,
    PERIOD_SERVING_COLUMNS,
    PRESENCE_FLAGS,
    SITE,
    SITE_PERIOD_SERVING_COLUMNS,
    SITE_TABLES,
)

_MODULUS = 4294967296  # key sums are kept modulo 2**32 (lms_refresh.disclosure.privacy)


# How daily_metrics is computed for the cells (day, course) of some days. The staging key is ordered by (day,
# course, actor): a day's learners are one range scan, each kept once in learner_days with what they did
# (PRESENCE). A cell is then two grouped passes in key order, never a sort nor a distinct count: its event counts
# and record keys' sums over its staged events (CELL_EVENTS), its learners over its rows of learner_days
# (CELL_LEARNERS: "learners with an attempt" are those whose presence has one; the learner key sums each
# learner's key once). Distinct counts over the staged events (six COUNT(DISTINCT actor), each an ephemeral
# index in SQLite) and an UPDATE for the learner key cost 9,384 instructions per statement where this costs
# 5,856 (callgrind, the cost model's sample).
def _key_sum(condition):
    return f"COALESCE(SUM(record_key) FILTER (WHERE {condition}) % {_MODULUS}, 0)"


CELL_EVENTS = (  # (daily_metrics column, its expression over the cell's staged events)
    ("statements", "COUNT(*)"), ("statement_key", f"SUM(record_key) % {_MODULUS}"),
) + tuple(metric for name, flag in (("attempt", "is_attempt"), ("completion", "is_completion"),
                                    ("passed", "is_passed"), ("failed", "is_failed")) for metric in (
    (name if name in ("passed", "failed") else f"{name}s", f"SUM({flag})"),
    (f"{name}_key", _key_sum(f"{flag} = 1")))) + (
    ("score_sum_micro", "SUM(score_micro)"), ("score_count", "COUNT(score_micro)"),
    ("score_key", _key_sum("score_micro IS NOT NULL")),
    ("duration_ms", "SUM(duration_ms)"), ("duration_count", "COUNT(duration_ms)"),
    ("duration_key", _key_sum("duration_ms IS NOT NULL")),
)
# The scale of the noise on the sums of scores and durations (lms_refresh.disclosure.policy): the largest of one
# record. A cell of parts (a period's days, the site's courses) takes its parts' largest, and none if a part with
# a sum has none (counted before schema version 9): its sum is then not published (fail closed).
CELL_SCALES = tuple(zip(MAGNITUDE_SCALES, ("MAX(ABS(score_micro))", "MAX(duration_ms)"), strict=True))
_LARGEST = ", ".join(f"CASE WHEN COUNT({summed}) > COUNT({name}) THEN NULL ELSE MAX({name}) END AS {name}"
                     for name, summed in MAGNITUDE_SCALES.items())
# The keys of the learners who did something (the cell key of a learner outcome count), each once: filtered, so
# that the aggregate is stepped only for them (most learner-days have no completion, pass or fail).
def _learner_key_sum(condition):
    return f"COALESCE(SUM(learner_key) FILTER (WHERE {condition}) % {_MODULUS}, 0)"


CELL_LEARNERS = (  # (daily_metrics column, its expression over the cell's rows of learner_days)
    ("learners", "COUNT(*)"),
) + tuple((f"{flag[4:]}_learners", f"SUM({flag})") for flag in PRESENCE_FLAGS) + (
    ("learner_key", f"SUM(learner_key) % {_MODULUS}"),
) + tuple((key, _learner_key_sum(f"{flag} = 1")) for key, flag in OUTCOME_LEARNER_KEYS.items())

_SUMS = tuple(name for name, _ in CELL_EVENTS)
_PARTS = _SUMS + tuple(MAGNITUDE_SCALES)  # what a cell of parts (a period's days, the site's courses) takes from them
_LEARNERS = tuple(name for name, _ in CELL_LEARNERS if not name.endswith("_key"))
_OUTCOME_KEYS = tuple(OUTCOME_LEARNER_KEYS)


# The learner outcome counts' cell keys of a cell of learners (a period's, the site's), each learner's key once if
# `had(flag)`, the condition that they did what the presence flag says.
def _outcome_keys(had):
    return ", ".join(f"{_learner_key_sum(had(flag))} AS {key}" for key, flag in OUTCOME_LEARNER_KEYS.items())


def _period_count(flag):
    return PERIOD_COUNTS[1 + PRESENCE_FLAGS.index(flag)]

# A cell's event counts and record keys' sums, the sums of its parts' (its days', its courses').
_SUMMED = ", ".join(f"SUM({name}){f' % {_MODULUS}' if name.endswith('_key') else ''} AS {name}"
                    for name in _SUMS) + ", " + _LARGEST

PRESENCE = f"""INSERT INTO learner_days (day, course_id, actor, learner_key, {", ".join(PRESENCE_FLAGS)})
SELECT day, course_id, actor, MAX(learner_key), MAX(is_attempt), MAX(is_completion), MAX(is_passed), MAX(is_failed),
    MAX(CASE WHEN score_micro IS NULL THEN 0 ELSE 1 END), MAX(CASE WHEN duration_ms IS NULL THEN 0 ELSE 1 END)
FROM staged_events WHERE {{days_in}} GROUP BY day, course_id, actor"""


def _grouped(metrics, table):
    return (f"SELECT day, course_id, {', '.join(f'{expression} AS {name}' for name, expression in metrics)}\n"
            f"    FROM {table} WHERE {{days_in}} GROUP BY day, course_id")


# After PRESENCE, with the same days: `{days_in}`'s parameter twice.
CELLS = f"""INSERT INTO daily_metrics (day, course_id, {
    ", ".join(name for name, _ in CELL_EVENTS + CELL_SCALES + CELL_LEARNERS)})
SELECT e.day, e.course_id, {", ".join([f"e.{name}" for name, _ in CELL_EVENTS + CELL_SCALES]
                                      + [f"l.{name}" for name, _ in CELL_LEARNERS])}
FROM ({_grouped(CELL_EVENTS + CELL_SCALES, "staged_events")}) AS e
JOIN ({_grouped(CELL_LEARNERS, "learner_days")}) AS l ON l.day = e.day AND l.course_id = e.course_id"""


_REBUILD = f"""INSERT INTO period_metrics (grain, period, course_id, {", ".join(_LEARNERS)}, learner_key,
    {", ".join(_OUTCOME_KEYS)}, {", ".join(_PARTS)})
SELECT ?, ?, l.course_id, l.learners, {", ".join(f"l.{name}" for name in _LEARNERS[1:])}, l.learner_key,
    {", ".join(f"l.{name}" for name in _OUTCOME_KEYS)}, {", ".join(f"e.{name}" for name in _PARTS)}
FROM (SELECT course_id, COUNT(*) AS learners,
        {", ".join(f"SUM(CASE WHEN {count} > 0 THEN 1 ELSE 0 END) AS {name}"
                   for count, name in zip(PERIOD_COUNTS[1:], _LEARNERS[1:], strict=True))},
        SUM(learner_key) % {_MODULUS} AS learner_key, {_outcome_keys(lambda flag: f"{_period_count(flag)} > 0")}
    FROM learner_periods WHERE grain = ? AND period = ?{{only}} GROUP BY course_id) AS l
JOIN (SELECT course_id, {_SUMMED}
    FROM daily_metrics WHERE day BETWEEN ? AND ?{{only}} GROUP BY course_id) AS e ON e.course_id = l.course_id"""


# The site's cells, each learner once however many courses they were in (learner_days and learner_periods hold
# the courses' rows only), one cell a statement: its learners grouped by learner (a sort, of one day's or one
# period's rows only), its event counts and record keys' sums the courses' summed. Parameters: the cell's day (or
# grain and period), then `where`'s (the same), then `sums`'s (the day, or the period's first and last days).
def _site_cell(table, cell, flags, where, sums, packed=False):
    learner = f"actor, MAX(learner_key) AS learner_key, {', '.join(f'MAX({flag}) AS {flag}' for flag in flags)}"
    had, widest = [f"{flag} > 0" for flag in flags], ""
    # Packed: a learner's flags (0 or 1 a row) summed into integers of _PER_SUM fields of _SITE_FIELD bits each,
    # as presence.py does. The learner's rows bound each field's sum; past what a field holds the cell is not
    # written. The sums themselves never overflow: the highest field's weight is
    # 2**20, so it takes 2**43 rows of one learner to reach 2**63 (all six flags in one sum overflowed at 8,192).
    if packed:
        groups = [flags[start:start + _PER_SUM] for start in range(0, len(flags), _PER_SUM)]
        learner = "actor, MAX(learner_key) AS learner_key, COUNT(*) AS courses, " + ", ".join(
            f"CAST(SUM({presence.pack(group, _SITE_FIELD)}) AS BIGINT) AS flags{number}"
            for number, group in enumerate(groups))
        had = [f"((flags{place // _PER_SUM} >> {_SITE_FIELD * (place % _PER_SUM)}) & {2 ** _SITE_FIELD - 1}) > 0"
               for place in range(len(flags))]
        widest = f" AND l.widest < {2 ** _SITE_FIELD}"  # no field can have overflowed into the next
    keys = _outcome_keys(lambda flag: had[PRESENCE_FLAGS.index(flag)])  # `flags` are in PRESENCE_FLAGS' order
    return f"""INSERT INTO {table} ({cell}, course_id, {", ".join(_LEARNERS)}, learner_key, {", ".join(_OUTCOME_KEYS)},
    {", ".join(_PARTS)})
SELECT {", ".join("?" for _ in cell.split(","))}, {SITE}, {", ".join(f"l.{name}" for name in _LEARNERS)}, l.learner_key,
    {", ".join(f"l.{name}" for name in _OUTCOME_KEYS)}, {", ".join(f"e.{name}" for name in _PARTS)}
FROM (SELECT COUNT(*) AS learners, {", ".join(f"SUM(CASE WHEN {condition} THEN 1 ELSE 0 END) AS {name}"
                                              for condition, name in zip(had, _LEARNERS[1:], strict=True))},
        SUM(learner_key) % {_MODULUS} AS learner_key, {keys}{", MAX(courses) AS widest" if packed else ""}
    FROM (SELECT {learner} FROM {where} GROUP BY actor) AS a) AS l,
    (SELECT {_SUMMED} FROM daily_metrics WHERE {sums}) AS e
WHERE l.learners > 0{widest}"""


# One learner grouping a day (by day and learner over a whole window would sort the window: 126 MiB more at 3M
# statements over 90 days), with no grouping by day above it: 7,541 instructions a statement against 11,204
# (callgrind, the cost model's sample).
# Its flags summed packed (a learner's rows of a day are in at most as many courses as a field counts: otherwise
# it writes nothing, and the day is counted flag by flag, SITE_DAY_EXACT): 24.5 ms a day of the benchmark's full
# 1M (29,269 learner-days, 16,212 learners) where seven maxima cost 28 ms.
_SITE_FIELD, _PER_SUM = 10, 3
SITE_DAY, SITE_DAY_EXACT = (_site_cell("daily_metrics", "day", PRESENCE_FLAGS, "learner_days WHERE day = ?",
                                       f"day = ? AND course_id <> {SITE}", packed) for packed in (True, False))
# A period's, with its learners' counts (their maxima: packed as the day's are, it cost 77 ms instead of 82 ms for
# a month of the benchmark's full 1M, 2026-12-06: too little for a second statement).
_SITE_PERIOD = _site_cell("period_metrics", "grain, period", PERIOD_COUNTS[1:],
                          "learner_periods WHERE grain = ? AND period = ?",
                          f"day BETWEEN ? AND ? AND course_id = {SITE}")


class Grains:
    """A mixin of SqlStore: `execute`, `executemany` and `dialect` come from it."""

    def rebuild_partitions(self, days, calendar):
        """Delete and rebuild the metrics of `days` from all staged events of those days, and their learners'
        presence in their periods of `calendar` (a periods.Calendar); return the rows written."""
        self.move_presence(days, calendar, presence.SUBTRACT)  # what the days held, before it goes
        day_set = self.dialect.day_set(days)
        learners, cells = (statement.format(days_in=self.dialect.days_in) for statement in (PRESENCE, CELLS))
        self.execute(f"DELETE FROM daily_metrics WHERE {self.dialect.days_in}", (day_set,))
        self.execute(f"DELETE FROM learner_days WHERE {self.dialect.days_in}", (day_set,))
        with self.filling("learner_days", "staged_events", day_set):  # a first run's, a rebuild's
            self.execute(learners, (day_set,))
        written = self.execute(cells, (day_set, day_set)).rowcount
        for (day,) in self.execute(f"SELECT DISTINCT day FROM daily_metrics WHERE {self.dialect.days_in}",
                                   (day_set,)).fetchall():
            if not self.dialect.packed_sums or self.execute(SITE_DAY, (day, day, day)).rowcount != 1:
                self.execute(SITE_DAY_EXACT, (day, day, day))
        self.move_presence(days, calendar, presence.ADD)
        return written

    def stored_calendar(self):
        """The periods.Calendar the store's term rows were counted with (meta `terms`)."""
        text = self.meta().get("terms")
        return periods.Calendar(json.loads(text) if text else ())

    def sync_terms(self, calendar):
        """Count the terms of `calendar` that the store does not hold as they are (new or changed), from the
        learners' presence it keeps, and forget the terms no longer configured; return {("term", name): (first
        day, last day)} of the terms counted (None if the terms are the store's already). A term that begins
        before the presence retention kept (meta `presence_from`) cannot be counted whole: it is not counted, nor
        kept among the store's terms (meta `terms`), so that no later run counts it from part of its presence
        either, and it is returned in a list under None at every run until it is moved. An unchanged term keeps
        its rows."""
        stored, uncounted = self.stored_calendar(), self.uncountable_terms(calendar)
        if stored.terms == calendar.terms and not uncounted:
            return None
        recounted = {}
        for name, first, last in stored.terms:
            if (name, first, last) not in calendar.terms or name in uncounted:
                for table in ("learner_periods", "period_metrics"):
                    self.execute(f"DELETE FROM {table} WHERE grain = 'term' AND period = ?", (name,))
        for name, first, last in calendar.terms:
            if (name, first, last) in stored.terms or name in uncounted:
                continue  # unchanged: its rows were kept up to date with every rebuilt day, as a week's are
            self.execute("DELETE FROM learner_periods WHERE grain = 'term' AND period = ?", (name,))
            for (day,) in self.execute("SELECT DISTINCT day FROM learner_days WHERE day BETWEEN ? AND ? ORDER BY day",
                                       (first, last)).fetchall():
                self.execute(presence.ADD, ("term", name, day))
            recounted[("term", name)] = (first, last)
        self.set_meta("terms", json.dumps([list(term) for term in calendar.without(uncounted).terms]))
        if uncounted:
            recounted[None] = sorted(uncounted)
        return recounted

    def uncountable_terms(self, calendar):
        """The names of the terms of `calendar` that cannot be counted whole from the presence the store keeps: a
        term not among the store's that begins before it (meta `presence_from`), and one among them that does and
        still has a day open (from the staging horizon on), which only a store that counted such a term from part
        of its presence (written before this check) holds: a term counted whole keeps its presence while it has
        a day open."""
        meta, stored = self.meta(), self.stored_calendar().terms
        kept_from, horizon = meta.get("presence_from"), meta.get("staging_horizon") or ""
        if kept_from is None:
            return set()
        return {name for name, first, last in calendar.terms
                if first < kept_from and ((name, first, last) not in stored or last >= horizon)}

    def countable(self, calendar):
        """`calendar` without its uncountable_terms."""
        return calendar.without(self.uncountable_terms(calendar))

    def reset_periods(self, horizon):
        """For a rebuild from the staging `horizon` (None: from the start), empty the presence and the periods
        from it on: a period with a day from the horizon on is counted again, with its closed days' presence."""
        if horizon is None:
            self.execute("DELETE FROM learner_periods")
            self.execute("DELETE FROM meta WHERE key = 'presence_from'")  # every day is read again
        else:
            self.move_presence({row[0] for row in self.execute(
                "SELECT DISTINCT day FROM learner_days WHERE day >= ?", (horizon,)).fetchall()}, self.stored_calendar())
        for table, day in (("learner_days", "day"), ("published_periods", "period_end"),
                           ("published_category_periods", "period_end")):
            self.execute(f"DELETE FROM {table} WHERE {day} >= ?", (horizon or "",))
        self.execute("DELETE FROM period_metrics" + (" WHERE period NOT IN (SELECT period FROM published_periods)"
                                                     if horizon else ""))
        self.execute("DELETE FROM category_period_cells" + (
            " WHERE period NOT IN (SELECT period FROM published_category_periods)" if horizon else ""))

    def move_presence(self, days, calendar, statement=presence.SUBTRACT):
        """Subtract from (or, with presence.ADD, add to) the learners of each period of `calendar` the presence
        learner_days holds on `days`; a learner left on no day of a period leaves it."""
        days = {day for day in days if instants.FIRST_DAY <= day <= instants.LAST_DAY}
        sign = 1 if statement is presence.ADD else -1
        # Into no learner at all (a first run's, a rebuild's), every period is filled and nothing else is done
        # to the table (a store fills it in bulk then, without its key: pg_bulk.py): a dialect that moves presence
        # by period fills each period whole (a SQLite period of up to presence.GROUPED_FILL_AFTER days is added day
        # by day, an upsert, but SQLite keeps its key).
        filling = (self.filling("learner_periods", "learner_days", self.dialect.day_set(days))
                   if statement is presence.ADD else contextlib.nullcontext(False))
        filled = {}  # the periods filled whole by this move, and with which days: parts of the longer ones
        found = calendar.periods_of(days)
        with filling as empty:
            for (grain, label) in sorted(found, key=self._moving_order(found, days, statement)):
                first, last = found[(grain, label)]
                in_period = sorted(day for day in days if first <= day <= last)
                grouping = self.dialect.presence_by_period or len(in_period) > presence.GROUPED_FILL_AFTER
                # Filled whole: into a table with no learner, or a period with none (asked only of one to be grouped)
                fresh = statement is presence.ADD and (empty or grouping and self._holds_no_learner(grain, label))
                packed = self.dialect.packed_sums and periods.length(first, last) <= presence.PACKED_DAYS
                if fresh and grouping:
                    parts, left = presence.parts_of(in_period, filled) if packed else ((), in_period)
                    with self.sorting():  # one sort of the period's rows by learner, each learner inserted once
                        self.execute(presence.filling_days(self.dialect.days_in, packed, len(parts)),
                                     (grain, label, *(key for part in parts for key in part),
                                      self.dialect.day_set(left)))
                elif self.dialect.presence_by_period:
                    self.execute(presence.moving_days(sign, self.dialect.days_in),
                                 (grain, label, self.dialect.day_set(in_period)))
                else:
                    for day in in_period:  # day by day: each pass in key order
                        self.execute(statement, (grain, label, day))
                if fresh:
                    filled[(grain, label)] = frozenset(in_period)
                if statement is presence.SUBTRACT:
                    self.execute("DELETE FROM learner_periods WHERE grain = ? AND period = ? AND days = 0",
                                 (grain, label))

    def _moving_order(self, found, days, statement):
        """The order in which to move the periods `found` (periods.Calendar.periods_of `days`): with packed sums,
        weeks, then months, then terms if one may be filled whole grouped, so that it is filled from those before it
        (presence.parts_of); otherwise in the table's key order, in which SQLite appends each period's rows after
        the last one's, not in front of them (3,700 instructions a statement of the cost model's recompute, weeks
        first)."""
        grouped = statement is presence.ADD and self.dialect.packed_sums and any(
            sum(first <= day <= last for day in days) > presence.GROUPED_FILL_AFTER for first, last in found.values())
        return (lambda period: (periods.GRAINS.index(period[0]), period)) if grouped else None

    def _holds_no_learner(self, grain, label):
        return self.execute("SELECT 1 FROM learner_periods WHERE grain = ? AND period = ? LIMIT 1",
                            (grain, label)).fetchone() is None

    def rebuild_periods(self, days, calendar, everything=(), also=None, touched=None):
        """Rebuild the cells of every period of `calendar` that holds one of `days` (ISO text, already rebuilt),
        and of the periods `also` ({(grain, label): (first, last)}); return ({grain: course ids to publish again}
        (every course of each grain in `everything`), {grain: the labels rebuilt}).

        With `touched` ({day: the course ids with a cell on it before or after its rebuild}), a period of `days`
        recounts only the cells of the courses touched on its rebuilt days, and the site's: no other course's
        presence or days changed, nor did its cell. The periods `also` are counted whole."""
        courses = {grain: set() for grain in periods.GRAINS}
        labels = {grain: set() for grain in periods.GRAINS}
        days = {day for day in days if instants.FIRST_DAY <= day <= instants.LAST_DAY}
        for (grain, label), (first, last) in sorted({**calendar.periods_of(days), **(also or {})}.items()):
            labels[grain].add(label)
            whole = touched is None or (grain, label) in (also or {})
            some = self._period_courses(grain, label) if whole else {SITE}.union(
                *(touched.get(day, ()) for day in days if first <= day <= last))
            courses[grain].update(some)
            only, some = ("", ()) if whole else (f" AND {self.dialect.courses_in}", (self.dialect.id_set(some),))
            self.execute(f"DELETE FROM period_metrics WHERE grain = ? AND period = ?{only}", (grain, label, *some))
            self.execute(_REBUILD.replace("{only}", only), (grain, label, grain, label, *some, first, last, *some))
            self.execute(_SITE_PERIOD, (grain, label, grain, label, first, last))
            if whole:
                courses[grain].update(self._period_courses(grain, label))
        for grain in everything:
            courses[grain] = {row[0] for row in self.execute(
                "SELECT course_id FROM period_metrics WHERE grain = ? UNION "
                "SELECT course_id FROM published_periods WHERE grain = ?", (grain, grain)).fetchall()}
        return courses, labels

    def _period_courses(self, grain, label):
        return {row[0] for row in self.execute(
            "SELECT course_id FROM period_metrics WHERE grain = ? AND period = ? UNION "
            "SELECT course_id FROM published_periods WHERE grain = ? AND period = ?",
            (grain, label, grain, label)).fetchall()}

    def close_periods(self, cutoff):
        """Mark complete the published periods that ended (closes_at) at or before the instant `cutoff` and that
        were counted whole: none that begins before `counted_from`."""
        for table in ("published_periods", "published_category_periods"):
            self.execute(f"UPDATE {table} SET complete = 1 WHERE complete = 0 AND closes_at <= ? "
                         "AND period_start >= ?", (instants.to_cursor(cutoff), self.counted_from()))

    def counted_from(self):
        """The first local day the store counts periods from ('' if any): a period that begins before it is not
        counted whole. A rebuild that keeps nothing before its first day sets it there (run/identity.py)."""
        return self.meta().get("counted_from") or ""

    def period_serving_rows(self, grain):
        """Return the serving view of `grain`'s rows, ordered, with dates as ISO text in every store."""
        view = self.serving_period_view(periods.TABLE_OF[grain])
        rows = self.execute(f"SELECT {', '.join(PERIOD_SERVING_COLUMNS)} FROM {view}").fetchall()
        site = self.execute(f"SELECT {', '.join(SITE_PERIOD_SERVING_COLUMNS)} "
                            f"FROM {self.serving_period_view(SITE_TABLES[grain])}").fetchall()
        rows += [(*row[:3], None, *row[3:]) for row in site]
        rows = [(row[0], str(row[1]), str(row[2])) + tuple(row[3:]) for row in rows]
        return sorted(rows, key=lambda row: (row[1], row[0], row[3] is not None, row[3] or ""))

    def serving_period_view(self, table):
        """The name of a period table's serving view in this store."""
        return self.dialect.serving_of(table)

    def drop_presence_before(self, day):
        """Delete the learners' presence on local days before `day`, and in the periods that begin before it
        (retention: see periods.Calendar.first_kept_presence); those periods are never rebuilt again."""
        for grain in periods.CALENDAR_GRAINS:
            label, first, last = periods.period_of(grain, day)
            kept = label if first == day else periods.period_of(grain, periods.following(last))[0]
            self.execute("DELETE FROM learner_periods WHERE grain = ? AND period < ?", (grain, kept))
        for name, first, _ in self.stored_calendar().terms:
            if first < day:
                self.execute("DELETE FROM learner_periods WHERE grain = 'term' AND period = ?", (name,))
        self.set_meta("presence_from", max(day, self.meta().get("presence_from") or day))
        return self.execute("DELETE FROM learner_days WHERE day < ?", (day,)).rowcount
