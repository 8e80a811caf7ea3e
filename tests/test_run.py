"""The refresh run through the installed CLI: the behaviours PRODUCT.md promises."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import statement, voiding
from lms_refresh.lock import probe

NOW = "2026-11-03T04:15:00+01:00"  # a Tuesday, 04:15 in Paris


def wait_for_lock(project, process, seconds=20):
    deadline = time.monotonic() + seconds
    while probe(str(project.state / "refresh.lock")) is None:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the first run never took the lock"
        time.sleep(0.02)


def test_bootstrap_with_no_prior_state(project):
    assert not project.state.exists()
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(12)])
    result = project.cli("run", now=NOW, check=0)
    assert "FileNotFoundError" not in result.stderr
    assert (project.state / "pseudonymisation.key").stat().st_mode & 0o777 == 0o600
    assert project.serving()[0][:4] == ("2026-11-02", "https://lms.example.edu/course/BIO101", 12, 12)
    assert project.meta()["watermark"] == "2026-11-03T03:15:00.000000Z"


def test_overlap_second_run_exits_0_and_touches_nothing(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    fifo = project.source / "slow.ndjson"
    os.mkfifo(fifo)  # the first run blocks reading it, holding the lock, until we write
    first = project.start("run", now=NOW)
    try:
        wait_for_lock(project, first)
        second = project.cli("run", now=NOW)
        assert second.returncode == 0
        assert "Another refresh holds the lock" in second.stderr
        assert str(first.pid) in second.stderr
        assert project.serving() == []
        with open(fifo, "w") as writer:
            writer.write(json.dumps(statement(learner="late")) + "\n")
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
    finally:
        first.kill()
    assert project.serving()[0][2] == 13
    assert [r[:3] for r in project.runs()] == [("run", "success", 0)]


def test_same_window_twice_is_byte_identical(project):
    project.write("a.ndjson", [statement(learner=f"u{i % 15}", score=(i % 7) / 10, duration="PT1M3.5S",
                                         timestamp=f"2026-11-0{1 + i % 2}T1{i % 10}:00:00Z") for i in range(300)])
    project.cli("backfill", "--since", "2026-10-30", "--until", "2026-11-03", now=NOW, check=0)
    first = project.dump()
    project.cli("backfill", "--since", "2026-10-30", "--until", "2026-11-03", now=NOW, check=0)
    assert project.dump() == first
    assert len(project.serving()) == 2


def test_watermark_advances_only_on_success(project):
    project.configure(extra_top="max_quarantine_share = 0.05")
    project.write("a.ndjson", [statement(learner=f"u{i}", stored="2026-11-01T09:00:00Z") for i in range(20)])
    project.cli("run", now="2026-11-01T12:00:00Z", check=0)
    before, watermark = project.dump(), project.meta()["watermark"]
    # A second window whose good statements are staged in batches before the bad file fails it.
    project.write("b.ndjson", [statement(learner=f"v{i}", timestamp="2026-11-02T09:00:00Z") for i in range(1500)])
    bad = project.write("c.ndjson", ['{"broken": '] * 200)
    result = project.cli("run", now=NOW)
    assert result.returncode == 65
    assert "nothing was committed" in result.stderr
    assert project.dump() == before and project.meta()["watermark"] == watermark
    assert project.runs()[-1][1:3] == ("failed", 65)
    bad.unlink()
    project.cli("run", now=NOW, check=0)
    assert project.runs()[-1][3] == watermark  # the same window again, from the old watermark
    assert [row[2] for row in project.serving()] == [1520]  # 20 from the first run + 1500


def test_exit_codes(project, tmp_path):
    project.write("a.ndjson", [statement()])
    assert project.cli("run", now=NOW).returncode == 0
    again = project.cli("run", now=NOW)
    assert again.returncode == 0 and "Nothing to do" in again.stderr
    assert project.cli("run", "--no-such-option").returncode == 2
    project.config.write_text(project.config.read_text() + "\n[stroe]\npath = 'x'\n")
    bad_config = project.cli("run", now=NOW)
    assert bad_config.returncode == 78 and "unknown key 'stroe'" in bad_config.stderr
    project.configure()
    project.source.rename(tmp_path / "moved")
    missing = project.cli("run", now="2026-11-04T04:15:00Z")
    assert missing.returncode == 69 and "does not exist" in missing.stderr


def test_unexpected_failure_exits_1_with_one_sentence(monkeypatch, capsys, project):
    from lms_refresh import cli

    def explode(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cli, "run_job", explode)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--config", str(project.config), "run"])
    assert stopped.value.code == 1
    assert "Unexpected failure (RuntimeError: disk on fire); nothing was committed." in capsys.readouterr().err


def test_runs_in_a_bare_environment(project):
    import subprocess
    import sys

    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(10)])
    result = subprocess.run(["env", "-i", sys.executable, "-m", "lms_refresh", "--config", str(project.config),
                             "--now", NOW, "run"], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert project.serving()[0][2] == 10


def test_late_statement_recomputes_its_old_partition(project):
    project.configure(extra_top="min_cell_size = 1")
    project.write("a.ndjson", [statement(learner="u1", timestamp="2026-10-27T10:00:00Z")])
    project.cli("run", now="2026-10-28T04:15:00Z", check=0)
    assert [r[:4] for r in project.serving()] == [("2026-10-27", "https://lms.example.edu/course/BIO101", 1, 1)]
    # Stored today, happened last week (offline mobile sync).
    project.write("b.ndjson", [statement(learner="u2", timestamp="2026-10-27T11:00:00Z", stored="2026-11-02T20:00:00Z")])
    project.cli("run", now=NOW, check=0)
    assert [r[:4] for r in project.serving()] == [("2026-10-27", "https://lms.example.edu/course/BIO101", 2, 2)]


def test_duplicates_and_repulled_windows_never_change_metrics(project):
    project.configure(extra_top="min_cell_size = 1", lookback='"3d"')
    same = statement(learner="u1", timestamp="2026-11-02T10:00:00Z")
    project.write("a.ndjson", [same, same, statement(learner="u2", timestamp="2026-11-02T11:00:00Z")])
    project.write("copy.ndjson", [same])
    project.cli("run", now=NOW, check=0)
    first = project.dump()
    assert project.serving()[0][3] == 2
    project.cli("run", now="2026-11-04T04:15:00+01:00", check=0)  # lookback re-reads the same statements
    assert project.dump() == first


def test_voided_statement_leaves_metrics_even_if_staged_earlier(project):
    project.configure(extra_top="min_cell_size = 1", lookback='"7d"')
    target = statement(learner="u1", timestamp="2026-11-01T10:00:00Z")
    project.write("a.ndjson", [target, statement(learner="u2", timestamp="2026-11-01T10:00:00Z")])
    project.cli("run", now="2026-11-02T04:15:00Z", check=0)
    assert project.serving()[0][2:4] == (2, 2)
    project.write("b.ndjson", [voiding(target["id"], "2026-11-02T12:00:00Z")])
    project.cli("run", now=NOW, check=0)
    assert project.serving()[0][2:4] == (1, 1)
    project.cli("run", now="2026-11-04T04:15:00Z", check=0)  # the lookback re-reads the target: still voided
    assert project.serving()[0][2:4] == (1, 1)


def test_dst_days_are_one_local_day_of_23_or_25_hours(project):
    project.configure(extra_top="min_cell_size = 1")
    autumn = ["2026-10-25T00:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00",
              "2026-10-25T23:30:00+01:00"]  # the 25-hour day, both 02:30s included
    spring = ["2026-03-29T00:30:00+01:00", "2026-03-29T03:30:00+02:00", "2026-03-29T23:59:00+02:00"]
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp=t, stored="2026-10-30T10:00:00Z")
                               for i, t in enumerate(autumn + spring)])
    project.cli("run", now=NOW, check=0)
    rows = project.serving()
    days = {row[0]: row[3] for row in rows if row[3] is not None}
    assert days == {"2026-10-25": 4, "2026-03-29": 3}
    # Every day between is published withheld (no existence signal): 29 March to 25 October.
    assert len(rows) == 211 and all(row[2:] == (None,) * 8 + (1,) for row in rows if row[0] not in days)


def test_dry_run_writes_nothing(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    result = project.cli("run", "--dry-run", now=NOW, check=0)
    assert "would write: 1 metric rows, 0 suppressed" in result.stdout
    assert "2026-11-02" in result.stdout
    assert not project.state.exists()
    project.cli("run", now=NOW, check=0)
    dump = project.dump()
    project.write("b.ndjson", [statement(learner="x", timestamp="2026-11-03T10:00:00Z")])
    project.cli("run", "--dry-run", now="2026-11-04T04:15:00Z", check=0)
    assert project.dump() == dump and project.meta()["watermark"] == "2026-11-03T03:15:00.000000Z"


def test_backfill_never_moves_the_watermark_backwards(project):
    project.write("a.ndjson", [statement()])
    project.cli("run", now=NOW, check=0)
    watermark = project.meta()["watermark"]
    project.cli("backfill", "--since", "2026-10-01", "--until", "2026-10-15", now=NOW, check=0)
    assert project.meta()["watermark"] == watermark
    project.cli("backfill", "--since", "2026-11-01", "--until", "2026-11-03T12:00", now="2026-11-05T00:00:00Z", check=0)
    assert project.meta()["watermark"] == "2026-11-03T11:00:00.000000Z"


def test_backfill_rejects_a_bad_date(project):
    result = project.cli("backfill", "--since", "yesterday", "--until", "2026-11-01")
    assert result.returncode == 2 and "not an ISO date" in result.stderr


def test_sigterm_rolls_back_and_exits_143(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    os.mkfifo(project.source / "slow.ndjson")
    first = project.start("run", now=NOW)
    try:
        wait_for_lock(project, first)
        first.terminate()
        try:
            out, err = first.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            first.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: show where it is stuck
            raise AssertionError(f"still running 30 s after SIGTERM:\n{first.communicate()[1]}")
    finally:
        first.kill()
    assert first.returncode == 143, err
    assert "rolled back" in err
    assert project.serving() == []
    assert not project.has_store() or "watermark" not in project.meta()  # stopped before or after creating it
    (project.source / "slow.ndjson").unlink()
    project.cli("run", now=NOW, check=0)
    assert project.serving()[0][2] == 12
