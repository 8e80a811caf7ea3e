"""What a run does once its work is committed: note which store the key built, and publish.

Neither may undo the commit. The note is best effort (the next run writes it
again); a failed publication fails the command, with a sentence that says the
store is committed, and is recorded in the run's own row of the run log.
"""

import logging

from lms_refresh.errors import RefreshError, exit_status
from lms_refresh.run import identity
from lms_refresh.run.publication import publish_if_behind

logger = logging.getLogger(__name__)


def remember(config, key):
    """Note in the state directory which store the key built (see run/identity.py); the run stands without it."""
    try:
        identity.remember_store(config, key)
    except (OSError, RefreshError) as error:  # the next run writes the note again
        logger.warning("Could not note the store in %s (%s).", identity.marker_path(config), error)


def publish(refresh, store):
    """Bring the dashboards' copy up to date for `refresh` (see run/publication.py); on failure,
    record the run as publish-failed with the exit status and sentence, and raise."""
    try:
        publish_if_behind(refresh.config, store, refresh.euid)
    except RefreshError as error:  # its sentence says the store is committed
        refresh.report.outcome = "publish-failed"
        code, message = exit_status(error)
        try:
            _replace_run(store, refresh.report.row(refresh.now, code, message[:1000]))
        except BaseException as unrecorded:  # the store's disk may be what is full
            store.rollback_quietly()
            logger.warning("Could not record the failed publication in the store (%s: %s).",
                           type(unrecorded).__name__, unrecorded)
        raise


def _replace_run(store, run):
    """Replace the run log's row of the committed run by `run`, in a transaction of its own."""
    store.begin()
    store.execute("DELETE FROM runs WHERE run_id = ?", (run["run_id"],))
    store.record_run(run)
    store.commit()
