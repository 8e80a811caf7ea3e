"""Disclosure control: the perturbation table, and the attacks of the README's "Threat model", run
against real refreshes on both stores.

Each attack runs twice on the same statements: with `method = "none"` (exact
counts), where the attacker must succeed every time — proof that the attack
works — and with the cell key method, where its success must stay within what
the README promises.
"""

import contextlib
import hashlib
import pickle
import random
import sqlite3
import uuid
from fractions import Fraction

import pytest

from helpers.attacks import complement, noise_probabilities, threshold
from helpers.downgrade import before_outcomes
from helpers.statements import statement as any_statement
from lms_refresh.disclosure.cell_key import PerturbationTable, RecordKeys, base_distribution
from lms_refresh.disclosure.policy import PrivacySettings
from lms_refresh.store import tables
from lms_refresh.store.postgres_schema import POSTGRESQL
from lms_refresh.store.sqlite_schema import SQLITE

K = 10
KEY = "5e" * 32  # a fixed pseudonymisation key: the noise, hence each figure, is reproducible
NOW = "2026-11-20T04:15:00Z"
CELL_KEY = 'method = "cell-key"'
EXACT = 'method = "none"'


IDS = random.Random(0)


def statement(**facts):
    """A statement with a reproducible id: record keys derive from ids, so each figure is reproducible."""
    return any_statement(id=str(uuid.UUID(int=IDS.getrandbits(128), version=4)), **facts)


@pytest.fixture(autouse=True)
def reproducible_ids():
    IDS.seed(0)


def configure(project, privacy, k=K):
    project.configure(extra_top=f"min_cell_size = {k}", privacy=privacy)
    project.state.mkdir(exist_ok=True)
    key = project.state / "pseudonymisation.key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)


def rows_by_cell(project):
    return {(row[0], row[1].rsplit("/", 1)[-1]): row for row in project.serving()}


def table(k=K):
    return PerturbationTable(PrivacySettings(min_cell_size=k))


def day(n):
    return f"2026-11-{2 + n:02d}"


# -- the perturbation table --------------------------------------------------------------------------

def test_the_default_table_is_bounded_zero_mean_with_its_variance_and_never_below_k():
    perturbation = table()
    assert base_distribution(3, 2.0) == {-3: Fraction(1, 20), -2: Fraction(1, 10), -1: Fraction(3, 20),
                                         0: Fraction(2, 5), 1: Fraction(3, 20), 2: Fraction(1, 10), 3: Fraction(1, 20)}
    for count in range(K, K + 60):
        row = noise_probabilities(perturbation, count)
        assert all(-3 <= noise <= 3 and count + noise >= K for noise in row)
        mean = sum(noise * p for noise, p in row.items())
        if count >= K + 3:
            assert abs(mean) < 1e-9 and abs(sum(noise * noise * p for noise, p in row.items()) - 2.0) < 1e-6
        else:  # cut at k: biased upwards by less than D/2, and never exact at k itself
            assert 0 <= mean < 1.5 and len(row) > 1
    assert perturbation.perturb(0, 12345, "passed") == 0
    keys = random.Random(3).sample(range(2 ** 32), 2000)
    values = [perturbation.perturb(25, key, "passed") for key in keys]
    assert set(values) == set(range(22, 29)) and values == [perturbation.perturb(25, key, "passed") for key in keys]
    # Each column has its own lookup: the same cell key gives another column other noise.
    same = sum(v == perturbation.perturb(25, key, "failed") for v, key in zip(values, keys, strict=True))
    assert same < 0.4 * len(keys)


def test_a_variance_the_noise_cannot_carry_is_refused(project):
    project.configure(privacy='method = "cell-key"\nmax_noise = 1\nvariance = 2.0')
    result = project.invoke("run", now=NOW)
    assert result.returncode == 78
    assert "key 'privacy.variance' is 2.0, more than privacy.max_noise = 1 allows (1.00)" in result.stderr


