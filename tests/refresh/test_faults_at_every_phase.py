"""Faults injected at every named phase (lms_refresh/faults.py), on both stores: whatever happens
there leaves the previous state or the new one, the exit status says which, and the next run
converges on what an uninterrupted run commits (itself checked against tests/helpers/reference.py)."""

import contextlib
import datetime as dt
import json
import os
import shutil
import sqlite3
import tempfile

import pytest

from helpers.pgserver import PostgresServer
from helpers.reference import expected_serving
from helpers.statements import statement
from lms_refresh import faults

PARIS = "Europe/Paris"
UTC = dt.UTC
FIRST = dt.datetime(2026, 11, 2, 3, 15, tzinfo=UTC)
SECOND = dt.datetime(2026, 11, 4, 3, 15, tzinfo=UTC)

# The phases a run over an existing store passes, and whether the run has committed there.
NOISY = 'method = "cell-key"'  # the perturbed publication must converge byte for byte too


def publication_bytes(project):
    """The SQLite publication's content, every table and value as sqlite3's dump writes it (None if there is none;
    a PostgreSQL store publishes its view), but `freshness.published_at`: the commit's own time, taken from the
    clock as the run ends, which the converging run and the reference run read a second apart on a loaded machine."""
    path = project.state.parent / "state-publication" / "serving.sqlite"
    if project.postgres is not None or not path.exists():
        return None
    with tempfile.TemporaryDirectory() as scratch:
        copied = shutil.copy(path, os.path.join(scratch, "copy.sqlite"))
        with contextlib.closing(sqlite3.connect(copied)) as db:
            db.execute("UPDATE freshness SET published_at = NULL")
            return "\n".join(db.iterdump())


def copy(base, root):
    victim = base.copy_to(root)
    victim.configure(privacy=NOISY)
    return victim


RUN_PHASES = {"batch-staged": False, "batch-staged@3": False, "before-recompute": False, "after-recompute": False,
              "before-commit": False, "after-commit": True, "before-exit": True}


def test_every_phase_is_tested():
    """A phase added to faults.PHASES without a crash test here fails this test (chunk-read's: an input/output
    error, in the run and in a parsing worker, tests/refresh/test_full_disk.py)."""
    tested = {phase.split("@")[0] for phase in RUN_PHASES} | {"store-created", "migration-applied",
                                                              "migration-committed"} \
        | {"chunk-parsed", "exiting"} \
        | {"chunk-read"} \
        | {"replace-written", "replace-synced", "replace-renamed"}  # tests/unit/test_atomic.py: every writer
    assert tested == set(faults.PHASES)


_SCENARIOS = {}  # per kind of store: built once, never changed (every test runs on a copy)


@pytest.fixture
def scenario(store_kind, make_project, tmp_path_factory):
    """A store holding a first run, new statements for a second (several batches), and the reference
    state after an uninterrupted second run."""
    if store_kind not in _SCENARIOS:
        servers = {server: server.databases() for server in PostgresServer.running}
        _SCENARIOS[store_kind] = build_scenario(tmp_path_factory.mktemp(f"scenario-{store_kind}"), make_project)
        for server, before in servers.items():  # the next tests copy them: not the first test's to drop
            server.kept |= server.databases() - before
    return _SCENARIOS[store_kind]


def build_scenario(root, make_project):
    base = make_project(root / "base")
    base.configure(privacy=NOISY)
    base.write("a.ndjson", [statement(learner=f"u{i % 40}", timestamp="2026-11-01T10:00:00Z") for i in range(300)])
    base.invoke("run", now=FIRST.isoformat(), check=0)
    second = [statement(learner=f"v{i % 60}", timestamp=f"2026-11-0{1 + i % 3}T1{i % 10}:00:00Z",
                        stored=f"2026-11-0{2 + i % 2}T12:00:00Z", score=(i % 5) / 5) for i in range(1800)]
    base.write("b.ndjson", second)  # 1800 statements: four batches of 500
    previous = base.dump()
    reference = copy(base, root / "reference")
    reference.invoke("run", now=SECOND.isoformat(), check=0)
    final = reference.dump()
    exact = copy(base, root / "exact")
    exact.configure(privacy='method = "none"')
    exact.invoke("run", "--accept-weaker-privacy", now=SECOND.isoformat(), check=0)  # exact counts, deliberately
    lines = [line for name in ("a.ndjson", "b.ndjson") for line in (base.source / name).read_text().splitlines()]
    assert exact.serving(site=True) == expected_serving(lines, FIRST - dt.timedelta(days=30), SECOND, PARIS, 10)
    assert final != previous
    base.published = publication_bytes(reference)
    return base, previous, final


