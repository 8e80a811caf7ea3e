"""The store's names: the IRIs of course and verb ids, what the sources name each course, and the serving
view's rows of course names.

A source hands course names as ("title", course id) entries of a batch's `names` (see sources.Batch):
(named_at, name, short_name, category, start_date, end_date), already made safe to publish by
lms_refresh.disclosure.names. An xAPI name carries the `stored` time of its statement, and a
name replaces the one kept only if it is newer (the same time: the greater name, by code point), so reading
old statements again never takes a course back to an old name, whatever order the batches come in. A
Moodle name (named_at None) is what the course table says now: it replaces the one kept.
"""

from lms_refresh.sources.records import title_of

_COLUMNS = ("course_id", "name", "short_name", "category", "start_date", "end_date", "named_at")
_FIELDS = ", ".join(_COLUMNS)
_UPDATE = ", ".join(f"{column} = excluded.{column}" for column in _COLUMNS[1:])
# Only courses the store knows (they have staged events) get a name: a Moodle site names every course.
_INSERT = (f"INSERT INTO course_names ({_FIELDS}) SELECT ?, ?, ?, ?, ?, ?, ? "
           f"WHERE EXISTS (SELECT 1 FROM courses WHERE course_id = ?) ON CONFLICT (course_id) DO UPDATE SET {_UPDATE}")


def _newer(bytewise):
    """The condition of a name replacing the one kept: a later `stored`; of the same, the greater name (records.title_of
    breaks a tie within a batch alike), by code point whatever the database's collation."""
    return (" WHERE excluded.named_at > course_names.named_at OR excluded.named_at = course_names.named_at "
            f"AND COALESCE(excluded.name, ''){bytewise} > COALESCE(course_names.name, ''){bytewise}")


class CourseNames:
    """The names of a SqlStore (store/base.py): a mixin, which needs its `execute` and `executemany`."""

    serving_courses = ""  # the serving view of course names, as this store names it

    def record_names(self, names):
        """Keep a batch's `names`: {(kind, id): IRI} of courses and verbs, {("title", id): name} of courses (an
        xAPI course's, what the newest of its naming statements says: sources.records.title_of)."""
        titles = {number: title_of(title) for (kind, number), title in names.items() if kind == "title"}
        titles = {number: title for number, title in titles.items() if title is not None}
        # One statement per table, not one per IRI: a first run of 50,000 courses meets 50,000 new ones.
        new = {"courses": [], "verbs": []}
        for (kind, number), iri in names.items():
            if kind != "title":
                new["courses" if kind == "course" else "verbs"].append((number, iri))
        for table, rows in new.items():
            if rows:
                self.executemany(f"INSERT INTO {table} VALUES (?, ?) ON CONFLICT DO NOTHING", rows)
        self.record_titles(titles)  # after the courses they name

    def course_iris(self):
        """Return {course id: IRI} of every course the store knows."""
        return dict(self.execute("SELECT course_id, iri FROM courses").fetchall())

    def label_courses(self, label_of):
        """Give every course that has none its label, `label_of` its IRI (the disclosure rule's, which the caller
        hands in: disclosure.names.iri_label), so that a course with no name is never shown blank. Once a run
        (publication.recompute): a store upgraded to schema 10 gets its courses' at its next run."""
        unlabelled = self.execute("SELECT course_id, iri FROM courses WHERE course_id NOT IN "
                                  "(SELECT course_id FROM course_labels)").fetchall()
        if unlabelled:
            self.executemany("INSERT INTO course_labels (course_id, label) VALUES (?, ?)",
                             [(course, label_of(iri)) for course, iri in unlabelled])

    def record_titles(self, titles):
        """Keep the names in `titles` {course id: (named_at or None, name, short name, category, start, end)}."""
        latest = [(course, *rest, named_at, course) for course, (named_at, *rest) in titles.items()
                  if named_at is not None]
        current = [(course, *rest, "", course) for course, (named_at, *rest) in titles.items() if named_at is None]
        if latest:
            self.executemany(_INSERT + _newer(self.dialect.bytewise), latest)
        if current:
            self.executemany(_INSERT, current)