def test_record_keys_need_the_secret_key():
    event = bytes(range(16))
    one, other = RecordKeys(b"a" * 32), RecordKeys(b"b" * 32)
    assert one.event(event) == RecordKeys(b"a" * 32).event(event)
    assert one.event(event) != other.event(event) and one.learner(42) != other.learner(42)
    assert 0 <= one.event(event) < 2 ** 32


def test_record_keys_are_those_already_stored_and_survive_pickling():
    """The keys are computed in the parsing workers now, from a keyed hash copied: they must stay the
    ones that stores written before hold (a keyed BLAKE2b of the id, and of the pseudonym's 8 bytes)."""
    secret, event = b"a" * 32, bytes(range(16))
    derived = hashlib.sha256(b"lms-refresh record keys\0" + secret).digest()
    keys = RecordKeys(secret)
    expected_event = int.from_bytes(hashlib.blake2b(event, key=derived, digest_size=4, person=b"event").digest(), "big")
    expected_learner = int.from_bytes(hashlib.blake2b((-7).to_bytes(8, "big", signed=True), key=derived, digest_size=4,
                                                      person=b"learner").digest(), "big")
    assert [keys.event(event), keys.event(event), keys.learner(-7)] == [expected_event] * 2 + [expected_learner]
    again = pickle.loads(pickle.dumps(keys))
    assert (again.event(event), again.learner(-7)) == (expected_event, expected_learner)


def test_a_new_store_has_no_rows_without_record_keys_to_look_for(tmp_path):
    """Version 3's migration marks a store whose staged rows predate record keys; a store created since has
    none such, and its first recompute must not scan staging for them (a first backfill's whole history)."""
    from lms_refresh.store.sqlite import SqliteStore

    store = SqliteStore.open(str(tmp_path / "metrics.sqlite"), create=True)
    try:
        assert "record_keys" not in store.meta()
        assert store.fill_record_keys(RecordKeys(b"a" * 32)) is False
    finally:
        store.close()


# -- the attacks ----------------------------------------------------------------------------------

def storyline_cells(seed, courses=30, days=5):
    """Storyline-shaped data: every completion is also a pass or a fail; `failed` is withheld in each cell."""
    rng = random.Random(seed)
    cells, statements = {}, []
    for c in range(courses):
        for d in range(days):
            failed = rng.randint(1, K - 1)
            learners = rng.randint(failed + K, failed + K + 10)
            cells[(day(d), f"C{c}")] = {"failed": failed, "learners": learners}
            statements += [statement(learner=f"c{c}-u{i}", verb="completed", course=f"C{c}", success=i >= failed,
                                     timestamp=f"{day(d)}T10:00:00Z") for i in range(learners)]
    return cells, statements


@pytest.mark.parametrize("privacy", [EXACT, CELL_KEY])
def test_complement_attack_on_storyline_data(project, privacy):
    cells, statements = storyline_cells(1)
    configure(project, privacy)
    project.write("a.ndjson", statements)
    project.invoke("run", now=NOW, check=0)
    published = rows_by_cell(project)
    perturbation = PerturbationTable(PrivacySettings(min_cell_size=K, method=privacy.split('"')[1]))
    exact = certain = 0
    for cell, truth in cells.items():
        row = published[cell]
        assert row[7] is None and row[5] is not None and row[6] is not None  # failed withheld, the others not
        found = complement(perturbation, row[5], row[6], range(1, K), truth["failed"])
        exact += found["exact"]
        certain += found["certain"]
    rate = exact / len(cells)
    if privacy == EXACT:
        assert exact == certain == len(cells)  # without noise, completions - passed gives every value back
    else:  # README, "Threat model": right about 1 time in 3 (at most 45% of a sample); certain in under 1%
        assert rate <= 0.45 and certain <= 0.01 * len(cells), (rate, certain)
        assert exact > 0  # the attacker is not blind: the noise is bounded
    print(f"complement attack ({privacy}): {exact}/{len(cells)} exact, {certain} certain")


