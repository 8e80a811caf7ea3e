"""Whole-pipeline consistency: daily runs vs one backfill, suppression vs a reference."""

import datetime as dt
import sqlite3

from conftest import Project
from lms_refresh.sample import generate, write_daily_files
from reference import expected_serving

START = dt.date(2026, 10, 19)  # a Monday; the sample spans a DST change (25 Oct)
PARIS = "Europe/Paris"


def sample(project, days=14, learners=300, **options):
    records = list(generate(11, START, days, learners, PARIS, **options))
    write_daily_files(project.source, records)
    return records


def at_0415(day):
    return f"{day.isoformat()}T04:15:00+{'02' if day < dt.date(2026, 10, 25) else '01'}:00"


def test_daily_runs_equal_one_backfill(tmp_path, make_project):
    daily = make_project(tmp_path / "daily")
    daily.configure(extra_top="max_quarantine_share = 0.05")  # early windows are small
    sample(daily)
    run_days = [START + dt.timedelta(days=n) for n in range(1, 18)]
    for day in run_days:
        if day.weekday() < 5:  # the timer's Mon..Fri schedule
            daily.cli("run", now=at_0415(day), check=0)
    once = make_project(tmp_path / "once")
    once.source.rmdir()
    once.source = daily.source
    once.configure(extra_top="max_quarantine_share = 0.05")
    last = at_0415(max(d for d in run_days if d.weekday() < 5))
    once.cli("backfill", "--since", "2026-10-01", "--until", last, now=last, check=0)
    assert daily.dump() == once.dump()
    assert len(daily.serving()) > 50


def test_serving_table_matches_an_independent_reference(tmp_path, make_project):
    project = make_project(tmp_path / "ref")
    records = sample(project, days=10, learners=400, malformed_share=0.0)
    now = "2026-10-30T04:15:00+01:00"
    project.cli("run", now=now, check=0)
    since = dt.datetime(2026, 10, 30, 3, 15, tzinfo=dt.timezone.utc) - dt.timedelta(days=30)
    until = dt.datetime(2026, 10, 30, 3, 15, tzinfo=dt.timezone.utc)
    expected = expected_serving([line for _, line in records], since, until, PARIS, 10)
    actual = project.serving()
    assert [row[:2] for row in actual] == [row[:2] for row in expected]
    for got, want in zip(actual, expected):
        assert got[:8] == want[:8] and got[10] == want[10], (got, want)
        assert (got[8] is None) == (want[8] is None) and abs((got[8] or 0) - (want[8] or 0)) < 1e-6
        assert (got[9] is None) == (want[9] is None) and abs((got[9] or 0) - (want[9] or 0)) < 1e-3
    assert any(row[2] is None for row in actual) and any(row[5] is not None for row in actual)


def test_no_published_value_derives_from_fewer_than_min_cell_size_learners(tmp_path):
    project = Project(tmp_path / "k")
    project.configure(extra_top="min_cell_size = 25")
    sample(project, days=6, learners=250)
    project.cli("run", now="2026-10-26T04:15:00+01:00", check=0)
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
        for value, contributors in zip(row[0::2], row[1::2]):
            if value is not None and value != 0:
                assert contributors >= 25, row
                published += 1
    assert published > 0


# SIGKILL and SIGTERM at every phase of a run, publication included: tests/test_faults.py.