@pytest.mark.parametrize("phase", list(RUN_PHASES))
@pytest.mark.parametrize("action", ["kill", "term"])
def test_a_kill_or_stop_at_any_phase_leaves_previous_or_new_and_converges(scenario, tmp_path, phase, action):
    base, previous, final = scenario
    victim = copy(base, tmp_path / "victim")
    # A kill or a stop signals the process: a subprocess. Everything else runs in this process.
    result = victim.cli("run", now=SECOND.isoformat(), env={faults.ENVIRONMENT_VARIABLE: f"{phase}:{action}"})
    committed = RUN_PHASES[phase]
    if action == "kill":
        assert result.returncode == -9
    elif committed:
        # The work is kept: a stop now must neither kill the process nor report a failure.
        assert result.returncode == 0, result.stderr
        assert "SIGTERM after the run committed" in result.stderr
    else:
        assert result.returncode == 143, result.stderr
        assert "Stopped by SIGTERM; the run was rolled back and nothing was committed." in result.stderr
        assert victim.runs()[-1][1:3] == ("failed", 143)
    assert victim.dump() == (final if committed else previous)
    assert publication_bytes(victim) in (None, base.published)  # the copy starts without one
    victim.invoke("run", now=SECOND.isoformat(), check=0)
    assert victim.dump() == final and publication_bytes(victim) == base.published


@pytest.mark.parametrize("action", ["term", "termgroup"])
def test_a_stop_as_the_process_exits_leaves_its_exit_status_as_it_was(scenario, tmp_path, action):
    """Past the stop policy (the command done, its status chosen), SIGTERM is ignored: a stop in those last
    milliseconds neither kills the process by the signal (no status, no message) nor changes its status."""
    base, previous, final = scenario
    victim = copy(base, tmp_path / "victim")
    result = victim.cli("run", now=SECOND.isoformat(), env={faults.ENVIRONMENT_VARIABLE: f"exiting:{action}"},
                        start_new_session=True)  # termgroup signals the run's process group, not the tests'
    assert result.returncode == 0, result.stderr
    assert "SIGTERM" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert victim.dump() == final and publication_bytes(victim) == base.published
    failing = victim.cli("--config", str(tmp_path / "absent.toml"), "status", now=SECOND.isoformat(),
                         env={faults.ENVIRONMENT_VARIABLE: f"exiting:{action}"}, start_new_session=True)
    assert failing.returncode == 78 and "Traceback" not in failing.stderr, failing.stderr  # its own status
    # Still under the policy, as the command ends (logging its error, or just done): a stop is a stop, 143.
    stopped = victim.cli("--config", str(tmp_path / "absent.toml"), "status", now=SECOND.isoformat(),
                         env={faults.ENVIRONMENT_VARIABLE: f"before-exit:{action}"}, start_new_session=True)
    assert stopped.returncode == 143 and "Stopped by SIGTERM." in stopped.stderr, stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr


@pytest.mark.parametrize("phase", ["batch-staged@2", "before-commit"])
def test_an_unexpected_exception_at_a_phase_rolls_back_with_exit_1(scenario, tmp_path, phase):
    base, previous, final = scenario
    victim = copy(base, tmp_path / "victim")
    result = victim.invoke("run", now=SECOND.isoformat(), env={faults.ENVIRONMENT_VARIABLE: f"{phase}:raise"})
    assert result.returncode == 1
    assert "Unexpected failure (InjectedFault: fault injected at" in result.stderr
    assert victim.dump() == previous
    victim.invoke("run", now=SECOND.isoformat(), check=0)
    assert victim.dump() == final


@pytest.mark.parametrize("phase", ["batch-staged", "before-commit"])
def test_a_full_disk_exits_69_and_the_run_log_says_so(scenario, tmp_path, phase):
    base, previous, final = scenario
    victim = copy(base, tmp_path / "victim")
    result = victim.invoke("run", now=SECOND.isoformat(), env={faults.ENVIRONMENT_VARIABLE: f"{phase}:enospc"})
    assert result.returncode == 69
    assert "the disk is full" in result.stderr and "nothing was committed" in result.stderr
    assert victim.dump() == previous
    status = json.loads(victim.invoke("status", "--json", now=SECOND.isoformat(), check=0).stdout)
    assert status["last_run"]["exit_code"] == 69 and "the disk is full" in status["last_run"]["message"]
    victim.invoke("run", now=SECOND.isoformat(), check=0)
    assert victim.dump() == final


@pytest.mark.parametrize("phase", ["store-created", "migration-applied", "migration-committed"])
@pytest.mark.parametrize("action", ["kill", "term"])
def test_a_kill_or_stop_while_the_store_is_created_or_upgraded(project, phase, action):
    """A new SQLite store passes every phase here; an existing store at schema version 1 passes the
    migration phases as the next run upgrades it (on both stores)."""
    from lms_refresh.config import load_config
    from lms_refresh.store import open_store

    lines = [statement(learner=f"u{i}", timestamp="2026-11-01T10:00:00Z") for i in range(12)]
    project.write("a.ndjson", lines)
    upgrading = phase != "store-created"
    if upgrading:
        project.state.mkdir()
        store = open_store(load_config(str(project.config), {}), {}, create=True, migrate=False)
        store.migrate(target=1)
        store.close()
    result = project.cli("run", now=FIRST.isoformat(), env={faults.ENVIRONMENT_VARIABLE: f"{phase}:{action}"})
    assert result.returncode == (-9 if action == "kill" else 143), result.stderr
    if action == "term":
        assert "Stopped by SIGTERM" in result.stderr and "damaged" not in result.stderr
    status = project.invoke("status", now=FIRST.isoformat())
    assert "damaged" not in status.stdout + status.stderr
    assert project.invoke("run", now=FIRST.isoformat()).returncode == 0
    assert project.serving(site=True) == expected_serving([json.dumps(s) for s in lines], FIRST - dt.timedelta(days=30),
                                                 FIRST, PARIS, 10)
