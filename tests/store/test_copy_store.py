"""Moving from SQLite to PostgreSQL carries history: `copy-store --from-sqlite PATH`, on a real PostgreSQL, as real
processes (README, "PostgreSQL store": "Moving a SQLite store to PostgreSQL")."""

import os
import shutil

import pytest

from helpers.project import Project
from helpers.statements import statement, voiding

FIRST, SECOND, THIRD = "2026-11-03T04:15:00+01:00", "2026-11-04T04:15:00+01:00", "2026-11-05T04:15:00+01:00"


def _history(project):
    """Two runs on SQLite: 40 days' worth of bootstrap window, a voided statement, a quarantined line."""
    first = [statement(learner=f"u{learner}", timestamp=f"2026-10-{10 + day}T10:00:00Z")
             for day in range(0, 20, 2) for learner in range(12 + day % 3)]
    project.write("a.ndjson", first + ['{"not": "a statement"']
                  + [voiding(first[0]["id"], "2026-11-02T12:00:00Z")])
    project.cli("run", now=FIRST, check=0)
    project.write("b.ndjson", [statement(learner=f"v{i % 12}", timestamp="2026-11-03T09:00:00Z") for i in range(50)])
    project.cli("run", now=SECOND, check=0)


def _state(project):
    return {
        "serving": project.serving(),
        "runs": project.runs(),
        "watermark": project.meta()["watermark"],
        "staged": project.query("SELECT COUNT(*) FROM staged_events"),
        "voided": project.query("SELECT COUNT(*) FROM voided_events"),
        "quarantine": project.query("SELECT origin, reason, raw FROM quarantine ORDER BY origin"),
    }


@pytest.mark.postgresql
def test_copy_store_carries_the_whole_history_and_the_next_run_continues_it(tmp_path, postgres_server):
    project = Project(tmp_path / "p")
    project.configure(extra_top="max_quarantine_share = 0.05")
    _history(project)
    before = _state(project)
    publication = tmp_path / "p" / "state-publication" / "serving.sqlite"
    assert publication.exists() and len(before["serving"]) > 15
    # The same history, continued on SQLite: what the moved store must hold after its next run.
    reference = tmp_path / "reference"
    shutil.copytree(tmp_path / "p", reference, symlinks=True)
    stay = Project.__new__(Project)
    stay.__dict__.update(project.__dict__, root=reference, source=project.source, state=reference / "state",
                         config=reference / "config.toml")
    stay.configure(extra_top="max_quarantine_share = 0.05")

    project.postgres, project.database = postgres_server, postgres_server.new_database()
    project.configure(extra_top="max_quarantine_share = 0.05")
    old_store = project.state / "metrics.sqlite"
    result = project.cli("copy-store", "--from-sqlite", str(old_store), now=SECOND, check=0)
    assert "Traceback" not in result.stderr
    assert " INFO Copied the SQLite store " in result.stderr and "WARNING Copied" not in result.stderr  # a success
    assert f"copied:      {before['staged'][0][0]} staged events" in result.stdout
    assert f"watermark:   {before['watermark']} (the next run reads on from there)" in result.stdout
    assert f"publication: {publication} removed; dashboards read lms_refresh_serving.daily_metrics now" in result.stdout
    report = publication.parent / "report.html"
    assert not report.exists()  # the report beside it went too: it would go stale
    assert f"Removed the HTML report {report}: the store is PostgreSQL now." in result.stderr
    assert not publication.exists() and old_store.exists()
    assert _state(project) == before  # everything, on the other store

    new = [statement(learner=f"w{i % 11}", timestamp="2026-11-04T11:00:00Z") for i in range(40)]
    project.write("c.ndjson", new)
    project.cli("run", now=THIRD, check=0)
    stay.cli("run", now=THIRD, check=0)
    assert project.serving() == stay.serving()
    assert project.runs()[:len(before["runs"])] == before["runs"]
    assert project.runs()[-1][:3] == ("run", "success", 0) and project.runs()[-1][3] == before["watermark"]

    again = project.cli("copy-store", "--from-sqlite", str(old_store), now=THIRD)
    assert again.returncode == 78, again.stderr
    assert "is not empty (" in again.stderr and "copy-store fills only an empty store" in again.stderr
    assert project.serving() == stay.serving()  # nothing changed by the refusal


