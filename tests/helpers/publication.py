"""Where a project's SQLite publication is, and what a dashboard reads from it."""

import contextlib
import sqlite3
from pathlib import Path


def publication(project):
    return Path(str(project.state) + "-publication") / "serving.sqlite"


def read_publication(path, site=False):
    """The publication's tables, its daily rows (the courses', and the site's too when `site`, from
    site_daily_metrics with course None, as Project.serving) and its privacy settings."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = db.execute("SELECT * FROM daily_metrics ORDER BY day, course").fetchall()
        if site:  # the site's rows, from their own table, first in each day (as Project.serving has them)
            rows += [(row[0], None, *row[1:]) for row in db.execute("SELECT * FROM site_daily_metrics")]
            rows.sort(key=lambda row: (row[0], row[1] is not None, row[1] or ""))
        about = db.execute("SELECT min_cell_size, method, max_noise, variance, withhold_zeros "
                           "FROM publication").fetchone()
    return tables, rows, about


COURSE_COLUMNS = "course, name, short_name, category, start_date, end_date"


def published_courses(project):
    """The course names as a dashboard reads them: the SQLite publication's table, or the PostgreSQL view."""
    if project.postgres:
        rows = project.query(f"SELECT {COURSE_COLUMNS} FROM lms_refresh_serving.courses ORDER BY course")
        return [row[:4] + tuple(None if value is None else value.isoformat() for value in row[4:]) for row in rows]
    with contextlib.closing(sqlite3.connect(f"file:{publication(project)}?mode=ro", uri=True)) as db:
        return db.execute(f"SELECT {COURSE_COLUMNS} FROM courses ORDER BY course").fetchall()


def directory_entries(directory):
    """The names in the publication's directory, as `ls` lists them, after checking that no temporary is left
    anywhere below it (the report's pages in report-files/ included): `.NAME.tmp-…` is what lms_refresh.atomic
    writes before its rename."""
    directory = Path(directory)
    left = [str(p.relative_to(directory)) for p in directory.rglob("*") if ".tmp-" in p.name]
    assert not left, f"temporaries left in {directory}: {left}"
    return sorted(p.name for p in directory.iterdir())
