"""What a run does once its work is committed: note which store the key built, publish, write the report.

None may undo the commit. The note is best effort (the next run writes it
again); a failed publication fails the command, with a sentence that says the
store is committed, and is recorded in the run's own row of the run log. The
HTML report is best effort too: a failure to write it is a warning, and it is
noted in the state directory (`report-failed`, removed by the next run that
writes the page) for `check`, `status`, `status --check` and the textfile.
"""

import json
import logging
import os
import stat

from lms_refresh import atomic, instants
from lms_refresh.errors import RefreshError, exit_status
from lms_refresh.run import identity, report_html, report_page
from lms_refresh.run.freshness import staleness
from lms_refresh.run.publication import publish_if_behind
from lms_refresh.run.report_data import local_today
from lms_refresh.state_directory import REPORT_FAILED

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
        note_report_failure(config, None)  # no page is asked for any more: none is missing
        return None
    try:
        info = os.stat(config.publication.path)
        success = store.last_runs()[1]
        freshness = {
            "last_success": success and success["started_at"], "watermark": store.meta().get("watermark"),
            "written": instants.to_cursor(refresh.now),
            # The rule of `status --check`, as of this run: a backfill's success is no refresh, so its page is
            # as fresh as the last run's or rebuild's (never stale merely because a backfill wrote it).
            "stale": staleness(success, refresh.now, config.timezone, grace=config.monitoring.grace,
                               shown=report_html.local_times(config.timezone)),
            "timezone": config.timezone,
        }
        mode = stat.S_IMODE(info.st_mode)
        written = report_page.write_report(config.publication.path, config.report.path, freshness,
                                           today=local_today(refresh.now, config.timezone), mode=mode,
                                           # the publication's group only when others may not read the page
                                           group=None if mode & stat.S_IROTH else info.st_gid)
        report_page.remember_page(config, written)
    except Exception as error:  # never the run's failure: the publication, the dashboards' data, stands
        logger.warning("Could not write the HTML report %s (%s: %s); the publication stands.", config.report.path,
                       type(error).__name__, error, extra={"REPORT": config.report.path})
        note_report_failure(config, {"path": config.report.path, "run_id": refresh.report.run_id,
                                      "at": instants.to_cursor(refresh.now),
                                      "message": f"{type(error).__name__}: {error}"})
        return None
    note_report_failure(config, None)
    return written


def report_failure(config):
    """Return what the last run noted of the HTML report it could not write ({path, run_id, at, message}), or None
    if it wrote the page (or none was asked for). A note that cannot be read is said as such."""
    try:
        with open(os.path.join(config.state_directory, REPORT_FAILED), encoding="utf-8") as handle:
            note = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        return {"path": config.report.path, "run_id": None, "at": None,
                "message": f"the note {REPORT_FAILED} in the state directory is unreadable ({error})"}
    return note if isinstance(note, dict) else {"path": config.report.path, "run_id": None, "at": None,
                                                "message": f"the note {REPORT_FAILED} is damaged"}


def note_report_failure(config, note):
    """Write (or, for None, remove) the state directory's note of the report that could not be written."""
    path = os.path.join(config.state_directory, REPORT_FAILED)
    try:
        if note is None:
            if os.path.lexists(path):
                os.unlink(path)
        else:
            atomic.replace_bytes(path, (json.dumps(note, sort_keys=True) + "\n").encode(), mode=0o640)
    except (OSError, RefreshError) as error:  # the run's warning above already says the page is missing
        logger.warning("Could not note in %s whether the report was written (%s).", path, error)


def _replace_run(store, run):
    """Replace the run log's row of the committed run by `run`, in a transaction of its own."""
    store.begin()
    store.execute("DELETE FROM runs WHERE run_id = ?", (run["run_id"],))
    store.record_run(run)
    store.commit()
