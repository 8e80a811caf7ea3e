"""Sums of scores and durations under attack (the README's "Threat model": sock puppets, differences).

An attacker who sends statements from accounts of their own can fill a cell of one learner up to the threshold
and knows everything in it but that learner's records. Were a cell's sum of scores or durations published
exact, or scaled by a noisy count only, what they sent subtracted from it would give that learner's score or
time. Each attack runs with `method = "none"`, where it must succeed every time (proof that it works), and with
the cell key method, where it must almost never give the value. The noise on those sums is scaled by each
cell's largest record: the store keeps that scale for every cell (days, periods, the site), which the last test
checks against a recount.
"""

import contextlib
import datetime as dt
import random
import sqlite3

import pytest
from test_perturbation_and_attacks import CELL_KEY, EXACT, NOW, K, configure, reproducible_ids, statement  # noqa: F401

from helpers.downgrade import before_outcomes
from lms_refresh.disclosure.cell_key import PerturbationTable
from lms_refresh.disclosure.policy import PrivacySettings, published_row
from lms_refresh.store.sqlite_schema import SQLITE

PUPPETS = K - 1
D = 3  # the default max_noise: how far the attacker must look around a published count


def _cells(rng, courses):
    """{course: (the victim's score, their seconds)}: one learner alone in each course on one day."""
    return {f"C{c}": (rng.randint(0, 100) / 100, rng.randint(60, 7200)) for c in range(courses)}


def _puppet_filled(cells):
    """The victims' statements and the attacker's: PUPPETS accounts a cell, each with a score of 0.5 and no time."""
    for course, (score, seconds) in cells.items():
        yield statement(learner=f"victim-{course}", course=course, score=score, duration=f"PT{seconds}S",
                        timestamp="2026-11-03T10:00:00Z")
        for i in range(PUPPETS):
            yield statement(learner=f"puppet{i}", course=course, score=0.5, duration="PT0S",
                            timestamp="2026-11-03T11:00:00Z")


def _score_candidates(average, statements):
    """What the attacker makes of a published average: for each count it could be divided by (within D of the
    published statements, each of which has a score), a sum whose two-decimal scores add up to a whole number
    of hundredths, minus the puppets' 0.5 each."""
    found = set()
    for count in range(statements - D, statements + D + 1):
        hundredths = average * count * 100
        if count > 0 and abs(hundredths - round(hundredths)) < count * 5e-5:
            found.add(round(round(hundredths) / 100 - 0.5 * PUPPETS, 2))
    return found


def _time_candidates(total):
    """The victim's seconds as the attacker reads a published total (the puppets sent none): the total itself,
    or the total unscaled by any ratio of a count to its perturbed value (the counts are about K)."""
    return {round(total * true / shown) for true in range(K - D, K + D + 1) for shown in range(K - D, K + D + 1)}


@pytest.mark.parametrize("privacy", [EXACT, CELL_KEY])
def test_puppets_filling_a_cell_never_learn_the_victims_score_or_time(sqlite_project, privacy):
    project = sqlite_project
    cells = _cells(random.Random(7), 60)
    configure(project, privacy)
    project.write("a.ndjson", list(_puppet_filled(cells)))
    project.invoke("run", now=NOW, check=0)
    rows = {row[1].rsplit("/", 1)[-1]: row for row in project.serving()}
    assert set(rows) == set(cells)  # K learners: every cell is published
    scores = times = 0
    for course, (score, seconds) in cells.items():
        statements, average, total = rows[course][3], rows[course][8], rows[course][9]
        scores += score in _score_candidates(average, statements)
        times += seconds in _time_candidates(total)
    if privacy == EXACT:
        assert scores == times == len(cells)
    else:  # a noise of up to D.5 of the largest record, continuous: the value turns up by chance only
        assert scores <= 0.1 * len(cells) and times <= 0.05 * len(cells), (scores, times)
    print(f"puppet attack ({privacy}): {scores}/{len(cells)} scores, {times}/{len(cells)} times found")


@pytest.mark.parametrize("privacy", [EXACT, CELL_KEY])
def test_the_site_minus_its_courses_does_not_give_a_withheld_courses_sum(sqlite_project, privacy):
    """Two visible courses and one learner alone in a third (withheld): the site's total time minus the visible
    courses' is that learner's, exactly, unless each sum has a noise of its own."""
    project = sqlite_project
    rng = random.Random(11)
    configure(project, privacy)
    found = 0
    days = [f"2026-11-{day:02d}" for day in range(2, 16)]
    secrets, written = {}, []
    for day in days:
        for course in ("A", "B"):
            written += [statement(learner=f"{course}{day}-{i}", course=course, duration=f"PT{rng.randint(60, 900)}S",
                                  timestamp=f"{day}T10:00:00Z") for i in range(K + rng.randint(0, 4))]
        secrets[day] = rng.randint(60, 3600)
        written.append(statement(learner=f"alone{day}", course="SECRET", duration=f"PT{secrets[day]}S",
                                 timestamp=f"{day}T12:00:00Z"))
    project.write("a.ndjson", written)
    project.invoke("run", now=NOW, check=0)
    by_cell = {(row[0], row[1] and row[1].rsplit("/", 1)[-1]): row for row in project.serving(site=True)}
    for day in days:
        difference = by_cell[(day, None)][9] - by_cell[(day, "A")][9] - by_cell[(day, "B")][9]
        found += abs(difference - secrets[day]) < 0.5
    if privacy == EXACT:
        assert found == len(days)
    else:
        assert found <= 1, found
    print(f"site difference ({privacy}): {found}/{len(days)} withheld totals found")


