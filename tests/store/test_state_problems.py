"""State, store and ownership problems: a clear sentence, never a silent bootstrap."""

import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import tempfile

import pytest

from helpers.commands import reachable_cli
from helpers.project import Project
from helpers.readable import readable_package
from helpers.statements import statement


@pytest.fixture
def project(sqlite_project):
    """These behaviours are about the local SQLite file, its directory or the CLI itself."""
    return sqlite_project


NOW = "2026-11-03T04:15:00+01:00"


def populated(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)


def test_corrupt_store_is_refused_not_rebuilt(project):
    populated(project)
    for leftover in ("metrics.sqlite-wal", "metrics.sqlite-shm"):
        (project.state / leftover).unlink(missing_ok=True)
    project.store.write_bytes(b"this is not a database" * 100)
    result = project.invoke("run", now="2026-11-04T04:15:00Z")
    assert result.returncode == 78
    assert f"The store {project.store} cannot be used" in result.stderr and "restore it from a backup" in result.stderr
    assert project.store.read_bytes().startswith(b"this is not a database")


def test_empty_store_file_from_an_interrupted_creation_is_created_over(project):
    project.state.mkdir()
    project.store.touch()  # what a kill during creation left before stores were created under a temporary name
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    status = project.invoke("status", now=NOW, check=0)
    assert "(not created yet)" in status.stdout and "damaged" not in status.stderr
    project.invoke("run", now=NOW, check=0)
    assert project.serving()[0][2] == 12


def test_empty_store_file_beside_a_key_is_refused(project):
    populated(project)
    for leftover in ("metrics.sqlite-wal", "metrics.sqlite-shm"):
        (project.state / leftover).unlink(missing_ok=True)
    project.store.write_bytes(b"")  # truncated: the key says there was a store with history
    result = project.invoke("run", now="2026-11-04T04:15:00Z")
    assert result.returncode == 78
    assert f"The store {project.store} is missing (or empty) but the pseudonymisation key" in result.stderr
    assert "lms-refresh rebuild --since DATE" in result.stderr


def test_missing_key_with_existing_data_is_refused(project):
    populated(project)
    (project.state / "pseudonymisation.key").unlink()
    result = project.invoke("run", now="2026-11-04T04:15:00Z")
    assert result.returncode == 78
    assert "is missing but the store already holds pseudonymised learners" in result.stderr
    assert not (project.state / "pseudonymisation.key").exists()


def test_swapped_key_is_refused(project):
    populated(project)
    (project.state / "pseudonymisation.key").write_text("ab" * 32 + "\n")
    result = project.invoke("run", now="2026-11-04T04:15:00Z")
    assert result.returncode == 78 and "is not the key this store was built with" in result.stderr


def test_changed_timezone_is_refused(project):
    populated(project)
    project.config.write_text(project.config.read_text().replace("Europe/Paris", "America/New_York"))
    for command in ("check", "run"):  # check says what the run would refuse, before it runs
        result = project.invoke(command, now="2026-11-04T04:15:00Z")
        assert result.returncode == 78 and "computed in time zone Europe/Paris" in result.stderr, command


def test_store_from_a_newer_version_is_refused(project):
    populated(project)
    with sqlite3.connect(project.store) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    result = project.invoke("run", now="2026-11-04T04:15:00Z")
    assert result.returncode == 78 and "schema version 99, newer than this lms-refresh understands" in result.stderr


def test_damaged_watermark_is_refused(project):
    populated(project)
    with sqlite3.connect(project.store) as db:
        db.execute("UPDATE meta SET value = 'yesterday' WHERE key = 'watermark'")
    result = project.invoke("run", now="2026-11-04T04:15:00Z")
    assert result.returncode == 78 and "The stored watermark 'yesterday' is not a valid time" in result.stderr


def test_root_runs_as_the_owner_of_the_state_directory_and_leaves_nothing_root_owned():
    """The installed command in a subprocess: it changes its own user."""
    root = tempfile.mkdtemp(prefix="lmsr-root-")
    os.chmod(root, 0o755)  # reachable by 'nobody', unlike pytest's private tmp_path
    try:
        project = Project(pathlib.Path(root) / "p")
        populated(project)
        for path in [project.root, project.state] + list(project.state.rglob("*")) + list(project.root.rglob("*")):
            os.chown(path, 65534, 65534)
        before = project.runs()
        # The command as root, from code the account it becomes can read (tests/helpers/readable.py).
        python, code = readable_package(root)
        command = [python, "-m", "lms_refresh", "--config", str(project.config)]
        environment = project.environment({"PYTHONPATH": code, "PYTHONDONTWRITEBYTECODE": "1"})
        result = subprocess.run(command + ["--now", "2026-11-04T04:15:00Z", "run"], capture_output=True, text=True,
                                env=environment, timeout=300, cwd=code)  # not the tree's own copy from the cwd
        assert result.returncode == 0, result.stderr
        assert len(project.runs()) == len(before) + 1
        owners = {p.stat().st_uid for p in [project.state] + list(project.state.rglob("*"))}
        assert owners == {65534}, owners
        check = subprocess.run(command + ["check"], capture_output=True, text=True, env=environment, timeout=300,
                               cwd=code)
        assert check.returncode == 0, (check.stdout, check.stderr)
        assert f"state directory {project.state}: writable" in check.stdout
    finally:
        shutil.rmtree(root)


