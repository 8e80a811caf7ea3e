"""Course categories in the store: the categories a source has, the courses each counts over, and their cells.

A source hands a `sources.records.CategoryTree` (categories with their parent and path, and each course's own
category) or None when it has none to say (Moodle's tables could not be read: the store keeps what it had). The
store keeps the tree as the source has it now, and from it every (course, category) pair a course counts in: its own
category and each one above it on the category's path (`category_courses`).

A category's cell of a day or period is counted as the site's is, over its courses only: its distinct learners from
the courses' presence (learner_days, learner_periods: each learner once, however many of its courses they were in),
its event counts and record keys' sums from the courses' cells (daily_metrics, period_metrics), so that it costs per
learner-day (or learner-period) and per course cell, never per statement. A recompute counts again the categories'
cells of the days it rebuilt and of the periods it rebuilt (their weeks, months and terms), with the tree as it is
then; no other cell changes. So a course moved to another category moves its learners in the days and periods a run
counts from then on, and a rebuild counts every day again under the tree of its time; a closed period keeps what it
was counted with.
"""

import re

from lms_refresh.store import grains
from lms_refresh.store.tables import PERIOD_COUNTS, PRESENCE_FLAGS

# A path of at most 64 ids (deeper than any real tree: Moodle's own limit on a category's depth is far lower).
_PATH = re.compile(r"(?:/[0-9]{1,19}){1,64}")


def ancestry(path, number):
    """Return the category ids of `path` ("/1/4/7", the top first) if it is a path of category `number` (its last
    id), else (number,): a category whose path is not one stands alone."""
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        return (number,)
    ids = tuple(int(part) for part in path.split("/")[1:])
    whole = ids[-1] == number and len(set(ids)) == len(ids) and all(0 < part < 2 ** 63 for part in ids)
    return ids if whole else (number,)


_MODULUS = grains._MODULUS
_LEARNER_COLUMNS = ", ".join(grains._LEARNERS)
_OUTCOME_COLUMNS = ", ".join(grains._OUTCOME_KEYS)
_PART_COLUMNS = ", ".join(grains._PARTS)


def _learners_by_category(rows, flags, had):
    """The SELECT of each category's learners over `rows` (a FROM clause of one day's or one period's rows `d` joined
    to category_courses as `m`): each learner once (their key, and whether `had(flag)` in any of its courses), grouped
    by category and learner alone (the day or period is one: a longer key only slows the sort)."""
    learner = ", ".join(f"MAX(CASE WHEN {had(flag)} THEN 1 ELSE 0 END) AS {flag}" for flag in flags)
    counts = ", ".join(f"SUM({flag}) AS {name}" for flag, name in zip(flags, grains._LEARNERS[1:], strict=True))
    keys = ", ".join(f"COALESCE(SUM(learner_key) FILTER (WHERE {flag} = 1) % {_MODULUS}, 0) AS {key}"
                     for key, flag in zip(grains._OUTCOME_KEYS, (flags[1], flags[2], flags[3]), strict=True))
    return f"""SELECT category_id, COUNT(*) AS learners, {counts}, SUM(learner_key) % {_MODULUS} AS learner_key, {keys}
    FROM (SELECT m.category_id, d.actor, MAX(d.learner_key) AS learner_key, {learner}
        FROM {rows} GROUP BY m.category_id, d.actor) AS a
    GROUP BY category_id"""


def _summed(rows):
    return f"SELECT m.category_id, {grains._SUMMED} FROM {rows} GROUP BY m.category_id"


def _cells(table, cell, rows, sums, had):
    """The INSERT of a day's (`cell` "day") or a period's ("grain, period") category cells into `table`: the
    learners of `rows`, the sums of the courses' cells `sums`. Parameters: the cell's own, then `rows`' and `sums`'."""
    return f"""INSERT INTO {table} ({cell}, category_id, {_LEARNER_COLUMNS}, learner_key, {_OUTCOME_COLUMNS},
    {_PART_COLUMNS})
SELECT {", ".join("?" for _ in cell.split(","))}, l.category_id, {", ".join(f"l.{name}" for name in grains._LEARNERS)},
    l.learner_key, {", ".join(f"l.{name}" for name in grains._OUTCOME_KEYS)},
    {", ".join(f"e.{name}" for name in grains._PARTS)}
FROM ({_learners_by_category(rows, PRESENCE_FLAGS, had)}) AS l
JOIN ({_summed(sums)}) AS e ON e.category_id = l.category_id"""


