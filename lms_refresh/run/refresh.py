"""One refresh: lock → open store → check state → choose window → stage → recompute → commit → publish.

A `Refresh` is one run. It holds everything the run depends on (config, the `Request`, now, environment,
effective uid, progress, the SIGTERM policy) and the `Report` of what it did; each phase is one method. `run`,
`backfill` and `rebuild` are this one code path; they differ only in the request (how the window is chosen,
and a rebuild's reset).

One error path: phases raise (lms_refresh.errors' domain errors, or whatever broke). `_settle` rolls a failure
back and records it (after the commit it is only tidying up: the run stands); `run()` alone turns the exception
into the `Outcome` (never raising, not even for ^C), which the job and the CLI read. SIGTERM: run/stopping.py.
"""

import dataclasses
import datetime as dt
import logging
import time
import typing
import uuid

from lms_refresh import faults, instants, logs, window as windows
from lms_refresh.config import Config
from lms_refresh.disclosure import policy, redaction, weakening
from lms_refresh.disclosure.cell_key import RecordKeys
from lms_refresh.disclosure.pseudonyms import Pseudonymiser, fingerprint
from lms_refresh.errors import RefreshError, StateError, Terminated, exit_status, from_os_error, from_thread_error
from lms_refresh.run import (
    after_commit,
    category_mapping,
    freshness,
    identity,
    period_publication,
    publication,
    publication_group,
    retention,
    stopping,
    upgrade,
)
from lms_refresh.run.lock import LockHeld, lock_held, locked_store, run_lock
from lms_refresh.run.report import Outcome, Report
from lms_refresh.run.request import BACKFILL, REBUILD, RUN, UNDONE, Request
from lms_refresh.sources import build_source
from lms_refresh.sources.redelivery import conflict_records
from lms_refresh.sources.xapi_fields import actor_identifier
from lms_refresh.state_directory import check_writable_file, user_name
from lms_refresh.store import load_driver, store_exists
from lms_refresh.store.staging import StageAgain

logger = logging.getLogger(__name__)

QUARANTINE_KEPT_ON_FAILURE = 1000  # records kept in memory to record after a rollback

