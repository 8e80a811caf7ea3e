"""A night's cost follows the courses its statements touched, not the courses the store holds: a run that adds
statements to one course, on a day in the same week, month and term as every other course's, recounts and
publishes again that course's cells and the whole site's, and no other course's; and the statements it makes are
as many with many courses as with few. The published rows stay exactly those of the independent recount, on both
stores."""

import datetime as dt
import json

from helpers.period_reference import expected_periods
from helpers.reference import expected_serving
from helpers.statements import statement
from lms_refresh.store import periods
from lms_refresh.store.base import SqlStore
from lms_refresh.store.tables import SITE

K = 3
TERM = '[[terms]]\nname = "Autumn"\nfirst_day = 2026-09-01\nlast_day = 2026-12-18\n'
NIGHT = "2026-10-02T04:15:00Z"


def _history(courses):
    """K learners in each of `courses` courses on 2026-09-28 (week 40, September, the term), read on the 1st."""
    return [statement(learner=f"l{n}", course=f"C{course}", timestamp="2026-09-28T10:00:00Z",
                      stored="2026-10-01T00:00:00Z", verb="completed") for course in range(courses) for n in range(K)]


def _night():
    """K more learners in course C1 on 2026-09-30: the same week, month and term as the history."""
    return [statement(learner=f"m{n}", course="C1", timestamp="2026-09-30T10:00:00Z",
                      stored="2026-10-02T00:00:00Z") for n in range(K)]


def _counted_night(project, monkeypatch, courses):
    """Build `courses` courses' history, then run the night; return (the statements the night made, the course
    ids whose published rows it wrote) and the night's store."""
    project.configure(extra_top=f"min_cell_size = {K}\n", bootstrap_days=60)
    project.config.write_text(project.config.read_text() + TERM)
    project.write("a.ndjson", _history(courses))
    project.invoke("run", now="2026-10-01T04:15:00Z", check=0)
    project.write("b.ndjson", _night())
    statements, written = [], set()
    execute, executemany = SqlStore.execute, SqlStore.executemany

    def counted(store, statement, parameters=()):
        statements.append(statement)
        return execute(store, statement, parameters)

    def counted_many(store, statement, rows):
        rows = list(rows)
        statements.append(statement)
        for table, place in (("published_metrics", 0), ("published_periods", 1)):
            if statement.startswith(f"INSERT INTO {table} "):
                written.update(row[place] for row in rows)
        return executemany(store, statement, rows)

    monkeypatch.setattr(SqlStore, "execute", counted)
    monkeypatch.setattr(SqlStore, "executemany", counted_many)
    project.invoke("run", now=NIGHT, check=0)
    monkeypatch.undo()
    return statements, written


def test_a_night_on_one_course_writes_only_its_rows_and_the_sites(project, monkeypatch):
    statements, written = _counted_night(project, monkeypatch, 12)
    (touched,) = project.query("SELECT course_id FROM courses WHERE iri LIKE '%/C1'")
    assert written == {touched[0], SITE}
    # and what it kept of the others is what they were: every row equals the independent recount
    everything = _history(12) + _night()
    lines = [json.dumps(s) for s in everything]
    now = dt.datetime.fromisoformat(NIGHT.replace("Z", "+00:00"))
    assert project.serving(site=True) == expected_serving(lines, now - dt.timedelta(days=60), now, "Europe/Paris", K)
    terms = [("Autumn", "2026-09-01", "2026-12-18")]
    for grain in periods.GRAINS:
        assert project.grain_rows(grain, site=True) == expected_periods(everything, "Europe/Paris", K, grain, now,
                                                                        terms=terms), grain


def test_a_nights_statements_do_not_grow_with_the_courses(tmp_path, make_project, monkeypatch):
    few, _ = _counted_night(make_project(tmp_path / "few"), monkeypatch, 4)
    many, _ = _counted_night(make_project(tmp_path / "many"), monkeypatch, 40)
    assert len(many) == len(few)