@pytest.mark.postgresql
def test_copy_store_refuses_what_it_cannot_copy_with_one_sentence(tmp_path, postgres_server):
    project = Project(tmp_path / "p")
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.cli("run", now=FIRST, check=0)
    store = str(project.state / "metrics.sqlite")
    on_sqlite = project.cli("copy-store", "--from-sqlite", store, now=FIRST)
    assert on_sqlite.returncode == 78 and 'has store.type = "sqlite"' in on_sqlite.stderr
    project.postgres, project.database = postgres_server, postgres_server.new_database()
    project.configure()
    missing = project.cli("copy-store", "--from-sqlite", str(tmp_path / "nothing.sqlite"), now=FIRST)
    assert missing.returncode == 78 and "holds no lms-refresh store" in missing.stderr
    key = project.state / "pseudonymisation.key"
    saved = key.read_bytes()
    key.write_text(os.urandom(32).hex() + "\n")
    other_key = project.cli("copy-store", "--from-sqlite", store, now=FIRST)
    assert other_key.returncode == 78 and "is not the key the store" in other_key.stderr
    key.write_bytes(saved)
    assert not project.has_store() or project.query("SELECT COUNT(*) FROM runs") == [(0,)]
    for result in (on_sqlite, missing, other_key):
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.postgresql
def test_copy_store_waits_for_no_one_a_held_lock_is_69_and_nothing_is_copied(tmp_path, postgres_server):
    from lms_refresh.run.lock import RunLock

    project = Project(tmp_path / "p")
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.cli("run", now=FIRST, check=0)
    project.postgres, project.database = postgres_server, postgres_server.new_database()
    project.configure()
    with RunLock(str(project.state / "refresh.lock")):
        held = project.cli("copy-store", "--from-sqlite", str(project.state / "metrics.sqlite"), now=FIRST)
    assert held.returncode == 69, held.stderr
    assert "Another refresh holds the lock (held by pid " in held.stderr
    assert "nothing was copied — run lms-refresh copy-store again when it has finished." in held.stderr
    assert (tmp_path / "p" / "state-publication" / "serving.sqlite").exists()  # untouched
    project.cli("copy-store", "--from-sqlite", str(project.state / "metrics.sqlite"), now=FIRST, check=0)
    assert [row[:4] for row in project.serving()] == [("2026-11-02", "https://lms.example.edu/course/BIO101", 12, 12)]


@pytest.mark.postgresql
@pytest.mark.parametrize("phase", ["before-commit", "after-commit"])
def test_a_stop_during_copy_store_says_whether_it_copied(tmp_path, postgres_server, phase):
    """A SIGTERM before the copy's commit leaves the target empty and says so (143), and the old publication
    stays; after it the copy stands, the command finishes (the old publication retired) and exits 0. It said
    "Stopped by SIGTERM." either way (143), after the commit too."""
    from lms_refresh import faults

    project = Project(tmp_path / "p")
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.cli("run", now=FIRST, check=0)
    project.postgres, project.database = postgres_server, postgres_server.new_database()
    project.configure()
    publication = tmp_path / "p" / "state-publication" / "serving.sqlite"
    result = project.cli("copy-store", "--from-sqlite", str(project.state / "metrics.sqlite"), now=FIRST,
                         env={faults.ENVIRONMENT_VARIABLE: f"{phase}:term"})
    if phase == "before-commit":
        assert result.returncode == 143, result.stderr
        assert "Stopped by SIGTERM before the copy was committed; nothing was copied." in result.stderr
        assert project.query("SELECT COUNT(*) FROM staged_events") == [(0,)] and publication.exists()
        assert (publication.parent / "report.html").exists()
        project.cli("copy-store", "--from-sqlite", str(project.state / "metrics.sqlite"), now=FIRST, check=0)
    else:
        assert result.returncode == 0, result.stderr
        assert "SIGTERM after the commit; the command finishes, and what it committed stands." in result.stderr
        assert not publication.exists() and not (publication.parent / "report.html").exists()
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(12,)]
