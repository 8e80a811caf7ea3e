"""The published rows of every grain as the stores keep them: the cells the publication reads, and the rows it
writes back. What a row holds is decided by lms_refresh.disclosure.policy; nothing here imports it.

A nightly run rewrites only what it changed (policy.republish): the rows of the days and periods it rebuilt,
and those that a move of a course's span adds or removes (every day or period from its first to its last
cell with at least k learners is published, withheld or not). So every read here is of one course's rows at
given labels or at an end of its span, one index range away: its cost follows what a run touches, not the
years of history behind it. A grain is `"day"` (daily_metrics, published_metrics) or one of
lms_refresh.store.periods.GRAINS (period_metrics, published_periods); labels are ISO days, `YYYY-Www` and
`YYYY-MM`, which sort as text in calendar order (term names do not: a term is always republished whole).
"""

import typing

from lms_refresh import instants
from lms_refresh.store.tables import column_names

# A day's cell as the publication reads it (see lms_refresh.disclosure.policy.published_row), and a period's:
# the same with `period` for `day`.
CELL_FIELDS = tuple(name for name in column_names("daily_metrics") if name != "course_id")
PERIOD_CELL_FIELDS = ("period",) + tuple(name for name in column_names("period_metrics")
                                         if name not in ("grain", "period", "course_id"))
_CHUNK = 500  # labels per statement: well under SQLite's parameter limit


class _Tables(typing.NamedTuple):
    cells: str
    published: str
    label: str
    fields: tuple
    written: tuple  # the published table's columns: the key's prefix (course, or grain and course), then a row's


_DAYS = _Tables("daily_metrics", "published_metrics", "day", CELL_FIELDS, column_names("published_metrics"))
_PERIODS = _Tables("period_metrics", "published_periods", "period", PERIOD_CELL_FIELDS,
                   column_names("published_periods"))


def _of(grain, course):
    """Return (the grain's tables, the condition selecting `course`'s rows of it, its parameters)."""
    if grain == "day":
        return _DAYS, "course_id = ?", (course,)
    return _PERIODS, "grain = ? AND course_id = ?", (grain, course)


class Published:
    """A mixin of SqlStore: `execute`, `executemany` and `dialect` come from it."""

    def cells(self, grain, course, labels=None):
        """Return the aggregates and record keys of `course`'s `grain` cells, all of them or those at `labels`:
        {label: {field: value}} (CELL_FIELDS, PERIOD_CELL_FIELDS)."""
        tables, where, parameters = _of(grain, course)
        select = f"SELECT {', '.join(tables.fields)} FROM {tables.cells} WHERE {where}"
        if labels is None:
            rows = self.execute(select, parameters).fetchall()
        else:
            labels, rows = sorted(labels), []
            for start in range(0, len(labels), _CHUNK):
                part = labels[start:start + _CHUNK]
                rows += self.execute(f"{select} AND {tables.label} IN ({', '.join('?' * len(part))})",
                                     parameters + tuple(part)).fetchall()
        return {row[0]: dict(zip(tables.fields, row, strict=True)) for row in rows}

    def visible_span(self, grain, course, min_cell_size):
        """Return (first, last) label of `course`'s `grain` cells with at least `min_cell_size` learners (days:
        within instants' range, which policy.course_rows publishes), or None if it has none."""
        tables, where, parameters = _of(grain, course)
        where += " AND learners >= ?"
        parameters += (min_cell_size,)
        if grain == "day":
            where += " AND day BETWEEN ? AND ?"
            parameters += (instants.FIRST_DAY, instants.LAST_DAY)
        return self._ends(tables.cells, tables.label, where, parameters)

    def published_span(self, grain, course):
        """Return (first, last) label of `course`'s published `grain` rows, or None if it has none."""
        tables, where, parameters = _of(grain, course)
        return self._ends(tables.published, tables.label, where, parameters)

    def _ends(self, table, label, where, parameters):
        # One ordered look-up per end (an index's first and last entry in range), never MIN and MAX together,
        # which SQLite answers by reading the whole range.
        ends = []
        for order in ("ASC", "DESC"):
            row = self.execute(f"SELECT {label} FROM {table} WHERE {where} ORDER BY {label} {order} LIMIT 1",
                               parameters).fetchone()
            if row is None:
                return None
            ends.append(row[0])
        return tuple(ends)

    def write_published(self, grain, course, rows, keep=None):
        """Write `course`'s published `grain` rows [(label, values...)]. Without `keep`, they replace all its
        rows; with `keep` = (first, last), its rows outside that span go, and `rows` replace those at their labels."""
        tables, where, parameters = _of(grain, course)
        if keep is None:
            self.execute(f"DELETE FROM {tables.published} WHERE {where}", parameters)
        else:
            self.execute(f"DELETE FROM {tables.published} WHERE {where} AND ({tables.label} < ? OR {tables.label} > ?)",
                         parameters + tuple(keep))
        if rows:
            key = len(parameters) + 1  # the key's columns: the prefix and the label
            columns, values = ", ".join(tables.written), ", ".join("?" * len(tables.written))
            update = ", ".join(f"{column} = excluded.{column}" for column in tables.written[key:])
            self.executemany(f"INSERT INTO {tables.published} ({columns}) VALUES ({values}) "
                             f"ON CONFLICT ({', '.join(tables.written[:key])}) DO UPDATE SET {update}",
                             [parameters + tuple(row) for row in rows])

    def suppressed_on(self, days):
        """Return how many published rows of `days` have a withheld value."""
        if not days:
            return 0
        return self.execute(f"SELECT COUNT(*) FROM published_metrics WHERE suppressed = 1 AND {self.dialect.days_in}",
                            (self.dialect.day_set(days),)).fetchone()[0]
