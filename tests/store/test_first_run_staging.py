"""A first run stages into an empty store without the unique index on statement ids, built once at the end
(store/sqlite.py, issue 23's "linear to 10 million statements"; store/pg_staging.py, COPY straight into staging).

What a first run publishes, quarantines and counts must not depend on that: every case here is run
twice, with the index built at the end and with it kept up throughout (`bulk_staging = False`, what every
later run does), and the two stores must agree with each other and with the independent recount. A
statement id under two staging keys cannot be indexed: the run is read again with the index in place,
and says so.
"""

import datetime as dt
import json
import re

import pytest

from helpers.reference import expected_serving
from helpers.statements import statement, voiding
from lms_refresh.sources.xapi import ADL
from lms_refresh.store.base import SqlStore

T = dt.datetime(2026, 11, 3, 3, 15, tzinfo=dt.UTC)  # Tuesday 04:15 in Paris
CONFLICT = "conflicting statement id: already staged with other content"
AGAIN = "Staging again, with the index on statement ids kept up throughout"
EARLIER = "2026-11-01T00:00:00+00:00"  # before every statement's `stored`: a run then creates an empty store
PG_INDEXES = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'lms_refresh' ORDER BY indexname"


def base(learners=12):
    return [statement(learner=f"u{i}", verb=("experienced", "completed", "passed")[i % 3], course=f"C{i % 2}",
                      timestamp=f"2026-11-02T10:{i:02d}:00Z", score=0.5 if i % 2 else None) for i in range(learners)]


def recount(statements):
    return expected_serving([json.dumps(s) for s in statements], T - dt.timedelta(days=30), T + dt.timedelta(days=1),
                            "Europe/Paris", 10)


def first_run(project, files, *, share="0.5"):
    """Write `files` ({name: statements}) and run once; return (stderr, the store's outcome)."""
    project.configure(extra_top=f"max_quarantine_share = {share}")
    for name, statements in files.items():
        project.write(name, statements)
    result = project.invoke("-v", "run", now=T.isoformat(), check=0)
    outcome = {
        "serving": project.serving(site=True),
        "quarantine": project.query("SELECT origin, reason FROM quarantine ORDER BY origin"),
        "staged": project.query("SELECT day, stored, occurred, verb_id, is_completion, score_micro, record_key "
                                "FROM staged_events ORDER BY stored, event_id"),
        "run": project.query("SELECT outcome, statements_read, staged, voided, quarantined FROM runs"),
        "schema": project.query("SELECT type, name, sql FROM sqlite_master ORDER BY name")
        if project.postgres is None else project.query(PG_INDEXES),
    }
    return result.stderr, outcome


def both_ways(tmp_path, make_project, monkeypatch, files):
    """Run `files` into a new store with the index built at the end (SQLite) and with it kept up throughout."""
    built_after, stderr = first_run(make_project(tmp_path / "bulk"), files)[::-1]
    monkeypatch.setattr(SqlStore, "bulk_staging", False)
    kept_up, kept_stderr = first_run(make_project(tmp_path / "kept"), files)[::-1]
    assert AGAIN not in kept_stderr
    # The record keys differ by store (each has its own secret key); everything else is the same.
    strip = [row[:-1] for row in built_after.pop("staged")], [row[:-1] for row in kept_up.pop("staged")]
    assert strip[0] == strip[1]
    assert built_after == kept_up
    return built_after, stderr


def test_a_first_run_with_redeliveries_and_a_second_version_under_the_same_key(tmp_path, make_project, monkeypatch,
                                                                              store_kind):
    statements = base()
    again = [dict(s, stored="2026-11-02T12:00:00Z") for s in statements[:5]]  # a re-delivery, a new `stored`
    second = dict(statements[6], verb={"id": ADL + "failed"}, stored="2026-11-02T13:00:00Z")  # same key, other verb
    outcome, stderr = both_ways(tmp_path, make_project, monkeypatch,
                                {"a.ndjson": statements, "b.ndjson": again + [second]})
    assert AGAIN not in stderr  # the staging key refused them all: the index was built at the end
    assert outcome["quarantine"] == [(f"statement {statements[6]['id'].replace('-', '')}", CONFLICT)]
    assert outcome["run"] == [("success", 18, 17, 0, 1)]
    assert outcome["serving"] == recount(statements)
    # The index built at the end is the one a migration creates, text and all (both_ways compared the schemas).
    assert {"sqlite": ("index", "staged_events_event_id",
                       "CREATE UNIQUE INDEX staged_events_event_id ON staged_events (event_id)"),
            "postgresql": ("staged_events_event_id", "CREATE UNIQUE INDEX staged_events_event_id ON "
                           "lms_refresh.staged_events USING btree (event_id)")}[store_kind] in outcome["schema"]


