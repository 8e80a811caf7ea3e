"""Exit codes and the domain errors that map to them.

This is the one place that defines what an exit status means: `exit_status`
turns the exception that ended a command into its code and sentence, for the
CLI, the run log, the Healthchecks ping and the metrics textfile alike; the
docs/admin/commands.md shows the table, generated from MEANINGS.
"""

import errno

OK = 0  # success, nothing to do, or another run holds the lock
FAILURE = 1  # unexpected failure; nothing committed, unless its sentence says the work was (after the commit)
USAGE = 2  # usage error (click's own code)
BAD_INPUT = 65  # EX_DATAERR: bad input beyond the configured tolerance
UNAVAILABLE = 69  # EX_UNAVAILABLE: source or store unreachable (transient)
CONFIG = 78  # EX_CONFIG: configuration or state an operator must fix
TERMINATED = 143  # 128 + SIGTERM: stopped before any commit (a run's transaction is rolled back)
INTERRUPTED = 130  # 128 + SIGINT: ^C at a terminal (a person saw it; no service exits so)

MEANINGS = {
    OK: "success, nothing to do, or lock held by another run",
    FAILURE: "unexpected failure; nothing committed unless the message says the store is committed",
    USAGE: "usage error",
    BAD_INPUT: "bad input beyond the configured tolerance; nothing committed",
    UNAVAILABLE: "source or store unreachable, or a full disk (transient)",  # after a commit, the sentence says so
    CONFIG: "configuration or state error; fix it before the next run",
    TERMINATED: "stopped by SIGTERM; nothing committed (a run's open transaction is rolled back)",
}


class RefreshError(Exception):
    """A failure with a one-sentence message meant for the operator."""

    exit_code = FAILURE


class ConfigError(RefreshError):
    """The configuration (or the state it points to) is wrong; retrying won't help."""

    exit_code = CONFIG


class NotConfiguredError(ConfigError):
    """There is no configuration file, or it has no [source] yet: an install not configured so far."""


class StateError(ConfigError):
    """The state directory or store is unreadable, corrupt or owned by someone else."""


class BadInputError(RefreshError):
    """Too much of the input was malformed; nothing was committed."""

    exit_code = BAD_INPUT


class UnavailableError(RefreshError):
    """A source or the store could not be reached; a later retry may succeed."""

    exit_code = UNAVAILABLE


class UnexpectedError(RefreshError):
    """An unexpected failure (a bug of ours, most likely) given a sentence that says what stands, e.g. after the
    commit. The exception it was raised from is the one to fix: the CLI logs its traceback with the sentence."""


class Terminated(BaseException):
    """SIGTERM arrived before the command committed anything; its message says what was undone.

    A BaseException, like KeyboardInterrupt, so that no library's
    `except Exception` can swallow the stop request on its way out.
    """

    exit_code = TERMINATED


def exit_status(error):
    """Given the exception that ended a command (None if none did), return (exit code, message).

    A domain error and a stop carry their own code and one-sentence message;
    anything else is an unexpected failure (1; 130 for ^C), named by its type.
    """
    if error is None:
        return OK, ""
    if isinstance(error, (RefreshError, Terminated)):
        return error.exit_code, str(error)
    return INTERRUPTED if isinstance(error, KeyboardInterrupt) else FAILURE, f"{type(error).__name__}: {error}"


def from_os_error(error, what, outcome=None):
    """Given an OSError met while writing `what`, return the domain error it means, or None.

    A full disk or quota is transient (69: the retry may find room); a read-only
    file system is named as such (78: someone has to remount it), and so is an
    input/output error (78: someone has to look at the device). `outcome` ends
    the sentence with what the failure means for the command (default: nothing
    was committed).
    """
    number = getattr(error, "errno", None)
    if number in (errno.ENOSPC, errno.EDQUOT):
        kind = "disk quota is exhausted" if number == errno.EDQUOT else "disk is full"
        return UnavailableError(f"Cannot write {what}: the {kind} ({error.strerror}); free some space — "
                                f"{outcome or 'nothing was committed.'}")
    if number == errno.EROFS:
        return StateError(f"Cannot write {what}: it is on a read-only file system; remount it read-write "
                          "(or point the configuration at a writable place)" + (f" — {outcome}" if outcome else "."))
    if number == errno.EIO:  # not a permission to grant: the device or the file system under it failed
        return StateError(f"Cannot write {what}: an input/output error ({error.strerror}); the disk or the file "
                          "system under it failed — see the kernel's log (journalctl -k) and check the device"
                          + (f" — {outcome}" if outcome else "."))
    return None


