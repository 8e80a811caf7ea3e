"""One refresh: lock → window → pull → stage → recompute → commit.

`refresh()` is the only code path for both `run` and `backfill`; they differ
only in how the window is chosen. Everything the run depends on (config,
clock, environment, effective uid) is passed in.
"""

import contextlib
import dataclasses
import datetime as dt
import logging
import os
import signal
import time
import uuid

from lms_refresh import logs
from lms_refresh import window as windows
from lms_refresh import __version__, redact, retention
from lms_refresh.errors import BadInputError, StateError, Terminated
from lms_refresh.lock import LOCK_NAME, LockHeld, RunLock
from lms_refresh.privacy import RecordKeys
from lms_refresh.publish import publish_if_behind
from lms_refresh.pseudonym import Pseudonymiser, create_key, fingerprint, read_key
from lms_refresh.sources import build_source
from lms_refresh.statedir import check_writable_file, prepare_state_directory
from lms_refresh.store import load_driver, open_store

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
    started: float = dataclasses.field(default_factory=time.monotonic)


@contextlib.contextmanager
def sigterm_raises():
    """Turn SIGTERM into a Terminated exception so the transaction rolls back on the way out."""

    def handler(signum, frame):
        raise Terminated("Stopped by SIGTERM; the run was rolled back and nothing was committed.")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def refresh(config, now, environ, euid, progress, since=None, until=None, dry_run=False):
    """Run one refresh of the window [since, until) (or the scheduled one if both are None).

    Returns a Report; raises a RefreshError subclass on failure, after rolling back.
    """
    kind = "run" if since is None else "backfill"
    report = Report(run_id=str(uuid.uuid4()), kind=kind, dry_run=dry_run)
    load_driver(config)
    lock = run_lock(config, euid, dry_run)
    try:
        with lock, sigterm_raises():
            paths = [config.key_file] + ([config.store_path] if config.store_type == "sqlite" else [])
            for path in paths:
                if not dry_run:
                    check_writable_file(path, euid)
            result = _locked_refresh(config, now, environ, progress, report, since, until)
            if not dry_run:
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


def open_key(config, meta, has_events, dry_run):
    """Return the pseudonymisation key, refusing one that does not match the store's data."""
    key = read_key(config.key_file)
    recorded = meta.get("key_fingerprint")
    if key is None:
        if recorded is not None or has_events:
            raise StateError(
                f"The pseudonymisation key {config.key_file} is missing but the store already holds "
                "pseudonymised learners; restore the key from a backup (a new key would count every learner twice)."
            )
        key = os.urandom(32) if dry_run else create_key(config.key_file)
        logger.info("Created a new pseudonymisation key at %s", config.key_file)
    elif recorded is not None and recorded != fingerprint(key):
        raise StateError(
            f"The pseudonymisation key {config.key_file} is not the key this store was built with; "
            "restore the original key file."
        )
    return key


def _check_timezone(config, meta, has_events):
    recorded = meta.get("timezone")
    if recorded is not None and recorded != config.timezone and has_events:
        raise StateError(
            f"The store's days were computed in time zone {recorded} but the configuration ({config.origin}) "
            f"says {config.timezone}; keep {recorded}, or move the store aside and rebuild with 'lms-refresh backfill'."
        )


def _choose_window(config, now, meta, source, since, until):
    watermark = meta.get("watermark")
    if watermark is not None:
        # Stores written before cursors had kinds hold stored times.
        kind = meta.get("cursor_kind", windows.TIME.name)
        if kind != source.axis.name:
            raise StateError(
                f"The store's watermark is a {kind} cursor but source type {config.source['type']!r} "
                f"counts by {source.axis.name}; a store follows one source — point store.path (or "
                "store.url) at a new store for this source."
            )
        watermark = source.axis.parse(watermark)
    if since is None:
        return watermark, source.run_window(watermark, now, config)
    return watermark, source.backfill_window(since, until, now, config)


def _locked_refresh(config, now, environ, progress, report, since, until):
    try:
        with locked_store(config, environ, create=not report.dry_run) as store:
            return _with_store(config, now, environ, store, progress, report, since, until)
    finally:
        progress.done()


