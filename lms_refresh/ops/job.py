"""A refresh as a scheduled job: the refresh itself plus what tells people about it.

Healthchecks pings bracket a scheduled run, and every run that got past the
lock leaves a Prometheus textfile. Neither may change the run's exit status.

The job only reads each attempt's `Outcome` (Refresh.run never raises, see
run/refresh.py): whether to retry, what to ping, what the textfile says. A
stop (or ^C) during the pause between attempts becomes the job's Outcome,
without a report, since no run was under way; the pings themselves only
raise what the stop policy raises into them.
"""

import dataclasses
import datetime as dt
import errno
import logging
import os
import time

from lms_refresh import logs
from lms_refresh.errors import ConfigError, RefreshError, Terminated, UnavailableError, exit_status
from lms_refresh.ops import trigger
from lms_refresh.ops.interruption import Marker
from lms_refresh.ops.monitoring import Healthchecks, metrics_text, read_previous, read_url, staleness, write_textfile
from lms_refresh.ops.status import collect_status
from lms_refresh.run import stopping
from lms_refresh.run.report import Outcome

logger = logging.getLogger(__name__)


def _pings(config, environ, enabled):
    if not enabled or not config.alerts.healthchecks_url_file:
        return Healthchecks(None, 0)
    try:
        return Healthchecks(read_url(config.alerts.healthchecks_url_file, environ, "alerts.healthchecks_url_file"),
                            config.alerts.timeout)
    except ConfigError as error:  # a bad ping URL never stops a run
        logger.warning("Healthchecks pings are off for this run: %s", error)
        return Healthchecks(None, 0)


def _write_metrics(config, environ, now, *, exit_code, duration, report):
    path = config.monitoring.textfile
    if not path:
        return
    try:
        try:
            status = collect_status(config, environ)
        except RefreshError:
            status = None  # a damaged store: keep what the previous file said
        text = metrics_text(now, exit_code, duration, report=report, status=status, previous=read_previous(path))
        write_textfile(path, text)
    except (OSError, RefreshError) as error:  # the disk, a quota, the mode: never the run's exit status
        cause = error.__cause__ if isinstance(error, RefreshError) else error
        hint = ""
        # The unit's ProtectSystem=strict: only listed paths are writable.
        if getattr(cause, "errno", None) == errno.EROFS:
            hint = (f"; the service may write only where it is told to: add 'ReadWritePaths={os.path.dirname(path)}' "
                    "to a drop-in (systemctl edit lms-refresh.service)")
            error = cause  # not "remount it": under ProtectSystem=strict the hint is the way out
        logger.warning("Could not write the metrics textfile %s: %s%s", path, error, hint)


def _stale(refresh):
    """Return why the data is stale for the schedule as of the run's `now` (monitoring.staleness), or None: also
    when the store cannot be read, which is no news of its freshness."""
    config = refresh.config
    try:
        return staleness(collect_status(config, refresh.environ), refresh.now, config.timezone,
                         grace=config.monitoring.grace)
    except (RefreshError, OSError) as error:
        logger.debug("Could not read the store's last success after finding the lock held: %s", error)
        return None


def run_job(refresh, sleep=time.sleep, clock=time.monotonic):
    """Run `refresh` (a Refresh) with retries, pings for scheduled runs and the textfile for real ones;
    return the Outcome (report, error) of its last attempt."""
    request = refresh.request
    if refresh.config.unused:  # once a job, not once an attempt: the journal says it where `check` is not run
        logger.warning("%s", refresh.config.unused_keys_sentence())
    pings = _pings(refresh.config, refresh.environ, enabled=request.scheduled)
    began = clock()
    pings.start()
    marker = Marker(refresh.config.state_directory, refresh.report.run_id, refresh.now)
    if request.scheduled:
        with stopping.held_back():  # a stop as it is written finds it written: the run is caught up at boot
            marker.begin()
    with stopping.installed():  # the process's policy (see run/stopping.py); it also covers the pauses
        outcome = _refresh_with_retries(refresh, sleep, clock)
    marker.end(stopped=isinstance(outcome.error, Terminated))
    report = outcome.report
    if not request.dry_run and report is not None and report.quarantined:
        logger.warning("%d of %d records in the window were quarantined (see the store's quarantine table).",
                       report.quarantined, report.statements_read, extra=logs.run_fields(logs.QUARANTINE, report))
    lock_held = report is not None and report.outcome == "lock-held"
    if not request.dry_run:
        code, message = exit_status(outcome.error)
        stale = _stale(refresh) if lock_held and request.scheduled else None
        if stale:
            # The lock has been held for longer than the schedule allows (a run that never ends, a lock that is
            # not a run's): exit 0 is the contract for a held lock, but a success ping would hide that nothing has
            # been refreshed since.
            pings.fail(f"Another refresh holds the lock (held by {report.lock_holder}) and the data is stale: "
                       f"{stale}.")
        else:
            # A /start left without its finish is a failure to Healthchecks once its grace time is over: the run
            # that found the lock held ends as it exits, with 0.
            pings.finish(code, message)
        if not lock_held:
            _write_metrics(refresh.config, refresh.environ, refresh.now, exit_code=code,
                           duration=clock() - began, report=report)
    return outcome


