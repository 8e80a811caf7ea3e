"""One refresh: lock → window → pull → stage → recompute → commit.

`refresh()` is the only code path for both `run` and `backfill`; they differ
only in how the window is chosen. Everything the run depends on (config,
clock, environment, effective uid) is passed in.
"""

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import time
import uuid

from lms_refresh import __version__, faults, logs, redact, retention, state, stopping
from lms_refresh import window as windows
from lms_refresh.errors import BadInputError, RefreshError, StateError, from_os_error
from lms_refresh.lock import LOCK_NAME, LockHeld, RunLock
from lms_refresh.privacy import RecordKeys
from lms_refresh.publish import publish_if_behind
from lms_refresh.pseudonym import Pseudonymiser
from lms_refresh.sources import build_source
from lms_refresh.statedir import check_writable_file, prepare_state_directory
from lms_refresh.store import load_driver, open_store, store_exists

logger = logging.getLogger(__name__)

QUARANTINE_KEPT_ON_FAILURE = 1000  # records kept in memory to record after a rollback


@dataclasses.dataclass
class Report:
    """What a run did (or, for a dry run, would do)."""

    run_id: str
    kind: str
    dry_run: bool
    outcome: str = "success"
    window: windows.Window = None
    statements_read: int = 0
    staged: int = 0
    voided: int = 0
    quarantined: int = 0
    partitions: list = dataclasses.field(default_factory=list)
    rows_written: int = 0
    suppressed: int = 0
    lock_holder: str = ""
    kept_quarantine: list = dataclasses.field(default_factory=list)  # recorded again after a rollback
    started: float = dataclasses.field(default_factory=time.monotonic)


def refresh(config, now, environ, euid, progress, since=None, until=None, dry_run=False, rebuild=False,
            stop=None):
    """Run one refresh of the window [since, until) (or the scheduled one if both are None).

    `rebuild` empties everything derived from the source and re-reads it from
    `since`, in the same transaction (see README, "Recovery"). `stop` is the
    process's SIGTERM policy (a new one is installed for the call if None).
    Returns a Report; raises a RefreshError subclass on failure, after rolling back.
    """
    kind = "rebuild" if rebuild else "run" if since is None else "backfill"
    report = Report(run_id=str(uuid.uuid4()), kind=kind, dry_run=dry_run)
    with contextlib.nullcontext(stop) if stop else stopping.installed() as stop:
        stop.begin()
        try:
            return _refresh(config, now, environ, euid, progress, report, since, until, stop)
        except OSError as error:  # the lock file, the key, a new store's file: the state directory's disk
            domain = from_os_error(error, error.filename or config.state_directory)
            if domain is None:
                raise
            raise domain from error


def _refresh(config, now, environ, euid, progress, report, since, until, stop):
    load_driver(config)
    lock = run_lock(config, euid, report.dry_run)
    try:
        with lock:
            paths = [config.key_file] + ([config.store.path] if config.store.type == "sqlite" else [])
            for path in paths:
                if not report.dry_run:
                    check_writable_file(path, euid)
            result = _locked_refresh(config, now, environ, progress, report, since, until, stop)
            if not report.dry_run:
                publish_if_behind(config, environ, euid)  # after the commit: see publish.py
            return result
    except LockHeld as held:
        report.outcome = "lock-held"
        report.lock_holder = held.holder
        logger.info(
            "Another refresh holds the lock (held by %s); nothing to do.", held.holder,
            extra=logs.run_fields(logs.LOCK_HELD, report),
        )
        return report


# -- the lock and the store, shared by every command that changes the store (run, backfill, forget) --

def run_lock(config, euid, dry_run=False):
    """Return the run's flock (a context manager), preparing the state directory; a dry run
    without a state directory takes none: there is nothing to protect, and it creates nothing."""
    lock_path = os.path.join(config.state_directory, LOCK_NAME)
    if dry_run and not os.path.isdir(config.state_directory):
        return contextlib.nullcontext()
    prepare_state_directory(config.state_directory, euid)
    check_writable_file(lock_path, euid)
    return RunLock(lock_path)


@contextlib.contextmanager
def locked_store(config, environ, create):
    """Yield the open store under its own run lock (a database shared by several hosts has one),
    with driver errors turned into the domain's; raise LockHeld if another run holds it."""
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
        store.close()


def sigterm_raises():
    """SIGTERM raises Terminated for the block (see lms_refresh.stopping), for commands that commit once."""
    return stopping.installed()


def open_key(config, meta, has_events, dry_run):
    """Return the pseudonymisation key, refusing one that does not match the store's data (see state.open_key)."""
    return state.open_key(config, meta, has_events, dry_run, rebuild=False)