@pytest.mark.parametrize("field", ["learner", "course", "day"])
def test_a_statement_id_under_two_staging_keys_reads_the_run_again(tmp_path, make_project, monkeypatch, field,
                                                                   store_kind):
    statements = base()
    other = {"learner": {"learner": "u99"}, "course": {"course": "C9"},
             "day": {"timestamp": "2026-11-01T10:00:00Z"}}[field]
    kept = statements[3]
    second = statement(**{"learner": "u3", "verb": "completed", "course": "C1", "timestamp": kept["timestamp"],
                          **other}, id=kept["id"], stored="2026-11-02T13:00:00Z")
    voided = voiding(statements[4]["id"], "2026-11-02T14:00:00Z")
    outcome, stderr = both_ways(tmp_path, make_project, monkeypatch,
                                {"a.ndjson": statements, "b.ndjson": [second, voided]})
    assert AGAIN in stderr
    # Counted once, not twice: what the first reading staged and quarantined was rolled back with it.
    assert outcome["run"] == [("success", 14, 12, 1, 1)]
    assert outcome["quarantine"] == [(f"statement {kept['id'].replace('-', '')}", CONFLICT)]
    assert outcome["serving"] == recount(statements[:4] + statements[5:])


# -- PostgreSQL: dropping the index needs the table's owner and the table to itself (store/pg_staging.py) --------

_BULK = ("staged_events", "learner_days", "learner_periods")  # the tables a first run fills whole
_NAMES = ", ".join(f"'{name}', '{name}_pkey'" for name in _BULK)


def _bulk_marks(project):
    """What a bulk fill changes (store/pg_bulk.py): the oid of each index of staging and of learner_days (a new
    one when an index was dropped and built again), and the tables' row counts as their statistics have them
    (pg_class.reltuples, which ANALYZE sets; the tests' tables are kept from autovacuum, see _no_autovacuum)."""
    return dict(project.query(
        "SELECT c.relname, CASE WHEN c.relkind = 'i' THEN c.oid::bigint ELSE c.reltuples::bigint END FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'lms_refresh' AND c.relname IN "
        f"({_NAMES})"))


def _no_autovacuum(server, project):
    """Keep autovacuum's ANALYZE away from the tables whose statistics a test reads (it could come at any time)."""
    for table in _BULK:
        server.admin(f"ALTER TABLE lms_refresh.{table} SET (autovacuum_enabled = false)", project.database)


def _staged_by(project, server, tmp_path, role, files, before=None):
    """Create the store as its owner (a run with nothing to read), then run `files` as `role`, which has every
    privilege a run needs (check's list) but owns nothing; return that run's stderr (`before`, a dict, is given
    the store's _bulk_marks before that run)."""
    project.configure(extra_top="max_quarantine_share = 0.5")
    project.invoke("run", now=EARLIER, check=0)
    _no_autovacuum(server, project)
    if before is not None:
        before.update(_bulk_marks(project))
    server.admin(f"DO $$ BEGIN CREATE ROLE {role} LOGIN PASSWORD 'dml'; EXCEPTION WHEN duplicate_object THEN "
                 "NULL; END $$")
    for grant in ("USAGE ON SCHEMA lms_refresh", "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA lms_refresh",
                  "USAGE ON ALL SEQUENCES IN SCHEMA lms_refresh", "USAGE ON SCHEMA lms_refresh_serving",
                  "SELECT ON ALL TABLES IN SCHEMA lms_refresh_serving"):
        server.admin(f"GRANT {grant} TO {role}", project.database)
    (tmp_path / "dml-password").write_text("dml\n")
    project.config.write_text(project.config.read_text().replace("lms_refresh@", f"{role}@")
                              .replace(server.password_file, str(tmp_path / "dml-password")))
    for name, statements in files.items():
        project.write(name, statements)
    return project.invoke("run", now=T.isoformat(), check=0).stderr


