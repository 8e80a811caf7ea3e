"""An error of the operating system met on the way through the export files or while the parsing workers start
is classified as what it is — the machine short of something (69), a device or a sandbox to look at (78) — never
as bad input to fix (65), never as the store's, never as an export file skipped; and nothing is committed.

The errors are injected where the run meets them: os.stat, os.scandir, os.open and os.fork patched in this process
for one path (the CLI runs in-process), and, for the workers' semaphores, a /dev/shm really read-only or full in a
mount namespace of our own (as root)."""

import contextlib
import errno
import json
import logging
import multiprocessing
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid

import pytest

from helpers.commands import reachable_cli
from helpers.project import Project
from helpers.statements import statement
from lms_refresh import errors
from lms_refresh.ops import monitoring
from lms_refresh.sources import ndjson, ndjson_worker

NOW = "2026-11-03T04:15:00+01:00"
EIO = "an input/output error (Input/output error); the disk or the file system under it failed — see the kernel's " \
      "log (journalctl -k) and check the device; nothing was committed."


def failing(real, path, number):
    """`real` (an os function taking a path first), raising OSError(`number`) for `path` alone."""
    def call(target, *args, **kwargs):
        if os.fspath(target) == str(path):
            raise OSError(number, os.strerror(number), str(target))
        return real(target, *args, **kwargs)
    return call


def project_with_files(tmp_path):
    project = Project(tmp_path / "p")
    first = project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    (project.source / "later").mkdir()
    second = project.write("later/b.ndjson", [statement(learner=f"v{i}") for i in range(12)])
    return project, first, second


def assert_nothing_committed(project, result):
    assert "Traceback" not in result.stderr and "fix or move the file" not in result.stderr
    assert "watermark" not in project.meta() and project.serving() == []
    assert project.runs()[-1][1:3] == ("failed", result.returncode)


def test_an_input_output_error_on_an_export_files_stat_fails_the_run_instead_of_skipping_the_file(
        tmp_path, monkeypatch):
    """Skipped with a warning, the file's statements would be behind the watermark when the device works again."""
    project, _, second = project_with_files(tmp_path)
    monkeypatch.setattr(os, "stat", failing(os.stat, second, errno.EIO))
    result = project.invoke("run", now=NOW)
    assert result.returncode == 78, result.stderr
    assert f"Cannot reach {second}: {EIO}" in result.stderr
    assert "Skipped" not in result.stderr
    assert_nothing_committed(project, result)


def test_a_stale_export_share_is_unreachable_not_a_path_to_fix(tmp_path, monkeypatch):
    project, _, _ = project_with_files(tmp_path)
    monkeypatch.setattr(os, "stat", failing(os.stat, project.source, errno.ESTALE))
    result = project.invoke("run", now=NOW)
    assert result.returncode == 69, result.stderr
    assert (f"Cannot reach the xAPI source path {project.source}: the file system it is on cannot be reached (Stale "
            "file handle; a network share?); nothing was committed, and a later run reads it again.") in result.stderr
    assert "point source.path at" not in result.stderr
    assert_nothing_committed(project, result)


def test_an_input_output_error_listing_a_directory_is_the_devices_not_a_tree_to_move(tmp_path, monkeypatch):
    project, _, second = project_with_files(tmp_path)
    monkeypatch.setattr(os, "scandir", failing(os.scandir, os.path.dirname(second), errno.EIO))
    result = project.invoke("run", now=NOW)
    assert result.returncode == 78, result.stderr
    assert f"Cannot list the directory {os.path.dirname(second)}: {EIO}" in result.stderr
    assert "move it out of source.path" not in result.stderr
    assert_nothing_committed(project, result)


def test_a_file_access_refuses_for_an_input_output_error_is_not_called_a_permission_to_grant(tmp_path, monkeypatch):
    """access(2) answers "no" to EIO as to EACCES: what opening the file says decides which it is."""
    project, first, _ = project_with_files(tmp_path)
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: os.fspath(path) != str(first))
    monkeypatch.setattr(os, "open", failing(os.open, first, errno.EIO))
    result = project.invoke("run", now=NOW)
    assert result.returncode == 78, result.stderr
    assert f"Cannot read {first}: {EIO}" in result.stderr
    assert "permission denied" not in result.stderr
    assert_nothing_committed(project, result)
    check = project.invoke("check", now=NOW)
    assert check.returncode == 78 and f"Cannot read {first}: {EIO}" in check.stdout + check.stderr, check


