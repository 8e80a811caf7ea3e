"""The SQLite publication is the store's serving views copied by SQLite itself (run/publication.py): every table
row for row and in order, and a change to any one value of any table makes the next run publish again, even one
that reads nothing."""

import contextlib
import math
import sqlite3

import pytest

from helpers.publication import publication
from helpers.statements import statement
from lms_refresh.config import load_config
from lms_refresh.store import open_store

NOW = "2026-11-20T04:15:00Z"
# The metrics tables are stored in their key's order (WITHOUT ROWID), the others in the order they were copied.
ORDERS = {"daily_metrics": "day, course", "weekly_metrics": "period, course", "monthly_metrics": "period, course",
          "term_metrics": "period, course", "site_daily_metrics": "day", "site_weekly_metrics": "period",
          "site_monthly_metrics": "period", "site_term_metrics": "period", "courses": "course",
          "freshness": "schema_version"}


def file_rows(path, table):
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute(f"SELECT * FROM {table}").fetchall()  # as stored


def assert_copied(project):
    """Each of the file's tables holds its store view's rows, in the view's order, every value as it is."""
    path = publication(project)
    for table, order in ORDERS.items():
        view = f"serving_{table}"
        assert file_rows(path, table) == project.query(f"SELECT * FROM {view} ORDER BY {order}"), table


@pytest.fixture
def published(sqlite_project):
    sqlite_project.configure(privacy='method = "none"')
    text = sqlite_project.config.read_text()
    sqlite_project.config.write_text(text.replace("\n[window]", "\nmin_cell_size = 2\n[window]", 1) + (
        '[[terms]]\nname = "Autumn"\nfirst_day = 2026-09-01\nlast_day = 2026-12-18\n'))
    sqlite_project.write("a.ndjson", [
        statement(learner=f"u{i}", course=course, verb="scored" if i % 2 else "experienced", score=0.1 * i + 1 / 3,
                  timestamp=f"{day}T10:00:00Z")
        for i in range(5) for course in ("BIO101", "CHEM200") for day in ("2026-11-02", "2026-11-10")])
    sqlite_project.invoke("run", now=NOW, check=0)
    assert_copied(sqlite_project)
    assert all(file_rows(publication(sqlite_project), table) for table in ORDERS)  # nothing empty: all copied
    return sqlite_project


# One value changed by hand in the store's published tables, as a run that committed and died before publishing
# would leave it: the smallest change (a REAL's last bit, a count by one) must reach the file.
CHANGES = {
    "a day's average's last bit": "UPDATE published_metrics SET avg_scaled_score = ? WHERE avg_scaled_score = "
                                  "(SELECT MAX(avg_scaled_score) FROM published_metrics)",
    "a week's site total": "UPDATE published_periods SET active_learners = active_learners - 1 "
                           "WHERE grain = 'week' AND course_id = 0 "
                           "AND period = (SELECT MIN(period) FROM published_periods WHERE grain = 'week')",
    "a term's statements": "UPDATE published_periods SET statements = statements + 1 WHERE grain = 'term' "
                           "AND course_id = (SELECT MIN(course_id) FROM published_periods WHERE grain = 'term')",
    "a course's name": "INSERT INTO course_names (course_id, name, named_at) SELECT MAX(course_id), 'Renamed', "
                       "'2026-11-19T00:00:00Z' FROM courses WHERE true "
                       "ON CONFLICT (course_id) DO UPDATE SET name = 'Renamed'",
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_to_any_published_value_is_published_by_the_next_run(published, change):
    path = publication(published)
    before = path.read_bytes()
    result = published.invoke("run", now=NOW, check=0)  # nothing new: the file stands, untouched
    assert "Nothing to do" in result.stderr and "Published" not in result.stderr and path.read_bytes() == before
    top = published.query("SELECT MAX(avg_scaled_score) FROM published_metrics")[0][0]
    store = open_store(load_config(str(published.config), {}), {}, create=False)
    try:
        store.begin()
        parameters = (math.nextafter(top, math.inf),) if "?" in CHANGES[change] else ()
        assert store.execute(CHANGES[change], parameters).rowcount >= 1
        store.commit()
    finally:
        store.close()
    result = published.invoke("run", now=NOW, check=0)
    days = len(published.query("SELECT * FROM serving_daily_metrics")) + len(
        published.query("SELECT * FROM serving_site_daily_metrics"))
    assert "Nothing to do" in result.stderr and f"Published {days} rows to {path}" in result.stderr, change
    assert path.read_bytes() != before
    assert_copied(published)
    if change == "a course's name":
        assert ("Renamed",) in [row[1:2] for row in file_rows(path, "courses")]


@pytest.mark.parametrize("directory", ["a?mode=memory", "b%41c", "c#d", "sp ace 'q\"é"])
def test_a_publication_whose_path_reads_as_a_uri_is_read_back_as_the_file_it_is(sqlite_project, tmp_path, directory):
    """"?", "#" and "%" in the path are the file's own characters, not a URI's: the file is read back, so a run
    with nothing new leaves it as it is, status says it is current, and the report is written from it."""
    path = tmp_path / directory / "serving.sqlite"
    sqlite_project.configure(privacy='method = "none"')
    escaped = str(path).replace("\\", "\\\\").replace('"', '\\"')
    sqlite_project.config.write_text(sqlite_project.config.read_text() + f'\n[publication]\npath = "{escaped}"\n')
    sqlite_project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    sqlite_project.invoke("run", now=NOW, check=0)
    before = path.stat()
    result = sqlite_project.invoke("run", now=NOW, check=0)
    assert "Nothing to do" in result.stderr and "Published" not in result.stderr
    assert path.stat().st_ino == before.st_ino and path.stat().st_mtime_ns == before.st_mtime_ns
    status = sqlite_project.invoke("status", check=0).stdout
    assert f"publication:  {path}, published " in status and "behind" not in status
    assert "<table" in (path.parent / "report.html").read_text()
