"""`status --check` as a monitoring plugin: one line with perfdata, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""

import os
import re

import pytest

from helpers.paths import REPO
from helpers.statements import statement
from lms_refresh.ops.monitoring import PLUGIN_CRITICAL, plugin_line

NOW = "2026-11-03T04:15:00+01:00"  # a Tuesday
ROOT = REPO  # the repository, or the copy debian/tests/suite runs in
LINE = re.compile(r"^LMS-REFRESH (OK|WARNING|CRITICAL|UNKNOWN) - ([^|\n]+?)(?: \| ((?:\S+=\S+ ?)+))?\n$")


def check(project, now):
    """Run `status --check`; return (exit code, state, text, {perfdata label: value}) after checking the format."""
    result = project.invoke("status", "--check", now=now)
    match = LINE.match(result.stdout)
    assert match, (result.stdout, result.stderr)  # exactly one line in the plugin format
    assert "Traceback" not in result.stderr
    perfdata = dict(item.split("=", 1) for item in (match.group(3) or "").split())
    return result.returncode, match.group(1), match.group(2), perfdata


def test_ok_warning_and_critical_with_perfdata(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    [run] = project.query("SELECT rows_written, quarantined FROM runs")
    code, state, text, perfdata = check(project, "2026-11-03T12:15:00+01:00")
    assert (code, state) == (0, "OK")
    assert text == "last success started 2026-11-03T04:15+01:00, watermark 2026-11-03T03:15:00.000000Z"
    assert perfdata["last_success_age"] == "28800s;;;0"  # eight hours
    assert perfdata["rows_written"] == f"{run[0]};;;0" and perfdata["quarantined"] == f"{run[1]};;;0"
    assert perfdata["last_exit_code"] == "0;;;0" and perfdata["store_size"].endswith("B;;;0")

    # A later run fails; the data is still fresh: WARNING, naming the failure.
    project.write("b.ndjson", ["garbage"] * 5 + [statement(timestamp="2026-11-03T10:00:00Z")])
    assert project.invoke("run", now="2026-11-03T13:00:00+01:00").returncode == 65
    code, state, text, perfdata = check(project, "2026-11-03T14:00:00+01:00")
    assert (code, state) == (1, "WARNING")
    assert text.startswith("the last run (run, started 2026-11-03T13:00+01:00) failed with exit status 65: 5 of 6")
    assert perfdata["last_exit_code"] == "65;;;0" and perfdata["quarantined"] == "5;;;0"

    # Wednesday's 04:15 run never succeeded: CRITICAL once the grace is over.
    code, state, text, _ = check(project, "2026-11-04T06:30:00+01:00")
    assert (code, state) == (2, "CRITICAL")
    assert text.startswith("stale: the last success started at 2026-11-03T04:15+01:00, before the run due at "
                           "2026-11-04T04:15+01:00")


def test_a_successful_backfill_does_not_make_good_a_failed_run(project):
    """A backfill of some window succeeding after the nightly run failed turned WARNING into OK, though the failed
    run's data was still missing. A failure stands until a refresh that reads up to its own now succeeds (or, for a
    failed backfill or rebuild, a later one of its own kind)."""
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    project.write("b.ndjson", ["garbage"] * 5 + [statement(timestamp="2026-11-03T10:00:00Z")])
    assert project.invoke("run", now="2026-11-03T13:00:00+01:00").returncode == 65
    project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-02", "--accept-bad-input",
                   now="2026-11-03T13:30:00+01:00", check=0)
    code, state, text, perfdata = check(project, "2026-11-03T14:00:00+01:00")
    assert (code, state) == (1, "WARNING"), text
    assert text.startswith("the last failed run (run, started 2026-11-03T13:00+01:00) failed with exit status 65: "
                           "5 of 6")
    assert perfdata["last_exit_code"] == "0;;;0"  # the last run itself, the backfill, succeeded
    project.invoke("run", "--accept-bad-input", now="2026-11-03T15:00:00+01:00", check=0)
    assert check(project, "2026-11-03T16:00:00+01:00")[:2] == (0, "OK")
    # A failed backfill is made good by a later backfill that succeeds.
    project.write("c.ndjson", ["more garbage"] * 20 + [statement(timestamp="2026-11-03T11:00:00Z")])
    assert project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-04",
                          now="2026-11-03T17:00:00+01:00").returncode == 65
    assert check(project, "2026-11-03T17:30:00+01:00")[:2] == (1, "WARNING")
    project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-04", "--accept-bad-input",
                   now="2026-11-03T18:00:00+01:00", check=0)
    assert check(project, "2026-11-03T18:30:00+01:00")[:2] == (0, "OK")


def test_no_store_yet_is_unknown_not_critical(project):
    code, state, text, perfdata = check(project, NOW)
    assert (code, state) == (3, "UNKNOWN") and text.startswith("no store at ") and perfdata == {}
    assert "no refresh has run" in text


def test_a_first_run_killed_before_its_store_is_unknown_and_says_it_did_not_finish(sqlite_project):
    project = sqlite_project
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.state.mkdir(exist_ok=True)  # as systemd's StateDirectory= has it before the first run
    killed = project.cli("run", now=NOW, env={"LMS_REFRESH_FAULT": "store-created:kill"})
    assert killed.returncode == -9, killed.stderr
    code, state, text, _ = check(project, "2026-11-03T05:00:00+01:00")
    assert (code, state) == (3, "UNKNOWN") and text.startswith("no store at ")
    assert ("yet: the first run, started 2026-11-03T03:15:00.000000Z, did not finish (a shutdown, a crash or a stop) "
            "and is not caught up yet") in text and "no refresh has run" not in text


@pytest.mark.parametrize("mistake, says", [
    ("min_cel_size = 5\n", "unknown key 'min_cel_size'"),
    ("this is = not toml\n", "is not valid TOML"),
])
def test_configuration_errors_are_unknown_never_78(sqlite_project, mistake, says):
    sqlite_project.config.write_text(mistake + sqlite_project.config.read_text())
    code, state, text, _ = check(sqlite_project, NOW)
    assert (code, state) == (3, "UNKNOWN") and text.startswith("cannot read the state: ") and says in text
    assert sqlite_project.invoke("status", now=NOW).returncode == 78  # the human view keeps the exit-code table


def test_an_unconfigured_install_is_unknown(sqlite_project):
    sqlite_project.config.write_text(open(os.path.join(ROOT, "debian", "config.toml")).read())
    code, state, text, _ = check(sqlite_project, NOW)
    assert (code, state) == (3, "UNKNOWN") and "No source is configured yet" in text


def test_a_missing_configuration_file_is_unknown(sqlite_project):
    sqlite_project.config.unlink()
    code, state, text, _ = check(sqlite_project, NOW)
    assert (code, state) == (3, "UNKNOWN") and f"No configuration file at {sqlite_project.config}" in text


def test_a_damaged_store_is_unknown(sqlite_project):
    sqlite_project.write("a.ndjson", [statement()])
    sqlite_project.invoke("run", now=NOW, check=0)
    with open(sqlite_project.store, "r+b") as handle:
        handle.write(b"this is no longer a SQLite database" * 4)
    code, state, text, _ = check(sqlite_project, NOW)
    assert (code, state) == (3, "UNKNOWN") and text.startswith("cannot read the state: ")
    assert str(sqlite_project.store) in text


def test_an_unreachable_database_is_unknown(sqlite_project, tmp_path):
    (tmp_path / "pw").write_text("secret\n")
    sqlite_project.config.write_text(sqlite_project.config.read_text() + (
        '[store]\ntype = "postgresql"\nurl = "postgresql://lms_refresh@127.0.0.1:9/metrics"\n'
        f'password_file = "{tmp_path / "pw"}"\n'))
    code, state, text, _ = check(sqlite_project, NOW)
    assert (code, state) == (3, "UNKNOWN") and text.startswith("cannot read the state: ")
    assert "secret" not in text


def test_the_line_stays_one_line_and_keeps_pipes_out_of_the_text():
    line = plugin_line(PLUGIN_CRITICAL, "a | b\nc", [("age", "5s;;;0")])
    assert line == "LMS-REFRESH CRITICAL - a / b c | age=5s;;;0"
