"""The command line: parse options, call plain functions, map domain errors to exit codes.

This module is the only one that knows about click and process exit codes.
"""

import datetime as dt
import json
import logging
import os
import sys

import click

from lms_refresh import __version__, errors, faults, logs, redact, stopping
from lms_refresh.config import DEFAULT_CONFIG_PATH, load_config
from lms_refresh.logs import Progress, configure_logging
from lms_refresh.job import run_job
from lms_refresh.refresh import BACKFILL, REBUILD, RUN, Refresh, Request
from lms_refresh.monitoring import plugin_check, staleness
from lms_refresh.status import collect_status, format_status, run_checks
from lms_refresh.window import parse_user_time

logger = logging.getLogger("lms_refresh")


class Settings:
    def __init__(self, config_path, now, stop=None):
        self.config_path = config_path
        self.now = now
        self.stop = stop or stopping.StopPolicy()  # the process's SIGTERM policy (see lms_refresh.stopping)

    def config(self):
        return load_config(self.config_path, os.environ)


def _parse_now(ctx, param, value):
    if value is None:
        return dt.datetime.now(dt.timezone.utc)
    try:
        return parse_user_time(value, "UTC")
    except ValueError as error:
        raise click.BadParameter(str(error))


@click.group(
    epilog="Example: lms-refresh --config /etc/lms-refresh/config.toml run",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--config", "config_path", envvar="LMS_REFRESH_CONFIG", default=DEFAULT_CONFIG_PATH,
    show_default=True, help="TOML configuration file (also $LMS_REFRESH_CONFIG).",
)
@click.option("-v", "--verbose", count=True, help="More detail (repeat for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.")
@click.option("--now", callback=_parse_now, hidden=True, help="Pretend the current time is this (UTC; tests).")
@click.version_option(__version__, prog_name="lms-refresh")
@click.pass_context
def cli(ctx, config_path, verbose, quiet, now):
    """Keep an LMS metrics store fresh: pull new activity, recompute daily metrics, suppress small cells."""
    configure_logging(-1 if quiet else verbose, os.environ, scrub=redact.scrub_text)
    ctx.obj = Settings(config_path, now, stop=ctx.obj)


def _do_refresh(settings, kind, dry_run, since=None, until=None):
    """Run one refresh of `kind` (SINCE and UNTIL as typed, in the configured time zone); return its exit code.

    Any error of the run (a configuration error too) is logged as its run-failed journal record.
    """
    report = None
    try:
        config = settings.config()
        request = Request(kind, _user_time(since, config), _user_time(until, config), dry_run)
        report, error = run_job(Refresh(config, request, settings.now, os.environ, os.geteuid(),
                                        Progress(os.environ), settings.stop))
    except click.ClickException:
        raise
    except (Exception, errors.Terminated) as raised:
        error = raised
    if error is not None:
        if not isinstance(error, (Exception, errors.Terminated)):
            raise error  # ^C: click's own "Aborted."
        return _failed(error, logs.run_fields(logs.RUN_FAILED, report))
    if report.outcome == "success":
        logger.info(
            "%s: read %d statements, staged %d, voided %d, quarantined %d; rebuilt %d partitions "
            "(%d rows, %d suppressed cells).",
            "Dry run (nothing written)" if dry_run else "Rebuild committed" if kind == REBUILD else "Refresh committed",
            report.statements_read, report.staged, report.voided, report.quarantined,
            len(report.partitions), report.rows_written, report.suppressed,
            extra=logs.run_fields(logs.DRY_RUN_FINISHED if dry_run else logs.RUN_FINISHED, report),
        )
    if dry_run:
        window = report.window
        click.echo(f"window:      {window.since_cursor} .. {window.until_cursor}" if window else "window:      -")
        click.echo(f"outcome:     {report.outcome}")
        click.echo(f"read:        {report.statements_read} statements ({report.quarantined} would be quarantined)")
        click.echo(f"partitions:  {', '.join(report.partitions) or '-'}")
        click.echo(f"would write: {report.rows_written} metric rows, {report.suppressed} suppressed")
    return errors.OK


