"""The operator's commands: `status`, `report`, `check`, `alert`, `alert-test`, `grant-reader`, `forget`,
`is-configured`, `demo`."""

import json
import logging
import os
import sys

import click

from lms_refresh import errors, logs
from lms_refresh.cli.invocation import UNICODE_TEXT
from lms_refresh.demo import DAYS, LEARNERS, READ_BACK_MARGIN
from lms_refresh.disclosure import redaction
from lms_refresh.ops.monitoring import plugin_check, staleness
from lms_refresh.ops.preflight import preflight
from lms_refresh.ops.status import collect_status, format_status

logger = logging.getLogger("lms_refresh")


@click.command()
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
    report["stale"] = staleness(report, settings.now, config.timezone, grace=config.monitoring.grace)
    click.echo(json.dumps(report, indent=2) if as_json else format_status(report))
    return errors.OK


@click.command()
@click.option("--output", type=click.Path(dir_okay=False), help="Write the page here (default: [report] path).")
@click.pass_obj
def report(settings, output):
    """Write the HTML report of the SQLite publication: freshness, weekly learners, outcomes, protection.

    One static page (no JavaScript, no network) from the publication file;
    every run writes it too, beside the publication.

    Example: lms-refresh report --output /tmp/report.html
    """
    from lms_refresh.ops.report import write_report
    from lms_refresh.run.lock import LockHeld, lock_held, run_lock

    config = settings.config()
    try:
        # Under the run's lock: a run that commits meanwhile writes its own report, which a page read before its
        # commit would replace with the old numbers and freshness.
        with run_lock(config, os.geteuid()):
            path, shown = write_report(config, os.environ, settings.now, output)
    except LockHeld as held:
        raise lock_held(held.holder, "no report was written (the run writes its own)", "report") from None
    click.echo(f"Wrote the report {path}" + (f" (STALE: {shown['stale']})" if shown["stale"] else ""))
    return errors.OK


@click.command()
@click.option("--unit", envvar="MONITOR_UNIT", default="lms-refresh.service", show_default=True,
              help="The failed unit (systemd sets $MONITOR_UNIT).")
@click.option("--exit-status", envvar="MONITOR_EXIT_STATUS", help="Its exit status ($MONITOR_EXIT_STATUS).")
@click.option("--result", envvar="MONITOR_SERVICE_RESULT", help="Its result ($MONITOR_SERVICE_RESULT).")
@click.option("--invocation", envvar="MONITOR_INVOCATION_ID", help="Its invocation id ($MONITOR_INVOCATION_ID).")
@click.pass_obj
def alert(settings, unit, exit_status, *, result, invocation):
    """Tell people that a refresh failed (run by lms-refresh-alert@.service through OnFailure=).

    Sends to every channel configured in [alerts]: mail through sendmail, a
    JSON webhook. A configuration broken elsewhere still alerts, from [alerts]
    alone. Exits 1 only if every configured channel failed, 78 if [alerts]
    itself cannot be read (logged at priority err).

    Example: lms-refresh alert --unit lms-refresh.service --exit-status 65
    """
    from lms_refresh.ops.alerts import send_alert

    delivered, attempted = send_alert(
        settings.config_path, unit, exit_status, result=result, invocation=invocation, environ=os.environ,
        last_run_of=lambda config: collect_status(config, os.environ)["last_run"],
    )
    return errors.FAILURE if attempted and not delivered else errors.OK


def _state_directory_key(path):
    """The `state_directory` a configuration that does not validate still names (an absolute path), or None: the
    owner of that directory, not of the default one, is who its alerts run as."""
    import tomllib

    try:
        with open(path, "rb") as handle:
            value = tomllib.load(handle).get("state_directory")
    except (OSError, ValueError):  # unreadable, or not TOML (tomllib's error is a ValueError)
        return None
    return value if isinstance(value, str) and os.path.isabs(value) and "\0" not in value else None


