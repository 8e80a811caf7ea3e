"""bench/grains_bench.py compares the full refresh with the grains against "days only": the same CLI with the
weeks, months, terms and site rows taken out where it runs. Its seams are checked here on a small project,
so that a renamed one fails the suite instead of timing the whole refresh twice; and the bench itself refuses
a run whose store does not match its variant."""

import datetime as dt
import importlib.util
import os
import sqlite3
import sys

import pytest

from helpers.paths import REPO

BENCH = os.path.join(REPO, "bench")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, BENCH)  # grains_bench imports refresh_bench as its script would
    try:
        yield _load("grains_bench")
    finally:
        sys.path.remove(BENCH)


def test_days_only_counts_the_days_cells_and_no_period_nor_site_cell(bench, tmp_path):
    source = str(tmp_path / "src")
    bench.refresh_bench.write_days(source, 0, 3, 200, seed=3)
    now = bench.refresh_bench.START + dt.timedelta(days=4)
    counted = {}
    for name, command in bench.VARIANTS.items():
        root = str(tmp_path / name.replace(" ", "-"))
        os.makedirs(root)
        config, _ = bench.refresh_bench.configure(root, source, None, days=6)
        bench.refresh_bench.timed_run(config, now, "run", command=command)
        counted[name] = bench.grain_rows(root, None, None)
        db = sqlite3.connect(os.path.join(root, "state", "metrics.sqlite"))
        counted[name] += (db.execute("SELECT count(*) FROM daily_metrics WHERE course_id <> 0").fetchone()[0],)
        db.close()
    weeks_and_months, site_days, course_days = counted["with the grains"]
    assert weeks_and_months > 0 and site_days > 0 and course_days > 0, counted  # 3 UTC days: 4 local days
    assert counted["days only"] == (0, 0, course_days), counted  # the same day cells, nothing else
    bench.checked("with the grains", counted["with the grains"][:2])
    bench.checked("days only", counted["days only"][:2])


def test_a_run_that_does_not_match_its_variant_is_refused(bench):
    with pytest.raises(SystemExit, match="the 'days only' run left 14 period cells and 3 site day cells"):
        bench.checked("days only", (14, 3))
    with pytest.raises(SystemExit, match="the 'with the grains' run left 0 period cells and 0 site day cells"):
        bench.checked("with the grains", (0, 0))


def test_the_floors_statements_count_what_the_store_publishes(bench, tmp_path):
    """bench/grains_floor.py times the grains' cells written as lean as we know how: a floor only if they count
    the same learners (and learner keys) as the store's own statements, the site's day and period cells too."""
    floor = _load("grains_floor")
    source = str(tmp_path / "src")
    bench.refresh_bench.write_days(source, 0, 10, 300, seed=5, learners=400)
    root = str(tmp_path / "grains")
    os.makedirs(root)
    config, _ = bench.refresh_bench.configure(root, source, None, days=12)
    bench.refresh_bench.timed_run(config, bench.refresh_bench.START + dt.timedelta(days=11), "run")
    path = os.path.join(root, "state", "metrics.sqlite")
    _, cells = floor.floor(path)
    learners = ("learners, attempt_learners, completion_learners, passed_learners, failed_learners, score_learners, "
                "duration_learners, learner_key")
    db = sqlite3.connect(path)
    stored = {("day", row[0], None): row[1:]
              for row in db.execute(f"SELECT day, {learners} FROM daily_metrics WHERE course_id = 0")}
    stored.update(((row[0], row[1], None if row[2] == 0 else row[2]), row[3:]) for row in db.execute(
        f"SELECT grain, period, course_id, {learners} FROM period_metrics"))
    db.close()
    assert {grain for grain, _, _ in stored} == {"day", "week", "month"} and len(stored) > 20, stored
    assert cells == stored
