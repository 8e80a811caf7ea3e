"""The data dictionary (docs/data-dictionary.md, from lms_refresh/store/dictionary.py) against a real publication and a
real PostgreSQL serving schema: every table and column they have is described, with its type, and nothing else; and
the page's ready-to-paste queries run as written on both, giving what an independent recount gives."""

import contextlib
import datetime as dt
import re
import sqlite3

from helpers import docs
from helpers.period_reference import expected_periods
from helpers.publication import publication
from lms_refresh.store import dictionary
from lms_refresh.store.tables import PERIOD_SERVING_COLUMNS
from refresh.test_terms import add_terms
from refresh.test_weeks_and_months import K, activity, configure, dashboard, moment, stamp
from store.test_course_names import iri, named

PAGE = docs.page("docs/data-dictionary.md")


def published_columns(project):
    """{table: [(column, declared type)]} of what a dashboard can read: the SQLite publication's tables and views, or
    the views of the PostgreSQL serving schema."""
    if not project.postgres:
        with contextlib.closing(sqlite3.connect(f"file:{publication(project)}?mode=ro", uri=True)) as db:
            tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
            return {table: [(row[1], row[2]) for row in db.execute(f"PRAGMA table_info({table})")]
                    for table in tables}
    store = project.open_store()
    try:
        rows = store.db.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
            "ORDER BY table_name, ordinal_position", (f"{store.schema}_serving",)).fetchall()
    finally:
        store.close()
    found = {}
    for table, column, kind in rows:
        found.setdefault(table, []).append((column, kind))
    return found


def a_published_store(project, now):
    """Refresh `project` with three courses' activity over the weeks before `now` (one course named, a term
    around `now`, two courses in a category); return the statements written and the term."""
    configure(project)
    today = now.date()
    term = ("This term", (today - dt.timedelta(days=40)).isoformat(), (today + dt.timedelta(days=40)).isoformat())
    add_terms(project, [term])
    project.config.write_text(project.config.read_text() + '\n[[categories]]\nname = "Sciences"\n'
                                                           'courses = ["*/course/BIO101", "*/course/CHEM1"]\n')
    written = activity(11, today - dt.timedelta(days=24), 22)
    written += named("BIO101", {"en": "Biology"}, learners=2, stored=stamp(now - dt.timedelta(days=3)))
    project.write("a.ndjson", written)
    project.invoke("run", now=stamp(now), check=0)
    return written, term


def test_every_published_table_and_column_is_in_the_dictionary_with_its_type(project):
    a_published_store(project, moment("2026-11-20T04:15:00Z"))
    kind = "postgresql" if project.postgres else "sqlite"
    described = {entry.name: dictionary.columns(entry.name, kind) for entry in dictionary.TABLES
                 if dictionary.columns(entry.name, kind)}
    published = published_columns(project)
    for name in sorted(set(published) | set(described)):
        assert published.get(name) == described.get(name), name
    assert published == described
    # ...and the page shows every one of them, as the dictionary has it.
    for entry in dictionary.TABLES:
        assert f"### {entry.name}\n" in PAGE
        for column in entry.columns:
            assert re.search(rf"^\| `{column.name}` \| {column.sqlite} \| ", PAGE.split(f"### {entry.name}\n")[1],
                             re.M), (entry.name, column.name)


def queries():
    """{title: SQL} of the page's ready-to-paste queries."""
    part = PAGE.split("## Ready-to-paste queries", 1)[1]
    return {title: sql for title, sql in re.findall(r"^### (.*?)\n.*?```sql\n(.*?)```", part, re.M | re.S)}


def named_as_the_query_names(course, names):
    """The site as "Whole site", a course by its name, else by its IRI's last path segment (never blank)."""
    return "Whole site" if course is None else names.get(course, course.rstrip("/").rsplit("/", 1)[-1])


def test_every_query_of_the_page_runs_on_both_stores(project):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    a_published_store(project, now)
    found = queries()
    assert len(found) == 9, sorted(found)
    for title, sql in found.items():
        assert dashboard(project, sql), title  # each gives rows on a store with weeks, months and a term


def test_weekly_active_learners_by_name_keep_the_site_row_and_match_the_recount(project):
    now = moment("2026-11-20T04:15:00Z")
    written, term = a_published_store(project, now)
    rows = dashboard(project, queries()["Weekly active learners per course, by name, with the whole site"])
    names = {iri("BIO101"): "Biology"}
    expected = [(row[0], named_as_the_query_names(row[3], names), row[4])
                for row in expected_periods(written, "Europe/Paris", K, "week", now, (term,)) if row[13] == 1]
    expected.sort(key=lambda row: (row[0], row[1] != "Whole site", row[1]))
    assert rows == expected
    assert {row[1] for row in rows} >= {"Whole site", "Biology", "CHEM1"} and all(row[1] for row in rows)


def test_this_terms_completions_are_the_term_holding_today(project):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    written, term = a_published_store(project, now)
    add_terms(project, [term, ("Last year", "2020-09-01", "2020-12-18")])  # a term that does not hold today
    project.invoke("run", now=stamp(now + dt.timedelta(seconds=1)), check=0)
    rows = dashboard(project, queries()["This term's completions per course"])
    names = {iri("BIO101"): "Biology"}
    expected = [(row[0], named_as_the_query_names(row[3], names), row[7], row[8], row[9])
                for row in expected_periods(written, "Europe/Paris", K, "term", now, (term,))]
    expected.sort(key=lambda row: (row[0], row[1] != "Whole site", row[1]))
    assert rows == expected and {row[0] for row in rows} == {"This term"}


def test_learners_who_completed_and_passed_in_each_term_are_the_recounts_with_their_shares(project):
    now = moment("2026-11-20T04:15:00Z")
    written, term = a_published_store(project, now)
    rows = dashboard(project, queries()["Learners who completed and passed in each term, per course"])
    columns = ("active_learners", "completed_learners", "completed_share", "passed_learners", "pass_rate")
    expected = [(row[0], row[3], *(dict(zip(PERIOD_SERVING_COLUMNS, row, strict=True))[name] for name in columns))
                for row in expected_periods(written, "Europe/Paris", K, "term", now, (term,))
                if row[3] is not None and row[4] is not None]
    assert rows == sorted(expected) and rows
    assert all(row[4] == row[3] / row[2] for row in rows if row[3] is not None)  # completed ÷ active learners
