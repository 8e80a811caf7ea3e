"""The site's rows apart from the courses', the freshness row and the declared keys (schema 11), on both stores: what a
dashboard reads (the SQLite publication file, PostgreSQL's serving schema) against the independent recounts
(tests/helpers/reference.py, tests/helpers/period_reference.py), and a store of schema 10 upgraded by its next run."""

import contextlib
import datetime as dt
import json
import sqlite3

import pytest

from helpers import docs
from helpers.downgrade import before_site_apart
from helpers.period_reference import expected_periods
from helpers.publication import publication
from helpers.reference import expected_serving
from lms_refresh.config import load_config
from lms_refresh.store import open_store, periods, tables
from refresh.test_terms import add_terms
from refresh.test_weeks_and_months import K, activity, configure, dashboard, moment, stamp
from store.test_course_names import iri, named

NOW = moment("2026-11-20T04:15:00Z")
TERM = ("Autumn", "2026-09-01", "2026-12-18")
COURSE_TABLES = {"day": "daily_metrics", **periods.TABLE_OF}
METRICS = ("active_learners", "statements", "attempts", "completions", "passed", "failed")


def refreshed(project):
    """Three courses over eight weeks (one named), a term around them, refreshed at NOW with exact counts; return
    the statements written."""
    configure(project)
    add_terms(project, [TERM])
    written = activity(5, dt.date(2026, 9, 28), 50)
    written += named("BIO101", {"en": "Biology"}, learners=1, stored=stamp(NOW - dt.timedelta(days=3)))
    project.write("a.ndjson", written)
    project.invoke("run", now=stamp(NOW), check=0)
    return written


def expected(written, grain):
    """{(period or day, course or None): (the six counts)} of the recount of `grain`."""
    if grain == "day":
        lines = [json.dumps(statement) for statement in written]
        rows = expected_serving(lines, moment("2000-01-01T00:00:00Z"), NOW, "Europe/Paris", K)
        return {(row[0], row[1]): tuple(row[2:8]) for row in rows}
    rows = expected_periods(written, "Europe/Paris", K, grain, NOW, (TERM,))
    return {(row[0], row[3]): tuple(row[4:10]) for row in rows}


def key_of(grain):
    return "day" if grain == "day" else "period"


@pytest.mark.parametrize("grain", ["day", *periods.GRAINS])
def test_a_sum_over_a_course_table_is_a_sum_of_courses_and_the_site_tables_hold_the_sites_rows(project, grain):
    written = refreshed(project)
    recount = expected(written, grain)
    table, key = COURSE_TABLES[grain], key_of(grain)
    # What a chart tool sums by default: each period's courses, and nothing else.
    sums = dashboard(project, f"SELECT {key}, {', '.join(f'SUM({m})' for m in METRICS)} FROM {table} "
                              f"GROUP BY {key} ORDER BY {key}")
    courses_only = {}
    for (period, course), values in recount.items():
        if course is not None:
            total = courses_only.setdefault(period, [None] * len(METRICS))
            for index, value in enumerate(values):
                if value is not None:
                    total[index] = (total[index] or 0) + value
    assert {str(row[0]): tuple(row[1:]) for row in sums} == {p: tuple(v) for p, v in courses_only.items()}
    assert sums
    # No row of a course table lacks its course; the site's table holds the recount's site rows, exactly.
    assert dashboard(project, f"SELECT COUNT(*) FROM {table} WHERE course IS NULL") == [(0,)]
    site = dashboard(project, f"SELECT {key}, {', '.join(METRICS)} FROM site_{table} ORDER BY {key}")
    assert {(str(row[0]), None): tuple(row[1:]) for row in site} == {
        cell: values for cell, values in recount.items() if cell[1] is None}
    # The site's learners are distinct across courses: fewer than the courses' sum in some period.
    assert any(row[1] < (courses_only[str(row[0])][0] or 0) for row in site)