def test_another_user_gets_told_who_owns_the_state():
    root = tempfile.mkdtemp(prefix="lmsr-owner-")
    os.chmod(root, 0o755)  # reachable by 'nobody', unlike pytest's private tmp_path
    try:
        _another_user_gets_told_who_owns_the_state(Project(pathlib.Path(root) / "p"))
    finally:
        shutil.rmtree(root)


def _another_user_gets_told_who_owns_the_state(project):
    populated(project)  # as root: state owned by root
    os.chmod(project.state, 0o755)
    result = subprocess.run(["runuser", "-u", "nobody", "--"] + reachable_cli(project.root.parent)
                            + ["--config", str(project.config), "run"],
                            capture_output=True, text=True, cwd=project.root.parent)
    assert result.returncode == 78, result.stderr
    assert (f"The state directory {project.state} belongs to user 'root' and is not writable by 'nobody'"
            in result.stderr)
    assert "Could not write" not in result.stderr, result.stderr  # no shutdown marker warned of first


def test_another_user_who_may_not_read_the_state_is_refused_by_every_command_before_it_begins():
    """A state directory of mode 0750 that is not theirs: each command names its owner (78), not a
    PermissionError on the lock or the store (exit 1 and a traceback), and a run warns of nothing first."""
    root = tempfile.mkdtemp(prefix="lmsr-unreadable-")
    os.chmod(root, 0o755)  # reachable by 'nobody', unlike pytest's private tmp_path
    try:
        project = Project(pathlib.Path(root) / "p")
        populated(project)  # as root: state owned by root
        os.chmod(project.state, 0o750)
        before = project.store.read_bytes()
        for command in (["status"], ["status", "--json"], ["forget", "--mbox", "a@example.org"],
                        ["report", "--output", str(pathlib.Path(root) / "r.html")], ["check"], ["run"],
                        ["watermark", "set", "2026-01-01"]):
            result = subprocess.run(["runuser", "-u", "nobody", "--", "env", "TRIGGER_UNIT=lms-refresh.timer"]
                                    + reachable_cli(project.root.parent) + ["--config", str(project.config)]
                                    + command, capture_output=True, text=True, cwd=project.root.parent)
            assert result.returncode == 78, (command, result.stderr)
            assert (f"The state directory {project.state} belongs to user 'root' and cannot be read by 'nobody': "
                    "run it as root (it becomes that user) or as that user" in result.stderr), (command, result.stderr)
            assert "Traceback" not in result.stderr and "WARNING" not in result.stderr, (command, result.stderr)
        check = subprocess.run(["runuser", "-u", "nobody", "--"] + reachable_cli(project.root.parent)
                               + ["--config", str(project.config), "status", "--check"],
                               capture_output=True, text=True, cwd=project.root.parent)
        assert check.returncode == 3 and check.stdout.startswith(
            "LMS-REFRESH UNKNOWN - cannot read the state: The state directory "), check.stdout
        assert project.store.read_bytes() == before
        assert not (pathlib.Path(root) / "r.html").exists()
        os.chmod(project.state, 0o755)
        shutil.copy(project.config, pathlib.Path(root) / "config.toml")  # readable, where 'nobody' may reach it
        os.chmod(pathlib.Path(root) / "config.toml", 0o644)
        os.chmod(project.root, 0o700)  # the directory above the state: not searchable by 'nobody'
        result = subprocess.run(["runuser", "-u", "nobody", "--"] + reachable_cli(project.root.parent)
                                + ["--config", str(pathlib.Path(root) / "config.toml"), "status"],
                                capture_output=True, text=True, cwd=project.root.parent)
        assert result.returncode == 78 and "Traceback" not in result.stderr, result.stderr
        assert (f"The state directory {project.state} cannot be reached by 'nobody' (a directory above it may not "
                "be searched by that user); let it search them (x) or move the state directory." in result.stderr), \
            result.stderr
    finally:
        shutil.rmtree(root)


