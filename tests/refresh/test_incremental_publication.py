"""A run publishes again only what its rebuilt days change (issue 23, part 3: disclosure.policy.republish): the
rows of those days and of their weeks and months, and the rows a move of a course's span adds or removes. After
every run of a random history — late statements before and after a span, in its gaps, voids that empty a span's
first or last day or a whole course, a span moved clear of the old one — the published rows must be exactly what
publishing every course whole from the store's cells gives, on both stores and with the cell key method's noise;
and the last run's rows must match the independent recount."""

import datetime as dt
import json
import random

import pytest

from helpers.period_reference import expected_periods
from helpers.reference import expected_serving
from helpers.statements import statement, voiding
from lms_refresh.config import load_config
from lms_refresh.disclosure import policy
from lms_refresh.run import period_publication
from lms_refresh.store import open_store, periods

K = 3
NOISE = 'method = "cell-key"\nmax_noise = 2\nvariance = 1.0'


def configure(project, privacy='method = "none"'):
    project.configure(privacy=privacy, bootstrap_days=400)
    text = project.config.read_text()
    project.config.write_text(text.replace("\n[window]", f"\nmin_cell_size = {K}\n[window]", 1))


def published(store):
    return (store.execute("SELECT * FROM published_metrics ORDER BY course_id, day").fetchall(),
            store.execute("SELECT * FROM published_periods ORDER BY grain, course_id, period").fetchall())


def as_published_whole(project, now):
    """Return (the published rows, those that publishing every course whole from its cells gives at `now`), the
    second in a transaction that is rolled back."""
    config = load_config(str(project.config), {})
    store = open_store(config, {}, create=False)
    try:
        store.begin()
        kept = published(store)
        settings = policy.in_force(store)
        days = {row[0] for row in store.execute(
            "SELECT course_id FROM daily_metrics UNION SELECT course_id FROM published_metrics").fetchall()}
        policy.publish(store, days, settings)
        period_publication.publish(store, {grain: {row[0] for row in store.execute(
            "SELECT course_id FROM period_metrics WHERE grain = ? UNION "
            "SELECT course_id FROM published_periods WHERE grain = ?", (grain, grain)).fetchall()}
            for grain in periods.GRAINS}, settings, config=config, now=now)
        whole = published(store)
        store.rollback()
    finally:
        store.close()
    return kept, whole


def at(day, hour=10):
    return f"{day.isoformat()}T{hour:02d}:00:00Z"


def history(seed, runs=9):
    """Yield (run time, statements to write, ids to void) for `runs` nightly runs over a random history."""
    rng, first, sent = random.Random(seed), dt.date(2026, 9, 1), []
    for run in range(runs):
        now = dt.datetime(2026, 11, 1 + run, 4, 15, tzinfo=dt.UTC)
        stored = (now - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        batch = []
        for _ in range(rng.randrange(1, 6)):
            day = first + dt.timedelta(days=rng.randrange(60))  # late, early, in a gap: anywhere in the span's reach
            course = rng.choice(["BIO101", "CHEM1"])
            for learner in rng.sample(range(6), rng.randrange(1, 5)):
                batch.append(statement(learner=f"l{learner}", course=course, timestamp=at(day, rng.randrange(24)),
                                       stored=stored, verb=rng.choice(["experienced", "passed", "completed"])))
        voided = [s["id"] for s in rng.sample(sent, min(len(sent), rng.randrange(0, 6)))] if run else []
        sent = [s for s in sent if s["id"] not in voided] + batch
        yield now, batch, [voiding(target, stored) for target in voided], list(sent)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_run_publishes_what_publishing_whole_would(project, seed):
    configure(project, NOISE if seed == 3 else 'method = "none"')
    runs = list(history(seed))
    for run, (now, batch, voids, _) in enumerate(runs):
        project.write(f"r{run}.ndjson", batch + voids)
        project.invoke("run", now=now.isoformat(), check=0)
        kept, whole = as_published_whole(project, now)
        assert kept == whole, run
    if seed != 3:  # exact counts: the last run's rows against the independent recount
        now, alive = runs[-1][0], runs[-1][3]
        assert project.serving(site=True) == expected_serving([json.dumps(s) for s in alive], now - dt.timedelta(
            days=400), now, "Europe/Paris", K)
        for grain in periods.GRAINS:
            assert project.grain_rows(grain, site=True) == expected_periods(alive, "Europe/Paris", K, grain, now)


def test_a_span_moved_clear_of_the_old_one_and_a_course_emptied(project):
    configure(project)
    old = [statement(learner=f"l{n}", course="BIO101", timestamp=at(dt.date(2026, 9, day)),
                     stored="2026-10-01T00:00:00Z") for n in range(K) for day in (2, 5)]
    other = [statement(learner=f"l{n}", course="CHEM1", timestamp=at(dt.date(2026, 9, 3)),
                       stored="2026-10-01T00:00:00Z") for n in range(K)]
    project.write("a.ndjson", old + other)
    project.invoke("run", now="2026-10-01T04:15:00Z", check=0)
    assert project.query("SELECT COUNT(*) FROM published_metrics WHERE course_id <> 0 GROUP BY course_id "
                         "ORDER BY 1") == [(1,), (4,)]
    # BIO101's span moves clear of the old one, after a gap; CHEM1 loses a learner (below k: no row left at all).
    new = [statement(learner=f"m{n}", course="BIO101", timestamp=at(dt.date(2026, 9, day)),
                     stored="2026-10-02T00:00:00Z") for n in range(K) for day in (20, 22)]
    project.write("b.ndjson", new + [voiding(s["id"], "2026-10-02T00:00:00Z") for s in old + other[:1]])
    project.invoke("run", now="2026-10-02T04:15:00Z", check=0)
    kept, whole = as_published_whole(project, dt.datetime(2026, 10, 2, 4, 15, tzinfo=dt.UTC))
    assert kept == whole
    days = [row for row in project.serving() if row[1] is not None]
    assert [(row[0], row[2]) for row in days] == [("2026-09-20", K), ("2026-09-21", None), ("2026-09-22", K)]