def test_the_freshness_row_says_the_watermark_in_the_zone_and_in_utc_and_the_settings(project):
    refreshed(project)
    rows = dashboard(project, "SELECT * FROM freshness")
    assert len(rows) == 1
    row = dict(zip(tables.FRESHNESS_COLUMNS, rows[0], strict=True))
    # The lag is 0s: the run read up to its own now, 04:15 UTC, 05:15 in Paris (CET, +01:00 in November).
    assert row["data_as_of_utc"] == "2026-11-20T04:15:00Z" and row["data_as_of"] == "2026-11-20T05:15:00+01:00"
    assert row["last_success"] == "2026-11-20T04:15:00Z" and row["timezone"] == "Europe/Paris"
    assert row["schema_version"] == tables.SCHEMA_VERSION
    assert (row["min_cell_size"], row["method"], row["max_noise"]) == (K, "none", 3)
    published = dt.datetime.fromisoformat(row["published_at"].replace("Z", "+00:00"))
    assert NOW <= published < NOW + dt.timedelta(minutes=5)
    # A backfill is no success: the data's time and the last success stay; a later run moves both, in summer time
    # too (+02:00).
    project.invoke("backfill", "--since", "2026-10-01", "--until", "2026-10-02", now=stamp(NOW), check=0)
    again = dict(zip(tables.FRESHNESS_COLUMNS, dashboard(project, "SELECT * FROM freshness")[0], strict=True))
    assert {k: again[k] for k in ("data_as_of", "data_as_of_utc", "last_success")} == {
        k: row[k] for k in ("data_as_of", "data_as_of_utc", "last_success")}
    project.invoke("run", now="2027-04-02T08:00:00Z", check=0)  # in summer time
    last = dict(zip(tables.FRESHNESS_COLUMNS, dashboard(project, "SELECT * FROM freshness")[0], strict=True))
    assert (last["data_as_of"], last["data_as_of_utc"], last["last_success"]) == (
        "2027-04-02T10:00:00+02:00", "2027-04-02T08:00:00Z", "2027-04-02T08:00:00Z")


