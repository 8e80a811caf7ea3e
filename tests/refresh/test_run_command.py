"""The refresh run as a command: exit statuses, a second run beside a first, a stop from outside, a bare
environment. What is about processes runs the installed CLI in a subprocess; the rest runs in this
process (tests/helpers/inprocess.py). What the run computes, on each store: tests/store/test_every_store_alike.py."""

import signal
import subprocess
import time

from helpers.lrsserver import HeldLrs
from helpers.statements import statement
from lms_refresh import faults
from lms_refresh.run.lock import probe

NOW = "2026-11-03T04:15:00+01:00"  # a Tuesday, 04:15 in Paris


def wait_for_lock(project, process, seconds=20):
    deadline = time.monotonic() + seconds
    while probe(str(project.state / "refresh.lock")) is None:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the first run never took the lock"
        time.sleep(0.02)


def test_overlap_second_run_exits_0_and_touches_nothing(project, tmp_path):
    lrs = HeldLrs(tmp_path, [statement(learner=f"u{i}") for i in range(13)])  # the first run waits at its first page
    project.source_settings = lrs.source
    project.configure()
    first = project.start("run", now=NOW)
    try:
        lrs.wait_until_held(first)
        wait_for_lock(project, first)
        second = project.invoke("run", now=NOW)  # in this process: the lock is the other process's
        assert second.returncode == 0
        assert "Another refresh holds the lock" in second.stderr
        assert str(first.pid) in second.stderr
        assert project.serving() == []
        lrs.release()
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
    finally:
        first.kill()
        lrs.stop()
    assert project.serving()[0][2] == 13
    assert [r[:3] for r in project.runs()] == [("run", "success", 0)]


def test_unexpected_failure_exits_1_with_one_sentence(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    result = project.invoke("run", now=NOW, env={faults.ENVIRONMENT_VARIABLE: "before-recompute:raise"})
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert errors[0].endswith(" ERROR Unexpected failure (InjectedFault: fault injected at before-recompute); "
                               "nothing was committed."), result.stderr
    assert "Traceback" in result.stderr  # the details follow the sentence
    assert project.serving() == [] and project.runs()[-1][1:3] == ("failed", 1)


def test_runs_in_a_bare_environment(project):
    import subprocess
    import sys

    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(10)])
    result = subprocess.run(["env", "-i", sys.executable, "-m", "lms_refresh", "--config", str(project.config),
                             "--now", NOW, "run"], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert project.serving()[0][2] == 10


def test_backfill_rejects_a_bad_date(project):
    result = project.invoke("backfill", "--since", "yesterday", "--until", "2026-11-01")
    assert result.returncode == 2 and "'yesterday' is not an ISO date" in result.stderr


def test_sigterm_rolls_back_and_exits_143(project, tmp_path):
    lrs = HeldLrs(tmp_path, [statement(learner=f"u{i}") for i in range(12)])  # the run waits inside its transaction
    project.source_settings = lrs.source
    project.configure()
    first = project.start("run", now=NOW)
    try:
        lrs.wait_until_held(first)
        first.terminate()
        try:
            out, err = first.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            first.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: show where it is stuck
            raise AssertionError(f"still running 30 s after SIGTERM:\n{first.communicate()[1]}") from None
    finally:
        first.kill()
        lrs.release()
    try:
        assert first.returncode == 143, err
        assert "rolled back" in err
        assert project.serving() == []
        assert not project.has_store() or "watermark" not in project.meta()  # stopped before or after creating it
        project.invoke("run", now=NOW, check=0)
        assert project.serving()[0][2] == 12
    finally:
        lrs.stop()