# What a read of a source's file may meet that is no fault of the file: the machine is short of something a
# later run may find (69), or the device under it failed (78). Anything else (a name too long, a loop of links,
# a file of the wrong kind) is the file's: bad input, in the caller's sentence.
_SHORT_OF = {errno.ENOMEM: "memory", errno.EMFILE: "file descriptors (this process's limit)",
             errno.ENFILE: "file descriptors (the system's limit)", errno.ENOBUFS: "buffer space",
             errno.EAGAIN: "a resource the kernel lends (EAGAIN)"}
_UNREACHABLE = (errno.ESTALE, errno.ETIMEDOUT, errno.ENOTCONN, errno.EHOSTDOWN, errno.EHOSTUNREACH,
                errno.ECONNRESET, errno.ENOLINK)


def from_read_error(error, what, verb="read"):
    """Given an OSError met while reading `what` (a source's file; `verb`: "list" for a directory, "reach" for a
    path's stat), return the domain error it means if the file is not at fault, else None. Nothing was
    committed: the run fails before its commit."""
    number = getattr(error, "errno", None)
    detail = error.strerror or str(error)
    if number in _SHORT_OF:
        return UnavailableError(f"Cannot {verb} {what}: the system is short of {_SHORT_OF[number]} ({detail}); "
                                "nothing was committed, and a later run reads it again.")
    if number in _UNREACHABLE:
        return UnavailableError(f"Cannot {verb} {what}: the file system it is on cannot be reached ({detail}; a "
                                "network share?); nothing was committed, and a later run reads it again.")
    if number == errno.EIO:
        return StateError(f"Cannot {verb} {what}: an input/output error ({detail}); the disk or the file system "
                          "under it failed — see the kernel's log (journalctl -k) and check the device; nothing "
                          "was committed.")
    return from_os_error(error, what)  # a full disk or quota (reading a network share may meet them)


# What starting processes may meet (the parsing workers: fork(), and the POSIX semaphores of their queues, which
# live in /dev/shm): the machine is short of something a later run may find (69), or it refuses what the workers
# need, which someone has to change (78).
_SHORT_OF_TO_START = {**_SHORT_OF, errno.EAGAIN: "processes (the user's limit, or the unit's TasksMax=)"}


def from_start_error(error, what):
    """Given an OSError met while starting `what` (processes and their semaphores), return its domain error.

    Never None: whatever the system refused, the input is not at fault. Nothing was committed (the run fails
    before its commit).
    """
    number = getattr(error, "errno", None)
    detail = error.strerror or str(error)
    if number in _SHORT_OF_TO_START:
        return UnavailableError(f"Cannot start {what}: the system is short of {_SHORT_OF_TO_START[number]} "
                                f"({detail}); nothing was committed, and a later run reads the same window again.")
    if number in (errno.ENOSPC, errno.EDQUOT):  # fork() never says so: a semaphore found no room
        return UnavailableError(f"Cannot start {what}: /dev/shm, where their semaphores are made, is full "
                                f"({detail}); free some room there — nothing was committed, and a later run reads "
                                "the same window again.")
    return StateError(f"Cannot start {what}: the system refused ({detail}); they need fork() and POSIX semaphores "
                      "in /dev/shm, a writable tmpfs (is it missing, read-only, or blocked by a sandbox?); nothing "
                      "was committed.")


# What Python says when the system refuses a thread (pthread_create's EAGAIN): threads count against the same
# limits as processes (the unit's TasksMax=, the user's RLIMIT_NPROC, the kernel's threads-max).
THREAD_REFUSED = "can't start new thread"


def from_thread_error(error, what, outcome=None):
    """Given an exception met while starting `what` (a thread, or what starts some), return the domain error it
    means if it is the system's refusal of a new thread, else None: 69, as fork()'s EAGAIN, since a later run may
    find room. `outcome` ends the sentence (default: nothing was committed, and a later run reads the window)."""
    if not isinstance(error, RuntimeError) or str(error) != THREAD_REFUSED:
        return None
    return UnavailableError(f"Cannot start {what}: the system is short of threads, which count as processes (the "
                            f"user's limit, ulimit -u, or the unit's TasksMax=) ({error}); "
                            f"{outcome or 'nothing was committed, and a later run reads the same window again.'}")
