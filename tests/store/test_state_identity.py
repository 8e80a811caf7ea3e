"""The state as a whole (issue 12, items 1-5): no clock, deletion, setting or duplicate id can lose
history or count a statement twice without a word — each refusal names the way out, and the way
out ends where an uninterrupted run would have (tests/helpers/reference.py)."""

import datetime as dt
import json
import shutil

import pytest

from helpers.downgrade import before_outcomes
from helpers.reference import expected_serving
from helpers.statements import statement
from lms_refresh.store.sqlite_schema import MIGRATIONS, SQLITE

PARIS = "Europe/Paris"
# The migration that made statement ids unique (the last one when these tests were written).
UNIQUE_IDS = next(number for number, statements in enumerate(MIGRATIONS, 1)
                  if any("staged_events_event_id" in statement for statement in statements))
UTC = dt.UTC
T = dt.datetime(2026, 11, 3, 3, 15, tzinfo=UTC)  # Tuesday 04:15 in Paris


def at(moment):
    return moment.isoformat()


def lines_of(project):
    return [line for path in sorted(project.source.iterdir()) for line in path.read_text().splitlines()]


def reference(project, until, since=T - dt.timedelta(days=30), k=10):
    return expected_serving(lines_of(project), since, until, PARIS, k)


def day_batch(learners, day, prefix="u", stored=None):
    return [statement(learner=f"{prefix}{i}", timestamp=f"{day}T10:00:00Z", stored=stored) for i in range(learners)]


def drop_store(project):
    """Delete the store as an operator's mistake would (the file, or the database schemas)."""
    if project.postgres:
        for schema in ("lms_refresh_serving", "lms_refresh"):
            project.postgres.admin(f"DROP SCHEMA {schema} CASCADE", project.database)
    else:
        for name in ("metrics.sqlite", "metrics.sqlite-wal", "metrics.sqlite-shm"):
            (project.state / name).unlink(missing_ok=True)


# -- 1: the clock ------------------------------------------------------------------------------

def test_a_clock_glitch_is_refused_and_watermark_set_recovers_every_statement(project):
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    glitch = T + dt.timedelta(days=90)
    project.invoke("run", now=at(glitch), check=0)  # the clock jumps ahead: the watermark follows it
    project.write("b.ndjson", day_batch(11, "2026-11-04", prefix="late"))  # stored at T + 1 day
    later = T + dt.timedelta(days=2)
    refused = project.invoke("run", now=at(later))
    assert refused.returncode == 78
    assert "is later than the current time 2026-11-05T03:15:00.000000Z" in refused.stderr
    assert "2027-02-01T03:15:00.000000Z" in refused.stderr and "lms-refresh watermark set TIME" in refused.stderr
    status = project.invoke("status", now=at(later), check=0)
    assert "STALE" in status.stdout and "in the future" in status.stdout  # not "fresh" from a future success

    result = project.invoke("watermark", "set", "2026-11-03T04:15", now=at(later), check=0)
    assert "-> 2026-11-03T03:15:00.000000Z" in result.stdout
    project.invoke("run", now=at(later), check=0)
    assert project.serving(site=True) == reference(project, later)
    assert [row[2] for row in project.serving() if row[2] is not None] == [12, 11]  # (gaps are published empty)


def test_watermark_set_refuses_the_future_and_needs_a_store(project):
    assert project.invoke("watermark", "set", "2026-11-01", now=at(T)).returncode == 78
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    future = project.invoke("watermark", "set", "2026-12-01", now=at(T))
    assert future.returncode == 78 and "is later than the current time" in future.stderr
    assert project.meta()["watermark"] == "2026-11-03T03:15:00.000000Z"


def test_a_run_with_nothing_to_do_is_recorded(project):
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    again = project.invoke("run", now=at(T), check=0)
    assert "Nothing to do" in again.stderr
    assert [row[:3] for row in project.runs()] == [("run", "success", 0), ("run", "nothing-to-do", 0)]


# -- 2: a store lost while its key remains --------------------------------------------------------