def test_a_file_access_refuses_for_want_of_permission_still_names_the_user(tmp_path, monkeypatch):
    project, first, _ = project_with_files(tmp_path)
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: os.fspath(path) != str(first))
    monkeypatch.setattr(os, "open", failing(os.open, first, errno.EACCES))
    result = project.invoke("run", now=NOW)
    assert result.returncode == 78, result.stderr
    assert f"Cannot read {first}: permission denied for user 'root'" in result.stderr
    assert_nothing_committed(project, result)


def large_project(tmp_path):
    """A project whose export file is larger than the parallel parsing threshold (16 MiB): the run starts workers."""
    project = Project(tmp_path / "p")
    line = json.dumps(statement(learner="LEARNER", id="ID"))
    path = project.source / "big.ndjson"
    project.source.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range((17 << 20) // len(line) + 1):
            handle.write(line.replace("ID", str(uuid.uuid4())).replace("LEARNER", f"u{i % 50}") + "\n")
    return project


def test_workers_that_cannot_be_forked_for_want_of_processes_are_transient(tmp_path, monkeypatch):
    """fork() refused with EAGAIN (the user's process limit, the unit's TasksMax=): 69, a later run may start them;
    not an unexpected failure (1), nor the store's."""
    project = large_project(tmp_path)

    def no_fork():
        raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    monkeypatch.setattr(os, "fork", no_fork)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 69, result.stderr
    workers = ndjson_worker.default_workers()
    assert (f"Cannot start the {workers} parsing workers: the system is short of processes (the user's limit, or the "
            "unit's TasksMax=) (Resource temporarily unavailable); nothing was committed, and a later run reads the "
            "same window again.") in result.stderr
    assert_nothing_committed(project, result)


@pytest.mark.parametrize("shm, code, sentence", [
    ("ro", 78, "the system refused (Read-only file system); they need fork() and POSIX semaphores in /dev/shm, a "
               "writable tmpfs (is it missing, read-only, or blocked by a sandbox?); nothing was committed."),
    ("size=4k", 69, "/dev/shm, where their semaphores are made, is full (No space left on device); free some room "
                    "there — nothing was committed, and a later run reads the same window again."),
])
def test_a_dev_shm_the_workers_cannot_use_is_named(tmp_path, shm, code, sentence):
    """The parsing workers' queues need POSIX semaphores, which glibc makes in /dev/shm: a /dev/shm mounted
    read-only, or full, in a mount namespace of this run's own."""
    project = large_project(tmp_path)
    script = (f"mount -t tmpfs -o {shm} tmpfs /dev/shm && "
              "{ dd if=/dev/zero of=/dev/shm/filler bs=4k count=4 2>/dev/null; true; } && exec \"$@\"")
    mounted = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs "
                              "/mnt"], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here (needs root and CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                             *project.cli_args("run", now=NOW)], capture_output=True, text=True,
                            env=project.environment(), timeout=300)
    assert result.returncode == code, result.stderr
    workers = ndjson_worker.default_workers()
    assert f"Cannot start the {workers} parsing workers: {sentence}" in result.stderr
    assert_nothing_committed(project, result)


@pytest.mark.parametrize("number, code", [(errno.EAGAIN, 69), (errno.ENOMEM, 69), (errno.EMFILE, 69),
                                          (errno.ENOSPC, 69), (errno.EROFS, 78), (errno.EACCES, 78),
                                          (errno.ENOENT, 78), (errno.ENOSYS, 78), (errno.EPERM, 78)])
def test_what_starting_the_workers_meets_is_never_bad_input_nor_unexpected(number, code):
    error = errors.from_start_error(OSError(number, os.strerror(number)), "the 3 parsing workers")
    assert errors.exit_status(error) == (code, str(error))
    assert str(error).startswith("Cannot start the 3 parsing workers: ") and os.strerror(number) in str(error)


# -- threads: they count against the same limits as processes (TasksMax=, RLIMIT_NPROC) ---------------------------

THREADS_SHORT = ("the system is short of threads, which count as processes (the user's limit, ulimit -u, or the "
                 "unit's TasksMax=) (can't start new thread)")


def refusing_threads(monkeypatch, name=None):
    """Have the system refuse every new thread (or only those named `name`), as pthread_create's EAGAIN does."""
    real = threading.Thread.start

    def start(thread):
        if name is None or thread.name == name:
            raise RuntimeError("can't start new thread")
        return real(thread)

    monkeypatch.setattr(threading.Thread, "start", start)


