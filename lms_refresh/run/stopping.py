"""What SIGTERM (`systemctl stop`) does to a command.

Before a run commits, a stop rolls it back: the handler raises `Terminated`
(exit 143), whose sentence says what the stop undid — a run's rollback only
while a run is under way (`during`); a command with nothing to roll back
(`check`, `alert`, `status`, the pause between a run's attempts) just says it
was stopped. Once it has committed, the work is done and kept, so a stop only
lets the run finish its report and exit 0 — dying by the signal then would
make systemd mark a successful run failed and fire the failure alert. The
commit itself runs with SIGTERM blocked, so a stop lands either before it or
after it, never inside.
"""

import contextlib
import logging
import os
import signal

from lms_refresh.errors import Terminated

logger = logging.getLogger(__name__)

STOPPED = "Stopped by SIGTERM."  # what a stop means when no work of the command is under way
RUN_STOPPED = "Stopped by SIGTERM; the run was rolled back and nothing was committed."


class StopPolicy:
    """The process's SIGTERM handler and whether the run has committed yet."""

    def __init__(self):
        self.committed = False
        self.requested = False
        self.pid = os.getpid()
        self.sentence = STOPPED  # the Terminated's: what a stop now means
        self.committed_during = None  # the sentence in force at the commit: whose work it was (a run's or not)

    def handler(self, signum, frame):
        if os.getpid() != self.pid:
            # A process forked from the run (a parsing worker the pool starts) that a stop reaches
            # before it set its own handler: it dies by the signal, as it would by default, instead
            # of raising the run's Terminated (and printing a traceback) in a process that has no run.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        global _deferred
        if _held:
            # Blocked in this thread, the signal reached another (a thread of the parsing pool's left behind by
            # a pool that would not stop, sources/pool.py), whose handler runs here all the same: it waits for
            # the block's end, as a signal blocked everywhere would.
            _deferred = True
            return
        if self.requested:
            return  # the first stop is already on its way out; raising again would interrupt the rollback
        self.requested = True
        if self.committed:
            # Whose commit it was, not what is under way now: after Refresh.run returns (the job's pings and
            # textfile, the summary) the run's `during` is over, but what was committed is still the run's.
            logger.warning("SIGTERM after the run committed; finishing the report, the run's result stands."
                           if self.committed_during == RUN_STOPPED else
                           "SIGTERM after the commit; the command finishes, and what it committed stands.")
            return
        raise Terminated(self.sentence)

    def begin(self):
        """A new attempt of a run: nothing of it is committed yet."""
        self.committed = False

    @contextlib.contextmanager
    def during(self, sentence):
        """Run the block with `sentence` as what a stop means (e.g. RUN_STOPPED while a run is under way)."""
        previous, self.sentence = self.sentence, sentence
        try:
            yield
        finally:
            self.sentence = previous

    @contextlib.contextmanager
    def commit(self):
        """Run the block (the COMMIT) with SIGTERM held back, then count the run as committed."""
        with held_back():
            yield
            self.committed, self.committed_during = True, self.sentence


_held = 0  # how many held_back blocks the main thread is in
_deferred = False  # a stop that came during one, to be acted on at its end


@contextlib.contextmanager
def held_back():
    """Run the block with SIGTERM blocked: a stop meanwhile is delivered (and acted on) as the block ends, so the
    block is done whole or not begun (the commit; the shutdown marker a stopped run must leave behind)."""
    global _held, _deferred
    _held += 1  # counted before the mask and after it: a stop handled in between is deferred too
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    finally:
        _held -= 1
        if not _held and _deferred:
            _deferred = False
            signal.raise_signal(signal.SIGTERM)


@contextlib.contextmanager
def installed(then=None):
    """Yield the process's stop policy, installing it for the block only if none is in force yet; after the
    block, SIGTERM's disposition is `then` (the process's entry point: SIG_IGN, so that a stop in the last
    moments of the process, with the command's work done and its exit status chosen, cannot replace that
    status by a death by the signal), else what it was before.

    The policy belongs to the process, so it is installed once, by the outermost
    caller: `lms_refresh.cli.main` for every command, or a library caller (a test,
    the demo) that calls `run_job` or `Refresh.run` directly. Everything inside
    (the job, each attempt of a run, `forget`) comes here too and is handed the
    policy in force, so a stop always meets the one policy that knows whether the
    work is committed.
    """
    current = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    if isinstance(current, StopPolicy) and current.pid == os.getpid():
        yield current  # inherited: whoever installed it removes it
        return
    policy = StopPolicy()
    previous = signal.signal(signal.SIGTERM, policy.handler)
    try:
        yield policy
    finally:
        signal.signal(signal.SIGTERM, previous if then is None else then)
