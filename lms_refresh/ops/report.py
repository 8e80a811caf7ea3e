"""`report`: the HTML report of the SQLite publication, written on demand (a run writes it too).

The numbers come from the publication file alone (run/report_data.py); the freshness shown first is
what `status` reads and decides (ops/status.py, ops/monitoring.py's `staleness`), as of `now`.
"""

import logging
import os
import stat

from lms_refresh import instants
from lms_refresh.config import paths
from lms_refresh.errors import ConfigError
from lms_refresh.ops.monitoring import staleness
from lms_refresh.ops.status import collect_status
from lms_refresh.run import after_commit, report_html, report_page
from lms_refresh.run.report_data import local_today
from lms_refresh.state_directory import user_name

logger = logging.getLogger(__name__)


def freshness(config, environ, now):
    """Return the report's freshness ({"last_success", "watermark", "stale", "written", "timezone"}) as `status`
    sees it."""
    status = collect_status(config, environ)
    success = status["last_success"]
    return {"last_success": success and success["started_at"], "watermark": status["watermark"],
            "stale": staleness(status, now, config.timezone, grace=config.monitoring.grace,
                               shown=report_html.local_times(config.timezone)),  # as the page's other times
            "written": instants.to_cursor(now), "timezone": config.timezone}


def write_report(config, environ, now, output=None):
    """Write the report of `config`'s publication to `output` (default `[report] path`), readable like the
    publication; return (the path written, the freshness shown)."""
    if config.store.type != "sqlite":
        raise ConfigError("The report reads the SQLite publication; on a PostgreSQL store dashboards read the "
                          "serving views instead, and there is no file to report on.")
    path = config.publication.path
    if not os.path.exists(path):
        raise ConfigError(f"There is no publication at {path} yet: `lms-refresh run` writes it (and the report).")
    if output is not None:
        _refuse_collision(config, output)
    info = os.stat(path)
    shown = freshness(config, environ, now)
    target = output or config.report.path
    try:
        mode = stat.S_IMODE(info.st_mode)
        # The publication's group where others may not read the page the dashboards' web server serves; a page
        # written elsewhere (--output) is the operator's, with the group its directory gives.
        group = None if mode & stat.S_IROTH or output is not None else info.st_gid
        written = report_page.write_report(path, target, shown, today=local_today(now, config.timezone),
                                           mode=mode, group=group)
    except OSError as error:  # a full disk, a read-only file system, EIO: domain errors already (atomic.py)
        raise ConfigError(f"Cannot write the report {target} ({error.strerror or error}): its directory must exist "
                          f"and be writable by '{user_name(os.geteuid())}'; nothing else was changed.") from error
    if written == report_page.maintained_page(config):  # the runs' page, not a copy asked for elsewhere (--output)
        report_page.remember_page(config, written)
    return written, shown


def _refuse_collision(config, output):
    """Raise ConfigError if `output` is a file the configuration names for something else (the key, the store, the
    publication, an export file...): the page would replace it, as a run's report.path is refused (config/paths.py).
    A name with a control character is refused first, as a configured path is: it is shown in every sentence."""
    if not output.isprintable():
        raise ConfigError(f"--output must not contain control or format characters: {output[:100]!r} (a newline "
                          "would start a forged line in every message naming it).")
    own = {path.key for path in paths.report_paths("report.path", config.report.path)}
    named = [path for path in paths.named_paths(config) if path.key not in own]  # its own files are fine
    found = paths.collision([*named, *paths.report_paths("--output", output)])
    if not found and paths.inside_state_directory(config, output):
        # The run's own files there are not all configured paths (the note of a run in progress, which the
        # catch-up timer reads), and no dashboard may read that directory anyway.
        found = (f"'--output' ({output}) lies inside 'state_directory' ({config.state_directory}), which holds the "
                 "run's own files and which only the service user may read; write the report elsewhere.")
    if found:
        raise ConfigError(f"Refusing to write the report there: {found}")


def rewrite_after(config, environ, now, command):
    """After `command` committed a change of the publication outside a run (`forget`): write the report again, as
    a run would, with the freshness `status` sees (the change is no refresh); a failure is a warning, never the
    command's, and a store with no report (PostgreSQL, disabled, nothing published yet) is left alone."""
    if config.store.type != "sqlite" or not config.report.enabled or not os.path.exists(config.publication.path):
        return None
    try:
        written = write_report(config, environ, now)[0]
    except Exception as error:  # the publication, the dashboards' data, stands
        logger.warning("Could not write the HTML report %s after %s (%s: %s); the publication stands.",
                       config.report.path, command, type(error).__name__, error, extra={"REPORT": config.report.path})
        after_commit.note_report_failure(config, {"path": config.report.path, "run_id": None,
                                                  "at": instants.to_cursor(now),
                                                  "message": f"{type(error).__name__}: {error}"})
        return None
    after_commit.note_report_failure(config, None)
    return written
