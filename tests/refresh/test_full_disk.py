"""A full or read-only file system under the state directory (issue 12, items 11-12): a full disk is
69 wherever it strikes, a read-only one is named as such — never a traceback, never "damaged"."""

import contextlib
import errno
import json
import os
import sqlite3
import subprocess

import pytest

from helpers.batches import collect_batches
from helpers.project import Project
from helpers.publication import directory_entries
from helpers.readers import MAPPER, WINDOW
from helpers.statements import statement
from lms_refresh import faults
from lms_refresh.errors import StateError, exit_status
from lms_refresh.sources.ndjson import NdjsonSource
from lms_refresh.sources.ndjson_worker import unreadable

NOW = "2026-11-03T04:15:00+01:00"


@pytest.fixture
def small_disk(tmp_path):
    """A 768 KiB tmpfs of our own (as root), unmounted afterwards: room for a new store (188 KiB since schema
    version 13) and its write-ahead log while it is built, and little more."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=768k,mode=0755", "tmpfs", str(mountpoint)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], check=True)


def project_on(disk, tmp_path):
    project = Project(tmp_path / "p")
    project.state = disk / "state"
    project.configure()
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    return project


def fill(disk):
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_full_disk_at_the_lock_exits_69_with_a_sentence(small_disk, tmp_path):
    project = project_on(small_disk, tmp_path)
    project.state.mkdir()
    fill(small_disk)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 69, result.stderr
    assert f"Cannot write {project.state / 'refresh.lock'}: the disk is full" in result.stderr
    assert "Traceback" not in result.stderr
    (small_disk / "filler").unlink()
    project.invoke("run", now=NOW, check=0)
    assert project.serving()[0][2] == 12


def test_a_disk_that_fills_up_during_the_run_exits_69(small_disk, tmp_path):
    project = project_on(small_disk, tmp_path)
    project.write("b.ndjson", [statement(learner=f"v{i % 300}", timestamp="2026-11-01T10:00:00Z")
                               for i in range(6000)])
    result = project.invoke("run", now=NOW)
    assert result.returncode == 69, result.stderr
    assert "the disk is full" in result.stderr and "Traceback" not in result.stderr
    assert project.serving() == [] or "watermark" not in project.meta()


def test_a_read_only_file_system_is_named_by_run_and_status(small_disk, tmp_path):
    project = project_on(small_disk, tmp_path)
    project.invoke("run", now=NOW, check=0)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    run = project.invoke("run", now="2026-11-04T04:15:00+01:00")
    assert run.returncode == 78
    assert f"The state directory {project.state} is on a read-only file system; remount it read-write" in run.stderr
    status = project.invoke("status", now="2026-11-04T04:15:00+01:00")
    assert status.returncode == 0, status.stderr  # it only reads: the state is shown as it is
    assert "watermark:    2026-11-03T03:15:00.000000Z" in status.stdout
    assert "damaged" not in status.stdout + status.stderr


# -- a full disk under the publication (issue 20, class 4): the run committed; say so, keep no temporary --

def published_on(disk, tmp_path):
    project = Project(tmp_path / "p")
    project.config.write_text(project.config.read_text()
                              + f'[publication]\npath = "{disk / "publication" / "serving.sqlite"}"\n')
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    return project, disk / "publication"


def test_a_full_disk_under_the_publication_exits_69_records_the_run_and_leaves_no_temporary(small_disk, tmp_path):
    project, directory = published_on(small_disk, tmp_path)
    project.write("b.ndjson", [statement(learner=f"v{i}", timestamp="2026-11-03T10:00:00Z") for i in range(11)])
    fill(small_disk)
    later = "2026-11-04T04:15:00+01:00"
    for _ in range(2):  # the second run has nothing to read and still tries to publish
        result = project.invoke("run", now=later)
        assert result.returncode == 69, result.stderr
        assert f"Cannot write the publication {directory / 'serving.sqlite'}: the disk is full (" in result.stderr
        assert "free some space — the store is committed, and the next run publishes it." in result.stderr
        assert "Traceback" not in result.stderr and "nothing was committed" not in result.stderr
        # one per run no more (the HTML report is the first run's: a run whose publication failed writes none)
        assert directory_entries(directory) == ["report-files", "report.html", "serving.sqlite"]
        assert project.runs()[-1][:3] == ("run", "publish-failed", 69)
    assert [row[2] for row in project.serving()] == [12, 11]  # the first of the two committed its rows
    check = project.invoke("status", "--check", now=later)
    assert check.returncode == 1 and "failed with exit status 69: Cannot write the publication" in check.stdout
    (small_disk / "filler").unlink()
    project.invoke("run", now=later, check=0)
    assert project.invoke("status", "--check", now=later).returncode == 0
    with contextlib.closing(sqlite3.connect(f"file:{directory / 'serving.sqlite'}?mode=ro", uri=True)) as db:
        assert db.execute("SELECT * FROM daily_metrics ORDER BY day, course").fetchall() == project.serving()
        assert [(row[0], None, *row[1:]) for row in db.execute("SELECT * FROM site_daily_metrics ORDER BY day")] == [
            row for row in project.serving(site=True) if row[1] is None]


def test_forget_on_a_full_publication_disk_says_the_learner_is_forgotten_and_status_check_warns(small_disk, tmp_path):
    project, directory = published_on(small_disk, tmp_path)
    fill(small_disk)
    result = project.invoke("forget", "--account-homepage", "https://lms.example.edu", "--account-name", "u0")
    assert result.returncode == 69, result.stderr
    assert "Forgot one learner: 1 staged event" in result.stderr
    assert "the disk is full" in result.stderr
    assert "the store is committed, and the next run publishes it." in result.stderr
    assert directory_entries(directory) == ["report-files", "report.html", "serving.sqlite"]  # the run's report
    check = project.invoke("status", "--check", now=NOW)
    assert check.returncode == 1, check.stdout
    behind = f"the publication {directory / 'serving.sqlite'} is behind the store (the next run publishes it)"
    assert behind in check.stdout
    (small_disk / "filler").unlink()
    project.invoke("run", now=NOW, check=0)
    assert project.invoke("status", "--check", now=NOW).returncode == 0


# -- a full disk elsewhere, and what reading meets: each OS error named as what it is, in the workers too --

def test_sqlite_temporary_files_finding_their_disk_full_are_named_not_the_store(small_disk, tmp_path):
    """SQLite sorts what does not fit its cache in temporary files (SQLITE_TMPDIR, TMPDIR, else /var/tmp): the
    unit's private /var/tmp full while the store's disk has room. The store's own sentence sent the operator to a
    disk with room to spare."""
    project = Project(tmp_path / "p")
    project.write("a.ndjson", [statement(learner=f"v{i % 300}", course=f"C{i % 50}",
                                         timestamp=f"2026-11-0{1 + i % 2}T10:00:00Z") for i in range(20000)])
    fill(small_disk)
    result = project.cli("run", now=NOW, env={"SQLITE_TMPDIR": str(small_disk)})  # read by the C library
    assert result.returncode == 69, result.stderr
    assert (f"SQLite's temporary files in {small_disk} found that disk full (database or disk is full) while the "
            f"store {project.store} was written, though the store's own disk has room; free some space there, or "
            "point SQLITE_TMPDIR (or TMPDIR) at a larger file system — nothing was committed.") in result.stderr
    assert "Traceback" not in result.stderr and "watermark" not in project.meta()
    project.cli("run", now=NOW, check=0)  # pointed at a larger file system, as the sentence says
    assert "watermark" in project.meta()


def test_an_input_output_error_reading_an_export_file_is_the_devices_not_bad_input(tmp_path):
    """EIO while a chunk is read: the disk under the export share failed (78, see the kernel's log), not a file to
    fix or move (65)."""
    project = Project(tmp_path / "p")
    path = project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    result = project.cli("run", now=NOW, env={faults.ENVIRONMENT_VARIABLE: "chunk-read:eio"})
    assert result.returncode == 78, result.stderr
    assert (f"Cannot read {path}: an input/output error (Input/output error (injected at chunk-read)); the disk or "
            "the file system under it failed — see the kernel's log (journalctl -k) and check the device; nothing "
            "was committed.") in result.stderr
    assert "fix or move the file" not in result.stderr and "watermark" not in project.meta()


def test_an_input_output_error_in_a_parsing_worker_reaches_the_run_as_what_it_is(tmp_path):
    (tmp_path / "a.ndjson").write_text("\n".join(json.dumps(statement(learner=f"u{i}")) for i in range(200)) + "\n")
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=2, parallel_min_bytes=1)
    faults.arm({faults.ENVIRONMENT_VARIABLE: "chunk-read:eio"})  # the workers are forked: armed there too
    try:
        with pytest.raises(StateError, match=f"Cannot read {tmp_path / 'a.ndjson'}: an input/output error"):
            collect_batches(source, WINDOW)
    finally:
        faults.arm({})


@pytest.mark.parametrize("number, code", [(errno.ENOMEM, 69), (errno.EMFILE, 69), (errno.ENFILE, 69),
                                          (errno.ESTALE, 69), (errno.ENOSPC, 69), (errno.EIO, 78),
                                          (errno.ELOOP, 65), (errno.EISDIR, 65)])
def test_what_reading_a_file_meets_is_classified_by_what_it_is(number, code):
    error = OSError(number, os.strerror(number))
    assert exit_status(unreadable("/srv/x/a.ndjson", error))[0] == code