@pytest.mark.parametrize("privacy", [EXACT, CELL_KEY])
def test_existence_attack_sees_no_day_of_a_small_course(project, privacy):
    configure(project, privacy)
    crowd = [statement(learner=f"u{i}", course="BIG", timestamp=f"{day(d)}T10:00:00Z")
             for d in (0, 6) for i in range(K)]
    alone = [statement(learner="lonely", course="BIG", timestamp=f"{day(3)}T10:00:00Z")]
    small = [statement(learner=f"s{i}", course="SMALL", timestamp=f"{day(d)}T10:00:00Z")
             for d in (1, 4) for i in range(K - 1)]
    project.write("a.ndjson", crowd + alone + small)
    project.invoke("run", now=NOW, check=0)
    rows = project.serving()
    assert {row[1].rsplit("/", 1)[-1] for row in rows} == {"BIG"}  # a course that never reached k: no row at all
    assert [row[0] for row in rows] == [day(d) for d in range(7)]  # every day of the visible span
    withheld = {row[0]: row[2:] for row in rows if row[0] not in (day(0), day(6))}
    # The day with one learner looks exactly like the days with none.
    assert set(withheld.values()) == {(None,) * 8 + (1,) + (None,) * 7} and len(withheld) == 5


@pytest.mark.parametrize("privacy", [EXACT, CELL_KEY])
def test_differencing_attack_with_single_late_statements(project, privacy):
    cells, statements = storyline_cells(2, courses=25, days=4)
    configure(project, privacy)
    project.write("a.ndjson", statements)
    project.invoke("run", now=NOW, check=0)
    before = rows_by_cell(project)
    # One late statement per cell, from a learner already in it: +1 statement, +1 completion, +1 pass.
    late = [statement(learner=f"{course.lower()}-u{K + 5}", verb="completed", course=course, success=True,
                      timestamp=f"{when}T11:00:00Z", stored="2026-11-21T09:00:00Z") for when, course in cells]
    project.write("b.ndjson", late)
    project.invoke("run", now="2026-11-22T04:15:00Z", check=0)
    after = rows_by_cell(project)
    changes = {"statements": 1, "completions": 1, "passed": 1}
    exact_columns = {name: 0 for name in changes}
    exact_statement = 0
    for cell in cells:
        deltas = {name: after[cell][column] - before[cell][column] for name, column in (
            ("statements", 3), ("completions", 5), ("passed", 6))}
        exact_statement += deltas == changes
        for name in changes:
            exact_columns[name] += deltas[name] == changes[name]
    if privacy == EXACT:
        assert exact_statement == len(cells)
    else:  # README: each count's change is exact about 1 time in 4 (at most 35%); the whole statement rarely
        assert all(count <= 0.35 * len(cells) for count in exact_columns.values()), exact_columns
        assert exact_statement <= 0.10 * len(cells), exact_statement
    print(f"differencing attack ({privacy}): {exact_statement}/{len(cells)} statements exposed, {exact_columns}")


@pytest.mark.parametrize("privacy", [EXACT, CELL_KEY])
def test_threshold_attack_pushing_a_cell_of_k_minus_1_learners_over(project, privacy):
    rng = random.Random(4)
    configure(project, privacy)
    others = {f"C{c}": [rng.randint(1, 4) for _ in range(K - 1)] for c in range(60)}
    project.write("a.ndjson", [statement(learner=f"{course}-u{i}", course=course, timestamp=f"{day(0)}T10:00:00Z")
                               for course, counts in others.items() for i, n in enumerate(counts) for _ in range(n)])
    project.invoke("run", now=NOW, check=0)
    assert project.serving() == []  # k-1 learners: nothing, not even a withheld row
    project.write("b.ndjson", [statement(learner="attacker", course=course, timestamp=f"{day(0)}T12:00:00Z",
                                         stored="2026-11-21T09:00:00Z") for course in others])
    project.invoke("run", now="2026-11-22T04:15:00Z", check=0)
    published = rows_by_cell(project)
    perturbation = PerturbationTable(PrivacySettings(min_cell_size=K, method=privacy.split('"')[1]))
    exact = certain = 0
    for course, counts in others.items():
        row = published[(day(0), course)]
        found = threshold(perturbation, row[3], 1, range(K - 1, 200), sum(counts))
        exact += found["exact"]
        certain += found["certain"]
    if privacy == EXACT:
        assert exact == certain == len(others)
    else:  # README: the others' statement count is right about 40% of the time (at most 50%), never certain
        assert exact <= 0.5 * len(others) and certain == 0, (exact, certain)
    print(f"threshold attack ({privacy}): {exact}/{len(others)} exact, {certain} certain")