def test_a_cell_without_a_scale_publishes_neither_sum():
    """Cells counted before schema version 9 whose events are gone (closed days) have no scale: their sums are
    withheld, and the row says something was withheld (fail closed)."""
    table = PerturbationTable(PrivacySettings(min_cell_size=K))
    cell = {"learners": 20, "learner_key": 1, "statements": 40, "statement_key": 2, "score_sum_micro": 8_000_000,
            "score_count": 20, "score_learners": 20, "score_key": 3, "duration_ms": 600_000, "duration_count": 20,
            "duration_learners": 20, "duration_key": 4, "score_max_micro": None, "duration_max_ms": None}
    for stem in ("attempt", "completion", "passed", "failed"):
        cell.update({f"{stem}s" if stem in ("attempt", "completion") else stem: 0, f"{stem}_learners": 0,
                     f"{stem}_key": 0, f"{stem}_learner_key": 0})
    values = published_row(cell, PrivacySettings(min_cell_size=K), table)
    assert values[11:14] == (None, None, 1)
    scaled = published_row(dict(cell, score_max_micro=900_000, duration_max_ms=60_000),
                           PrivacySettings(min_cell_size=K), table)
    assert None not in scaled[11:13] and scaled[13] == 0
    assert -1 <= scaled[11] <= 1 and scaled[12] >= 0


def test_with_withhold_zeros_a_cell_nobody_scored_looks_like_one_a_few_scored():
    """withhold_zeros makes a count of 0 look like one of 1..k-1: the average score and the total duration too,
    flag included (the flag alone told "nobody scored" from "fewer than k scored")."""
    settings = PrivacySettings(min_cell_size=K, withhold_zeros=True)
    table = PerturbationTable(settings)
    cell = {"learners": 20, "learner_key": 1, "statements": 40, "statement_key": 2, "score_sum_micro": None,
            "score_count": 0, "score_learners": 0, "score_key": 0, "duration_ms": None, "duration_count": 0,
            "duration_learners": 0, "duration_key": 0, "score_max_micro": None, "duration_max_ms": None}
    for stem in ("attempt", "completion", "passed", "failed"):
        cell.update({f"{stem}s" if stem in ("attempt", "completion") else stem: 20, f"{stem}_learners": 20,
                     f"{stem}_key": 5, f"{stem}_learner_key": 6})
    few = dict(cell, score_sum_micro=1_500_000, score_count=3, score_learners=3, score_key=9, score_max_micro=900_000,
               duration_ms=60_000, duration_count=3, duration_learners=3, duration_key=9, duration_max_ms=30_000)
    assert published_row(cell, settings, table)[11:14] == published_row(few, settings, table)[11:14] == (None, None, 1)
    assert published_row(cell, PrivacySettings(min_cell_size=K), table)[11:14] == (None, None, 0)  # zeros published


def test_a_cell_whose_records_all_scored_zero_does_not_say_so_for_certain():
    """Scaled by its largest record alone, a cell of zeros would get no noise: an exact 0.0 would say that every
    record scored 0 (and, among an attacker's puppets scoring 0, that the victim did)."""
    settings = PrivacySettings(min_cell_size=K)
    table = PerturbationTable(settings)
    cell = {"learners": 12, "learner_key": 1, "statements": 12, "statement_key": 2, "score_sum_micro": 0,
            "score_count": 12, "score_learners": 12, "score_key": 0, "duration_ms": 0, "duration_count": 12,
            "duration_learners": 12, "duration_key": 0, "score_max_micro": 0, "duration_max_ms": 0}
    for stem in ("attempt", "completion", "passed", "failed"):
        cell.update({f"{stem}s" if stem in ("attempt", "completion") else stem: 0, f"{stem}_learners": 0,
                     f"{stem}_key": 0, f"{stem}_learner_key": 0})
    averages = {published_row(dict(cell, score_key=key, duration_key=key), settings, table)[11]
                for key in range(1000, 1100)}
    assert 0.0 not in averages and len(averages) > 90