def test_a_thread_of_the_parsing_pool_refused_is_transient_as_fork_is_and_leaves_no_worker_behind(
        tmp_path, monkeypatch):
    """The pool forks its workers, then starts its threads: refused one, the pool is never made, and its workers,
    which nothing else would end, are ended with it."""
    project = large_project(tmp_path)
    before = set(multiprocessing.active_children())
    refusing_threads(monkeypatch)
    try:
        result = project.invoke("run", now=NOW)
        left = [child for child in multiprocessing.active_children() if child not in before]
    finally:
        monkeypatch.undo()
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
            child.join()
    assert result.returncode == 69, result.stderr
    workers = ndjson_worker.default_workers()
    assert (f"Cannot start the {workers} parsing workers: {THREADS_SHORT}; nothing was committed, and a later run "
            "reads the same window again.") in result.stderr
    assert left == []
    assert_nothing_committed(project, result)


def test_no_thread_to_end_the_parsing_pool_in_still_ends_it_and_the_run_stands(tmp_path, monkeypatch):
    """The pool is ended in a thread of its own (a dead worker may leave terminate() waiting for ever): refused that
    thread, its workers are killed without it, and the run, which has read everything, commits."""
    project = large_project(tmp_path)
    before = set(multiprocessing.active_children())
    refusing_threads(monkeypatch, "pool-terminate")
    result = project.invoke("run", now=NOW)
    left = [child for child in multiprocessing.active_children() if child not in before]
    assert result.returncode == 0, result.stderr
    assert left == [] and "Traceback" not in result.stderr
    assert "watermark" in project.meta() and len(project.serving()) > 0


def test_a_thread_refused_anywhere_before_the_commit_is_transient_and_nothing_is_committed(tmp_path, monkeypatch):
    project, _, _ = project_with_files(tmp_path)

    def read_chunk(*args, **kwargs):  # whatever started a thread on the way (a library's), refused
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(ndjson, "read_chunk", read_chunk)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 69, result.stderr
    assert (f"Cannot start a thread: {THREADS_SHORT}; nothing was committed, and a later run reads the same window "
            "again.") in result.stderr
    assert "Unexpected failure" not in result.stderr
    assert_nothing_committed(project, result)


def test_a_delivery_whose_thread_is_refused_says_so_not_that_the_url_is_malformed(monkeypatch, caplog):
    refusing_threads(monkeypatch)
    with caplog.at_level(logging.WARNING):
        assert monitoring.post("https://hc-ping.example/SECRET-UUID", b"", "text/plain", timeout=1) is False
    assert caplog.messages == [f"Delivery to https://hc-ping.example:443 failed: {THREADS_SHORT}."]


@pytest.mark.parametrize("error, code", [(RuntimeError("can't start new thread"), 69),
                                         (RuntimeError("cannot schedule new futures"), None), (ValueError(), None)])
def test_only_the_refusal_of_a_thread_is_told_as_one(error, code):
    domain = errors.from_thread_error(error, "a thread")
    assert (domain and errors.exit_status(domain)[0]) == code


# -- symbolic links that lead to no file: never skipped, since the watermark would pass what they name -------------

def test_a_dangling_link_among_the_export_files_fails_the_run_and_the_watermark_stays(tmp_path):
    """Its target may be an export file out of reach for now (a share mounted later, a file being moved): skipped,
    the statements it names would be behind the watermark once it is back. 69, as a missing source.path."""
    project, first, _ = project_with_files(tmp_path)
    target = tmp_path / "archive" / "2026-10.ndjson"  # a share not mounted
    os.symlink(target, project.source / "later" / "october.ndjson")
    result = project.invoke("run", now=NOW)
    assert result.returncode == 69, result.stderr
    link = project.source / "later" / "october.ndjson"
    assert (f"{link} is a symbolic link to {target}, which does not exist (a share not mounted? a file moved or "
            "removed?); nothing was committed, and a later run reads the window again — remove the link if its "
            "target is gone for good.") in result.stderr
    assert "Skipped" not in result.stderr
    assert_nothing_committed(project, result)
    check = project.invoke("check", now=NOW)
    assert check.returncode == 69 and f"{link} is a symbolic link to {target}, which does not exist" in \
        check.stdout + check.stderr
    target.parent.mkdir()  # the share is back: the next run reads what the link names
    target.write_text("\n".join(json.dumps(statement(learner=f"w{i}")) for i in range(12)) + "\n")
    assert project.invoke("run", now=NOW).returncode == 0
    assert "watermark" in project.meta() and project.serving() != []


def test_a_dangling_link_in_a_store_that_has_a_watermark_leaves_it_where_it_was(tmp_path):
    project, _, _ = project_with_files(tmp_path)
    assert project.invoke("run", now=NOW).returncode == 0
    before, serving = project.meta()["watermark"], project.serving()
    os.symlink(tmp_path / "gone.ndjson", project.source / "z.ndjson")
    project.write("later/c.ndjson", [statement(learner=f"x{i}") for i in range(12)])
    result = project.invoke("run", now="2026-11-04T04:15:00+01:00")
    assert result.returncode == 69 and "which does not exist" in result.stderr, result.stderr
    assert project.meta()["watermark"] == before and project.serving() == serving
    assert project.runs()[-1][1:3] == ("failed", 69)