def test_a_deleted_store_is_refused_while_its_key_remains_and_rebuild_restores_history(project):
    project.configure(bootstrap_days=2)
    project.write("a.ndjson", day_batch(12, "2026-10-20", stored="2026-10-20T12:00:00Z"))
    project.write("b.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("backfill", "--since", "2026-10-01", "--until", "2026-11-03T04:15", now=at(T), check=0)
    assert [row[0] for row in project.serving() if row[2]] == ["2026-10-20", "2026-11-02"]
    drop_store(project)
    refused = project.invoke("run", now=at(T + dt.timedelta(days=1)))
    assert refused.returncode == 78
    assert "is missing (or empty) but the pseudonymisation key" in refused.stderr
    assert "lms-refresh rebuild --since DATE" in refused.stderr
    assert not project.has_store()  # nothing was created over the loss (no 2-day bootstrap)

    later = T + dt.timedelta(days=1)
    project.invoke("rebuild", "--since", "2026-10-01", now=at(later), check=0)
    assert project.serving(site=True) == reference(project, later, since=dt.datetime(2026, 9, 30, 22, tzinfo=UTC))
    assert [row[0] for row in project.serving() if row[2]] == ["2026-10-20", "2026-11-02"]
    project.invoke("run", now=at(later), check=0)  # and the timer carries on from the rebuild's watermark
    assert project.runs()[-1][1:] == ("nothing-to-do", 0, project.runs()[-1][3], project.runs()[-1][3])


def test_a_new_store_path_beside_the_old_store_starts_that_store(tmp_path):
    """Pointing store.path at a new file (as a change of source requires) is no lost store: the
    note names the old store, which is still there; only that store's loss is refused."""
    from helpers.project import Project

    project = Project(tmp_path)
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    old = project.store.read_bytes()
    with open(project.config, "a", encoding="utf-8") as handle:
        handle.write(f'[store]\npath = "{project.state / "second.sqlite"}"\n')
    project.invoke("run", now=at(T + dt.timedelta(hours=1)), check=0)
    assert (project.state / "second.sqlite").exists()
    assert project.store.read_bytes() == old  # the first store is left as it was
    (project.state / "second.sqlite").unlink()
    refused = project.invoke("run", now=at(T + dt.timedelta(hours=2)))
    assert refused.returncode == 78  # now the note names second.sqlite, which is gone
    assert f"The store {project.state / 'second.sqlite'} is missing (or empty)" in refused.stderr


def test_a_missing_key_message_says_every_host_needs_the_same_key(project):
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    (project.state / "pseudonymisation.key").unlink()
    result = project.invoke("run", now=at(T + dt.timedelta(days=1)))
    assert result.returncode == 78
    assert "every host that shares a store needs the same key: copy it from a host that has it" in result.stderr


def test_a_dry_run_does_not_claim_to_create_a_key(project):
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    result = project.invoke("run", "--dry-run", now=at(T), check=0)
    assert "Created a new pseudonymisation key" not in result.stderr
    assert not (project.state / "pseudonymisation.key").exists()


# -- 3: settings that change a staged row's identity -----------------------------------------------

def untyped(learners, day):
    """Statements whose course comes from course_pattern (no context activity typed as a course)."""
    batch = day_batch(learners, day)
    for item in batch:
        del item["context"]
    return batch


def test_a_changed_course_pattern_is_refused_and_rebuild_applies_it_without_double_counting(project):
    project.write("a.ndjson", untyped(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    before = project.serving()
    assert [row[1] for row in before] == ["https://lms.example.edu/course/BIO101"]
    text = project.config.read_text().replace(
        "batch_size = 500", "batch_size = 500\ncourse_pattern = '^(.+?/course/[^/?#]+/quiz)'")
    project.config.write_text(text)
    later = T + dt.timedelta(days=1)
    refused = project.invoke("run", now=at(later))
    assert refused.returncode == 78
    assert "derived with source.course_pattern = '^(.+?/course/[^/?#]+)'" in refused.stderr
    assert "lms-refresh rebuild --since DATE" in refused.stderr
    assert project.serving() == before
    project.invoke("rebuild", "--since", "2026-10-01", now=at(later), check=0)
    after = project.serving()
    assert [row[1] for row in after] == ["https://lms.example.edu/course/BIO101/quiz"]
    assert after[0][2:] == before[0][2:]  # the same 12 learners and statements, counted once
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(12,)]


def test_a_store_without_a_recorded_mapping_version_counts_as_version_1(project, monkeypatch):
    from lms_refresh.config import load_config
    from lms_refresh.errors import StateError
    from lms_refresh.run import identity

    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    meta = project.meta()
    assert meta["identity.mapping_version"] == str(identity.MAPPING_VERSION)
    del meta["identity.mapping_version"]  # as a store written before versions were recorded
    monkeypatch.setattr(identity, "MAPPING_VERSION", 2)  # a later lms-refresh that maps statements otherwise
    with pytest.raises(StateError) as refused:
        identity.verify_identity(load_config(str(project.config), {}), meta, has_events=True)
    assert ("derived by statement mapping version 1 but this lms-refresh maps statements by version 2"
            in str(refused.value))
    assert "lms-refresh rebuild --since DATE" in str(refused.value) and refused.value.exit_code == 78


# -- 4: one statement id, two contents ------------------------------------------------------------

def test_a_conflicting_second_version_of_a_statement_id_is_quarantined_never_counted(project):
    project.configure(extra_top="max_quarantine_share = 0.2")
    first = day_batch(12, "2026-11-02")
    project.write("a.ndjson", first)
    # The same id again with other content: another learner, course and day (a non-conforming LRS)
    conflicting = dict(first[0], actor={"account": {"homePage": "https://lms.example.edu", "name": "other"}},
                       timestamp="2026-11-01T09:00:00Z")
    conflicting["context"] = json.loads(json.dumps(first[0]["context"]).replace("BIO101", "CHEM200"))
    project.write("b.ndjson", [conflicting, first[1]])  # and an identical copy, which is no conflict
    project.invoke("run", now=at(T), check=0)
    expected = expected_serving([json.dumps(s) for s in first], T - dt.timedelta(days=30), T, PARIS, 10)
    assert project.serving(site=True) == expected
    rows = project.query("SELECT origin, reason FROM quarantine")
    assert rows == [(f"statement {first[0]['id'].replace('-', '')}",
                     "conflicting statement id: already staged with other content")]
    # and in a later run, from a later window, just the same
    conflicting["stored"] = "2026-11-03T08:00:00Z"
    fresh = day_batch(12, "2026-11-03", prefix="v", stored="2026-11-03T08:00:00Z")
    project.write("c.ndjson", [conflicting] + fresh)
    later = T + dt.timedelta(days=1)
    project.invoke("run", now=at(later), check=0)
    assert project.serving(site=True) == expected_serving([json.dumps(s) for s in first + fresh],
                                                          T - dt.timedelta(days=30), later, PARIS, 10)
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(24,)]
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(2,)]  # once per version and where it was seen


