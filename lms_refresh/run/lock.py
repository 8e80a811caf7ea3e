"""The run lock: an exclusive, non-blocking flock on refresh.lock in the state directory.

The kernel drops an flock when its holder dies, so a crash never leaves a
stale lock behind. The file itself is never removed (removing it would let
two processes lock two different inodes); it only records the holder's PID.

Exclusive access for the commands that change the store (run, backfill,
rebuild, forget, watermark set) takes two locks, in this order: the run's
flock on `refresh.lock` in the state directory (one host), then the store's
own lock (a PostgreSQL store shared by several hosts has one; a SQLite
store's is the flock). Either one held by another run raises `LockHeld`;
what that means is the command's to say.
"""

import contextlib
import fcntl
import os
import socket
import stat

from lms_refresh.config.paths import refuse_collisions
from lms_refresh.errors import StateError, UnavailableError
from lms_refresh.state_directory import LOCK_NAME, check_writable_file, prepare_state_directory
from lms_refresh.store import open_store


class LockHeld(Exception):
    """Another process holds the lock; `holder` is what it recorded (PID and host)."""

    def __init__(self, holder):
        super().__init__(holder)
        self.holder = holder


def _open(path):
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)


def read_holder(fd):
    """Return 'pid N on HOST' from what the holder wrote, or '' if nothing."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
    except OSError:
        return ""
    return f"pid {text[0]} on {text[1]}" if len(text) == 2 else " ".join(text)


class RunLock:
    """Context manager: hold the flock for the block, raise LockHeld if taken."""

    def __init__(self, path):
        self.path = path
        self.fd = None

    def __enter__(self):
        fd = _open(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(fd)
            os.close(fd)
            raise LockHeld(holder or "unknown") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        except OSError as error:  # a full disk: say which file could not be written
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise OSError(error.errno, error.strerror, self.path) from error
        self.fd = fd
        # Forked helpers (the parsing workers) must not keep the lock alive if the
        # run itself is killed: the flock lasts as long as any copy of the descriptor.
        os.register_at_fork(after_in_child=self._close_in_child)
        return self

    def _close_in_child(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __exit__(self, *exc):
        self.release()
        return False

    def release(self):
        if self.fd is not None:
            fd, self.fd = self.fd, None
            # Unlocking explicitly (not only on close) keeps the release prompt even
            # if a child process inherited the descriptor.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def probe(path, proc_locks="/proc/locks"):
    """Return None if nobody holds the lock at `path`, else the holder's recorded text.

    Reads the kernel's lock table instead of trying the lock: a probe that
    briefly took the lock could make a timer run starting at that instant skip.
    """
    try:
        info = os.stat(path)
        with open(proc_locks, encoding="ascii", errors="replace") as table:
            lines = table.readlines()
    except FileNotFoundError:
        return None
    wanted = (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":  # waiters are listed as "N: -> FLOCK ..."
            continue
        try:
            major, minor, inode = fields[5].split(":")
            found = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if found == wanted:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return f"pid {fields[4]}"
            try:
                return read_holder(fd) or f"pid {fields[4]}"
            finally:
                os.close(fd)
    return None



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
    refuse_odd_lock(lock_path)
    check_writable_file(lock_path, euid)
    return RunLock(lock_path)


def refuse_odd_lock(path):
    """Refuse (78) a lock path that is not a plain file: a directory or a FIFO ended the run with a traceback
    (exit 1), and a symbolic link had the run write its PID over the file it points to."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        if stat.S_ISDIR(info.st_mode):
            what = "a directory"
        elif stat.S_ISFIFO(info.st_mode):
            what = "a FIFO"
        raise StateError(f"The run lock {path} is {what}; remove it (the next run creates the file it needs).")


@contextlib.contextmanager
def locked_store(config, environ, create, *, rehearsal=False):
    """Yield the open store under its own run lock, with driver errors turned into the domain's;
    raise LockHeld if another run holds it. A `rehearsal` (a dry run) is rolled back at the end: the
    store writes nothing that a rollback would not undo (store/pg_bulk.py)."""
    store = open_store(config, environ, create=create)
    store.rehearsal = rehearsal
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
