"""A test-only seam: fail on purpose at a named phase of a run.

The crash tests set `LMS_REFRESH_FAULT="PHASE:ACTION"` (or `"PHASE@N:ACTION"`
for the Nth time the phase is reached; `"PHASE/NAME:ACTION"` only where it is
reached for the file named NAME, see lms_refresh/atomic.py) and check that
whatever happens there leaves the previous state or the new one, never a
mixture. Operators never
set it. Unset, `point()` costs one comparison.

Actions: `kill` (SIGKILL, as a power cut would), `term` (SIGTERM to this
process, as `systemctl stop` does), `termgroup` (SIGTERM to the whole process
group, parsing workers included), `raise` (an unexpected exception),
`enospc` (the disk is full) and `eio` (the device failed).
"""

import errno
import os
import signal

ENVIRONMENT_VARIABLE = "LMS_REFRESH_FAULT"

# Every phase the engine reports, in the order a run reaches them. Adding one is
# one line here plus a `faults.point("name")` where it happens.
PHASES = (
    "store-created",        # a new store is migrated under its temporary name, before it takes its own name
    "migration-applied",    # a migration's statements ran; its transaction is not committed (@N: migration N)
    "migration-committed",  # a migration committed (@N: migration N)
    "chunk-read",           # an export file's chunk is read (in a parsing worker, or here for a small file)
    "chunk-parsed",         # in a parsing worker (parallel NDJSON parsing), after it parsed a chunk
    "batch-staged",         # a batch is staged inside the run's transaction (@N: the Nth batch)
    "before-recompute",
    "after-recompute",
    "before-commit",
    "after-commit",
    "before-exit",          # the run's work and reporting are done; the process is about to exit
    "exiting",              # past the stop policy (SIGTERM ignored): the process exits with its status
    # Inside every atomic replacement of a file (lms_refresh/atomic.py); /NAME picks the file:
    "replace-written",      # the temporary is written and has its final mode; not yet synced
    "replace-synced",       # the temporary is fsynced; not yet renamed
    "replace-renamed",      # renamed over the file; the directory is not yet fsynced
)
ACTIONS = ("kill", "term", "termgroup", "raise", "enospc", "eio")

_armed = None  # (phase, occurrence, action) once arm() found a fault to inject
_reached = {}


class InjectedFault(RuntimeError):
    """The `raise` action: an exception no code path expects."""


def parse(text):
    """Given 'PHASE[@N][/NAME]:ACTION', return (phase, N, action, NAME or None) or raise ValueError."""
    where, _, action = text.rpartition(":")
    where, _, subject = where.partition("/")
    phase, _, occurrence = where.partition("@")
    if phase not in PHASES or action not in ACTIONS or (occurrence and not occurrence.isdigit()):
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={text!r}: expected PHASE[@N][/NAME]:ACTION with a phase among "
                         f"{', '.join(PHASES)} and an action among {', '.join(ACTIONS)}")
    return phase, int(occurrence or 1), action, subject or None


def arm(environ):
    """Read the fault to inject from `environ` (once, at start-up); without one, every point is a no-op."""
    global _armed
    text = environ.get(ENVIRONMENT_VARIABLE)
    _armed = parse(text) if text else None
    _reached.clear()


def point(phase, subject=None):
    """The engine reached `phase` (for the file named `subject`): inject the armed fault if this is its place."""
    if _armed is None:
        return
    wanted, occurrence, action, wanted_subject = _armed
    if phase != wanted or wanted_subject not in (None, subject):
        return
    _reached[phase] = _reached.get(phase, 0) + 1
    if _reached[phase] != occurrence:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    elif action == "termgroup":
        os.killpg(os.getpgrp(), signal.SIGTERM)
    elif action == "raise":
        raise InjectedFault(f"fault injected at {phase}")
    elif action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (injected at {phase})")
    elif action == "eio":
        raise OSError(errno.EIO, f"Input/output error (injected at {phase})")