def test_the_magnitude_noise_is_continuous_zero_mean_and_bounded():
    table = PerturbationTable(PrivacySettings(min_cell_size=K))
    noises = [table.magnitude(key, "score sum") for key in range(0, 2 ** 32, 2 ** 32 // 20000)]
    assert all(-D - 0.5 <= noise <= D + 0.5 for noise in noises)
    assert abs(sum(noises) / len(noises)) < 0.05
    assert len({round(noise, 3) for noise in noises}) > 5000  # not whole units: no exact fraction survives
    assert table.magnitude(12345, "score sum") == table.magnitude(12345, "score sum")  # the same records, the same
    assert table.magnitude(12345, "score sum") != table.magnitude(12345, "time sum")
    assert PerturbationTable(PrivacySettings(min_cell_size=K, method="none")).magnitude(12345, "score sum") == 0


def test_every_cell_keeps_its_largest_record_as_the_scale_of_its_sums(project):
    """Days, weeks, months and the site's cells: the largest |score| and duration of one of their records."""
    rng = random.Random(5)
    configure(project, CELL_KEY)
    written = [statement(learner=f"u{rng.randint(0, 30)}", course=rng.choice("XYZ"),
                         score=rng.choice([None, rng.randint(-100, 100) / 100]),
                         duration=rng.choice([None, f"PT{rng.randint(0, 5000)}S"]),
                         timestamp=f"2026-11-{rng.randint(2, 19):02d}T{rng.randint(8, 18):02d}:00:00Z")
               for _ in range(600)]
    project.write("a.ndjson", written)
    project.invoke("run", now=NOW, check=0)
    expected = {}
    for s in written:
        day, course = s["timestamp"][:10], s["object"]["id"].split("/")[4]
        iso = dt.date.fromisoformat(day).isocalendar()  # 08:00-18:00 UTC: the same local day in Paris
        result = s.get("result", {})
        score = abs(round(result["score"]["scaled"] * 1_000_000)) if "score" in result else None
        ms = int(result["duration"][2:-1]) * 1000 if "duration" in result else None
        for cell in (("day", day, course), ("day", day, None), ("week", f"{iso[0]}-W{iso[1]:02d}", course),
                     ("week", f"{iso[0]}-W{iso[1]:02d}", None), ("month", day[:7], course), ("month", day[:7], None)):
            old = expected.get(cell, (None, None))
            expected[cell] = tuple(value if old_value is None else old_value if value is None else max(old_value, value)
                                   for old_value, value in zip(old, (score, ms), strict=True))
    found = {}
    query = ("SELECT {label}, c.iri, m.score_max_micro, m.duration_max_ms FROM {table} m "
             "LEFT JOIN {prefix}courses c ON c.course_id = m.course_id {where}")
    prefix = "lms_refresh." if project.postgres else ""
    for grain, label, table, where in (("day", "m.day", "daily_metrics", ""),
                                       (None, "m.grain, m.period", "period_metrics", "WHERE m.grain <> 'term'")):
        for row in project.query(query.format(label=label, table=prefix + table, prefix=prefix, where=where)):
            cell = ((grain, str(row[0])) if grain else (row[0], row[1])) + (row[-3] and row[-3].split("/")[4],)
            found[cell] = (row[-2], row[-1])
    assert found == expected


def test_an_upgraded_store_republishes_every_row_and_withholds_the_sums_of_closed_days(sqlite_project):
    """Schema version 9 gives every cell the scale of its sums: the staged days are counted again with theirs,
    every published row is computed again, and a closed day (its events dropped by retention) has no scale to
    publish its sums with: they are withheld, no longer published exactly."""
    project = sqlite_project
    project.configure(extra_top="min_cell_size = 2", privacy=EXACT)
    retention = "[retention]\nstaging_days = 30\n"
    project.config.write_text(project.config.read_text() + retention)
    project.write("a.ndjson", [statement(learner=f"u{i}", score=i / 10, duration=f"PT{60 * i}S",
                                         timestamp="2026-11-02T10:00:00Z") for i in range(1, 6)])
    project.invoke("run", now=NOW, check=0)
    project.night_before("2026-12-13T04:15:00+01:00")
    project.write("b.ndjson", [statement(learner=f"u{i}", score=0.5, duration="PT30S", timestamp="2026-12-12T09:00:00Z")
                               for i in range(3)])
    project.invoke("run", now="2026-12-13T04:15:00+01:00", check=0)
    assert project.meta()["staging_horizon"] == "2026-11-13"  # 2 November is closed
    published = {row[0]: row[8:11] for row in project.serving()}
    assert published["2026-11-02"] == (0.3, 900.0, 0) and published["2026-12-12"] == (0.5, 90.0, 0)
    with contextlib.closing(sqlite3.connect(project.store)) as db:  # back to version 8
        for sql in before_outcomes(SQLITE):
            db.execute(sql)
        for table in ("daily_metrics", "period_metrics"):
            for column in ("score_max_micro", "duration_max_ms"):
                db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        db.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
        db.commit()
    project.invoke("run", now="2026-12-14T04:15:00+01:00", check=0)
    published = {row[0]: row[8:11] for row in project.serving()}
    assert published["2026-11-02"] == (None, None, 1)  # closed: no scale, so neither sum
    assert published["2026-12-12"] == (0.5, 90.0, 0)  # counted again from its events
    assert "republish" not in project.meta()
    assert project.query("SELECT day, score_max_micro, duration_max_ms FROM daily_metrics WHERE course_id <> 0 "
                         "ORDER BY day") == [("2026-11-02", None, None), ("2026-12-12", 500000, 30000)]
