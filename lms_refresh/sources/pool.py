"""Starting a pool of parsing workers, and ending it within seconds, whatever state its workers are in.

What starting it may meet (fork() refused for want of processes or memory, /dev/shm missing, read-only or
full for the semaphores of its queues, a thread of the pool's refused for want of tasks) is the machine's, never
the input's: `errors.from_start_error` and `errors.from_thread_error` say which (69 when a later run may find what
was short, else 78).

A worker that dies in the middle of its work — SIGTERM to the whole process
group, which is what `systemctl stop` sends, or the kernel's out-of-memory
killer — can leave a queue's lock held for ever (a worker waiting for a task
holds the task queue's read lock) and a pipe in the middle of a message (a
worker killed between a task's length and its body, or while it wrote a
result). `Pool.terminate()` then waits for that lock for ever, and no lock
freed by hand would help: the next reader would take the rest of the message
for a new one, `terminate()` would fail half-way, and the pool's result
handler would wait for ever on a message that never ends. So terminate() runs
in a helper thread; if it has not returned promptly, the pool's queues are
given up instead: no worker is started any more, every worker is killed and
reaped, and the pool's threads (daemons, blocked on those queues) are left to
the process's exit, with nothing there that waits for them.
"""

import logging
import multiprocessing
import multiprocessing.pool
import signal
import threading

from lms_refresh.errors import RefreshError, from_start_error, from_thread_error

logger = logging.getLogger(__name__)

PROMPT = 1.0  # seconds a healthy terminate() needs at most
LAST_CHANCE = 3.0
POLL = 0.5  # seconds between looks at the workers while waiting for a result


class WorkerLost(RefreshError):
    """A parsing worker died mid-run (e.g. killed for lack of memory); its task will never finish."""


def start_pool(processes, initializer, initargs):
    """Return a pool of `processes` forked workers, each started with `initializer(*initargs)`; raise the domain
    error of an OSError met while starting them (a worker started already is ended by the pool itself), or of the
    system's refusal of one of the pool's threads, which it starts once its workers are forked: those are ended
    here, since the pool, never made, cannot end them."""
    before = set(multiprocessing.active_children())
    try:
        return multiprocessing.get_context("fork").Pool(processes, initializer, initargs)
    except OSError as error:
        raise from_start_error(error, f"the {processes} parsing workers") from error
    except RuntimeError as error:
        domain = from_thread_error(error, f"the {processes} parsing workers")
        if domain is None:
            raise
        orphans = [child for child in multiprocessing.active_children() if child not in before]
        for worker in orphans:
            worker.kill()
        for worker in orphans:
            worker.join(LAST_CHANCE)
        raise domain from error


def workers_of(pool):
    """The pool's worker processes as started: the pool replaces a dead worker, silently."""
    return list(getattr(pool, "_pool", []))


# Signals a process raises against itself (a fault in a C extension, an abort, a resource limit): nobody sent them.
_CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGABRT, signal.SIGFPE, signal.SIGXCPU,
            signal.SIGXFSZ}


def _death(code):
    """How a worker with exit code `code` ended, and what usually does that."""
    if code < 0 and -code in signal.valid_signals():
        name = signal.Signals(-code).name
        if -code == signal.SIGKILL:  # what the kernel's out-of-memory killer sends
            return f"signal {name} — for example killed by the kernel for lack of memory (see 'journalctl -k')"
        if -code in _CRASHES:
            return f"signal {name} — the worker crashed (see 'journalctl -k' and the journal around this time)"
        return f"signal {name} — sent to it alone, not to the run (see the journal around this time for who sent it)"
    return f"status {code}"


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
                raise WorkerLost(
                    f"A parsing worker (pid {worker.pid}) ended with {_death(code)} while reading the export files; "
                    "nothing was committed, and the next run reads the same window again."
                )
    return pending.get()


def stop_pool(pool):
    """Terminate `pool` (a multiprocessing Pool) and reap its workers, in a few seconds at most."""
    returned = []

    def terminate():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # as monitoring's exchange: it may outlive us
        try:
            pool.terminate()  # returns once it has joined the pool's threads and workers
        except Exception as error:  # e.g. EOFError: a queue a dead worker left in the middle of a message
            logger.debug("Terminating the parsing workers' pool failed: %r", error)
        else:
            returned.append(True)

    ending = threading.Thread(target=terminate, name="pool-terminate", daemon=True)
    try:
        ending.start()
    except RuntimeError as error:  # the system refused the thread (TasksMax=): never terminate() here, it may hang
        logger.debug("No thread to terminate the parsing workers' pool in (%s): its workers are killed.", error)
    else:
        ending.join(PROMPT)
    if not returned:
        _give_up(pool)


def _give_up(pool):
    """Kill and reap `pool`'s workers without its queues, which a dead worker may have left unusable."""
    logger.debug("The parsing workers' pool did not stop promptly: its workers are killed.")
    handler = pool._worker_handler
    handler._state = multiprocessing.pool.TERMINATE  # no worker is started any more ...
    pool._change_notifier.put(None)  # ... once it wakes up (only this process's threads use that queue)
    handler.join(LAST_CHANCE)
    _kill_workers(pool)
    # At exit, multiprocessing runs a pool's finalizer (what terminate() does) if nothing has run it yet:
    # in the main thread, it would wait for ever on the same lock.
    pool._terminate.cancel()


def _kill_workers(pool):
    workers = workers_of(pool)
    for worker in workers:
        if worker.exitcode is None:
            worker.kill()
    for worker in workers:
        worker.join(1.0)
