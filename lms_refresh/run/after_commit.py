"""What a run does once its work is committed: note which store the key built, publish, write the report.

None may undo the commit. The note is best effort (the next run writes it
again); a failed publication fails the command, with a sentence that says the
store is committed, and is recorded in the run's own row of the run log. The
HTML report is best effort too: a failure to write it is a warning.
"""

import logging
import os
import stat

from lms_refresh import instants
from lms_refresh.errors import RefreshError, exit_status
from lms_refresh.run import identity, report_page
from lms_refresh.run.freshness import staleness
from lms_refresh.run.publication import publish_if_behind
from lms_refresh.run.report_data import local_today

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
    write_report(refresh, store)


def write_report(refresh, store):
    """Write the HTML report of the SQLite publication beside it (`[report] path`), with the publication's
    mode and group, unless `[report] enabled` is false; a failure is logged as a warning, never raised.
    Return the report's path, or None if none was written."""
    config = refresh.config
    report_page.retire_page(config)  # a page the configuration no longer has the runs write
    if report_page.maintained_page(config) is None:
        return None
    try:
        info = os.stat(config.publication.path)
        success = store.last_runs()[1]
        freshness = {
            "last_success": success and success["started_at"], "watermark": store.meta().get("watermark"),
            "written": instants.to_cursor(refresh.now),
            # The rule of `status --check`, as of this run: a backfill's success is no refresh, so its page is
            # as fresh as the last run's or rebuild's (never stale merely because a backfill wrote it).
            "stale": staleness(success, refresh.now, config.timezone, grace=config.monitoring.grace),
            "note": None if success is not None and success["run_id"] == refresh.report.run_id else (
                f"This page was written after a {refresh.report.kind}, which refreshes no new data: its freshness "
                "is that of the last successful refresh (a run or a rebuild)."),
        }
        written = report_page.write_report(config.publication.path, config.report.path, freshness,
                                           today=local_today(refresh.now, config.timezone),
                                           mode=stat.S_IMODE(info.st_mode), group=info.st_gid)
        report_page.remember_page(config, written)
        return written
    except Exception as error:  # never the run's failure: the publication, the dashboards' data, stands
        logger.warning("Could not write the HTML report %s (%s: %s); the publication stands.", config.report.path,
                       type(error).__name__, error, extra={"REPORT": config.report.path})
        return None


def _replace_run(store, run):
    """Replace the run log's row of the committed run by `run`, in a transaction of its own."""
    store.begin()
    store.execute("DELETE FROM runs WHERE run_id = ?", (run["run_id"],))
    store.record_run(run)
    store.commit()