# -- the threshold in force ---------------------------------------------------------------------------

def test_a_threshold_that_is_not_an_integer_never_switches_suppression_off(sqlite_project):
    configure(sqlite_project, CELL_KEY)
    sqlite_project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(K)]
                         + [statement(learner=f"u{i}", verb="failed") for i in range(3)])
    sqlite_project.invoke("run", now=NOW, check=0)
    published = sqlite_project.serving()
    with sqlite3.connect(sqlite_project.store) as db:
        db.execute("UPDATE meta SET value = 'abc' WHERE key = 'min_cell_size'")  # what used to switch it off
    assert sqlite_project.serving() == published and published[0][7] is None
    for bad in ("'abc'", "'10.5'", "0", "NULL", "2.5"):
        with sqlite3.connect(sqlite_project.store) as db, pytest.raises(sqlite3.IntegrityError):
            db.execute(f"UPDATE privacy_settings SET min_cell_size = {bad}")
    with sqlite3.connect(sqlite_project.store) as db:
        db.execute("DELETE FROM privacy_settings")
    store = sqlite_project.open_store()
    try:
        with pytest.raises(Exception, match="has no privacy settings; nothing was published"):
            store.privacy_settings()
    finally:
        store.close()
    status = sqlite_project.invoke("status", check=0).stdout
    assert "privacy:" not in status  # nothing in force is shown as nothing, not as a default
    sqlite_project.invoke("run", now="2026-11-21T04:15:00Z", check=0)
    status = sqlite_project.invoke("status", check=0).stdout
    assert f"privacy:      min_cell_size {K} in force; noise cell key, counts within +-3, variance 2.0" in status


def test_postgresql_refuses_a_threshold_below_one(postgres_server, tmp_path):
    from helpers.project import Project

    server, pg_project = postgres_server, Project(tmp_path / "pg", postgres_server)
    configure(pg_project, CELL_KEY)
    pg_project.invoke("run", now=NOW, check=0)
    import psycopg

    with pytest.raises(psycopg.errors.CheckViolation):
        server.admin("UPDATE lms_refresh.privacy_settings SET min_cell_size = 0", pg_project.database)
    status = pg_project.invoke("status", check=0).stdout
    assert f"privacy:      min_cell_size {K} in force" in status
    assert "publication:  view lms_refresh_serving.daily_metrics in the store" in status


def test_the_internal_counts_stay_exact_under_perturbation(project):
    cells, statements = storyline_cells(5, courses=6, days=2)
    configure(project, CELL_KEY)
    project.write("a.ndjson", statements)
    project.invoke("run", now=NOW, check=0)
    internal = project.query("SELECT m.day, c.iri, m.learners, m.failed FROM daily_metrics m "
                             "JOIN courses c USING (course_id)")
    assert {(d, iri.rsplit("/", 1)[-1]): (n, f) for d, iri, n, f in internal} == {
        cell: (truth["learners"], truth["failed"]) for cell, truth in cells.items()}
    assert any(row[2] != cells[cell]["learners"] for cell, row in rows_by_cell(project).items())


