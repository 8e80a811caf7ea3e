"""Ending a pool of parsing workers within seconds, whatever state its workers are in.

`Pool.terminate()` first takes the task queue's read lock. A worker waiting
for a task holds that lock, so a worker killed while waiting — SIGTERM to the
whole process group, which is what `systemctl stop` sends — dies holding it
and `terminate()` then waits forever (and systemd waits out TimeoutStopSec).
So terminate() runs in a helper thread; if it has not finished promptly the
workers are killed outright and the locks only dead workers can hold are
released; if even that does not free it, the pool is left to the process's
exit rather than holding the run up.
"""

import logging
import signal
import threading

from lms_refresh.errors import RefreshError

logger = logging.getLogger(__name__)

PROMPT = 1.0  # seconds a healthy terminate() needs at most
LAST_CHANCE = 3.0
POLL = 0.5  # seconds between looks at the workers while waiting for a result


class WorkerLost(RefreshError):
    """A parsing worker died mid-run (e.g. killed for lack of memory); its task will never finish."""


def workers_of(pool):
    """The pool's worker processes as started: the pool replaces a dead worker, silently."""
    return list(getattr(pool, "_pool", []))


def result_of(pending, workers):
    """Return `pending.get()` (an AsyncResult), raising WorkerLost as soon as one of `workers` has died.

    A worker killed while it held a task (the kernel's out-of-memory killer, an operator's
    SIGKILL) takes that task with it: the pool starts a new worker, but the result never
    comes, and a plain get() would wait for ever. These workers never exit on their own
    (no maxtasksperchild), so any exit is such a death.
    """
    while not pending.ready():
        pending.wait(POLL)
        for worker in workers:
            code = worker.exitcode
            if code is not None and not pending.ready():
                how = f"signal {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() \
                    else f"status {code}"
                raise WorkerLost(
                    f"A parsing worker (pid {worker.pid}) ended with {how} while reading the export files — "
                    "for example killed by the kernel for lack of memory (see 'journalctl -k'); nothing was "
                    "committed, and the next run reads the same window again."
                )
    return pending.get()


def stop_pool(pool):
    """Terminate `pool` (a multiprocessing Pool) and reap its workers, in a few seconds at most."""
    ending = threading.Thread(target=pool.terminate, name="pool-terminate", daemon=True)
    ending.start()
    ending.join(PROMPT)
    if ending.is_alive():
        _kill_workers(pool)
        for queue, name in ((getattr(pool, "_inqueue", None), "_rlock"), (getattr(pool, "_outqueue", None), "_wlock")):
            lock = getattr(queue, name, None)
            if lock is not None and not lock.acquire(False):
                lock.release()  # held by a worker that no longer exists: nobody else will ever release it
            elif lock is not None:
                lock.release()
        ending.join(LAST_CHANCE)
    if ending.is_alive():
        logger.warning("The parsing workers' pool did not shut down cleanly; it is left to the process's exit.")
        return
    pool.join()


def _kill_workers(pool):
    workers = workers_of(pool)
    for worker in workers:
        if worker.exitcode is None:
            worker.kill()
    for worker in workers:
        worker.join(1.0)