@dataclasses.dataclass(eq=False)
class Refresh:
    """One run of `request` as of `now`; `run()` it once (a retry is a new Refresh, see job.py)."""

    config: Config
    request: Request
    now: dt.datetime
    environ: typing.Mapping
    euid: int
    progress: typing.Callable  # a logs.Progress: progress(text, force=False), progress.done()
    report: Report = dataclasses.field(init=False)
    stop: stopping.StopPolicy = dataclasses.field(init=False, default=None)  # the process's, while run() runs

    def __post_init__(self):
        self.report = Report(run_id=str(uuid.uuid4()), kind=self.request.kind, dry_run=self.request.dry_run)
        self._began = False  # the store's lock is taken: a failure from here on is a run in the run log
        self._kept = []  # quarantined records, recorded again after a rollback ...
        self._redactor = None  # ... without identifiers
        self._record_keys = self._key_fingerprint = None  # set once the run has its secret key
        self._upgrade = None  # (older mapping version, since): this run rebuilds the store for the new mapping

    def run(self):
        """Run the refresh; return its Outcome. Rolls back on failure; the error is returned, never raised."""
        with stopping.installed() as self.stop, self.stop.during(stopping.RUN_STOPPED):
            self.stop.begin()
            try:
                load_driver(self.config)
                with self.lock():
                    self._locked()
            except LockHeld as held:  # a held lock is an outcome; a backfill's or rebuild's is an error too
                return Outcome(self.report, self._lock_held(held.holder))
            except (Exception, Terminated, KeyboardInterrupt) as error:
                return Outcome(self.report if self._began else None, self._domain_error(error))
        return Outcome(self.report)

    # -- the phases, in the order a run reaches them --

    def lock(self):
        """Return the run's flock (a context manager), preparing the state directory (see lock.py)."""
        return run_lock(self.config, self.euid, self.request.dry_run)

    def open_store(self):
        """Return the store under its own lock (a context manager, see lock.py), refusing to start
        a new one where the key's store was lost (see run/identity.py)."""
        config = self.config
        if not self.request.dry_run:
            for path in [config.key_file] + ([config.store.path] if config.store.type == "sqlite" else []):
                check_writable_file(path, self.euid)
        identity.verify_store_present(config, not store_exists(config, self.environ) and self.request.kind != REBUILD)
        publication_group.require_group(config, user_name(self.euid))  # before anything is read, not after the commit
        return locked_store(config, self.environ, create=not self.request.dry_run, rehearsal=self.request.dry_run)

    def check_state(self, store, meta):
        """Return the pseudonymisation key, once the clock and the store's identity are checked against it."""
        config, rebuild = self.config, self.request.kind == REBUILD
        has_events = store.has_events()
        if not rebuild:
            # Any kind of last entry: a watermark set by hand says the operator has looked at the clock.
            identity.verify_clock(self.now, meta, store.last_entry())
            self._upgrade = upgrade.plan(config, self.request.kind == RUN, store, meta=meta, has_events=has_events)
            identity.verify_identity(config, meta, has_events, upgrading=self._upgrade is not None)
        identity.verify_terms(config, meta)  # a rebuild's too: it would count other terms
        key = identity.open_key(config, meta, has_events, dry_run=self.request.dry_run, rebuild=rebuild)
        self._record_keys = RecordKeys(key)  # the cell keys of what this run stages and recomputes
        self._key_fingerprint = fingerprint(key)  # the quarantine's pseudonyms follow the key (store/erasure.py)
        # Quarantined records keep no identifiers.
        self._redactor = redaction.Redactor(key, actor_identifier, getattr(config.source, "site_url", None))
        self.check_privacy(store)
        return key

    def check_privacy(self, store):
        """Refuse (78) a configuration that protects the publication less than the settings in force, unless
        the request accepts it: then say so, in the journal and in the run's row (see weakening.py)."""
        in_force = policy.in_force(store, missing_ok=True)
        lowered = weakening.require(self.config, store, self.request.accept_weaker_privacy)
        if not lowered:
            return
        what = ", ".join(lowered)
        self.report.note = f"privacy weakened deliberately (--accept-weaker-privacy): {what}"
        logger.warning("Privacy protection weakened deliberately (--accept-weaker-privacy): %s; in force until now: "
                       "%s.", what, weakening.describe(in_force),
                       extra=logs.fields(logs.PRIVACY_WEAKENED, RUN_ID=self.report.run_id, PRIVACY_WEAKENED=what))

    def choose_window(self, meta, source):
        """Return (the store's watermark on the source's axis or None, the window to read)."""
        watermark = meta.get("watermark") if self.request.kind != REBUILD and not self._upgrade else None  # anew
        if watermark is not None:
            # Stores written before cursors had kinds hold stored times.
            cursor_kind = meta.get("cursor_kind", windows.TIME.name)
            if cursor_kind != source.axis.name:
                raise StateError(
                    f"The store's watermark is a {cursor_kind} cursor but source type "
                    f"{self.config.source.type!r} counts by {source.axis.name}; a store follows one source — "
                    "point store.path (or store.url) at a new store for this source."
                )
            watermark = source.axis.parse(watermark)
        since = self._upgrade[1] if self._upgrade is not None else self.request.since  # an upgrade re-reads
        if since is None:
            window = source.run_window(watermark, self.now, self.config)
        else:
            window = source.backfill_window(since, self.request.until or self.now, self.now, config=self.config)
        self.report.window = window
        return watermark, window

    def nothing_to_do(self, store, meta, key, source):
        """An empty window: still a run (staleness checks see it), retention's, and a rename's (standing names)."""
        report = self.report
        report.outcome = "nothing-to-do"
        logger.info("Nothing to do: the window %s .. %s is empty.", report.window.since_cursor,
                    report.window.until_cursor, extra=logs.run_fields(logs.NOTHING_TO_DO, report))
        if self.request.dry_run:
            return
        store.begin()
        identity.follow_key(store, self._key_fingerprint)
        store.record_names(source.standing_names())
        store.record_categories(category_mapping.standing_tree(self.config, source, store))
        # Retention does not wait for new records: a quiet source's old data goes on time too.
        horizon = retention.staging_horizon(self.config, retention.clock(self.now, store), meta)
        days = retention.apply(store, self.config, self.now, horizon=horizon, days=store.pending_days())
        # A change of the settings (the terms, the privacy settings) takes effect now, whatever there is to read:
        # the same recompute as a run's, of no day unless one is pending.
        store.set_privacy(self.config.min_cell_size, self.config.privacy)
        publication.recompute(store, days, record_keys=self._record_keys, config=self.config, now=self.now,
                              enrolments=source.enrolments)
        store.clear_pending_days()
        identity.record_terms(store, self.config, meta)
        store.close_periods(period_publication.cutoff(self.config, self.now))  # a week may have ended since
        row = self.report.row(self.now)
        freshness.record(store, self.config, now=self.now, finished=instants.from_cursor(row["finished_at"]),
                         read_to_now=self.request.kind != BACKFILL, axis=source.axis,
                         watermark=source.axis.parse(meta["watermark"]) if meta.get("watermark") else None)
        store.record_run(row)
        with self.stop.commit():
            store.commit()
        after_commit.remember(self.config, key)  # a note lost with a run killed after its commit

    def stage(self, store, source, window, *, horizon):
        """Stage the window's batches inside the run's transaction; return the local days they touched."""
        report, now_text, days = self.report, instants.to_cursor(self.now), set()
        source.restore(store.source_state_of)
        store.begin_staging()
        for batch in source.batches(window):
            held = retention.hold_back(batch, horizon)  # days whose staged events were dropped stay closed
            report.closed += len(held)
            days |= store.stage(batch.events, batch.voids, batch.names, rejected=held)
            quarantined = batch.quarantined + conflict_records(store.take_conflicts())
            if quarantined:
                again = store.quarantine(report.run_id, quarantined, now_text, redactor=self._redactor)
                report.count_quarantined(quarantined, again=again)
                room = QUARANTINE_KEPT_ON_FAILURE - len(self._kept)
                self._kept.extend(quarantined[:max(room, 0)])
            store.save_source_state(batch.state)
            report.statements_read += batch.read
            report.staged += len(batch.events) - (len(quarantined) - len(batch.quarantined))
            report.voided += len(batch.voids)
            self.progress(f"Read {report.statements_read} statements in the window, {report.quarantined} quarantined")
            faults.point("batch-staged")
        store.record_names(source.standing_names())
        store.record_categories(category_mapping.standing_tree(self.config, source, store))
        days |= store.finish_staging()
        self.report.refuse_past_share(self.config.max_quarantine_share, accept=self.request.accept_bad_input)
        return days

    def recompute(self, store, window, days, *, horizon, enrolments=None):
        """Rebuild every affected daily partition (after retention) from all of its staged events."""
        report = self.report
        days.update(window.local_days(self.config.timezone))
        days |= store.pending_days()
        days = retention.apply(store, self.config, self.now, horizon=horizon, days=days)
        report.partitions = sorted(days)
        self.progress(f"Recomputing {len(days)} daily partitions", force=True)
        store.set_privacy(self.config.min_cell_size, self.config.privacy)
        faults.point("before-recompute")
        report.rows_written, report.suppressed = publication.recompute(store, days, record_keys=self._record_keys,
                                                                       config=self.config, now=self.now,
                                                                       enrolments=enrolments)
        store.clear_pending_days()
        faults.point("after-recompute")

    def commit(self, store, key, axis, *, watermark, window):
        """Commit the watermark, the store's identity and the run with its work (a dry run rolls back): True if so."""
        new_watermark = windows.next_watermark(watermark, window, self.request.kind != RUN, axis=axis)
        if new_watermark is not None:
            store.set_meta("watermark", axis.format(new_watermark))
            store.set_meta("cursor_kind", axis.name)
        identity.record(store, self.config, key)
        identity.record_terms(store, self.config, store.meta())
        row = self.report.row(self.now)
        freshness.record(store, self.config, now=self.now, finished=instants.from_cursor(row["finished_at"]),
                         read_to_now=self.request.kind != BACKFILL,
                         watermark=new_watermark if new_watermark is not None else watermark, axis=axis)
        store.record_run(row)
        if self.request.dry_run:
            store.rollback()
            return False
        faults.point("before-commit")
        with self.stop.commit():
            store.commit()
        faults.point("after-commit")
        after_commit.remember(self.config, key)
        return True

    def publish(self, store):
        after_commit.publish(self, store)  # the dashboards' copy, after the commit (see run/after_commit.py)

    def record_failure(self, store, error):
        """After a rollback, note the failed run (and what was quarantined) in its own transaction."""
        code, message = exit_status(error)
        self.report.outcome = "failed"
        try:
            store.begin()
            identity.follow_key(store, self._key_fingerprint)
            if self._kept:
                store.quarantine(self.report.run_id, self._kept, instants.to_cursor(self.now), redactor=self._redactor)
            store.record_run(self.report.row(self.now, code, message[:1000]))
            store.commit()
        except BaseException as failure:  # the store itself may be what failed; the run's own error is what matters
            store.rollback_quietly()
            logger.warning("Could not record the failed run in the store (%s: %s).", type(failure).__name__, failure)

    # -- how the phases are put together --

    def _locked(self):
        try:
            with self.open_store() as store:
                self._began = True
                self._settle(store)
                if self.stop.committed and not self.request.dry_run:
                    self.publish(store)
        finally:
            self.progress.done()

    def _settle(self, store):
        """Run the phases on `store`; a failure before the commit is rolled back, recorded and raised."""
        try:
            self._refresh(store)
        except BaseException as error:
            if self.stop.committed:
                if not isinstance(error, Exception):
                    raise
                logger.warning("The run committed, but tidying up after it failed (%s); the committed run stands.",
                               error)
                return
            store.rollback_quietly()  # a failing ROLLBACK must never replace the error that got us here
            domain = self._domain_error(error, store)
            if not self.request.dry_run:
                self.record_failure(store, domain)
            if domain is not error:
                raise domain from error
            raise

    def _domain_error(self, error, store=None):
        """Return the domain error `error` means (a driver's, a full disk's, a thread the system refused), or
        `error`; an OSError without a file name is the store's disk, or before the store the state directory's
        (lock file, key, new store)."""
        if isinstance(error, RefreshError) or not isinstance(error, Exception):
            return error
        domain = store.translate(error) if store is not None else None
        if domain is None and isinstance(error, OSError):
            where = error.filename or (store.describe() if store is not None else self.config.state_directory)
            domain = from_os_error(error, where)
        return domain or from_thread_error(error, "a thread") or error

    def _refresh(self, store):
        meta = store.meta()
        key = self.check_state(store, meta)
        try:
            self._read(store, meta, key)
        except StageAgain as again:  # rare: the run is read again, with a new source, into the same store
            store.rollback()
            logger.info("Staging again, with the index on statement ids kept up throughout: %s.", again,
                        extra={"RUN_ID": self.report.run_id})
            self.report.restart()
            self._kept.clear()
            self._read(store, meta, key)

    def _read(self, store, meta, key):
        source = build_source(self.config, Pseudonymiser(key), self.environ, now=self.now,
                              record_keys=self._record_keys)  # the events' record keys are computed as they are mapped
        try:
            watermark, window = self.choose_window(meta, source)
            if window.empty:
                self.nothing_to_do(store, meta, key, source)
                return
            self._transaction(store, source, key, watermark=watermark, window=window)
        finally:
            source.close()

    def _transaction(self, store, source, key, *, watermark, window):
        report = self.report
        logger.info("Refreshing %s from %s, window %s .. %s", store.describe(), source.describe(),
                    window.since_cursor, window.until_cursor, extra=logs.run_fields(logs.RUN_STARTED, report))
        self.progress(f"Reading {source.describe()}, window {window.since_cursor} .. {window.until_cursor}",
                      force=True)
        store.begin()
        identity.follow_key(store, self._key_fingerprint)
        horizon = retention.staging_horizon(self.config, retention.clock(self.now, store), store.meta())
        upgrade.begin(store, self._upgrade, window, run_id=report.run_id)  # nothing without an upgrade
        if self._upgrade is None and self.request.kind == REBUILD:  # closed days too stay as they were published
            identity.begin_rebuild(store, self.config, self.request.since, self._key_fingerprint, horizon=horizon,
                                   run_id=report.run_id)
        days = self.stage(store, source, window, horizon=horizon)
        upgrade.verify(store, self._upgrade, report)
        staged_at = time.monotonic()
        self.recompute(store, window, days, horizon=horizon, enrolments=source.enrolments)
        recomputed_at = time.monotonic()
        if self.commit(store, key, source.axis, watermark=watermark, window=window):
            logger.debug("Phases: pull and stage %.2f s, recompute %.2f s, commit %.2f s",
                         staged_at - report.started, recomputed_at - staged_at, time.monotonic() - recomputed_at)

    def _lock_held(self, holder):
        """Log the held lock for the timer's run (its next start does the work); return a backfill's or a rebuild's
        error."""
        self.report.outcome, self.report.lock_holder = "lock-held", holder
        if self.request.kind != RUN:
            return lock_held(holder, f"nothing was {UNDONE[self.request.kind]}", self.request.kind)
        logger.info("Another refresh holds the lock (held by %s); nothing to do.", holder,
                    extra=logs.run_fields(logs.LOCK_HELD, self.report))  # and returns None: no error