def _choose_window(config, now, meta, source, since, until, kind):
    watermark = meta.get("watermark") if kind != "rebuild" else None  # a rebuild starts the store over
    if watermark is not None:
        # Stores written before cursors had kinds hold stored times.
        cursor_kind = meta.get("cursor_kind", windows.TIME.name)
        if cursor_kind != source.axis.name:
            raise StateError(
                f"The store's watermark is a {cursor_kind} cursor but source type {config.source.type!r} "
                f"counts by {source.axis.name}; a store follows one source — point store.path (or "
                "store.url) at a new store for this source."
            )
        watermark = source.axis.parse(watermark)
    if since is None:
        return watermark, source.run_window(watermark, now, config)
    return watermark, source.backfill_window(since, until or now, now, config)


def _locked_refresh(config, now, environ, progress, report, since, until, stop):
    state.check_store_present(config, not store_exists(config, environ) and report.kind != "rebuild")
    store = open_store(config, environ, create=not report.dry_run)
    try:
        # Driver errors anywhere below (a dropped connection while reading the
        # watermark as much as during the commit) become the domain's exit codes.
        with store.errors():
            return _with_store(config, now, environ, store, progress, report, since, until, stop)
    except Exception as error:
        if not stop.committed:
            raise
        # The run's work is committed; what failed is tidying up after it.
        logger.warning("The run committed, but tidying up after it failed (%s); the committed run stands.", error)
        return report
    finally:
        progress.done()
        with contextlib.suppress(Exception):
            store.close()


def _with_store(config, now, environ, store, progress, report, since, until, stop):
    holder = store.acquire_run_lock()  # a database shared by several hosts has its own lock
    if holder is not None:
        raise LockHeld(holder)
    redactor = None
    try:
        meta, has_events = store.meta(), store.has_events()
        rebuild = report.kind == "rebuild"
        if not rebuild:
            state.check_clock(now, meta, store.last_runs()[0])
            state.check_identity(config, meta, has_events)
        key = state.open_key(config, meta, has_events, report.dry_run, rebuild)
        store.record_keys = RecordKeys(key)
        redactor = redact.Redactor(key, getattr(config.source, "site_url", None))  # quarantined records keep no identifiers
        source = build_source(config, Pseudonymiser(key), environ)
        try:
            return _read_source(config, now, store, source, key, meta, report, progress, since, until, stop,
                                redactor)
        finally:
            source.close()
    except BaseException as error:
        if stop.committed:
            raise
        store.rollback_quietly()  # a failing ROLLBACK must never replace the error that got us here
        domain = store.translate(error) if isinstance(error, Exception) else None
        if domain is None and isinstance(error, OSError):
            domain = from_os_error(error, error.filename or store.describe())
        if not report.dry_run:
            _record_failure(store, report, now, domain or error, redactor)
        (domain or error).report = report  # what was read and quarantined, for the job's metrics
        if domain is not None:
            raise domain from error
        raise


def _read_source(config, now, store, source, key, meta, report, progress, since, until, stop, redactor):
    watermark, window = _choose_window(config, now, meta, source, since, until, report.kind)
    report.window = window
    if window.empty:
        report.outcome = "nothing-to-do"
        logger.info(
            "Nothing to do: the window %s .. %s is empty.", window.since_cursor, window.until_cursor,
            extra=logs.run_fields(logs.NOTHING_TO_DO, report),
        )
        if not report.dry_run:  # still a run: staleness checks must see that it happened
            store.begin()
            # Retention does not wait for new records: a quiet source's old data goes on time too.
            retention.apply(store, config, now, retention.staging_horizon(config, now, meta), set())
            store.record_run(_run_row(report, now, 0, ""))
            with stop.commit():
                store.commit()
        return report
    logger.info(
        "Refreshing %s from %s, window %s .. %s", store.describe(), source.describe(),
        window.since_cursor, window.until_cursor, extra=logs.run_fields(logs.RUN_STARTED, report),
    )
    _transaction(config, now, store, source, key, watermark, window, report, progress, stop, redactor)
    return report


