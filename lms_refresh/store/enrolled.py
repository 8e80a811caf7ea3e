"""The enrolled learners' cells as the stores keep them: how many learners were enrolled in each course (and in
the whole site, tables.SITE) at any moment of a day or period, with the sum of their keys, and which days and
periods are settled. Counted in Python (lms_refresh.run.enrolment) from what the source reads; what is published
of them is decided by lms_refresh.disclosure.policy. No learner is kept here, only the aggregates.

Every read is of some courses at some labels (one statement for a set of courses, as store/published.py reads
the activity cells), every write of the periods one run counted: a run's cost follows the periods it counts, not
the history behind them.
"""

_CHUNK = 5000  # courses (or ranges) per statement, as store/published.py reads


def _parts(values):
    values = list(values)
    return (values[start:start + _CHUNK] for start in range(0, len(values), _CHUNK))


class Enrolled:
    """A mixin of SqlStore: `execute`, `executemany` and `dialect` come from it."""

    def enrolled(self, grain, courses):
        """Return every enrolled cell of `grain` ("day" or a period's) of `courses`: {course: {label: (enrolled,
        key sum)}}; a course without one is not in it."""
        found = {}
        for part in _parts(courses):
            self._collect_enrolled(found, f"SELECT c.value, m.period, m.enrolled, m.enrolled_key FROM "
                                          f"{self.dialect.courses_table} CROSS JOIN {self._enrolled_by_course()} "
                                          "WHERE m.grain = ? AND m.course_id = c.value",
                                   (self.dialect.id_set(part), grain))
        return found

    def enrolled_in(self, grain, ranges):
        """Return the enrolled cells of `grain` within `ranges` [(course, first label, last label)], as `enrolled`."""
        found = {}
        for part in _parts(ranges):
            self._collect_enrolled(found, f"SELECT r.course, m.period, m.enrolled, m.enrolled_key FROM "
                                          f"{self.dialect.ranges_table} CROSS JOIN {self._enrolled_by_course()} "
                                          "WHERE m.grain = ? AND m.course_id = r.course "
                                          "AND m.period BETWEEN r.lo AND r.hi",
                                   self.dialect.range_set(part) + (grain,))
        return found

    def _enrolled_by_course(self):
        return f"enrolled_cells AS m{self.dialect.indexed_by('enrolled_cells_by_course')}"

    def _collect_enrolled(self, found, select, parameters):
        for course, label, enrolled, key in self.execute(select, parameters).fetchall():
            found.setdefault(course, {})[label] = (enrolled, key)

    def unsettled_enrolment_periods(self):
        """Return {(grain, label): (first day, last day)} of the days and periods counted but not settled."""
        return {(grain, label): (first, last) for grain, label, first, last in self.execute(
            "SELECT grain, period, first_day, last_day FROM enrolled_periods WHERE settled = 0").fetchall()}

    def settled_enrolment_periods(self, wanted):
        """Return {(grain, label): (first day, last day) it was counted for} of the settled ones of the days and
        periods `wanted` ({(grain, label): ...}): per grain, one look-up of the labels between the least and the
        greatest wanted."""
        settled = {}
        for grain in sorted({grain for grain, _ in wanted}):
            labels = sorted(label for kind, label in wanted if kind == grain)
            settled.update(((grain, label), (first, last)) for label, first, last in self.execute(
                "SELECT period, first_day, last_day FROM enrolled_periods WHERE grain = ? AND period BETWEEN ? AND ? "
                "AND settled = 1", (grain, labels[0], labels[-1])).fetchall() if (grain, label) in wanted)
        return settled

    def write_enrolled(self, counted):
        """Replace the enrolled cells of the days and periods `counted` ({(grain, label): (first day, last day,
        settled, {course: (enrolled, key sum)})}); return {(grain, label): the courses whose cell changed (a cell
        new, gone, or counted otherwise)}: only their published rows can change."""
        touched = {}
        for (grain, label), (first, last, settled, cells) in sorted(counted.items()):
            before = {course: (enrolled, key) for course, enrolled, key in self.execute(
                "SELECT course_id, enrolled, enrolled_key FROM enrolled_cells WHERE grain = ? AND period = ?",
                (grain, label)).fetchall()}
            self.execute("DELETE FROM enrolled_cells WHERE grain = ? AND period = ?", (grain, label))
            self.executemany("INSERT INTO enrolled_cells (grain, period, course_id, enrolled, enrolled_key) "
                             "VALUES (?, ?, ?, ?, ?)",
                             [(grain, label, course, enrolled, key)
                              for course, (enrolled, key) in sorted(cells.items())])
            self.execute("INSERT INTO enrolled_periods (grain, period, first_day, last_day, settled) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT (grain, period) DO UPDATE SET "
                         "first_day = excluded.first_day, last_day = excluded.last_day, settled = excluded.settled",
                         (grain, label, first, last, int(settled)))
            touched[(grain, label)] = {course for course in before.keys() | cells.keys()
                                       if before.get(course) != cells.get(course)}
        return touched

    def reset_enrolled(self, horizon):
        """For a rebuild from the local day `horizon` (None: from the start), forget the enrolled cells of every day
        and period that ends on or after it: the rebuild counts them again."""
        self.execute("DELETE FROM enrolled_cells WHERE (grain, period) IN "
                     "(SELECT grain, period FROM enrolled_periods WHERE last_day >= ?)", (horizon or "",))
        self.execute("DELETE FROM enrolled_periods WHERE last_day >= ?", (horizon or "",))