def _user_time(text, config):
    if text is None:
        return None
    try:
        return parse_user_time(text, config.timezone)
    except ValueError as error:
        raise click.BadParameter(str(error))


@cli.command()
@click.option("--dry-run", is_flag=True, help="Show the window, partitions and row counts; write nothing.")
@click.pass_obj
def run(settings, dry_run):
    """Refresh from the last successful run's watermark to now (the timer's entrypoint).

    Example: lms-refresh run --dry-run
    """
    return _do_refresh(settings, RUN, dry_run)


class UserTime(click.ParamType):
    name = "DATE|DATETIME"

    def convert(self, value, param, ctx):
        return value  # parsed once the configured time zone is known


@cli.command()
@click.option("--since", required=True, type=UserTime(), help="Start (inclusive): ISO date or datetime.")
@click.option("--until", required=True, type=UserTime(), help="End (exclusive): ISO date or datetime.")
@click.option("--dry-run", is_flag=True, help="Show what would be done; write nothing.")
@click.pass_obj
def backfill(settings, since, until, dry_run):
    """Refresh an explicit window of arrival times [SINCE, UNTIL).

    Dates mean local midnight and datetimes without an offset are local time,
    in the configured time zone. The watermark never moves backwards; it moves
    forward only if the window starts at or before it (no gap is skipped).

    Example: lms-refresh backfill --since 2026-09-01 --until 2026-10-01
    """
    return _do_refresh(settings, BACKFILL, dry_run, since, until)


@cli.command()
@click.option("--since", required=True, type=UserTime(), help="Re-read the source from here: ISO date or datetime.")
@click.option("--dry-run", is_flag=True, help="Show what the rebuilt store would hold; write nothing.")
@click.pass_obj
def rebuild(settings, since, dry_run):
    """Start the store's derived data over from the source, from SINCE to now.

    The way to apply a change the store refuses (time zone, course_pattern,
    site_url, the key), and to re-create history after the store was lost. In
    one transaction it empties staging and metrics, re-reads the source from
    SINCE and records the configuration's identity; days before SINCE that the
    source no longer holds are gone. The run log and the quarantine stay.
    Run it as the service user, like backfill.

    Example: lms-refresh rebuild --since 2026-09-01
    """
    return _do_refresh(settings, REBUILD, dry_run, since)


@cli.group()
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
    from lms_refresh.recovery import set_watermark

    old, new = set_watermark(settings.config(), settings.now, os.environ, os.geteuid(), value)
    logger.warning("Watermark set from %s to %s; the next run reads from there.", old or "none", new)
    click.echo(f"watermark: {old or 'none'} -> {new}")
    return errors.OK


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--check", is_flag=True,
              help="Act as a monitoring plugin: print one line with perfdata and exit 0 OK (fresh), 1 WARNING "
                   "(fresh, but the last run failed), 2 CRITICAL (stale: no success since the last weekday 04:15 "
                   "run plus [monitoring] grace) or 3 UNKNOWN (no store yet, or the configuration or state cannot "
                   "be read). Overrides --json.")
@click.pass_obj
def status(settings, as_json, check):
    """Show the watermark, the last run, the lock and the store, and say when the data is stale.

    Example: lms-refresh status --check
    """
    if check:
        def read_status():
            config = settings.config()
            return collect_status(config, os.environ), config.timezone, config.monitoring.grace

        code, line = plugin_check(read_status, settings.now)
        click.echo(line)
        return code
    config = settings.config()
    report = collect_status(config, os.environ)
    report["stale"] = staleness(report, settings.now, config.timezone, config.monitoring.grace)
    click.echo(json.dumps(report, indent=2) if as_json else format_status(report))
    return errors.OK


@cli.command()
@click.option("--unit", envvar="MONITOR_UNIT", default="lms-refresh.service", show_default=True,
              help="The failed unit (systemd sets $MONITOR_UNIT).")
