"""The commands that change the store under the run lock: `run` (the timer's), `backfill`, `rebuild`, `watermark set`
and `copy-store`."""

import logging
import os

import click

from lms_refresh import errors, logs
from lms_refresh.cli.invocation import UserTime, failed, user_time
from lms_refresh.disclosure import redaction
from lms_refresh.logs import Progress
from lms_refresh.ops.job import run_job
from lms_refresh.run.refresh import Refresh
from lms_refresh.run.request import BACKFILL, REBUILD, RUN, Request

logger = logging.getLogger("lms_refresh")


# Applies a configuration that protects the publication less than the store's settings in force.
_weaker_option = click.option(
    "--accept-weaker-privacy", is_flag=True,
    help="Apply a min_cell_size or [privacy] that protects less than the settings in force (refused with 78 "
         "otherwise); logged.")
# Commits a window although more than max_quarantine_share of its records were malformed (they stay quarantined).
_bad_input_option = click.option(
    "--accept-bad-input", is_flag=True,
    help="Commit although more than max_quarantine_share of the window's records were malformed (exit 65 "
         "otherwise); they stay quarantined; logged.")


def _do_refresh(settings, kind, dry_run, *, since=None, until=None, weaker=False, bad_input=False):
    """Run one refresh of `kind` (SINCE and UNTIL as typed, in the configured time zone); return its exit code.

    Any error of the run (a configuration error too) is logged as its run-failed journal record.
    """
    report = None
    try:
        config = settings.config()
        request = Request(kind, user_time(since, config, "--since"), user_time(until, config, "--until"), dry_run,
                          accept_weaker_privacy=weaker, accept_bad_input=bad_input)
        report, error = run_job(Refresh(config, request, settings.now, os.environ, os.geteuid(),
                                        Progress(os.environ, scrub=redaction.scrub_text)))
    except click.ClickException:
        raise
    except (Exception, errors.Terminated) as raised:  # before the job has an outcome: the configuration, the
        error = raised  # options, or a stop that lands in a ping (the job's own work around the runs)
    if error is not None:
        if not isinstance(error, (Exception, errors.Terminated)):
            raise error  # ^C: click's own "Aborted."
        held = report is not None and report.outcome == "lock-held"  # a backfill or rebuild: 69
        return failed(error, logs.run_fields(logs.LOCK_HELD if held else logs.RUN_FAILED, report),
                      committed=settings.stop.committed)
    if report.outcome == "success":
        logger.info(
            "%s: read %s, staged %d, voided %d, quarantined %d; rebuilt %s (%s, %s).",
            "Dry run (nothing written)" if dry_run else "Rebuild committed" if kind == REBUILD else "Refresh committed",
            logs.counted(report.statements_read, "statement"), report.staged, report.voided, report.quarantined,
            logs.counted(len(report.partitions), "partition"), logs.counted(report.rows_written, "row"),
            logs.counted(report.suppressed, "suppressed cell"),
            extra=logs.run_fields(logs.DRY_RUN_FINISHED if dry_run else logs.RUN_FINISHED, report),
        )
    if dry_run:
        window = report.window
        click.echo(f"window:      {window.since_cursor} .. {window.until_cursor}" if window else "window:      -")
        click.echo(f"outcome:     {report.outcome}")
        click.echo(f"read:        {logs.counted(report.statements_read, 'statement')} ({report.quarantined} would be "
                   "quarantined)")
        click.echo(f"partitions:  {', '.join(report.partitions) or '-'}")
        click.echo(f"would write: {logs.counted(report.rows_written, 'metric row')}, {report.suppressed} suppressed")
    return errors.OK


@click.command()
@click.option("--dry-run", is_flag=True, help="Show the window, partitions and row counts; write nothing.")
@_weaker_option
@_bad_input_option
@click.pass_obj
def run(settings, dry_run, *, accept_weaker_privacy, accept_bad_input):
    """Refresh from the last successful run's watermark to now (the timer's entrypoint).

    Example: lms-refresh run --dry-run
    """
    return _do_refresh(settings, RUN, dry_run, weaker=accept_weaker_privacy, bad_input=accept_bad_input)