# The flags in PRESENCE_FLAGS' order (attempt, completion, passed, failed, score, duration): _OUTCOME_KEYS' learners
# are those of the completion, passed and failed flags, as grains.OUTCOME_LEARNER_KEYS says. Parameters: the day,
# then the day twice (or the grain and period, then each twice).
_DAY_CELLS = _cells("category_day_cells", "day",
                    "learner_days AS d JOIN category_courses AS m ON m.course_id = d.course_id WHERE d.day = ?",
                    "daily_metrics AS d JOIN category_courses AS m ON m.course_id = d.course_id WHERE d.day = ?",
                    lambda flag: f"d.{flag} = 1")
_PERIOD_CELLS = _cells("category_period_cells", "grain, period",
                       "learner_periods AS d JOIN category_courses AS m ON m.course_id = d.course_id "
                       "WHERE d.grain = ? AND d.period = ?",
                       "period_metrics AS d JOIN category_courses AS m ON m.course_id = d.course_id "
                       "WHERE d.grain = ? AND d.period = ?",
                       lambda flag: f"d.{PERIOD_COUNTS[1 + PRESENCE_FLAGS.index(flag)]} > 0")


class Categories:
    """A mixin of SqlStore: `execute`, `executemany` and `dialect` come from it."""

    def record_categories(self, tree):
        """Keep the source's category `tree` (a sources.records.CategoryTree; None: keep what the store has), and
        from it the categories each course the store knows counts in. Only what changed is written."""
        if tree is None:
            return
        held = {row[0]: tuple(row[1:]) for row in self.execute(
            "SELECT category_id, name, parent, path, depth FROM categories").fetchall()}
        wanted = {}
        for number, (name, _, path) in tree.categories.items():
            # The path decides, as it does which courses the category counts: its parent is the id before its own
            # (Moodle's `parent` says the same, unless the database is inconsistent).
            ids = ancestry(path, number)
            wanted[number] = (name, ids[-2] if len(ids) > 1 else None, "/" + "/".join(str(part) for part in ids),
                              len(ids))
        self._write_changes("categories", "category_id", ("name", "parent", "path", "depth"), held, wanted)
        known = {row[0] for row in self.execute("SELECT course_id FROM courses").fetchall()}
        own = {course: (category,) for course, category in tree.courses.items()
               if course in known and category in tree.categories}
        held_own = {row[0]: (row[1],) for row in self.execute(
            "SELECT course_id, category_id FROM course_categories").fetchall()}
        self._write_changes("course_categories", "course_id", ("category_id",), held_own, own)
        # Every category above a course's own, as its path says; ids on the path that are no category count too,
        # so that a category read on one run and its parent's row not readable counts its courses the same.
        pairs = {(course, above) for course, (category,) in own.items()
                 for above in ancestry(wanted[category][2], category)}
        held_pairs = {tuple(row) for row in self.execute(
            "SELECT course_id, category_id FROM category_courses").fetchall()}
        if held_pairs - pairs:
            self.executemany("DELETE FROM category_courses WHERE course_id = ? AND category_id = ?",
                             sorted(held_pairs - pairs))
        if pairs - held_pairs:
            self.executemany("INSERT INTO category_courses (course_id, category_id) VALUES (?, ?)",
                             sorted(pairs - held_pairs))

    def _write_changes(self, table, key, columns, held, wanted):
        gone = sorted(set(held) - set(wanted))
        if gone:
            self.executemany(f"DELETE FROM {table} WHERE {key} = ?", [(number,) for number in gone])
        changed = sorted((number, *values) for number, values in wanted.items() if held.get(number) != values)
        if changed:
            update = ", ".join(f"{column} = excluded.{column}" for column in columns)
            self.executemany(f"INSERT INTO {table} ({key}, {', '.join(columns)}) VALUES "
                             f"({', '.join('?' for _ in range(len(columns) + 1))}) "
                             f"ON CONFLICT ({key}) DO UPDATE SET {update}", changed)

    def category_days(self, days, labels):
        """The days and periods ({grain: labels}) whose category cells a recompute counts: those it rebuilt, and
        once after the upgrade to schema 12 (meta `count_categories`) every day and period whose learners' presence
        the store keeps."""
        if self.execute("DELETE FROM meta WHERE key = 'count_categories'").rowcount:
            days = set(days) | {row[0] for row in self.execute("SELECT DISTINCT day FROM learner_days").fetchall()}
            labels = {grain: set(found) for grain, found in labels.items()}
            for grain, label in self.execute("SELECT DISTINCT grain, period FROM learner_periods").fetchall():
                labels.setdefault(grain, set()).add(label)
        return days, labels

    def rebuild_category_cells(self, days, labels, whole=()):
        """Count again the categories' cells of `days` (rebuilt) and of the periods `labels` ({grain: labels},
        rebuilt); return {grain ("day" among them): the category ids to publish again}: those with a cell there
        before or after, and every category with a cell or a published row of each grain in `whole`."""
        touched = {"day": set(), **{grain: set() for grain in labels}}
        # A store without categories (an xAPI source without [[categories]]) counts none: it reads no learner's
        # presence for them (it still forgets the cells of categories it had, and publishes their rows again).
        counted = self.execute("SELECT EXISTS (SELECT 1 FROM category_courses)").fetchone()[0]
        if days:
            day_set = self.dialect.day_set(days)
            where = f"WHERE {self.dialect.days_in}"
            touched["day"] |= self._categories_of("category_day_cells", where, (day_set,))
            self.execute(f"DELETE FROM category_day_cells {where}", (day_set,))
            if counted:
                # A day at a time, as the site's day cells are (grains.SITE_DAY): grouping a whole window's
                # learner-days by learner at once sorts them all in memory (peak RSS 158 MiB against 112 MiB for a
                # first run of 300,000 statements over 30 days).
                for (day,) in self.execute(f"SELECT DISTINCT day FROM daily_metrics {where}", (day_set,)).fetchall():
                    self.execute(_DAY_CELLS, (day, day, day))
                touched["day"] |= self._categories_of("category_day_cells", where, (day_set,))
        for grain, rebuilt in sorted(labels.items()):
            for label in sorted(rebuilt):
                where = "WHERE grain = ? AND period = ?"
                touched[grain] |= self._categories_of("category_period_cells", where, (grain, label))
                self.execute(f"DELETE FROM category_period_cells {where}", (grain, label))
                if counted:
                    self.execute(_PERIOD_CELLS, (grain, label, grain, label, grain, label))
                    touched[grain] |= self._categories_of("category_period_cells", where, (grain, label))
        terms = "term" in whole or bool(labels.get("term"))
        if terms:
            # A term no longer configured (grains.sync_terms forgot its courses' cells) goes with them.
            self.execute("DELETE FROM category_period_cells WHERE grain = 'term' AND period NOT IN "
                         "(SELECT DISTINCT period FROM period_metrics WHERE grain = 'term')")
        # The terms are published whole (run/period_publication.py): every category that has or had one.
        for grain in {*whole, *(("term",) if terms else ())}:
            cells, published = (("category_day_cells", "published_category_days") if grain == "day" else
                                ("category_period_cells", "published_category_periods"))
            where, parameters = ("", ()) if grain == "day" else ("WHERE grain = ?", (grain,))
            touched[grain] = (touched.get(grain, set()) | self._categories_of(cells, where, parameters)
                              | self._categories_of(published, where, parameters))
        return touched

    def _categories_of(self, table, where, parameters):
        return {row[0] for row in self.execute(f"SELECT DISTINCT category_id FROM {table} {where}",
                                               parameters).fetchall()}

    def category_cells(self):
        """The categories' cells and published rows as the publication reads and writes a course's
        (lms_refresh.disclosure.policy, run/period_publication.py): the same store, its category tables."""
        return CategoryCells(self)


class CategoryCells:
    """The categories' side of a store, with the interface of its courses' published rows (store.published)."""

    def __init__(self, store):
        self.store = store

    def cells(self, grain, categories):
        return self.store.cells(grain, categories, kind="category")

    def cells_in(self, grain, ranges):
        return self.store.cells_in(grain, ranges, kind="category")

    def enrolled(self, grain, categories):
        return {}  # a category has no enrolled learners: the source's enrolments are a course's

    def enrolled_in(self, grain, ranges):
        return {}

    def visible_spans(self, grain, categories, min_cell_size):
        return self.store.visible_spans(grain, categories, min_cell_size, kind="category")

    def published_spans(self, grain, categories):
        return self.store.published_spans(grain, categories, kind="category")

    def write_published(self, grain, rows, *, courses=(), keep=None):
        self.store.write_published(grain, rows, courses=courses, keep=keep, kind="category")

    def counted_from(self):
        return self.store.counted_from()

    def close_periods(self, cutoff):
        self.store.close_periods(cutoff)