@click.option("--exit-status", envvar="MONITOR_EXIT_STATUS", help="Its exit status ($MONITOR_EXIT_STATUS).")
@click.option("--result", envvar="MONITOR_SERVICE_RESULT", help="Its result ($MONITOR_SERVICE_RESULT).")
@click.option("--invocation", envvar="MONITOR_INVOCATION_ID", help="Its invocation id ($MONITOR_INVOCATION_ID).")
@click.pass_obj
def alert(settings, unit, exit_status, result, invocation):
    """Tell people that a refresh failed (run by lms-refresh-alert@.service through OnFailure=).

    Sends to every channel configured in [alerts]: mail through sendmail, a
    JSON webhook. A configuration broken elsewhere still alerts, from [alerts]
    alone. Exits 1 only if every configured channel failed, 78 if [alerts]
    itself cannot be read (logged at priority err).

    Example: lms-refresh alert --unit lms-refresh.service --exit-status 65
    """
    from lms_refresh.alerts import send_alert

    delivered, attempted = send_alert(
        settings.config_path, unit, exit_status, result, invocation, os.environ,
        last_run_of=lambda config: collect_status(config, os.environ)["last_run"],
    )
    return errors.FAILURE if attempted and not delivered else errors.OK


@cli.command()
@click.pass_obj
def check(settings):
    """Validate the configuration and reach the source and store; write nothing.

    Example: lms-refresh --config ./config.toml check
    """
    for finding in run_checks(settings.config(), os.geteuid(), os.environ):
        # Deviations and warnings are findings to read, not failures: a failed check raises.
        click.echo(redact.scrub_text(f"{'ok' if finding.ok else 'note'}  {finding}"))
    return errors.OK


@cli.command("grant-reader")
@click.argument("role")
@click.pass_obj
def grant_reader(settings, role):
    """Let a PostgreSQL ROLE read the serving view (and nothing else), for dashboards.

    The role gets USAGE on the schema <schema>_serving and SELECT on its view
    daily_metrics; it gets no access to staging or pseudonymised learners.

    Example: lms-refresh grant-reader metabase
    """
    config = settings.config()
    if config.store.type != "postgresql":
        raise errors.ConfigError("grant-reader needs store.type = \"postgresql\"; a SQLite store has no roles "
                                 "(give dashboards read access to the file instead).")
    from lms_refresh.store import open_store

    store = open_store(config, os.environ, create=True)
    try:
        store.grant_reader(role)
    finally:
        store.close()
    click.echo(f"{role} may now read {store.serving}")
    return errors.OK


@cli.command()
@click.option("--mbox", metavar="ADDRESS", help="xAPI: the learner's e-mail address (mailto: optional).")
@click.option("--mbox-sha1sum", metavar="HEX", help="xAPI: the SHA-1 of the learner's mailto: IRI.")
@click.option("--openid", metavar="URL", help="xAPI: the learner's OpenID.")
@click.option("--account-homepage", metavar="URL", help="xAPI: the account's homePage (with --account-name).")
@click.option("--account-name", metavar="NAME", help="xAPI: the account's name (with --account-homepage).")
@click.option("--moodle-user-id", type=click.IntRange(min=1), metavar="N", help="Moodle: the user's id.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted and rebuilt; write nothing.")
@click.pass_obj
def forget(settings, mbox, mbox_sha1sum, openid, account_homepage, account_name, moodle_user_id, dry_run):
    """Erase one learner: delete their staged events and quarantined records, rebuild their days.

    Name the learner as the source knows them, by exactly one identifier. It
    runs under the run's lock, in one transaction, and logs counts only; run
    it as the service user (sudo -u lms-refresh). Erase the learner at the
    source too, or a backfill brings them back.

    Example: lms-refresh forget --account-homepage https://lms.example.edu --account-name 4711
    """
    from lms_refresh.forget import forget as forget_learner, learner_identifier

    if (account_homepage is None) != (account_name is None):
        raise click.UsageError("--account-homepage and --account-name name one account together; give both.")
    given = [option for option, value in (("--mbox", mbox), ("--mbox-sha1sum", mbox_sha1sum), ("--openid", openid),
                                          ("--account-homepage/--account-name", account_name),
                                          ("--moodle-user-id", moodle_user_id)) if value is not None]
    if len(given) != 1:
        raise click.UsageError("Name the learner by exactly one identifier (--mbox, --mbox-sha1sum, --openid, "
                               f"--account-homepage with --account-name, or --moodle-user-id); got {len(given)}.")
    agent = None
    if mbox is not None:
        agent = {"mbox": mbox if mbox.lower().startswith("mailto:") else f"mailto:{mbox}"}
    elif mbox_sha1sum is not None:
        agent = {"mbox_sha1sum": mbox_sha1sum}
    elif openid is not None:
        agent = {"openid": openid}
    elif account_name is not None:
        agent = {"account": {"homePage": account_homepage, "name": account_name}}
    config = settings.config()
    identifier = learner_identifier(config, agent, moodle_user_id)
    report = forget_learner(config, identifier, os.environ, os.geteuid(), dry_run=dry_run)
    click.echo(f"{'would delete' if dry_run else 'deleted'}: {report.events} staged events, "
               f"{report.quarantined} quarantined records")
    click.echo(f"rebuilt:     {len(report.partitions)} daily partitions ({report.rows_written} rows, "
               f"{report.suppressed} suppressed)" + (" — rolled back" if dry_run else ""))
    return errors.OK