@click.command()
@click.option("--since", required=True, type=UserTime(), help="Start (inclusive): ISO date or datetime.")
@click.option("--until", required=True, type=UserTime(), help="End (exclusive): ISO date or datetime.")
@click.option("--dry-run", is_flag=True, help="Show what would be done; write nothing.")
@_weaker_option
@_bad_input_option
@click.pass_obj
def backfill(settings, since, until, *, dry_run, accept_weaker_privacy, accept_bad_input):
    """Refresh an explicit window of arrival times [SINCE, UNTIL).

    Dates mean local midnight and datetimes without an offset are local time,
    in the configured time zone. The watermark never moves backwards; it moves
    forward only if the window starts at or before it (no gap is skipped).

    Example: lms-refresh backfill --since 2026-09-01 --until 2026-10-01
    """
    return _do_refresh(settings, BACKFILL, dry_run, since=since, until=until, weaker=accept_weaker_privacy,
                       bad_input=accept_bad_input)


@click.command()
@click.option("--since", required=True, type=UserTime(), help="Re-read the source from here: ISO date or datetime.")
@click.option("--dry-run", is_flag=True, help="Show what the rebuilt store would hold; write nothing.")
@_weaker_option
@_bad_input_option
@click.pass_obj
def rebuild(settings, since, *, dry_run, accept_weaker_privacy, accept_bad_input):
    """Start the store's derived data over from the source, from SINCE to now.

    The way to apply a change the store refuses (time zone, course_pattern,
    site_url, the key), and to re-create history after the store was lost. In
    one transaction it empties what the store derived from SINCE's day on,
    re-reads the source from SINCE and records the configuration's identity;
    the days before SINCE stay as they are, so the weeks, months and terms
    that hold SINCE stay whole (a rebuild that applies a changed setting must
    start at the store's first day). The run log and the quarantine stay.
    Run it as the service user, like backfill.

    Example: lms-refresh rebuild --since 2026-09-01
    """
    return _do_refresh(settings, REBUILD, dry_run, since=since, weaker=accept_weaker_privacy,
                       bad_input=accept_bad_input)


@click.command("copy-store")
@click.option("--from-sqlite", "path", required=True, type=click.Path(dir_okay=False),
              help="The SQLite store file whose history to copy.")
@click.pass_obj
def copy_store(settings, path):
    """Copy a SQLite store's whole history into the configured, empty PostgreSQL store.

    For a move from SQLite to PostgreSQL: set [store] type = "postgresql"
    (and its url), then copy the old store before the next run. Staged
    events, metrics, published rows, run log, quarantine, watermark and the
    store's identity go in one transaction, under the run lock; a target that
    holds anything is refused. The old publication file is removed (the view
    in <schema>_serving is the publication now); the old store file is left.

    Example: lms-refresh copy-store --from-sqlite /var/lib/lms-refresh/metrics.sqlite
    """
    from lms_refresh.run.store_copy import copy_from_sqlite

    config = settings.config()
    report = copy_from_sqlite(config, path, environ=os.environ, euid=os.geteuid())
    rows = report.rows
    click.echo(f"copied:      {logs.counted(rows['staged_events'], 'staged event')}, "
               f"{logs.counted(rows['daily_metrics'], 'metric row')}, "
               f"{logs.counted(rows['published_metrics'], 'published row')}, {logs.counted(rows['runs'], 'run')}, "
               f"{logs.counted(rows['quarantine'], 'quarantined record')} into {config.store_location}")
    click.echo(f"watermark:   {report.watermark or 'none'} (the next run reads on from there)")
    what = {"removed": "removed", "absent": "none there",
            "kept": "kept: it is not a publication lms-refresh wrote"}[report.publication]
    click.echo(f"publication: {config.publication.path} {what}; dashboards read "
               f"{config.store.schema}_serving.daily_metrics now (lms-refresh grant-reader ROLE)")
    click.echo(f"old store:   {path} is left as it was; remove it once the PostgreSQL store serves")
    return errors.OK


@click.group()
def watermark():
    """Inspect or move the store's watermark (see 'watermark set').

    Example: lms-refresh watermark set 2026-11-02T04:00
    """


@watermark.command("set")
@click.argument("value", metavar="TIME")
@click.pass_obj
def watermark_set(settings, value):
    """Set the watermark to TIME (a log id for a Moodle source), e.g. after a clock glitch.

    A date means local midnight and a datetime without an offset is local time
    in the configured time zone. The next run reads from there: what it reads
    twice counts once. Takes the run lock; run it as the service user.

    Example: lms-refresh watermark set 2026-11-02T04:00
    """
    from lms_refresh.run.watermark import set_watermark

    old, new = set_watermark(settings.config(), settings.now, os.environ, euid=os.geteuid(), text=value)
    logger.warning("Watermark set from %s to %s; the next run reads from there.", old or "none", new)
    click.echo(f"watermark: {old or 'none'} -> {new}")
    return errors.OK