def _with_store(config, now, environ, store, progress, report, since, until):
    meta, has_events = store.meta(), store.has_events()
    key = open_key(config, meta, has_events, report.dry_run)
    store.record_keys = RecordKeys(key)
    _check_timezone(config, meta, has_events)
    source = build_source(config, Pseudonymiser(key), environ)
    try:
        return _read_source(config, now, store, source, key, meta, report, progress, since, until)
    finally:
        source.close()


def _read_source(config, now, store, source, key, meta, report, progress, since, until):
    watermark, window = _choose_window(config, now, meta, source, since, until)
    report.window = window
    if window.empty:
        report.outcome = "nothing-to-do"
        logger.info(
            "Nothing to do: the window %s .. %s is empty.", window.since_cursor, window.until_cursor,
            extra=logs.run_fields(logs.NOTHING_TO_DO, report),
        )
        return report
    logger.info(
        "Refreshing %s from %s, window %s .. %s", store.describe(), source.describe(),
        window.since_cursor, window.until_cursor, extra=logs.run_fields(logs.RUN_STARTED, report),
    )
    _transaction(config, now, store, source, key, watermark, window, report, progress)
    return report


def _transaction(config, now, store, source, key, watermark, window, report, progress):
    now_text = windows.to_cursor(now)
    days = set()
    kept_quarantine = []
    redactor = redact.Redactor(key, config.source.get("site_url"))  # quarantined records keep no identifiers
    progress(f"Reading {source.describe()}, window {window.since_cursor} .. {window.until_cursor}", force=True)
    store.begin()
    try:
        horizon = retention.staging_horizon(config, now, store.meta())
        for batch in source.batches(window, store.source_index()):
            retention.hold_back(batch, horizon)  # days whose staged events were dropped stay closed
            days |= store.stage(batch.events, batch.voids, batch.names)
            if batch.quarantined:
                store.quarantine(report.run_id, batch.quarantined, now_text, redactor)
                room = QUARANTINE_KEPT_ON_FAILURE - len(kept_quarantine)
                kept_quarantine.extend(batch.quarantined[:max(room, 0)])
            store.save_source_state(batch.state)
            report.statements_read += batch.read
            report.staged += len(batch.events)
            report.voided += len(batch.voids)
            report.quarantined += len(batch.quarantined)
            progress(f"Read {report.statements_read} statements in the window, {report.quarantined} quarantined")
        days |= store.finish_staging()
        staged_at = time.monotonic()
        _check_tolerance(config, report)
        days.update(window.local_days(config.timezone))
        days = retention.apply(store, config, now, horizon, days)
        report.partitions = sorted(days)
        progress(f"Recomputing {len(days)} daily partitions", force=True)
        store.set_privacy(config.min_cell_size, config.privacy)
        report.rows_written, report.suppressed = store.recompute(days)
        recomputed_at = time.monotonic()
        new_watermark = windows.next_watermark(watermark, window, report.kind == "backfill", source.axis)
        if new_watermark is not None:
            store.set_meta("watermark", source.axis.format(new_watermark))
            store.set_meta("cursor_kind", source.axis.name)
        store.set_meta("timezone", config.timezone)
        store.set_meta("key_fingerprint", fingerprint(key))
        store.record_run(_run_row(report, now, 0, ""))
        if report.dry_run:
            store.rollback()
        else:
            store.commit()
        logger.debug("Phases: pull and stage %.2f s, recompute %.2f s, commit %.2f s",
                     staged_at - report.started, recomputed_at - staged_at, time.monotonic() - recomputed_at)
    except BaseException as error:
        store.rollback()
        if not report.dry_run:
            _record_failure(store, report, now, error, kept_quarantine, redactor)
        error.report = report  # what was read and quarantined, for the job's metrics
        raise


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


def _record_failure(store, report, now, error, kept_quarantine, redactor):
    """After a rollback, note the failed run (and what was quarantined) in its own transaction."""
    exit_code = getattr(error, "exit_code", 1)
    report.outcome = "failed"
    try:
        store.begin()
        if kept_quarantine:
            store.quarantine(report.run_id, kept_quarantine, windows.to_cursor(now), redactor)
        store.record_run(_run_row(report, now, exit_code, str(error)[:1000]))
        store.commit()
    except Exception:  # the store itself may be what failed; the run's own error is what matters
        with contextlib.suppress(Exception):
            store.rollback()
        logger.warning("Could not record the failed run in the store", exc_info=True)