def _transaction(config, now, store, source, key, watermark, window, report, progress, stop, redactor):
    now_text = windows.to_cursor(now)
    days = set()
    progress(f"Reading {source.describe()}, window {window.since_cursor} .. {window.until_cursor}", force=True)
    store.begin()
    if report.kind == "rebuild":
        store.reset_derived()
        logger.warning("Rebuilding the store: everything derived from the source is replaced by what it holds "
                       "from %s on.", window.since_cursor, extra={"RUN_ID": report.run_id})
    horizon = retention.staging_horizon(config, now, store.meta())
    source.restore(store.source_index())
    for batch in source.batches(window):
        retention.hold_back(batch, horizon)  # days whose staged events were dropped stay closed
        days |= store.stage(batch.events, batch.voids, batch.names)
        quarantined = batch.quarantined + _conflicts(store.take_conflicts())
        if quarantined:
            store.quarantine(report.run_id, quarantined, now_text, redactor)
            room = QUARANTINE_KEPT_ON_FAILURE - len(report.kept_quarantine)
            report.kept_quarantine.extend(quarantined[:max(room, 0)])
        store.save_source_state(batch.state)
        report.statements_read += batch.read
        report.staged += len(batch.events) - (len(quarantined) - len(batch.quarantined))
        report.voided += len(batch.voids)
        report.quarantined += len(quarantined)
        progress(f"Read {report.statements_read} statements in the window, {report.quarantined} quarantined")
        faults.point("batch-staged")
    days |= store.finish_staging()
    staged_at = time.monotonic()
    _check_tolerance(config, report)
    days.update(window.local_days(config.timezone))
    days |= store.pending_days()
    days = retention.apply(store, config, now, horizon, days)
    report.partitions = sorted(days)
    progress(f"Recomputing {len(days)} daily partitions", force=True)
    store.set_privacy(config.min_cell_size, config.privacy)
    faults.point("before-recompute")
    report.rows_written, report.suppressed = store.recompute(days)
    store.execute("DELETE FROM pending_days")
    faults.point("after-recompute")
    recomputed_at = time.monotonic()
    new_watermark = windows.next_watermark(watermark, window, report.kind != "run", source.axis)
    if new_watermark is not None:
        store.set_meta("watermark", source.axis.format(new_watermark))
        store.set_meta("cursor_kind", source.axis.name)
    state.record(store, config, key)
    store.record_run(_run_row(report, now, 0, ""))
    if report.dry_run:
        store.rollback()
        return
    faults.point("before-commit")
    with stop.commit():
        store.commit()
    faults.point("after-commit")
    try:
        state.remember_store(config, key)
    except OSError as error:  # the run stands; the next one writes the note again
        logger.warning("Could not note the store in %s (%s).", state.marker_path(config), error)
    logger.debug("Phases: pull and stage %.2f s, recompute %.2f s, commit %.2f s",
                 staged_at - report.started, recomputed_at - staged_at, time.monotonic() - recomputed_at)


def _conflicts(rows):
    """Quarantine records for second versions of staged statement ids (their canonical content)."""
    return [(f"statement {event.event_id.hex()}", "conflicting statement id: already staged with other content",
             json.dumps({name: value.hex() if isinstance(value, bytes) else value
                         for name, value in event._asdict().items()}, sort_keys=True)) for event in rows]
def _check_tolerance(config, report):
    if report.quarantined and report.quarantined > config.max_quarantine_share * report.statements_read:
        share = report.quarantined / report.statements_read
        raise BadInputError(
            f"{report.quarantined} of {report.statements_read} records in the window were malformed "
            f"({share:.1%}, more than max_quarantine_share = {config.max_quarantine_share:.1%}); "
            "nothing was committed. See the quarantine table (lms-refresh status) and fix the source."
        )


def _run_row(report, now, exit_code, message):
    finished = now + dt.timedelta(seconds=time.monotonic() - report.started)
    return {
        "run_id": report.run_id, "kind": report.kind, "started_at": windows.to_cursor(now),
        "finished_at": windows.to_cursor(finished), "outcome": report.outcome,
        "exit_code": exit_code,
        "window_since": report.window.since_cursor if report.window else None,
        "window_until": report.window.until_cursor if report.window else None,
        "statements_read": report.statements_read, "staged": report.staged, "voided": report.voided,
        "quarantined": report.quarantined, "partitions": len(report.partitions),
        "rows_written": report.rows_written, "suppressed": report.suppressed, "message": message,
        "version": __version__,
    }


def _record_failure(store, report, now, error, redactor):
    """After a rollback, note the failed run (and what was quarantined) in its own transaction."""
    exit_code = getattr(error, "exit_code", 1)
    report.outcome = "failed"
    message = str(error) if isinstance(error, RefreshError) else f"{type(error).__name__}: {error}"
    try:
        store.begin()
        if report.kept_quarantine and redactor is not None:
            store.quarantine(report.run_id, report.kept_quarantine, windows.to_cursor(now), redactor)
        store.record_run(_run_row(report, now, exit_code, message[:1000]))
        store.commit()
    except BaseException as failure:  # the store itself may be what failed; the run's own error is what matters
        store.rollback_quietly()
        logger.warning("Could not record the failed run in the store (%s: %s).", type(failure).__name__, failure)