@click.command("alert-test")
@click.pass_obj
def alert_test(settings):
    """Send one test alert through every channel in [alerts] and say, per channel, whether it went out.

    The alert says it is a test and names the host and the configuration
    file. It takes no lock and reads no store: it is safe while a run is
    under way. As root it runs as the service user, as the alert unit does.
    Exits 0 if every channel delivered it, 69 if one did not (a warning says
    why), 78 if no channel is configured.

    Example: lms-refresh alert-test
    """
    from lms_refresh.config import load_config
    from lms_refresh.config.schema import DEFAULT_STATE_DIRECTORY
    from lms_refresh.ops.alerts import send_test_alert
    from lms_refresh.state_directory import become_owner

    try:  # the alert unit runs as the state directory's owner: the credentials are read, and mail sent, as it
        directory = load_config(settings.config_path, os.environ).state_directory
    except errors.ConfigError:  # a configuration broken outside [alerts] still alerts, so it is tested too
        directory = os.environ.get("STATE_DIRECTORY") or _state_directory_key(settings.config_path) \
            or DEFAULT_STATE_DIRECTORY
    become_owner(directory, os.geteuid())
    results = send_test_alert(settings.config_path, os.environ)
    for channel, delivered, note in results:
        click.echo(redaction.scrub_text(f"{'delivered' if delivered else 'FAILED   '}  {channel}"
                                        + (f": {note}" if note else "")))
    failed = sum(not delivered for _, delivered, _ in results)
    if failed:
        raise errors.UnavailableError(f"The test alert did not go out through {failed} of {len(results)} "
                                      f"channel{'' if len(results) == 1 else 's'}: a failure would not be "
                                      "reported there; the warnings above say why.")
    click.echo(f"The test alert went out through every channel ({len(results)}); check that it arrived.")
    return errors.OK


@click.command()
@click.pass_obj
def check(settings):
    """Validate the configuration and reach the source and store; write nothing.

    Example: lms-refresh --config ./config.toml check
    """
    for finding in preflight(settings.config(), os.geteuid(), os.environ):
        # Deviations and warnings are findings to read, not failures: a failed check raises.
        click.echo(redaction.scrub_text(f"{'ok' if finding.ok else 'note'}  {finding}"))
    return errors.OK


@click.command("grant-reader")
@click.argument("role")
@click.pass_obj
def grant_reader(settings, role):
    """Let a PostgreSQL ROLE read the serving views (and nothing else), for dashboards.

    The role gets USAGE on the schema <schema>_serving and SELECT on its views
    daily_metrics, weekly_metrics, monthly_metrics, term_metrics and courses; it
    gets no access to staging or pseudonymised learners.

    Example: lms-refresh grant-reader metabase
    """
    config = settings.config(uses_state=False)  # the database's grants only: a DBA need not read the state
    if config.store.type != "postgresql":
        raise errors.ConfigError("grant-reader needs store.type = \"postgresql\"; a SQLite store has no roles "
                                 "(give dashboards read access to the file instead).")
    from lms_refresh.store import open_store

    store = open_store(config, os.environ, create=True)
    try:
        views = store.grant_reader(role)
    finally:
        store.close()
    click.echo(f"{role} may now read {', '.join(views[:-1])} and {views[-1]}")
    return errors.OK


@click.command()
@click.option("--mbox", metavar="ADDRESS", type=UNICODE_TEXT,
              help="xAPI: the learner's e-mail address (mailto: optional).")
@click.option("--mbox-sha1sum", metavar="HEX", type=UNICODE_TEXT, help="xAPI: the SHA-1 of the learner's mailto: IRI.")
@click.option("--openid", metavar="URL", type=UNICODE_TEXT, help="xAPI: the learner's OpenID.")
@click.option("--account-homepage", metavar="URL", type=UNICODE_TEXT,
              help="xAPI: the account's homePage (with --account-name).")
@click.option("--account-name", metavar="NAME", type=UNICODE_TEXT,
              help="xAPI: the account's name (with --account-homepage).")
