"""PostgreSQL's bulk fill of an empty table (store/pg_bulk.py): whatever keeps a run from dropping a key (another
session's lock, a lock cycle with a session, an object that depends on the key) fills the table the usual way and
never fails the run; a table that stays empty is left alone; a dry run takes no statistics.

The first run's bulk fill itself (keys built again, the tables analyzed, the recount's metrics) is tested with the
other first-run cases in test_first_run_staging.py.
"""

import datetime as dt
import threading
import time

import psycopg
import pytest

from store.test_first_run_staging import EARLIER, T, _bulk_marks, _no_autovacuum, base, recount

pytestmark = pytest.mark.postgresql
DAY = "2026-11-02"  # the day of base()'s statements


def _project(tmp_path, server, name, statements=()):
    """A PostgreSQL project whose store exists (a first run at EARLIER), with `statements` then refreshed."""
    from helpers.project import Project

    project = Project(tmp_path / name, server)
    project.configure()
    project.invoke("run", now=EARLIER, check=0)
    _no_autovacuum(server, project)
    if statements:
        project.write("a.ndjson", statements)
        project.invoke("run", now=T.isoformat(), check=0)
    return project


def _open(project):
    from lms_refresh.config import load_config
    from lms_refresh.store import open_store

    return open_store(load_config(str(project.config), {}), {}, create=True)


def _waits_for(server, database, table):
    """Whether some session waits for a lock on lms_refresh.`table`."""
    with psycopg.connect(host=server.sockets, port=server.port, user="postgres", dbname=database,
                         autocommit=True) as probe:
        return probe.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND relation = %s::regclass)",
                             (f"lms_refresh.{table}",)).fetchone()[0]


@pytest.mark.parametrize(("held", "asked", "source"), [("staged_events", "learner_days", "staged_events"),
                                                       ("learner_days", "learner_periods", "learner_days")])
def test_a_session_in_a_lock_cycle_with_a_bulk_fill_leaves_the_table_filled_the_usual_way(
        tmp_path, postgres_server, held, asked, source):
    """A run holds `held` exclusively until its commit (staging's index dropped, or presence filled in bulk). A
    session that holds `asked` and then waits for `held` makes a cycle with the run's drop on `asked`: the server
    fails one side after deadlock_timeout (1 s), here the run's drop (the session's one check came before the cycle
    closed). The run fills `asked` with its key kept up instead of failing, as on a lock held too long."""
    project = _project(tmp_path, postgres_server, "cycle", base())
    before = _bulk_marks(project)
    store, reader, failures = _open(project), psycopg.connect(
        host=postgres_server.sockets, port=postgres_server.port, user="postgres", dbname=project.database), []

    def read_held():
        try:
            reader.execute(f"SELECT COUNT(*) FROM lms_refresh.{held}")
        except psycopg.Error as error:
            failures.append(error)

    try:
        store.begin()
        store.execute(f"DELETE FROM {asked}")  # empty, as in a rebuild from scratch
        assert store.alone(f"LOCK TABLE {held} IN ACCESS EXCLUSIVE MODE")  # what the run's own drop took
        reader.execute(f"SELECT COUNT(*) FROM lms_refresh.{asked}")  # its transaction holds `asked` from now on
        thread = threading.Thread(target=read_held)
        thread.start()
        deadline = time.monotonic() + 30
        while not _waits_for(postgres_server, project.database, held):
            assert time.monotonic() < deadline, "the session never waited for the run's table"
            time.sleep(0.05)
        time.sleep(1.2)  # past the session's one deadlock check, which found no cycle yet
        started = time.monotonic()
        with store.filling(asked, source, store.dialect.day_set([DAY])) as empty:
            assert empty
            assert time.monotonic() - started < 10  # the cycle found at the run's 1 s, not a 2 s lock timeout
        store.commit()
        thread.join(30)
        assert not thread.is_alive() and not failures  # the session read once the run committed
    finally:
        store.rollback_quietly()
        store.close()
        reader.close()
    assert _bulk_marks(project)[f"{asked}_pkey"] == before[f"{asked}_pkey"]  # never dropped


def test_a_key_an_operator_built_on_keeps_its_table_filled_the_usual_way(tmp_path, postgres_server):
    """An operator's view that groups learner_days by its key (its other columns then depend on the key) cannot
    outlive the key's drop: a first run fills the table with the key kept up, and succeeds."""
    project = _project(tmp_path, postgres_server, "dependent")
    postgres_server.admin("CREATE VIEW lms_refresh.presence_keys AS SELECT day, course_id, actor, learner_key "
                          "FROM lms_refresh.learner_days GROUP BY day, course_id, actor", project.database)
    before = _bulk_marks(project)
    project.write("a.ndjson", base())
    result = project.invoke("run", now=T.isoformat(), check=0)
    assert " ERROR " not in result.stderr and " WARNING " not in result.stderr, result.stderr
    after = _bulk_marks(project)
    assert after["learner_days_pkey"] == before["learner_days_pkey"]  # kept up: the view needs it
    assert after["learner_periods_pkey"] != before["learner_periods_pkey"]  # nothing holds that one
    assert project.serving(site=True) == recount(base())
    assert postgres_server.admin("SELECT COUNT(*) FROM lms_refresh.presence_keys", project.database) == [(12,)]


