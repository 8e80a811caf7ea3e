"""The in-process runner (tests/helpers/inprocess.py) gives what the installed command gives: the same exit
status, stdout and stderr (log lines without their timestamps), so a test moved in process proves
what it proved as a subprocess. And it refuses what only a process can take."""

import json
import re

import pytest

from helpers.statements import statement
from lms_refresh import faults

NOW = "2026-11-03T04:15:00+01:00"


def comparable(result):
    stderr = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", result.stderr, flags=re.M)
    return result.returncode, result.stdout, stderr


def volatile_removed(status):
    """`status --json` without what differs between two runs of the same: run ids, the moment a run
    finished and the publication was written (the clock's, not --now), a database's size."""
    for run in (status.get("last_run"), status.get("last_success")):
        if run:
            run.pop("run_id"), run.pop("finished_at")
    status["store"].pop("size_bytes", None)
    if status.get("publication"):
        status["publication"].pop("published_at", None)
    return status


@pytest.mark.parametrize("steps", [
    [("run", "--no-such-option")],
    [("status",)],  # no store yet
    [("run", "--dry-run"), ("run",), ("run",), ("status", "--json"), ("check",), ("watermark", "set", "2026-12-01")],
    [("backfill", "--since", "yesterday", "--until", "2026-11-01"), ("forget",), ("grant-reader", "x")],
])
def test_in_process_and_subprocess_runs_agree(tmp_path, make_project, steps):
    inside, outside = make_project(tmp_path / "in"), make_project(tmp_path / "out")
    for project in (inside, outside):
        project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)] + ["{broken"])
        project.configure(extra_top="max_quarantine_share = 0.1")
    for step in steps:
        expected, got = outside.cli(*step, now=NOW), inside.invoke(*step, now=NOW)
        want, have = comparable(expected), comparable(got)
        have = tuple(part.replace(str(inside.root), str(outside.root)) if isinstance(part, str) else part
                     for part in have)
        if outside.postgres:  # each project has its own database
            have = tuple(part.replace(inside.database, outside.database) if isinstance(part, str) else part
                         for part in have)
        if step[:2] == ("status", "--json"):  # compared as data, so that a difference names its key
            want, have = (pair[:1] + (volatile_removed(json.loads(pair[1])),) + pair[2:] for pair in (want, have))
        elif step[0] == "status":  # the same, as text
            volatile = r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}|finished \S+|size \S+|published \S+"
            want, have = (tuple(re.sub(volatile, "#", part) if isinstance(part, str) else part for part in pair)
                          for pair in (want, have))
        assert have == want, step
    assert inside.dump() == outside.dump()


@pytest.mark.parametrize("action", ["kill", "term", "termgroup"])
def test_a_fault_that_signals_the_process_is_refused_in_process(sqlite_project, action):
    with pytest.raises(ValueError, match="signals the process: run it as a subprocess"):
        sqlite_project.invoke("run", now=NOW, env={faults.ENVIRONMENT_VARIABLE: f"before-commit:{action}"})
    assert not sqlite_project.state.exists()
