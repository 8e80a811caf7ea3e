"""The run lock (lms_refresh.run.lock)."""

import os
import signal

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
