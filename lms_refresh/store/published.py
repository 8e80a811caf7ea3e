"""The published rows of every grain as the stores keep them: the cells the publication reads, and the rows it
writes back. What a row holds is decided by lms_refresh.disclosure.policy; nothing here imports it.

A nightly run rewrites only what it changed (policy.republish): the rows of the days and periods it rebuilt,
and those that a move of a course's span adds or removes (every day or period from its first to its last
cell with at least k learners is published, withheld or not). So every read here is of some courses' rows at
given labels or at an end of their spans, each course one index range away: its cost follows what a run touches,
not the years of history behind it nor the courses it did not touch. Each read and write is one statement for a
set of courses (the dialect's `courses_table`, `ranges_table`, `courses_in`), never one per course: a run that
publishes 50,000 courses makes a few statements per grain, not 300,000. A grain is `"day"` (daily_metrics,
published_metrics) or one of lms_refresh.store.periods.GRAINS (period_metrics, published_periods); labels are ISO
days, `YYYY-Www` and `YYYY-MM`, which sort as text in calendar order (term names do not: a term is always
republished whole).
"""

import typing

from lms_refresh import instants
from lms_refresh.store.tables import column_names

# A day's cell as the publication reads it (see lms_refresh.disclosure.policy.published_row), and a period's:
# the same with `period` for `day`.
CELL_FIELDS = tuple(name for name in column_names("daily_metrics") if name != "course_id")
PERIOD_CELL_FIELDS = ("period",) + tuple(name for name in column_names("period_metrics")
                                         if name not in ("grain", "period", "course_id"))
_CHUNK = 5000  # courses (or ranges) per statement


class _Tables(typing.NamedTuple):
    owner: str  # the column naming whose cell a row is: a course's (course_id) or a category's (category_id)
    cells: str
    published: str
    label: str
    fields: tuple
    written: tuple  # the published table's columns: the key's prefix (course, or grain and course), then a row's
    by_course: str  # the index of `cells` by course, then label


_DAYS = _Tables("course_id", "daily_metrics", "published_metrics", "day", CELL_FIELDS,
                column_names("published_metrics"), "daily_metrics_by_course")
_PERIODS = _Tables("course_id", "period_metrics", "published_periods", "period", PERIOD_CELL_FIELDS,
                   column_names("published_periods"), "period_metrics_by_course")
# A category's cells and published rows (lms_refresh.store.categories): the same fields, under its own id.
_CATEGORY_DAYS = _Tables("category_id", "category_day_cells", "published_category_days", "day", CELL_FIELDS,
                         column_names("published_category_days"), "category_day_cells_by_category")
_CATEGORY_PERIODS = _Tables("category_id", "category_period_cells", "published_category_periods", "period",
                            PERIOD_CELL_FIELDS, column_names("published_category_periods"),
                            "category_period_cells_by_category")


def _of(grain, kind="course"):
    """Return (the grain's tables of `kind`'s cells, "course" or "category", the condition selecting its rows before
    the owner's, its parameters)."""
    if grain == "day":
        return (_DAYS if kind == "course" else _CATEGORY_DAYS), "", ()
    return (_PERIODS if kind == "course" else _CATEGORY_PERIODS), "grain = ? AND ", (grain,)


def _parts(values):
    values = list(values)
    return (values[start:start + _CHUNK] for start in range(0, len(values), _CHUNK))