def test_a_symbolic_link_loop_among_the_export_files_fails_the_run_naming_it(tmp_path):
    """A loop leads to no file until someone fixes it: 78, a configuration to fix, in a sentence naming the link."""
    project, _, _ = project_with_files(tmp_path)
    a, b = project.source / "loop-a.ndjson", project.source / "loop-b.ndjson"
    os.symlink(b, a)
    os.symlink(a, b)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 78, result.stderr
    assert (f"Cannot reach {a}: it is a symbolic link loop (Too many levels of symbolic links); fix the link or move "
            "it out of source.path — nothing was committed.") in result.stderr
    assert "Skipped" not in result.stderr
    assert_nothing_committed(project, result)


@pytest.mark.parametrize("number, code, sentence", [
    (errno.EIO, 78, f"Cannot read the symbolic link {{link}}: {EIO}"),
    (errno.ESTALE, 69, "Cannot read the symbolic link {link}: the file system it is on cannot be reached (Stale file "
                       "handle; a network share?); nothing was committed, and a later run reads it again."),
    (errno.EACCES, 78, "Cannot read the symbolic link {link}: permission denied for user 'root'"),
    (errno.ENOMEM, 69, "Cannot read the symbolic link {link}: the system is short of memory"),
])
def test_a_dangling_link_that_cannot_be_read_is_classified_not_a_traceback(tmp_path, monkeypatch, number, code,
                                                                            sentence):
    """Its target is read to name it: what reading it meets is the machine's (or a permission), said as such."""
    project, _, _ = project_with_files(tmp_path)
    link = project.source / "dangling.ndjson"
    os.symlink(tmp_path / "gone.ndjson", link)
    monkeypatch.setattr(os, "readlink", failing(os.readlink, link, number))
    result = project.invoke("run", now=NOW)
    assert result.returncode == code, result.stderr
    assert sentence.format(link=link) in result.stderr
    assert_nothing_committed(project, result)


def test_a_dangling_link_removed_before_its_target_is_read_is_as_if_never_there(tmp_path, monkeypatch):
    project, _, _ = project_with_files(tmp_path)
    link = project.source / "dangling.ndjson"
    os.symlink(tmp_path / "gone.ndjson", link)
    real = os.readlink

    def removed_first(path, *args, **kwargs):
        if os.fspath(path) == str(link):
            os.unlink(link)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", removed_first)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 0, result.stderr
    assert len(project.serving()) > 0 and "watermark" in project.meta()


def test_a_real_limit_of_tasks_refuses_the_pools_first_thread_and_the_run_says_so(tmp_path):
    """For real: RLIMIT_NPROC (what TasksMax= does to a unit) that leaves room for the run and its forked workers
    and for no more, so that the pool's first thread is refused, in a user id nothing else on the machine runs as
    (the limit counts every task of the user)."""
    if os.geteuid() != 0:
        pytest.skip("running as another user id needs root")
    uid = 64000 + os.getpid() % 1000
    running = subprocess.run(["ps", "-o", "pid=", "-u", str(uid)], capture_output=True, text=True).stdout.split()
    assert running == [], f"user id {uid} has processes; the limit would count them"
    root = pathlib.Path(tempfile.mkdtemp(prefix="lmsr-nproc-", dir="/tmp"))
    try:
        root.chmod(0o755)
        project = large_project(root)
        project.state.mkdir()
        for path in (project.root, project.state):
            os.chown(path, uid, uid)
        workers = ndjson_worker.default_workers()
        result = subprocess.run(["prlimit", f"--nproc={1 + workers}", "setpriv", f"--reuid={uid}", f"--regid={uid}",
                                 "--clear-groups", "--", *reachable_cli(root), "--config", str(project.config),
                                 "--now", NOW, "run"], capture_output=True, text=True, cwd=root, timeout=300,
                                env=project.environment())
        assert result.returncode == 69, result.stderr
        assert (f"Cannot start the {workers} parsing workers: {THREADS_SHORT}; nothing was committed, and a later run "
                "reads the same window again.") in result.stderr
        assert_nothing_committed(project, result)
        left = subprocess.run(["ps", "-o", "pid=", "-u", str(uid)], capture_output=True, text=True).stdout.split()
        assert left == []  # no worker outlived the run
    finally:  # a worker left behind, by its process id (none is, unless the test failed)
        for pid in subprocess.run(["ps", "-o", "pid=", "-u", str(uid)], capture_output=True, text=True).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(root)