def test_a_store_from_schema_version_2_gets_its_record_keys_and_the_same_publication(project):
    cells, statements = storyline_cells(6, courses=4, days=3)
    configure(project, CELL_KEY)
    project.write("a.ndjson", statements)
    project.invoke("run", now=NOW, check=0)
    fresh = project.serving()
    prefix = "lms_refresh." if project.postgres else ""
    # (Version 5's view of course names reads published_metrics: it goes first; its table may stay, the
    # migration creates it only if it is missing.)
    # (Version 11's views read published_metrics, published_periods and privacy_settings too: they go first.)
    serving = "lms_refresh_serving." if project.postgres else "serving_"
    downgrade = [f"DROP VIEW {serving}{view}" for view in (*tables.BY_NAME.values(), *tables.SITE_TABLES.values(),
                                                            "freshness")]
    downgrade += before_outcomes(POSTGRESQL if project.postgres else SQLITE)  # version 10's columns first
    downgrade += [f"DROP VIEW {'lms_refresh_serving.courses' if project.postgres else 'serving_courses'}",
                 f"DROP VIEW {'lms_refresh_serving.daily_metrics' if project.postgres else 'serving_daily_metrics'}",
                 f"DROP TABLE {prefix}published_metrics", f"DROP TABLE {prefix}privacy_settings",
                 f"DROP INDEX {prefix}daily_metrics_by_course"]
    downgrade += [f"ALTER TABLE {prefix}staged_events DROP COLUMN {column}" for column in ("record_key", "learner_key")]
    downgrade += [f"ALTER TABLE {prefix}daily_metrics DROP COLUMN {column}" for column in (
        "learner_key", "statement_key", "attempt_key", "completion_key", "passed_key", "failed_key", "score_key",
        "duration_count", "duration_key")]
    downgrade += [f"ALTER TABLE {prefix}{table} DROP COLUMN {column}" for table in ("daily_metrics", "period_metrics")
                  for column in ("score_max_micro", "duration_max_ms")]  # version 9's
    if project.postgres:
        from lms_refresh.store.postgres_schema import MIGRATIONS

        downgrade += [next(s for s in MIGRATIONS[0] if "CREATE VIEW" in s).replace("{s}", "lms_refresh"),
                      "DELETE FROM lms_refresh.schema_version WHERE version >= 3",
                      "UPDATE lms_refresh.meta SET value = '2' WHERE key = 'schema_version'"]
        for sql in downgrade:
            project.postgres.admin(sql, project.database)
    else:
        from lms_refresh.store.sqlite_schema import MIGRATIONS

        downgrade += [next(s for s in MIGRATIONS[0] if "CREATE VIEW" in s),
                      "UPDATE meta SET value = '2' WHERE key = 'schema_version'"]
        with contextlib.closing(sqlite3.connect(project.store)) as db:
            for sql in downgrade:
                db.execute(sql)
            db.commit()
    before = project.invoke("status")  # version 2: status does not upgrade, and says the next run will
    assert before.returncode == 0 and "the next run upgrades it to schema" in before.stdout, before.stdout
    project.write("b.ndjson", [statement(learner="late", course="C0", timestamp=f"{day(0)}T12:00:00Z",
                                         stored="2026-11-21T09:00:00Z")])
    project.invoke("run", now="2026-11-22T04:15:00Z", check=0)
    upgraded = project.serving()
    assert project.query("SELECT COUNT(*) FROM staged_events WHERE record_key IS NULL") == [(0,)]
    # Every cell but the one the late statement joined is published exactly as before the upgrade.
    assert len(upgraded) == len(fresh)
    changed = [(a, b) for a, b in zip(fresh, upgraded, strict=True) if a != b]
    assert [a[:2] for a, _ in changed] == [(day(0), fresh[0][1])]


def test_withhold_zeros_and_a_new_threshold_republish_every_day(project):
    configure(project, EXACT)
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp=f"{day(d)}T10:00:00Z")
                               for d in (0, 1) for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    assert [row[2:] for row in project.serving()] == [(12, 12, 0, 0, 0, 0, None, None, 0, 0, 0, 0, 0.0, None, None,
                                                     None)] * 2
    project.configure(extra_top=f"min_cell_size = {K}", privacy='method = "none"\nwithhold_zeros = true')
    project.invoke("run", now="2026-11-21T04:15:00Z", check=0)  # reads nothing new: the settings alone republish
    assert [row[2:] for row in project.serving()] == [(12, 12) + (None,) * 6 + (1,) + (None,) * 7] * 2
    project.configure(extra_top="min_cell_size = 13", privacy='method = "none"')  # zeros published again: weaker
    project.invoke("run", "--accept-weaker-privacy", now="2026-11-22T04:15:00Z", check=0)
    assert project.serving() == []  # 12 learners < 13 on every day: no row, as for a course never seen