def retried(request, environ, started_by=trigger.timer_started):
    """Whether an unreachable source or store (69) is retried per [retry]: only for a scheduled run that a
    timer started (lms-refresh.timer, lms-refresh-catch-up.timer: see ops/trigger.py for how that is told),
    or at a terminal, where each retry is a line on stderr.

    A `systemctl start lms-refresh.service` by hand waits for the run to end and shows nothing
    meanwhile, so it fails fast (69) rather than block for the retries' 20 minutes in silence."""
    if not request.scheduled:
        return False
    if not logs.under_systemd(environ):
        return True
    timer, unknown = started_by(environ)
    if unknown:
        logger.info("Could not tell whether a timer started this run (%s): it is taken for a start by hand.", unknown)
    return timer is not None


def _refresh_with_retries(refresh, sleep, clock):
    """Run `refresh`, and again after a pause while the source or store is unreachable (scheduled runs only).

    The retries happen inside the one service start, so systemd's start rate
    limit never counts them and the unit's final exit status stays the real one.
    """
    attempts = refresh.config.retry.attempts if retried(refresh.request, refresh.environ) else 1
    if refresh.request.scheduled and attempts == 1 and refresh.config.retry.attempts > 1:
        logger.info("Started by hand (systemctl start), not by a timer: an unreachable source or store fails "
                    "at once instead of being retried per [retry].")
    began = clock()
    attempt = refresh
    for number in range(1, attempts + 1):
        outcome = attempt.run()
        if number == attempts or not isinstance(outcome.error, UnavailableError):
            return outcome
        try:
            _pause(refresh, outcome.error, number, attempts=attempts, sleep=sleep)
            # A new run (its own id and report) that reads up to its own "now", so it misses nothing.
            attempt = dataclasses.replace(refresh, now=refresh.now + dt.timedelta(seconds=clock() - began))
        except (Exception, Terminated, KeyboardInterrupt) as error:  # a stop (143) while it waited to retry
            return Outcome(None, error)


def _pause(refresh, error, number, *, attempts, sleep):
    """Say that attempt `number` of `attempts` ended with `error` and wait [retry] delay seconds."""
    delay, (code, message) = refresh.config.retry.delay, exit_status(error)
    logger.warning("%s Retrying in %d s (attempt %d of %d).", message, delay, number + 1, attempts,
                   extra=logs.fields(logs.RUN_RETRYING, RETRY_ATTEMPT=number + 1, EXIT_STATUS=code))
    refresh.progress(f"Unreachable; attempt {number + 1} of {attempts} in {delay} s", force=True)
    with stopping.installed() as stop:
        # The attempt before may have committed (its publication then failed): a stop must still end the pause at
        # once, not wait it out as a stop after a commit waits for the command's end (systemd would kill it).
        committed = stop.committed
        stop.begin()
        kept = "what the attempt before committed stands, and the next run publishes it." if committed else \
            "nothing was committed."
        with stop.during(f"Stopped by SIGTERM while waiting to retry, between attempts: nothing was under way and "
                         f"{kept}"):
            sleep(delay)  # a stop meanwhile: the stop policy raises Terminated