class Published:
    """A mixin of SqlStore: `execute`, `executemany` and `dialect` come from it."""

    def cells(self, grain, courses, kind="course"):
        """Return the aggregates and record keys of all `grain` cells of `courses`: {course: {label: {field:
        value}}} (CELL_FIELDS, PERIOD_CELL_FIELDS); a course without one is not in it."""
        tables, where, parameters = _of(grain, kind)
        found = {}
        for part in _parts(courses):
            self._collect(found, tables, f"SELECT c.value, {self._fields(tables)} FROM {self.dialect.courses_table} "
                                         f"CROSS JOIN {self._by_course(tables)} "
                                         f"WHERE {where}m.{tables.owner} = c.value",
                          (self.dialect.id_set(part),) + parameters)
        return found

    def cells_in(self, grain, ranges, kind="course"):
        """Return the `grain` cells within `ranges` [(course, first label, last label)], as `cells` does."""
        tables, where, parameters = _of(grain, kind)
        found = {}
        for part in _parts(ranges):
            self._collect(found, tables, f"SELECT r.course, {self._fields(tables)} FROM {self.dialect.ranges_table} "
                                         f"CROSS JOIN {self._by_course(tables)} WHERE {where}"
                                         f"m.{tables.owner} = r.course AND m.{tables.label} BETWEEN r.lo AND r.hi",
                          self.dialect.range_set(part) + parameters)
        return found

    def _by_course(self, tables):
        return f"{tables.cells} AS m{self.dialect.indexed_by(tables.by_course)}"

    @staticmethod
    def _fields(tables):
        return ", ".join(f"m.{name}" for name in tables.fields)

    def _collect(self, found, tables, select, parameters):
        for course, *row in self.execute(select, parameters).fetchall():
            found.setdefault(course, {})[row[0]] = dict(zip(tables.fields, row, strict=True))

    def visible_spans(self, grain, courses, min_cell_size, kind="course"):
        """Return {course: (first, last)} labels of each of `courses`' `grain` cells with at least `min_cell_size`
        learners (days: within instants' range, which policy.course_rows publishes); a course with none is not
        in it."""
        tables, where, parameters = _of(grain, kind)
        where += f"{tables.owner} = c.value AND learners >= ?"
        parameters += (min_cell_size,)
        if grain == "day":
            where += " AND day BETWEEN ? AND ?"
            parameters += (instants.FIRST_DAY, instants.LAST_DAY)
        return self._ends(courses, tables.cells + self.dialect.indexed_by(tables.by_course), tables.label, where,
                          parameters)

    def published_spans(self, grain, courses, kind="course"):
        """Return {course: (first, last)} labels of each of `courses`' published `grain` rows; a course with none is
        not in it."""
        tables, where, parameters = _of(grain, kind)
        return self._ends(courses, tables.published, tables.label, where + f"{tables.owner} = c.value", parameters)

    def _ends(self, courses, table, label, where, parameters):
        # One ordered look-up per end and course (an index's first and last entry in range), never MIN and MAX
        # together, which SQLite answers by reading the whole range.
        ends = [f"(SELECT {label} FROM {table} WHERE {where} ORDER BY {label} {order} LIMIT 1)"
                for order in ("ASC", "DESC")]
        found = {}
        for part in _parts(courses):
            found.update((course, (first, last)) for course, first, last in self.execute(
                f"SELECT c.value, {', '.join(ends)} FROM {self.dialect.courses_table}",
                parameters + parameters + (self.dialect.id_set(part),)).fetchall() if first is not None)
        return found

    def write_published(self, grain, rows, *, courses=(), keep=None, kind="course"):
        """Write published `grain` rows [(course, (label, values...))]: those of `courses` go first (rewritten
        whole), then of each course in `keep` ({course: (first, last)}) those outside that span; `rows` replace
        those at their labels."""
        tables, where, parameters = _of(grain, kind)
        for part in _parts(courses):
            owned = self.dialect.courses_in.replace("course_id", tables.owner)
            self.execute(f"DELETE FROM {tables.published} WHERE {where}{owned}",
                         parameters + (self.dialect.id_set(part),))
        if keep:
            self.executemany(f"DELETE FROM {tables.published} WHERE {where}{tables.owner} = ? AND "
                             f"({tables.label} < ? OR {tables.label} > ?)",
                             [parameters + (course, first, last) for course, (first, last) in sorted(keep.items())])
        if rows:
            key = len(parameters) + 2  # the key's columns: the prefix, the course and the label
            columns, values = ", ".join(tables.written), ", ".join("?" * len(tables.written))
            update = ", ".join(f"{column} = excluded.{column}" for column in tables.written[key:])
            self.executemany(f"INSERT INTO {tables.published} ({columns}) VALUES ({values}) "
                             f"ON CONFLICT ({', '.join(tables.written[:key])}) DO UPDATE SET {update}",
                             [parameters + (course,) + tuple(row) for course, row in rows])

    def suppressed_on(self, days):
        """Return how many published rows of `days` have a withheld value."""
        if not days:
            return 0
        return self.execute(f"SELECT COUNT(*) FROM published_metrics WHERE suppressed = 1 AND {self.dialect.days_in}",
                            (self.dialect.day_set(days),)).fetchone()[0]
