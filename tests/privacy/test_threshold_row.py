"""The threshold in force lives in one typed row (privacy_settings), on both stores: runs write it
there and nowhere else, every reader goes through it, and without it nothing is published."""

import contextlib
import json
import sqlite3

from helpers.statements import statement
from lms_refresh.config import load_config
from lms_refresh.store import open_store

NOW = "2026-11-03T04:15:00+01:00"
HOME = "https://lms.example.edu"


def write_store(project, sql):
    """Change the store behind lms-refresh's back, as an operator with a SQL shell could."""
    if project.postgres:
        project.postgres.admin(sql.replace("privacy_settings", "lms_refresh.privacy_settings")
                               .replace("meta", "lms_refresh.meta"), project.database)
        return
    with contextlib.closing(sqlite3.connect(project.store)) as db:
        db.execute(sql)
        db.commit()


def five_learners(project):
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(5)])


def test_a_run_keeps_the_threshold_in_the_typed_row_only_and_status_shows_that_row(project):
    project.configure(extra_top="min_cell_size = 2")
    five_learners(project)
    project.invoke("run", now=NOW, check=0)
    assert "min_cell_size" not in project.meta()
    assert project.query("SELECT min_cell_size, method FROM privacy_settings") == [(2, "none")]
    # Status reports what is in force in the store, not what the configuration says.
    write_store(project, "UPDATE privacy_settings SET min_cell_size = 7, method = 'cell-key'")
    text = project.invoke("status", check=0).stdout
    assert "privacy:      min_cell_size 7 in force; noise cell key, counts within +-3, variance 2.0" in text
    report = json.loads(project.invoke("status", "--json", check=0).stdout)
    assert report["privacy"] == {"min_cell_size": 7, "method": "cell-key", "max_noise": 3, "variance": 2.0,
                                 "withhold_zeros": False}


def test_a_store_from_schema_version_1_is_upgraded_before_its_threshold_is_read(project):
    project.configure(extra_top="min_cell_size = 2")
    project.state.mkdir()
    store = open_store(load_config(str(project.config), {}), {}, create=True, migrate=False)
    store.migrate(target=1)
    assert store.meta()["min_cell_size"] == "10"  # the text copy versions 1 and 2 suppressed with
    store.close()
    result = project.invoke("status")
    assert result.returncode == 0 and "schema v1); the next run upgrades it" in result.stdout, result.stderr
    assert "privacy:" not in result.stdout  # the text copy of a store not upgraded yet is shown as nothing
    five_learners(project)
    project.invoke("run", now=NOW, check=0)
    assert "min_cell_size" not in project.meta()
    # Five learners pass the configured threshold of 2 (the old copy said 10).
    assert [row[:3] for row in project.serving()] == [("2026-11-02", f"{HOME}/course/BIO101", 5)]
    assert "privacy:      min_cell_size 2 in force" in project.invoke("status", check=0).stdout


def test_without_the_typed_row_nothing_is_published_and_status_shows_no_threshold(project):
    project.configure(extra_top="min_cell_size = 2")
    five_learners(project)
    project.invoke("run", now=NOW, check=0)
    published = project.serving()
    write_store(project, "DELETE FROM privacy_settings")
    report = json.loads(project.invoke("status", "--json", check=0).stdout)
    assert report["privacy"] is None  # nothing in force is shown as nothing, not as a default
    # Forgetting a learner republishes without a run: it refuses to publish without the row.
    result = project.invoke("forget", "--account-homepage", HOME, "--account-name", "u0")
    assert result.returncode == 78, (result.stdout, result.stderr)
    assert "has no privacy settings; nothing was published" in result.stderr
    assert project.serving() == published
    # The next run stores the row from the configuration again and forgetting works.
    project.invoke("run", now="2026-11-04T04:15:00+01:00", check=0)
    project.invoke("forget", "--account-homepage", HOME, "--account-name", "u0", check=0)
    assert [row[:3] for row in project.serving()] == [("2026-11-02", f"{HOME}/course/BIO101", 4)]