@pytest.mark.postgresql
def test_a_role_that_does_not_own_staging_stages_a_first_run_with_the_index_kept_up(tmp_path, postgres_server):
    """DROP INDEX needs the table's owner: a role granted only what a run needs would fail the run there."""
    from helpers.project import Project

    project = Project(tmp_path / "dml", postgres_server)
    statements = base()
    second = statement(learner="u3", verb="completed", course="C1", timestamp="2026-11-01T10:00:00Z",
                       id=statements[3]["id"], stored="2026-11-02T13:00:00Z")  # an id under two keys
    marks = {}
    stderr = _staged_by(project, postgres_server, tmp_path, "dml_only", {"a.ndjson": statements, "b.ndjson": [second]},
                        before=marks)
    assert AGAIN not in stderr
    # Nor may it drop learner_days' key, nor analyze what it filled: the same index, the owner's statistics.
    assert _bulk_marks(project) == marks  # the index was there throughout: the second version was refused as it came
    assert project.query("SELECT outcome, statements_read, staged, quarantined FROM runs ORDER BY staged") == [
        ("success", 0, 0, 0), ("success", 13, 12, 1)]
    assert project.serving(site=True) == recount(statements)
    assert ("staged_events_event_id", "CREATE UNIQUE INDEX staged_events_event_id ON lms_refresh.staged_events "
            "USING btree (event_id)") in project.query(PG_INDEXES)


@pytest.mark.postgresql
def test_a_first_run_does_not_wait_for_a_session_reading_staging(tmp_path, postgres_server):
    """Another session reading staged_events holds a lock that DROP INDEX would wait for until that session ends
    (and every later reader would queue behind it): the run gives up the drop after 2 s and stages with the index
    kept up. The reading session is ended by a timer after 120 s at the latest, so that a run that waited could
    not hang the suite; the run must have ended long before."""
    import threading

    import psycopg

    from helpers.project import Project

    project = Project(tmp_path / "busy", postgres_server)
    project.configure()
    project.invoke("run", now=EARLIER, check=0)  # the store, empty
    _no_autovacuum(postgres_server, project)
    project.write("a.ndjson", base())
    reader = psycopg.connect(host=postgres_server.sockets, port=postgres_server.port, user="postgres",
                             dbname=project.database)
    before = _bulk_marks(project)
    # Its transaction stays open, locks and all: on staging, and on the presence a first run fills in bulk.
    for table in _BULK:
        reader.execute(f"SELECT COUNT(*) FROM lms_refresh.{table}")
    ended = threading.Event()

    def end_reader():
        ended.set()
        reader.rollback()

    timer = threading.Timer(120, end_reader)
    timer.start()
    try:
        result = project.invoke("-v", "run", now=T.isoformat(), check=0)
        assert not ended.is_set(), "the run waited for the reading session to end"
    finally:
        timer.cancel()
        if not ended.is_set():
            reader.rollback()
        reader.close()
    assert AGAIN not in result.stderr and " ERROR " not in result.stderr and " WARNING " not in result.stderr
    assert project.query("SELECT outcome, staged FROM runs ORDER BY staged") == [("success", 0), ("success", 12)]
    after = _bulk_marks(project)
    assert [after[f"{table}_pkey"] for table in _BULK] == [before[f"{table}_pkey"] for table in _BULK]  # kept up
    assert project.serving(site=True) == recount(base())
    assert ("staged_events_event_id", "CREATE UNIQUE INDEX staged_events_event_id ON lms_refresh.staged_events "
            "USING btree (event_id)") in project.query(PG_INDEXES)