def test_two_versions_of_one_id_in_the_same_batch_count_once(project):
    project.configure(extra_top="max_quarantine_share = 0.2")
    batch = day_batch(12, "2026-11-02")
    second = dict(batch[3], timestamp="2026-11-01T10:00:00Z")  # the same id, another day
    project.write("a.ndjson", batch[:6] + [second] + batch[6:])
    project.invoke("run", now=at(T), check=0)
    assert project.serving(site=True) == expected_serving([json.dumps(s) for s in batch], T - dt.timedelta(days=30), T,
                                                 PARIS, 10)
    assert project.query("SELECT reason FROM quarantine") == [
        ("conflicting statement id: already staged with other content",)]


def test_moodle_identity_settings_are_recorded_and_guarded(tmp_path):
    from lms_refresh.config import load_config
    from lms_refresh.errors import StateError
    from lms_refresh.run import identity

    path = tmp_path / "moodle.toml"
    path.write_text('[source]\ntype = "moodle"\nurl = "postgresql://reader@db/moodle"\n'
                    'site_url = "https://moodle.example.edu"\nsite_course_id = 1\n')
    config = load_config(str(path), {})
    meta = dict(identity.identity(config), timezone="UTC")
    assert meta == {"identity.site_url": "https://moodle.example.edu", "identity.site_course_id": "1",
                    "identity.guest_user_id": "1", "timezone": "UTC"}
    identity.verify_identity(config, meta, has_events=True)  # unchanged: fine
    moved = dict(meta, **{"identity.site_url": "https://old-moodle.example.edu"})
    with pytest.raises(StateError) as refused:
        identity.verify_identity(config, moved, has_events=True)
    assert "derived with source.site_url = 'https://old-moodle.example.edu'" in str(refused.value)
    identity.verify_identity(config, moved, has_events=False)  # an empty store takes the new identity