@cli.command("is-configured")
@click.pass_obj
def is_configured(settings):
    """Exit 0 if the configuration has a [source] (the service's ExecCondition=), else 1.

    A configuration that exists but is invalid counts as configured, so the
    run itself fails loudly with exit 78 instead of being skipped.

    Example: lms-refresh is-configured && echo configured
    """
    from lms_refresh.config import has_source

    if has_source(settings.config_path):
        return errors.OK
    logger.warning("%s has no [source] table yet; the refresh is skipped until it is configured.",
                   settings.config_path)
    return errors.FAILURE


@cli.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), help="Where to put the sample (default: a new temporary directory).")
@click.option("--learners", default=2000, show_default=True, help="Number of learners.")
@click.option("--days", default=21, show_default=True, help="Days of activity, ending yesterday.")
@click.option("--seed", default=7, show_default=True, help="Random seed (same seed, same sample).")
@click.pass_obj
def demo(settings, directory, learners, days, seed):
    """Generate realistic sample xAPI data, refresh a local SQLite store, print the metrics.

    Example: lms-refresh demo --dir /tmp/lms-demo
    """
    from lms_refresh.demo import run_demo

    from lms_refresh.demo import command_hint

    run_demo(directory, learners, days, seed, settings.now, os.environ, click.echo,
             command=command_hint(sys.argv[0], os.environ, sys.executable))
    return errors.OK


def main(argv=None):
    """Entry point: run the CLI and exit with the documented code."""
    try:
        faults.arm(os.environ)
    except ValueError as error:  # the test-only seam, misspelt
        click.echo(f"Error: {error}.", err=True)
        sys.exit(errors.USAGE)
    # One SIGTERM policy for the whole process: a stop after the commit must not kill it by the signal.
    with stopping.installed() as stop:
        code = _main(argv, stop)
        faults.point("before-exit")
    sys.exit(code)


def _main(argv, stop):
    try:
        code = cli.main(args=argv, prog_name="lms-refresh", standalone_mode=False, obj=stop)
    except click.ClickException as error:
        error.show()
        code = error.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        code = errors.FAILURE
    except KeyboardInterrupt:
        code = errors.INTERRUPTED
    except (Exception, errors.Terminated) as error:
        code = _failed(error)
    return code if isinstance(code, int) else errors.OK


def _failed(error, fields=None):
    """Log the error that ended a command, with the journal `fields` of what failed; return its exit code."""
    _ensure_logging()
    if isinstance(error, OSError):
        error = errors.from_os_error(error, error.filename or "a file") or error
    code, message = errors.exit_status(error)
    fields = {**(fields or {}), "EXIT_STATUS": code}
    if isinstance(error, (errors.RefreshError, errors.Terminated)):
        logger.error("%s", message, extra={**fields, "ERROR_KIND": type(error).__name__})
    else:  # the last resort: one sentence first, then the details
        logger.error("Unexpected failure (%s); nothing was committed.", message, exc_info=error,
                     extra=fields)
    return code


def _ensure_logging():
    if not logging.getLogger().handlers:
        configure_logging(0, os.environ, scrub=redact.scrub_text)
