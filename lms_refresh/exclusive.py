"""Exclusive access for the commands that change the store: run, backfill, rebuild, forget, watermark set.

Two locks, taken in this order: the run's flock on `refresh.lock` in the state
directory (one host), then the store's own lock (a PostgreSQL store shared by
several hosts has one; a SQLite store's is the flock). Either one held by
another run raises `LockHeld`; what that means is the command's to say.
"""

import contextlib
import os

from lms_refresh.errors import UnavailableError

from lms_refresh.lock import LockHeld, RunLock
from lms_refresh.paths import refuse_collisions
from lms_refresh.statedir import LOCK_NAME, check_writable_file, prepare_state_directory
from lms_refresh.store import open_store


def lock_held(holder, undone, command):
    """Return the error of an operator's command (backfill, rebuild, forget, watermark set) that found the
    lock held: unlike the timer's run, whose next start does its work, nothing will do this command's,
    so it is not "nothing to do" but 69 — transient: run it again."""
    return UnavailableError(f"Another refresh holds the lock (held by {holder}); {undone} — run lms-refresh "
                            f"{command} again when it has finished.")


def run_lock(config, euid, dry_run=False):
    """Return the run's flock (a context manager), preparing the state directory; a dry run
    without a state directory takes none: there is nothing to protect, and it creates nothing."""
    # Checked at loading too; again here, since a retry or a long wait may find other files in place.
    refuse_collisions(config)
    lock_path = os.path.join(config.state_directory, LOCK_NAME)
    if dry_run and not os.path.isdir(config.state_directory):
        return contextlib.nullcontext()
    prepare_state_directory(config.state_directory, euid)
    check_writable_file(lock_path, euid)
    return RunLock(lock_path)


@contextlib.contextmanager
def locked_store(config, environ, create):
    """Yield the open store under its own run lock, with driver errors turned into the domain's;
    raise LockHeld if another run holds it."""
    store = open_store(config, environ, create=create)
    try:
        # Driver errors anywhere inside (a dropped connection while reading the
        # watermark as much as during the commit) become the domain's exit codes.
        with store.errors():
            holder = store.acquire_run_lock()
            if holder is not None:
                raise LockHeld(holder)
            yield store
    finally:
        with contextlib.suppress(Exception):  # a failing close must not replace the command's own error
            store.close()