def test_an_older_store_with_a_double_staged_id_is_repaired_by_the_upgrade(sqlite_project):
    import sqlite3

    from lms_refresh.store.sqlite import SqliteStore

    project = sqlite_project
    project.state.mkdir()
    store = SqliteStore.open(str(project.store), create=True, migrate=False)
    store.migrate(target=UNIQUE_IDS - 1)  # the schema before statement ids were unique
    store.close()
    batch = day_batch(12, "2026-11-02")
    project.write("a.ndjson", batch)
    # Simulate what the old code did with one id under two courses: stage it twice by hand.
    project.invoke("run", now=at(T), check=0)
    with sqlite3.connect(project.store) as db:
        db.execute("DROP INDEX staged_events_event_id")  # back to the schema before that migration
        db.execute("DROP TABLE pending_days")
        for sql in before_outcomes(SQLITE):  # version 10's columns (a column is never added twice)
            db.execute(sql)
        for table in ("daily_metrics", "period_metrics"):  # version 9's
            for column in ("score_max_micro", "duration_max_ms"):
                db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        row = db.execute("SELECT * FROM staged_events LIMIT 1").fetchone()
        db.execute(f"INSERT INTO staged_events VALUES ({', '.join('?' * len(row))})",
                   (row[0], row[1] + 1, row[2]) + row[3:])
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(UNIQUE_IDS - 1),))
        assert db.execute("SELECT COUNT(*) FROM staged_events").fetchone() == (13,)
    project.invoke("run", now=at(T + dt.timedelta(hours=1)), check=0)
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(12,)]
    assert project.serving(site=True) == expected_serving([json.dumps(s) for s in batch], T - dt.timedelta(days=30), T,
                                                 PARIS, 10)


# -- 5: a store is never visible half-built --------------------------------------------------------

def test_a_kill_while_the_store_is_created_leaves_no_store_and_status_says_so(project):
    _killed_while_created(project, "store-created")


@pytest.mark.parametrize("phase", ["migration-applied@2", "migration-committed@1"])
def test_a_kill_between_the_migrations_of_a_new_sqlite_store_leaves_no_store(sqlite_project, phase):
    """(A new PostgreSQL store is built in one transaction: it has no phase between migrations.)"""
    _killed_while_created(sqlite_project, phase)


def _killed_while_created(project, phase):
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    killed = project.cli("run", now=at(T), env={"LMS_REFRESH_FAULT": f"{phase}:kill"})
    assert killed.returncode == -9
    status = project.invoke("status", now=at(T))
    assert status.returncode == 0, status.stderr
    assert "damaged" not in status.stdout + status.stderr
    assert "not created yet" in status.stdout
    if not project.postgres:
        assert not project.store.exists()  # only the temporary file, under another name
    project.invoke("run", now=at(T), check=0)
    assert project.serving(site=True) == reference(project, T)
    if not project.postgres:
        assert [p.name for p in project.state.iterdir() if ".creating-" in p.name] == []


def test_status_on_a_state_directory_with_only_a_key_is_not_damaged(sqlite_project, tmp_path):
    project = sqlite_project
    project.state.mkdir()
    shutil.copy(__file__, project.state / "unrelated")  # any other file: nothing calls it a store
    status = project.invoke("status", now=at(T), check=0)
    assert "not created yet" in status.stdout


def test_a_damaged_watermark_can_be_set_by_hand(sqlite_project):
    import sqlite3

    project = sqlite_project
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    with sqlite3.connect(project.store) as db:
        db.execute("UPDATE meta SET value = 'yesterday' WHERE key = 'watermark'")
    refused = project.invoke("run", now=at(T))
    assert refused.returncode == 78 and "'lms-refresh watermark set TIME'" in refused.stderr
    project.invoke("watermark", "set", "2026-11-03T04:15", now=at(T), check=0)
    project.invoke("run", now=at(T), check=0)
    assert project.serving(site=True) == reference(project, T)
    assert [row[:3] for row in project.runs()][-2:] == [("watermark-set", "watermark-set", 0),
                                                         ("run", "nothing-to-do", 0)]


def test_a_moodle_watermark_is_a_log_id(tmp_path):
    from lms_refresh.config import load_config
    from lms_refresh.errors import ConfigError
    from lms_refresh.run.watermark import parse_cursor
    from lms_refresh.window import LOG_ID

    path = tmp_path / "moodle.toml"
    path.write_text('[source]\ntype = "moodle"\nurl = "postgresql://reader@db/moodle"\n'
                    'site_url = "https://moodle.example.edu"\n')
    config = load_config(str(path), {})
    assert parse_cursor(config, "123456") == (LOG_ID, 123456)
    with pytest.raises(ConfigError, match="is not a Moodle log id"):
        parse_cursor(config, "2026-11-01")


def _as_mapping_version_1(project):
    """Make the store look as an lms-refresh that recorded no mapping version (version 1) left it."""
    _write(project, "DELETE FROM meta WHERE key LIKE 'identity.%'")