@pytest.mark.postgresql
def test_status_does_not_wait_for_a_first_run_that_holds_staging(tmp_path, postgres_server):
    """A first run holds staged_events exclusively while it stages without the index (as long as a backfill
    takes): `status` (and `status --check`, a monitoring plugin with its own timeout) and `check` must answer
    meanwhile. The
    run's lock is held here by a session of the test's own; status is given 120 s, where it takes well under 1 s.
    """
    import subprocess

    import psycopg

    from helpers.project import Project

    project = Project(tmp_path / "held", postgres_server)
    project.configure()
    project.write("a.ndjson", base())
    project.invoke("run", now=T.isoformat(), check=0)
    holder = psycopg.connect(host=postgres_server.sockets, port=postgres_server.port, user="postgres",
                             dbname=project.database)
    try:
        # A first run also holds the presence tables so while it fills them (store/pg_bulk.py).
        holder.execute("LOCK TABLE lms_refresh.staged_events, lms_refresh.learner_days, lms_refresh.learner_periods "
                       "IN ACCESS EXCLUSIVE MODE")
        status = subprocess.run(project.cli_args("status", now=T.isoformat()), capture_output=True, text=True,
                                env=project.environment(), timeout=120)
        plugin = subprocess.run(project.cli_args("status", "--check", now=T.isoformat()), capture_output=True,
                                text=True, env=project.environment(), timeout=120)
        check = subprocess.run(project.cli_args("check", now=T.isoformat()), capture_output=True, text=True,
                               env=project.environment(), timeout=120)
    finally:
        holder.rollback()
        holder.close()
    assert status.returncode == 0, status.stderr
    assert re.search(rf"^store: +postgresql postgresql://lms_refresh@127\.0\.0\.1:{postgres_server.port}/"
                     rf"{project.database} \([1-9][0-9,]* bytes, schema v[0-9]+\)$", status.stdout, re.M), status.stdout
    assert plugin.returncode == 0 and plugin.stdout.startswith("LMS-REFRESH OK"), plugin.stdout
    assert check.returncode == 0 and "; its role may write every table" in check.stdout, check.stdout


@pytest.mark.postgresql
def test_a_first_run_fills_presence_in_bulk_and_analyzes_what_it_filled(tmp_path, postgres_server):
    """Into an empty store the run drops the presence tables' keys while it fills them and builds them after, and
    analyzes staging and presence before the recompute reads them (store/pg_bulk.py); a later run, whose tables
    are not empty, keeps the keys up. The key built is the migrations' own, and the metrics are the recount's."""
    from helpers.project import Project

    project = Project(tmp_path / "bulk", postgres_server)
    project.configure()
    project.invoke("run", now=EARLIER, check=0)  # the store, empty
    _no_autovacuum(postgres_server, project)
    empty = _bulk_marks(project)
    project.write("a.ndjson", base())
    project.invoke("run", now=T.isoformat(), check=0)
    first = _bulk_marks(project)
    counts = [project.query(f"SELECT COUNT(*) FROM {table}")[0][0] for table in _BULK]
    assert counts == [12, 12, 24]  # a learner's one course-day, in its week and its month
    assert [first[table] for table in _BULK] == counts  # what ANALYZE counted, in the run
    # Dropped and built again (staging's key is kept up: its index on statement ids is the one dropped).
    assert [first[f"{table}_pkey"] == empty[f"{table}_pkey"] for table in _BULK] == [True, False, False]
    indexes = project.query(PG_INDEXES)
    assert ("learner_days_pkey", "CREATE UNIQUE INDEX learner_days_pkey ON lms_refresh.learner_days USING btree "
            "(day, course_id, actor)") in indexes
    assert ("learner_periods_pkey", "CREATE UNIQUE INDEX learner_periods_pkey ON lms_refresh.learner_periods "
            "USING btree (grain, period, course_id, actor)") in indexes
    for table in _BULK[1:]:
        # (PostgreSQL 18 lists each NOT NULL there too, contype 'n'.)
        assert project.query(f"SELECT conname FROM pg_constraint WHERE conrelid = 'lms_refresh.{table}'::regclass "
                             "AND contype = 'p'") == [(f"{table}_pkey",)]
    assert project.serving(site=True) == recount(base())
    # Another day: the day rebuilt is emptied first, and a table left empty so is filled in bulk again.
    later = [statement(learner=f"v{i}", course="C0", timestamp=f"2026-11-03T11:{i:02d}:00Z",
                       stored="2026-11-03T12:00:00Z") for i in range(3)]
    project.write("b.ndjson", later)
    project.invoke("run", now=(T + dt.timedelta(days=1)).isoformat(), check=0)
    assert _bulk_marks(project) == first  # the same key, and no ANALYZE: autovacuum's business from now on
    assert project.serving(site=True) == recount(base() + later)
