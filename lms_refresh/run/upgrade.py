"""An upgrade of lms-refresh that maps xAPI statements by a newer version, applied by the first run after it.

A store built under an older statement mapping holds numbers of the old rules. Where the source
still holds everything the store was built from, the first `run` after the upgrade rebuilds the
store from it — under the run's lock, in its one transaction, logged — and commits only if the
re-read found every statement the store held again (staged anew, voided, or quarantined under
the new rules). Where it cannot, the run exits 78 saying what an operator must do, as
debian/NEWS does.
"""

import logging

from lms_refresh.errors import StateError
from lms_refresh.instants import from_cursor
from lms_refresh.run import identity, retention

logger = logging.getLogger(__name__)

NEWS = "/usr/share/doc/lms-refresh/NEWS.Debian.gz"


def _refused(old, why):
    return StateError(
        f"The store's rows were derived by statement mapping version {old} but this lms-refresh maps statements "
        f"by version {identity.MAPPING_VERSION}, and {why}. Rebuild it from a date the source still holds with "
        f"{identity.REBUILD} (days before that date are then gone; see {NEWS}), or keep the previous lms-refresh.")


def plan(config, is_run, store, *, meta, has_events):
    """Return (the older mapping version, where to re-read from) when this `run` (`is_run`) rebuilds
    the store for the new mapping, None when there is nothing to upgrade, or raise StateError where
    the source alone cannot bring the store back."""
    old = identity.mapping_upgrade(config, meta, has_events)
    if old is None or not is_run:
        return None
    since = store.built_since()
    if meta.get(retention.HORIZON_KEY) or config.retention.staging_days is not None:
        raise _refused(old, "the store cannot be rebuilt automatically: its days before the staging horizon "
                            "([retention] staging_days) can no longer be rebuilt")
    if since is None:
        raise _refused(old, "the store cannot be rebuilt automatically: its run log does not say which windows "
                            "it was built from")
    return old, from_cursor(since, "window start")


def begin(store, planned, window, *, run_id):
    """In the run's transaction, before the store is emptied: say so, and note what it holds (`planned`:
    plan()'s answer; None does nothing)."""
    if planned is None:
        return
    logger.warning("Upgrading the store from statement mapping version %d to %d: rebuilding it from the source from "
                   "%s (the first window it was built from) in this run's transaction.", planned[0],
                   identity.MAPPING_VERSION, window.since_cursor, extra={"RUN_ID": run_id})
    store.keep_staged_ids()
    store.reset_derived()


def verify(store, planned, report):
    """After the re-read: every statement the store held must have been found again (None: no upgrade)."""
    if planned is None:
        return
    missing = store.missing_staged_ids()
    if missing > report.quarantined:
        raise _refused(planned[0], f"rebuilding it from the source from {report.window.since_cursor} found "
                                   f"{missing} of the statements it was built from no longer there; nothing was "
                                   "changed")
    logger.info("The upgrade's re-read found every statement the store was built from.",
                extra={"RUN_ID": report.run_id})