def test_another_user_reading_the_status_is_told_why_the_store_cannot_be_opened():
    """A reader of a WAL store writes its -shm beside it: without write access to the state directory, `status`
    says so and whose it is, not that the store may be damaged."""
    root = tempfile.mkdtemp(prefix="lmsr-reader-")
    os.chmod(root, 0o755)  # reachable by 'nobody', unlike pytest's private tmp_path
    try:
        project = Project(pathlib.Path(root) / "p")
        populated(project)  # as root: state owned by root
        for path in [project.state, *project.state.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by 'nobody', not writable
        result = subprocess.run(["runuser", "-u", "nobody", "--"] + reachable_cli(project.root.parent)
                                + ["--config", str(project.config), "status"],
                                capture_output=True, text=True, cwd=project.root.parent)
        store = project.state / "metrics.sqlite"
        assert result.returncode == 78, result.stderr
        assert (f"The store {store} cannot be opened by 'nobody' (attempt to write a readonly database): even to "
                f"read it, SQLite writes metrics.sqlite-shm beside it, in {project.state}, which belongs to user "
                f"'root': run it as root" in result.stderr)
        assert "damaged" not in result.stderr
    finally:
        shutil.rmtree(root)


def test_malformed_records_are_quarantined_with_reason_and_origin(project):
    project.configure(extra_top="max_quarantine_share = 0.5")
    good = [statement(learner=f"u{i}") for i in range(12)]
    bad_score = statement(learner="x", score=3)
    path = project.write("a.ndjson", good + ['{"id": "truncated', bad_score])
    project.invoke("run", now=NOW, check=0)
    with sqlite3.connect(project.store) as db:
        rows = db.execute("SELECT origin, reason, raw FROM quarantine ORDER BY origin").fetchall()
        logged = db.execute("SELECT quarantined, statements_read FROM runs").fetchone()
    # A record that cannot be read is kept as its size only (it might name someone; see test_data_minimisation).
    assert rows[0][0] == f"{path}:13" and rows[0][1].startswith("not valid JSON")
    assert json.loads(rows[0][2])["bytes"] == 17
    assert rows[1][0] == f"{path}:14" and "score.scaled is not a number between -1 and 1" in rows[1][1]
    assert logged == (2, 14)


def test_past_tolerance_exits_65_and_commits_nothing_but_keeps_the_evidence(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)] + ["not json"] * 3)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 65
    assert ("3 of 15 records in the window were malformed (20.0%, more than max_quarantine_share = 1.0%)"
            in result.stderr)
    with sqlite3.connect(project.store) as db:
        assert db.execute("SELECT COUNT(*) FROM staged_events").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0] == 3  # the evidence survives the rollback
        assert db.execute("SELECT outcome, exit_code FROM runs").fetchall() == [("failed", 65)]
    assert "watermark" not in project.meta()


def test_a_state_directory_that_is_a_file_is_refused_with_a_sentence(sqlite_project):
    """A file where the state directory should be (or above it) is a configuration mistake: 78 and
    one sentence from every command that uses the directory, never a traceback; the file is left alone."""
    project = sqlite_project
    blocker = project.root / "not-a-directory"
    blocker.write_text("keep me\n")
    for path in (blocker, blocker / "state"):
        project.config.write_text(project.config.read_text().replace(str(project.state), str(path)))
        for command in (["run"], ["backfill", "--since", "2026-11-01", "--until", "2026-11-02"], ["status"], ["check"]):
            result = project.invoke(*command, now="2026-11-03T04:15:00+01:00")
            assert result.returncode == 78, (command, result.stderr)
            assert f"The state directory {path} is not a directory; point state_directory at one." in result.stderr
            assert "Traceback" not in result.stderr
        project.config.write_text(project.config.read_text().replace(str(path), str(project.state)))
    assert blocker.read_text() == "keep me\n"


def test_grant_reader_needs_the_database_not_the_state_directory():
    """A DBA with the store's credentials but no access to the state directory may still grant a reader: the
    command touches only the database (here unreachable: 69, where a state refusal would be 78)."""
    root = tempfile.mkdtemp(prefix="lmsr-grant-")
    os.chmod(root, 0o755)  # reachable by 'nobody', unlike pytest's private tmp_path
    try:
        base = pathlib.Path(root)
        (base / "state").mkdir(mode=0o700)
        (base / "src").mkdir()
        config = base / "config.toml"
        config.write_text(f'timezone = "Europe/Paris"\nstate_directory = "{base}/state"\n[source]\n'
                          f'type = "xapi-ndjson"\npath = "{base}/src"\n[store]\ntype = "postgresql"\n'
                          'url = "postgresql://reader@127.0.0.1:1/db"\n')
        config.chmod(0o644)
        command = ["runuser", "-u", "nobody", "--"] + reachable_cli(base) + ["--config", str(config)]
        granted = subprocess.run(command + ["grant-reader", "metabase"], capture_output=True, text=True, cwd=base)
        assert granted.returncode == 69 and "is unreachable" in granted.stderr, granted.stderr
        status = subprocess.run(command + ["status"], capture_output=True, text=True, cwd=base)
        assert status.returncode == 78 and "cannot be read by 'nobody'" in status.stderr, status.stderr
    finally:
        shutil.rmtree(root)
