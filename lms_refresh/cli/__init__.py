"""The command line: parse options, call plain functions, map domain errors to exit codes.

This package is the only place that knows about click and process exit codes: `__init__.py` is
the group and the entry point, `refresh_commands.py` and `operator_commands.py` the commands,
`invocation.py` what they share (the one path from an error to its exit code among it).
"""

import datetime as dt
import io
import os
import signal
import sys

import click

from lms_refresh import __version__, errors, faults
from lms_refresh.cli import operator_commands, refresh_commands
from lms_refresh.cli.invocation import Invocation, failed
from lms_refresh.config.schema import DEFAULT_CONFIG_PATH
from lms_refresh.disclosure import redaction
from lms_refresh.instants import NotAnInstant, parse_user_time
from lms_refresh.logs import configure_logging
from lms_refresh.run import stopping


def _parse_now(ctx, param, value):
    if value is None:
        return dt.datetime.now(dt.UTC)
    try:
        return parse_user_time(value, "UTC")
    except NotAnInstant as error:
        raise click.BadParameter(str(error)) from None


@click.group(
    epilog="Example: lms-refresh --config /etc/lms-refresh/config.toml run\n\n"
           "Manuals: man lms-refresh (commands, exit statuses, files, units) and man 5 lms-refresh.toml (every "
           "configuration key); guides and the data dictionary in /usr/share/doc/lms-refresh/ (docs/ in the "
           "source).",
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
def cli(ctx, config_path, verbose, *, quiet, now):
    """Keep an LMS metrics store fresh: pull new activity, recompute daily metrics, suppress small cells."""
    configure_logging(-1 if quiet else verbose, os.environ, scrub=redaction.scrub_text)
    ctx.obj = Invocation(config_path, now, stop=ctx.obj)


# Each command is named here once; a new command module adds its commands to this list.
COMMANDS = (
    refresh_commands.run, refresh_commands.backfill, refresh_commands.rebuild, refresh_commands.watermark,
    refresh_commands.copy_store,
    operator_commands.status, operator_commands.report, operator_commands.alert, operator_commands.alert_test,
    operator_commands.check,
    operator_commands.grant_reader,
    operator_commands.forget, operator_commands.is_configured, operator_commands.demo,
)
for command in COMMANDS:
    cli.add_command(command)


def main(argv=None):
    """Entry point: run the CLI and exit with the documented code."""
    try:
        faults.arm(os.environ)
    except ValueError as error:  # the test-only seam, misspelt
        click.echo(f"Error: {error}.", err=True)
        sys.exit(errors.USAGE)
    # The process's one SIGTERM policy, installed here, where the process is owned; the run, the job and
    # `forget` consult it (see run/stopping.py): a stop after the commit must not kill it by the signal.
    with stopping.installed(then=signal.SIG_IGN) as stop:
        try:
            code = _main(argv, stop)
            faults.point("before-exit")
        except errors.Terminated as stopped:  # a stop while the command logged how it ended: a stop, 143
            code = failed(stopped)
    faults.point("exiting")  # SIGTERM ignored from here on: the command's exit status stands
    sys.exit(code)


def show_redacted(error):
    """Print click's message for `error` (a usage error's usage line too) through the one redaction rule:
    click repeats the value it refused, which may be an address (`--since someone@example.org`, a path)."""
    shown = io.StringIO()
    error.show(file=shown)
    click.echo(redaction.scrub_text(shown.getvalue()), err=True, nl=False)


def _main(argv, stop):
    try:
        code = cli.main(args=argv, prog_name="lms-refresh", standalone_mode=False, obj=stop)
    except click.ClickException as error:
        show_redacted(error)
        code = error.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        code = errors.FAILURE
    except KeyboardInterrupt:
        code = errors.INTERRUPTED
    except (Exception, errors.Terminated) as error:
        code = failed(error, committed=stop.committed)
    return code if isinstance(code, int) else errors.OK