def test_a_run_with_nothing_to_fill_leaves_the_keys_and_the_statistics_alone(tmp_path, postgres_server):
    """Nights with an empty window on a store with no presence (a new install; retention emptied it): the tables
    stay empty, so no key is dropped and built again, no table analyzed, no table held exclusively."""
    project = _project(tmp_path, postgres_server, "quiet")
    before = _bulk_marks(project)
    for night in (1, 2):
        result = project.invoke("-v", "run", now=(T + dt.timedelta(days=night)).isoformat(), check=0)
        assert "Refresh committed: read 0 statements" in result.stderr, result.stderr
        assert _bulk_marks(project) == before


def test_a_dry_run_fills_nothing_in_bulk(tmp_path, postgres_server):
    """ANALYZE and an index's build write a table's row count into pg_class in place: a dry run's rollback would
    leave the planner counting rows that were never committed. A dry first run leaves every count and key as it
    was (staging's index kept up too); the real one sets them."""
    project = _project(tmp_path, postgres_server, "dry")
    before = _bulk_marks(project)
    project.write("a.ndjson", base())
    result = project.invoke("run", "--dry-run", now=T.isoformat(), check=0)
    assert "Dry run" in result.stderr, result.stderr
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(0,)]
    assert _bulk_marks(project) == before
    project.invoke("run", now=T.isoformat(), check=0)
    assert [_bulk_marks(project)[table] for table in ("staged_events", "learner_days", "learner_periods")] == [
        12, 12, 24]


def test_a_dry_forget_fills_nothing_in_bulk(tmp_path, postgres_server):
    """`forget --dry-run` of a learner present on the store's one day rebuilds that day in its rolled-back
    transaction, learner_days emptied first and filled again from the other learners: not in bulk either."""
    from helpers.statements import HOME

    project = _project(tmp_path, postgres_server, "dry-forget", base())
    before = _bulk_marks(project)
    dry = project.invoke("forget", "--dry-run", "--account-homepage", HOME, "--account-name", "u1", check=0)
    assert "would delete: 1 staged event" in dry.stdout, dry.stdout
    assert _bulk_marks(project) == before
    assert project.serving(site=True) == recount(base())


def test_a_key_with_storage_settings_of_an_operator_keeps_them(tmp_path, postgres_server):
    """A fillfactor set on learner_days' key would be lost by a build with the session's defaults: the key is kept
    up (and the setting with it), the other table filled in bulk as usual."""
    project = _project(tmp_path, postgres_server, "fillfactor")
    postgres_server.admin("ALTER INDEX lms_refresh.learner_days_pkey SET (fillfactor = 70)", project.database)
    before = _bulk_marks(project)
    project.write("a.ndjson", base())
    project.invoke("run", now=T.isoformat(), check=0)
    after = _bulk_marks(project)
    assert after["learner_days_pkey"] == before["learner_days_pkey"]
    assert after["learner_periods_pkey"] != before["learner_periods_pkey"]
    assert postgres_server.admin("SELECT reloptions FROM pg_class WHERE oid = 'lms_refresh.learner_days_pkey'"
                                 "::regclass", project.database) == [(["fillfactor=70"],)]
    assert project.serving(site=True) == recount(base())


@pytest.mark.parametrize("action, status", [("kill", -9), ("term", 143)])
def test_a_first_run_stopped_after_its_bulk_fills_leaves_the_store_as_it_was(tmp_path, postgres_server, action,
                                                                              status):
    """Killed (or stopped by SIGTERM) after the recompute, its keys dropped and built again in its transaction:
    nothing was committed, the keys are the ones from before, and the next run publishes the recount. (The tables'
    row counts in pg_class are the rolled-back run's: ANALYZE and an index's build write them in place, as any
    aborted CREATE INDEX does. Only the planner reads them, and the next run's fills take them again.)"""
    project = _project(tmp_path, postgres_server, f"stopped-{action}")
    before = _bulk_marks(project)
    project.write("a.ndjson", base())
    stopped = project.cli("run", now=T.isoformat(), env={"LMS_REFRESH_FAULT": f"after-recompute:{action}"})
    assert stopped.returncode == status, stopped.stderr
    if action == "term":
        assert "Stopped by SIGTERM" in stopped.stderr, stopped.stderr
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(0,)]
    keys = [f"{table}_pkey" for table in ("staged_events", "learner_days", "learner_periods")]
    assert [_bulk_marks(project)[key] for key in keys] == [before[key] for key in keys]
    project.invoke("run", now=T.isoformat(), check=0)
    assert project.serving(site=True) == recount(base())
    assert [_bulk_marks(project)[table] for table in ("staged_events", "learner_days", "learner_periods")] == [
        12, 12, 24]
