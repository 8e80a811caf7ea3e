"""The run lock (lms_refresh.run.lock)."""

import os
import signal

import pytest

from lms_refresh.run.lock import RunLock


def test_forked_helpers_do_not_keep_the_run_lock_alive(tmp_path):
    path = str(tmp_path / "refresh.lock")
    lock = RunLock(path).__enter__()
    ready, started = os.pipe()
    child = os.fork()
    if child == 0:  # a parsing worker, still alive after the run that forked it died
        os.write(started, b"x")  # fork's child-side hooks have run by now
        signal.pause()
        os._exit(0)
    os.read(ready, 1)
    try:
        os.close(lock.fd)  # the run dies: its descriptor closes without an explicit unlock
        lock.fd = None
        with RunLock(path):  # free at once, although the worker lives on
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(ready)
        os.close(started)


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_a_lock_path_that_is_no_plain_file_is_a_state_error_naming_it(sqlite_project, tmp_path, kind):
    """A directory or a FIFO at refresh.lock ended a run with a traceback and exit 1; a symbolic link had the
    run truncate the file it points to and write its PID there."""
    project = sqlite_project
    project.state.mkdir(mode=0o750)
    lock = project.state / "refresh.lock"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    {"directory": lock.mkdir, "fifo": lambda: os.mkfifo(lock), "symlink": lambda: lock.symlink_to(victim)}[kind]()
    result = project.invoke("run", now="2026-11-03T04:15:00+01:00")
    assert result.returncode == 78, result.stderr
    assert f"The run lock {lock} is" in result.stderr and "Traceback" not in result.stderr
    assert victim.read_text() == "precious\n"