@click.option("--moodle-user-id", type=click.IntRange(min=1), metavar="N", help="Moodle: the user's id.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted and rebuilt; write nothing.")
@click.pass_obj
def forget(settings, mbox, mbox_sha1sum, *, openid, account_homepage, account_name, moodle_user_id, dry_run):
    """Erase one learner: delete their staged events and quarantined records, rebuild their days.

    Name the learner as the source knows them, by exactly one identifier. It
    runs under the run's lock, in one transaction, and logs counts only; run
    it as root or as the service user. Erase the learner at the
    source too, or a backfill brings them back.

    Example: lms-refresh forget --account-homepage https://lms.example.edu --account-name 4711
    """
    from lms_refresh.ops.report import rewrite_after
    from lms_refresh.run.forget import forget as forget_learner, learner_identifier

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
    report = forget_learner(config, identifier, os.environ, euid=os.geteuid(), dry_run=dry_run)
    if not dry_run:  # the page is made of the publication: it must not show the learner until the next run
        rewrite_after(config, os.environ, settings.now, "forget")
    click.echo(f"{'would delete' if dry_run else 'deleted'}: {logs.counted(report.events, 'staged event')}, "
               f"{logs.counted(report.quarantined, 'quarantined record')}")
    click.echo(f"rebuilt:     {logs.counted(len(report.partitions), 'daily partition')} "
               f"({logs.counted(report.rows_written, 'row')}, {report.suppressed} suppressed)"
               + (" — rolled back" if dry_run else ""))
    # Closed days are never rebuilt, but their learner's presence goes (docs/admin/erasure-and-retention.md).
    if report.closed_days:
        days, will = f"{report.closed_days} day{'' if report.closed_days == 1 else 's'}", "would be " if dry_run else ""
        click.echo(f"closed:      presence on {days} before the staging horizon {will}deleted; their weeks, months "
                   f"and terms with a day still open {will}counted again")
    return errors.OK


@click.command("is-configured")
@click.pass_obj
def is_configured(settings):
    """Exit 0 unless the install is not configured yet (the service's ExecCondition=), else 1.

    Not configured means: no configuration file, or one whose settings are all
    valid but that has no [source] table yet (the packaged file as installed).
    Anything else wrong (a misspelt table such as [sources], an unknown key, a
    bad value, invalid TOML) counts as configured, so the run itself fails
    loudly with exit 78 and alerts instead of being skipped.

    Example: lms-refresh is-configured && echo configured
    """
    from lms_refresh.config import is_configured as configured

    if configured(settings.config_path, os.environ):
        return errors.OK
    if not os.path.exists(settings.config_path):  # a link to nothing too
        logger.warning("%s does not exist yet; the refresh is skipped until it is configured.", settings.config_path)
    else:
        logger.warning("%s has no [source] table yet and nothing else in it is wrong; the refresh is skipped until "
                       "it is configured.", settings.config_path)
    return errors.FAILURE


@click.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False),
              help="Where to put the sample (default: a new temporary directory).")
@click.option("--learners", default=2000, show_default=True, type=click.IntRange(*LEARNERS),
              help=f"Number of learners ({LEARNERS[0]} to {LEARNERS[1]}).")
@click.option("--days", default=21, show_default=True, type=click.IntRange(*DAYS),
              help=f"Days of activity, ending yesterday ({DAYS[0]} to {DAYS[1]}: the first run reads back a week "
                   f"more, and window.bootstrap_days is at most {DAYS[1] + READ_BACK_MARGIN}).")
@click.option("--seed", default=7, show_default=True, help="Random seed (same seed, same sample).")
@click.pass_obj
def demo(settings, directory, learners, *, days, seed):
    """Generate realistic sample xAPI data, refresh a local SQLite store, print the metrics.

    Example: lms-refresh demo --dir /tmp/lms-demo
    """
    from lms_refresh.demo.command import command_hint, run_demo

    run_demo(directory, learners, days, seed=seed, now=settings.now, environ=os.environ, echo=click.echo,
             command=command_hint(sys.argv[0], os.environ, sys.executable))
    return errors.OK
