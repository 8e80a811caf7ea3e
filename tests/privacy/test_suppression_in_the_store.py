"""Suppression holds in the store itself, whatever the view shows. Daily runs against one backfill and
the serving table against an independent reference, on both stores: tests/store/test_every_store_alike.py."""

import datetime as dt
import sqlite3

from helpers.project import Project
from lms_refresh.demo.sample import generate, write_daily_files

START = dt.date(2026, 10, 19)  # a Monday; the sample spans a DST change (25 Oct)
PARIS = "Europe/Paris"


def test_no_published_value_derives_from_fewer_than_min_cell_size_learners(tmp_path):
    project = Project(tmp_path / "k")
    project.configure(extra_top="min_cell_size = 25")
    write_daily_files(project.source, generate(11, START, 6, learners=250, timezone=PARIS))
    project.invoke("run", now="2026-10-26T04:15:00+01:00", check=0)
    with sqlite3.connect(project.store) as db:
        rows = db.execute("""
            SELECT s.active_learners, m.learners, s.attempts, m.attempt_learners, s.completions,
                   m.completion_learners, s.passed, m.passed_learners, s.failed, m.failed_learners,
                   s.avg_scaled_score, m.score_learners, s.total_duration_seconds, m.duration_learners
            FROM serving_daily_metrics s JOIN courses c ON c.iri = s.course
            JOIN daily_metrics m ON m.day = s.day AND m.course_id = c.course_id""").fetchall()
    assert rows
    published = 0
    for row in rows:
        for value, contributors in zip(row[0::2], row[1::2], strict=True):
            if value is not None and value != 0:
                assert contributors >= 25, row
                published += 1
    assert published > 0


# SIGKILL and SIGTERM at every phase of a run, publication included: tests/refresh/test_faults_at_every_phase.py.