def test_the_dictionarys_freshness_query_runs_as_written(project):
    refreshed(project)
    page = docs.page("docs/data-dictionary.md")
    query = page.split("### How fresh the data is", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    assert dashboard(project, query) == [("2026-11-20T05:15:00+01:00", "Europe/Paris", "2026-11-20T04:15:00Z",
                                          "2026-11-20T04:15:00Z", K, "none", 3)]


def test_the_publication_declares_each_tables_key_and_its_course_a_row_of_courses(sqlite_project):
    refreshed(sqlite_project)
    path = publication(sqlite_project)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:  # (the PRAGMA below: no transaction)
        for grain, table in COURSE_TABLES.items():
            assert [row[2:5] for row in db.execute(f"PRAGMA foreign_key_list({table})")] == [
                ("courses", "course", "course")], table
            keys = sorted((row[5], row[1]) for row in db.execute(f"PRAGMA table_info({table})") if row[5])
            assert [name for _, name in keys] == [key_of(grain), "course"], table
            site_keys = [row[1] for row in db.execute(f"PRAGMA table_info(site_{table})") if row[5]]
            assert site_keys == [key_of(grain)], table
            # A second row under a key is refused, in the course table and in the site's.
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
                db.execute(f"INSERT INTO {table} SELECT * FROM {table} LIMIT 1")
            with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
                db.execute(f"INSERT INTO site_{table} SELECT * FROM site_{table} LIMIT 1")
            assert "course" in columns
        # Every course of every table is a row of courses: with the foreign keys checked, none is missing.
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        db.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            db.execute("INSERT INTO daily_metrics (day, course, suppressed) VALUES ('2026-11-01', 'urn:nowhere', 0)")


def test_the_by_name_views_never_show_a_blank_name(project):
    written = refreshed(project)
    rows = dashboard(project, "SELECT period, course, course_name, active_learners FROM weekly_metrics_by_name "
                              "ORDER BY period, course")
    recount = expected(written, "week")
    names = {iri("BIO101"): "Biology", iri("CHEM1"): "CHEM1", iri("TINY"): "TINY"}  # the IRI's last segment
    assert [(row[0], row[1], row[2], row[3]) for row in rows] == sorted(
        (period, course, names[course], values[0]) for (period, course), values in recount.items()
        if course is not None)
    assert {row[2] for row in rows} == {"Biology", "CHEM1"} and all(row[2] for row in rows)
    for table in tables.BY_NAME.values():  # every grain's, each as many rows as its course table
        course_table = table.removesuffix("_by_name")
        assert dashboard(project, f"SELECT COUNT(*) FROM {table} WHERE course_name IS NULL OR course_name = ''") \
            == [(0,)]
        assert dashboard(project, f"SELECT COUNT(*) FROM {table}") == dashboard(
            project, f"SELECT COUNT(*) FROM {course_table}")


def test_a_course_whose_iri_ends_in_slashes_or_hostile_text_is_labelled_by_the_name_rule(sqlite_project):
    from lms_refresh.disclosure.names import iri_label

    assert iri_label("https://lms.example.edu/course/BIO101/") == "BIO101"
    assert iri_label("urn:course:x") == "urn:course:x"
    assert iri_label("https://lms.example.edu/course/a\u202egpj.exe") == "agpj.exe"  # the bidi override goes
    assert iri_label("https://lms.example.edu/" + "x" * 5000) == "x" * 200  # bounded as a name is
    assert iri_label("https://lms.example.edu///") == "lms.example.edu"
    assert iri_label("\u202e") == "(unnamed course)"  # nothing left of it: never blank


def taken_back_to_schema_10(project):
    """Take the refreshed store of `project` back to schema 10 as the previous lms-refresh left it
    (helpers/downgrade.py: its views with the site's rows, course NULL; none of schema 11's tables or views) and
    (SQLite) its publication file to that shape."""
    config = load_config(str(project.config), {})
    store = open_store(config, {}, create=False)
    ddl = getattr(store, "_ddl", lambda text: text)
    try:
        store.begin()
        for statement in before_site_apart(store.dialect, schema=getattr(store, "schema", "lms_refresh")):
            store.db.execute(ddl(statement))
        store.set_meta("schema_version", tables.SITE_APART_SINCE - 1)
        if project.postgres:
            store.db.execute(f"DELETE FROM {store.schema}.schema_version WHERE version >= {tables.SITE_APART_SINCE}")
        store.commit()
    finally:
        store.close()
    if not project.postgres:  # the file as the previous lms-refresh wrote it: the site's rows with course NULL
        path = publication(project)
        path.unlink()
        with contextlib.closing(sqlite3.connect(project.store)) as db:
            db.execute("ATTACH DATABASE ? AS old", (str(path),))
            db.execute("CREATE TABLE old.daily_metrics AS SELECT * FROM serving_daily_metrics")
            for view in tables.PERIOD_VIEWS.values():
                db.execute(f"CREATE TABLE old.{view} AS SELECT * FROM serving_{view}")
            db.execute("CREATE TABLE old.courses AS SELECT * FROM serving_courses")
            db.execute("CREATE TABLE old.publication AS SELECT 'old' AS digest, min_cell_size, method, max_noise, "
                       "variance, withhold_zeros FROM privacy_settings")
            db.commit()


def site_nulls(project):
    """How many rows with no course each course table (or view) a dashboard reads holds (a store behind too)."""
    if not project.postgres:
        return [dashboard(project, f"SELECT COUNT(*) FROM {table} WHERE course IS NULL")[0][0]
                for table in COURSE_TABLES.values()]
    store = open_store(load_config(str(project.config), {}), {}, create=False, read_only=True, behind_ok=True)
    try:
        return [store.db.execute(f"SELECT COUNT(*) FROM {store.schema}_serving.{table} WHERE course IS NULL")
                .fetchone()[0] for table in COURSE_TABLES.values()]
    finally:
        store.close()


def test_a_store_of_schema_10_and_its_publication_get_the_new_shape_at_the_next_run(project):
    written = refreshed(project)
    new_shape = {table: dashboard(project, f"SELECT * FROM {table} ORDER BY 1, 2")
                 for table in (*COURSE_TABLES.values(), *tables.SITE_TABLES.values())}
    taken_back_to_schema_10(project)
    assert all(count > 0 for count in site_nulls(project))  # the old shape: the site's rows among the courses'
    result = project.invoke("run", now=stamp(NOW + dt.timedelta(hours=1)), check=0)
    assert result.returncode == 0
    assert site_nulls(project) == [0, 0, 0, 0]
    for table, rows in new_shape.items():  # the same rows as a store created at schema 11
        assert dashboard(project, f"SELECT * FROM {table} ORDER BY 1, 2") == rows, table
    assert dashboard(project, "SELECT schema_version, last_success FROM freshness") == [
        (tables.SCHEMA_VERSION, "2026-11-20T05:15:00Z")]
    names = dashboard(project, "SELECT course, course_name FROM courses ORDER BY course")
    assert names == [(iri("BIO101"), "Biology"), (iri("CHEM1"), "CHEM1")]  # the upgraded courses labelled
    assert project.query("SELECT value FROM meta WHERE key = 'schema_version'") == [(str(tables.SCHEMA_VERSION),)]
    recount = expected(written, "week")
    assert {(row[0], None): tuple(row[1:]) for row in dashboard(
        project, f"SELECT period, {', '.join(METRICS)} FROM site_weekly_metrics")} == {
        cell: values for cell, values in recount.items() if cell[1] is None}
