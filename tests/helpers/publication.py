"""Where a project's SQLite publication is, and what a dashboard reads from it."""

import contextlib
import sqlite3
from pathlib import Path


def publication(project):
    return Path(str(project.state) + "-publication") / "serving.sqlite"


def read_publication(path):
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = db.execute("SELECT * FROM daily_metrics ORDER BY day, course").fetchall()
        about = db.execute("SELECT min_cell_size, method, max_noise, variance, withhold_zeros "
                           "FROM publication").fetchone()
    return tables, rows, about