def _write(project, statement):
    from lms_refresh.config import load_config
    from lms_refresh.store import open_store

    store = open_store(load_config(str(project.config), {}), {}, create=True)
    try:
        store.begin()
        store.execute(statement)
        store.commit()
    finally:
        store.close()


def test_the_first_run_after_an_upgrade_rebuilds_the_store_for_the_new_mapping_under_its_lock(project):
    from lms_refresh.sources.xapi import MAPPING_VERSION

    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    project.write("b.ndjson", day_batch(14, "2026-11-03", prefix="v", stored="2026-11-03T12:00:00Z"))
    _as_mapping_version_1(project)
    later = T + dt.timedelta(days=1)
    checked = project.invoke("check", check=0)
    assert (f"ok  store: the next run upgrades it from statement mapping version 1 to {MAPPING_VERSION}: it reads the "
            "source again from 2026-10-04T03:15:00.000000Z") in checked.stdout
    result = project.invoke("run", now=at(later), check=0)
    assert (f"Upgrading the store from statement mapping version 1 to {MAPPING_VERSION}: rebuilding it from the "
            "source from 2026-10-04T03:15:00.000000Z (the first window it was built from)") in result.stderr
    assert "found every statement the store was built from" in result.stderr
    assert project.meta()["identity.mapping_version"] == str(MAPPING_VERSION)
    assert project.serving(site=True) == reference(project, later)
    assert project.runs()[-1][0] == "run" and project.runs()[-1][2] == 0
    again = project.invoke("run", now=at(later + dt.timedelta(hours=1)), check=0)  # once: nothing to upgrade now
    assert "Upgrading" not in again.stderr


def test_an_upgrade_the_source_can_no_longer_feed_fails_with_78_and_changes_nothing(project):
    from lms_refresh.sources.xapi import MAPPING_VERSION

    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.write("b.ndjson", day_batch(12, "2026-11-02", prefix="w"))
    project.invoke("run", now=at(T), check=0)
    before = project.serving()
    (project.source / "a.ndjson").unlink()  # the export rotated away
    _as_mapping_version_1(project)
    result = project.invoke("run", now=at(T + dt.timedelta(days=1)))
    assert result.returncode == 78, result.stderr
    assert (f"derived by statement mapping version 1 but this lms-refresh maps statements by version {MAPPING_VERSION}"
            ", and rebuilding it from the source from 2026-10-04T03:15:00.000000Z found 12 of the statements it "
            "was built from no longer there; nothing was changed") in result.stderr
    assert "lms-refresh rebuild --since DATE" in result.stderr and "NEWS.Debian" in result.stderr
    assert project.serving() == before and "identity.mapping_version" not in project.meta()
    assert project.runs()[-1][2] == 78


def test_an_upgrade_of_a_store_with_a_staging_horizon_needs_the_operator(project):
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    _as_mapping_version_1(project)
    _write(project, "INSERT INTO meta (key, value) VALUES ('staging_horizon', '2026-09-01')")
    checked = project.invoke("check")  # says what the run would say, before a night's run does
    assert checked.returncode == 78
    assert "cannot be rebuilt automatically: its days before the staging horizon" in checked.stderr
    result = project.invoke("run", now=at(T + dt.timedelta(days=1)))
    assert result.returncode == 78
    assert "cannot be rebuilt automatically: its days before the staging horizon" in result.stderr


def test_an_upgrade_of_a_store_whose_run_log_has_no_windows_is_refused_by_check_as_by_the_run(project):
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    _as_mapping_version_1(project)
    _write(project, "UPDATE runs SET window_since = NULL")  # as a store from before the run log kept windows
    for command in (["check"], ["run"]):
        result = project.invoke(*command, now=at(T + dt.timedelta(days=1)))
        assert result.returncode == 78, command
        assert "its run log does not say which windows it was built from" in result.stderr, command

def test_a_key_copied_in_for_a_first_run_starts_a_store(project):
    from lms_refresh.disclosure.pseudonyms import create_key

    project.state.mkdir()
    create_key(str(project.state / "pseudonymisation.key"))  # from another host, or made in advance
    project.write("a.ndjson", day_batch(12, "2026-11-02"))
    project.invoke("run", now=at(T), check=0)
    assert project.serving(site=True) == reference(project, T)
    assert (project.state / "store-identity").exists()  # from now on, losing the store is refused
