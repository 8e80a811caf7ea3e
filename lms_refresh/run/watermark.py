"""`watermark set`: move the watermark by hand, under the run lock, and say so in the run log.

After a clock glitch the watermark can lie in the future, where every later
window would start and silently skip what arrives before it. Setting it back
to the last time the operator trusts makes the next run re-read the gap;
staging is keyed by statement id, so what is read twice counts once.
A SIGTERM before the commit leaves the watermark where it was (143, saying so); after it, the new
one stands and the command ends as it would have (run/stopping.py).
"""

import uuid

from lms_refresh import __version__, faults, instants, window as windows
from lms_refresh.errors import ConfigError, StateError, from_os_error
from lms_refresh.run import identity, stopping
from lms_refresh.run.lock import LockHeld, lock_held, locked_store, run_lock
from lms_refresh.store import load_driver, store_exists


def parse_cursor(config, text):
    """Given the operator's TIME (or, for a Moodle source, a log id), return (axis, value)."""
    if config.source.type == "moodle":
        if not text.isdigit():
            raise ConfigError(f"{text!r} is not a Moodle log id; the watermark of a Moodle source is a log id "
                              "(e.g. 1234567).")
        return windows.LOG_ID, int(text)
    try:
        return windows.TIME, instants.parse_user_time(text, config.timezone)
    except instants.NotAnInstant as error:
        raise ConfigError(f"{error}.") from None


def set_watermark(config, now, environ, *, euid, text):
    """Set the store's watermark to `text`; return (old cursor or None, new cursor).

    Refuses a time after now (the mistake this command exists to undo). The
    change is a row in the run log (kind "watermark-set"), which also tells the
    clock check that the operator has looked at the clock.
    """
    axis, value = parse_cursor(config, text)
    if axis is windows.TIME and value > now + identity.CLOCK_TOLERANCE:
        raise ConfigError(f"{instants.to_cursor(value)} is later than the current time {instants.to_cursor(now)}; "
                          "a watermark in the future would skip everything stored before it.")
    load_driver(config)
    try:
        with run_lock(config, euid), stopping.installed() as stop, stop.during(STOPPED):
            if not store_exists(config, environ):
                raise StateError(f"The store {config.store_location} does not exist yet; the first run chooses its "
                                 "window itself (or use 'lms-refresh backfill').")
            with locked_store(config, environ, create=False) as store:
                return _set(store, now, axis, value=value, stop=stop)
    except LockHeld as held:
        raise lock_held(held.holder, "the watermark was not moved", "watermark set") from None
    except OSError as error:
        domain = from_os_error(error, error.filename or config.state_directory)
        if domain is None:
            raise
        raise domain from error


STOPPED = "Stopped by SIGTERM before the new watermark was committed; the watermark was not moved."


def _set(store, now, axis, *, value, stop):
    meta = store.meta()
    kind = meta.get("cursor_kind", windows.TIME.name) if meta.get("watermark") else axis.name
    if kind != axis.name:
        raise StateError(f"The store's watermark is a {kind} cursor, not a {axis.name}; a store follows one "
                         "source.")
    old, new = meta.get("watermark"), axis.format(value)
    store.begin()
    store.set_meta("watermark", new)
    store.set_meta("cursor_kind", axis.name)
    moment = instants.to_cursor(now)
    store.record_run({
        "run_id": str(uuid.uuid4()), "kind": "watermark-set", "started_at": moment, "finished_at": moment,
        "outcome": "watermark-set", "exit_code": 0, "window_since": old, "window_until": new,
        "statements_read": 0, "staged": 0, "voided": 0, "quarantined": 0, "partitions": 0,
        "rows_written": 0, "suppressed": 0, "message": f"watermark set by hand from {old} to {new}",
        "version": __version__,
    })
    faults.point("before-commit")
    with stop.commit():
        store.commit()
    faults.point("after-commit")
    return old, new
