"""A refresh as a scheduled job: the refresh itself plus what tells people about it.

Healthchecks pings bracket a scheduled run, and every run that got past the
lock leaves a Prometheus textfile. Neither may change the run's exit status.
"""

import contextlib
import datetime as dt
import errno
import logging
import os
import time

from lms_refresh import logs
from lms_refresh.errors import ConfigError, RefreshError, UnavailableError
from lms_refresh.credentials import read_secret
from lms_refresh.monitoring import Healthchecks, metrics_text, read_previous, write_textfile
from lms_refresh import stopping
from lms_refresh.refresh import refresh
from lms_refresh.status import collect_status

logger = logging.getLogger(__name__)


def _pings(config, environ, enabled):
    if not enabled or not config.alerts.healthchecks_url_file:
        return Healthchecks(None, 0)
    try:
        return Healthchecks(read_secret(config.alerts.healthchecks_url_file, environ), config.alerts.timeout)
    except ConfigError as error:
        logger.warning("Healthchecks pings are off for this run: %s", error)
        return Healthchecks(None, 0)


def _write_metrics(config, environ, now, exit_code, duration, report):
    path = config.monitoring.textfile
    if not path:
        return
    try:
        try:
            status = collect_status(config, environ)
        except RefreshError:
            status = None  # a damaged store: keep what the previous file said
        write_textfile(path, metrics_text(now, exit_code, duration, report, status, read_previous(path)))
    except OSError as error:
        hint = ""
        if error.errno == errno.EROFS:  # the unit's ProtectSystem=strict: only listed paths are writable
            hint = (f"; the service may write only where it is told to: add 'ReadWritePaths={os.path.dirname(path)}' "
                    "to a drop-in (systemctl edit lms-refresh.service)")
        logger.warning("Could not write the metrics textfile %s: %s%s", path, error, hint)


def _refresh_with_retries(config, now, environ, euid, progress, since, until, dry_run, rebuild, sleep, clock, stop):
    """refresh(), retried after a pause while the source or store is unreachable (scheduled runs only).

    The retries happen inside the one service start, so systemd's start rate
    limit never counts them and the unit's final exit status stays the real one.
    """
    attempts = config.retry.attempts if since is None and not dry_run and not rebuild else 1
    began = clock()
    for attempt in range(1, attempts + 1):
        try:
            # A retry reads up to its own "now", so a late success misses nothing.
            moment = now if attempt == 1 else now + dt.timedelta(seconds=clock() - began)
            return refresh(config, moment, environ, euid, progress, since=since, until=until, dry_run=dry_run,
                           rebuild=rebuild, stop=stop)
        except UnavailableError as error:
            if attempt == attempts:
                raise
            delay = config.retry.delay
            logger.warning("%s Retrying in %d s (attempt %d of %d).", error, delay, attempt + 1, attempts,
                           extra=logs.fields(logs.RUN_RETRYING, RETRY_ATTEMPT=attempt + 1, EXIT_STATUS=error.exit_code))
            progress(f"Unreachable; attempt {attempt + 1} of {attempts} in {delay} s", force=True)
            sleep(delay)  # a stop meanwhile ends the run with 143 (the stop policy raises)


def run_job(config, now, environ, euid, progress, since=None, until=None, dry_run=False, rebuild=False,
            sleep=time.sleep, clock=time.monotonic, stop=None):
    """Run refresh() (same arguments) with retries, pings for scheduled runs and the textfile for real ones."""
    with contextlib.nullcontext(stop) if stop else stopping.installed() as stop:
        return _job(config, now, environ, euid, progress, since, until, dry_run, rebuild, sleep, clock, stop)


def _job(config, now, environ, euid, progress, since, until, dry_run, rebuild, sleep, clock, stop):
    pings = _pings(config, environ, enabled=since is None and not dry_run and not rebuild)
    began = clock()
    pings.start()
    report, code, message = None, 0, ""
    try:
        report = _refresh_with_retries(config, now, environ, euid, progress, since, until, dry_run, rebuild,
                                       sleep, clock, stop)
        return report
    except BaseException as error:
        code = getattr(error, "exit_code", 130 if isinstance(error, KeyboardInterrupt) else 1)
        message = str(error) if isinstance(error, RefreshError) else f"{type(error).__name__}: {error}"
        report = getattr(error, "report", None)
        raise
    finally:
        if not dry_run and report is not None and report.quarantined:
            logger.warning("%d of %d records in the window were quarantined (see the store's quarantine table).",
                           report.quarantined, report.statements_read,
                           extra=logs.run_fields(logs.QUARANTINE, report))
        if not dry_run and not (report is not None and report.outcome == "lock-held"):
            pings.finish(code, message)
            _write_metrics(config, environ, now, code, clock() - began, report)
