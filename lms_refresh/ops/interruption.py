"""Runs that never finished: a shutdown, a crash of the machine or of the process.

A scheduled run writes `run-in-progress` in the state directory before its first attempt and
removes it when it ends by itself, whatever its outcome. A run stopped by SIGTERM (143: an
operator's stop or a shutdown) or killed keeps it, so that lms-refresh-catch-up.timer, whose
ConditionPathExists= sees it at the next boot, starts the service once; and the next scheduled
run that finds a marker of a run that is gone notes it in `last-interruption`, which `status`
shows and the next failure alert reports (a shutdown cannot queue an alert of its own).
"""

import json
import logging
import os
import socket
import time

from lms_refresh import atomic
from lms_refresh.errors import RefreshError
from lms_refresh.instants import from_cursor, to_cursor
from lms_refresh.state_directory import LAST_INTERRUPTION, RUN_IN_PROGRESS

logger = logging.getLogger(__name__)

MARKER, LAST = RUN_IN_PROGRESS, LAST_INTERRUPTION


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
        return value if isinstance(value, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable or damaged: a run that did not finish cleanly all the same


def _write(path, value):
    """Replace `path` by `value` as JSON (see lms_refresh/atomic.py); any failure is an OSError, for the
    callers' own warnings."""
    try:
        atomic.replace_bytes(path, (json.dumps(value, sort_keys=True) + "\n").encode(), mode=0o640)
    except RefreshError as error:  # a full disk or a read-only file system, named
        raise OSError(getattr(error.__cause__, "errno", None), str(error), path) from error


def _booted_at():
    """This boot's start (Unix time), from CLOCK_BOOTTIME: readable under ProcSubset=pid."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def _process_start(pid):
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat), or None if it is gone or unreadable.
    The service's own processes are visible under ProtectProc=invisible and ProcSubset=pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])  # field 22, counted after the command's name
    except (OSError, ValueError, IndexError):
        return None


def _alive(marker):
    """Whether the marker's run may still be running: the very process that wrote it, still there. A marker that
    names its process's start (since this version) is judged by it alone: a run started while the clock was
    behind (a bad RTC, a boot-time run), then stepped forward, is no run of an earlier boot."""
    try:
        pid = int(marker["pid"])
        process_start = marker.get("process_start")
        if process_start is not None and marker.get("host") == socket.gethostname() and pid != os.getpid():
            return _process_start(pid) == int(process_start)
        started = from_cursor(marker["started_at"], "run start").timestamp()
    except Exception:  # any failure: a marker we cannot read is no live run's
        return False
    if started < _booted_at() - 5 or marker.get("host") != socket.gethostname() or pid == os.getpid():
        return False  # an earlier boot, another host, or a pid number reused by this very process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pending(state_directory):
    """The marker of a run that did not finish and is not running, or None."""
    marker = _read(os.path.join(state_directory, MARKER))
    if marker is None or _alive(marker):
        return None
    return marker


def last(state_directory):
    """The last interruption a run noticed (see `begin`), or None."""
    return _read(os.path.join(state_directory, LAST)) or None


class Marker:
    """The scheduled job's marker: `begin()` before the first attempt, `end(error)` after the last."""

    def __init__(self, state_directory, run_id, now):
        self.directory, self.run_id, self.now = state_directory, run_id, now
        self.owned = False

    def begin(self):
        """Write the marker; note an earlier run that never finished. Never fails the run."""
        path = os.path.join(self.directory, MARKER)
        if not os.path.isdir(self.directory):
            return  # a first run: nothing before it to catch up, and its lock creates the directory
        if not os.access(self.directory, os.W_OK | os.X_OK):
            return  # the run is refused at its lock, with the directory's owner named: no warning before that
        try:
            previous = _read(path)
            if previous is not None and _alive(previous):
                return  # another run (it holds the lock, or is about to): its marker stays its own
            if previous is not None:
                noticed = dict(previous, noticed_at=to_cursor(self.now), noticed_by=self.run_id, alerted=False)
                _write(os.path.join(self.directory, LAST), noticed)
                logger.warning("The run started at %s (pid %s) did not finish: the machine was shut down or crashed, "
                               "or the run was stopped or killed; this run catches it up.",
                               previous.get("started_at", "an unknown time"), previous.get("pid", "?"),
                               extra={"RUN_ID": self.run_id, "INTERRUPTED_RUN_STARTED": previous.get("started_at")})
            _write(path, {"run_id": self.run_id, "started_at": to_cursor(self.now), "pid": os.getpid(),
                          "host": socket.gethostname(), "process_start": _process_start(os.getpid())})
            self.owned = True
        except OSError as error:
            logger.warning("Could not write %s (%s): a shutdown during this run would not be caught up at boot.",
                           path, error)

    def end(self, stopped):
        """Remove the marker unless the run was `stopped` (SIGTERM: a shutdown or an operator's stop)."""
        if not self.owned or stopped:
            return
        path = os.path.join(self.directory, MARKER)
        try:
            if (_read(path) or {}).get("run_id") == self.run_id:
                os.unlink(path)
        except OSError as error:
            logger.warning("Could not remove %s (%s): the next boot will run the refresh once more.", path, error)


def unalerted(state_directory):
    """The last interruption if no alert has reported it yet, else None (see `mark_alerted`)."""
    noticed = _read(os.path.join(state_directory, LAST))
    if not noticed or noticed.get("alerted"):
        return None
    return noticed


def mark_alerted(state_directory, noticed):
    """`noticed` (from `unalerted`) reached someone: later alerts leave it out. Only an alert that was delivered
    marks it; one that reached nobody leaves it to the next."""
    try:
        _write(os.path.join(state_directory, LAST), dict(noticed, alerted=True))
    except OSError:
        pass  # reported again next time rather than never
