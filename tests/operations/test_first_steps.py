"""Small things an administrator meets first: the unconfigured install, the demo's hint and data, the lock message."""

import datetime as dt
import os
import re
import socket
import subprocess
import sys

import pytest

from helpers import docs
from helpers.paths import REPO
from helpers.statements import statement
from lms_refresh.config import is_configured
from lms_refresh.demo.command import command_hint
from lms_refresh.demo.sample import generate
from lms_refresh.run.lock import RunLock

ROOT = REPO  # the repository, or the copy debian/tests/suite runs in
DOCS = docs.everything()
PACKAGED = open(os.path.join(ROOT, "debian", "config.toml"), encoding="utf-8").read()


def test_an_unconfigured_install_says_no_source_is_configured_and_where(sqlite_project):
    sqlite_project.config.write_text(PACKAGED)  # as installed: every [source] commented out
    expected = (f"No source is configured yet: {sqlite_project.config} has no [source] table; uncomment and fill "
                "in one of the commented [source] examples in it")
    for command in ("check", "status"):
        result = sqlite_project.invoke(command)
        assert result.returncode == 78 and expected in result.stderr, (command, result.stderr)
        assert "source.type" not in result.stderr
    assert sqlite_project.invoke("is-configured").returncode == 1


def test_only_an_unconfigured_install_is_skipped_and_every_mistake_runs_to_fail_loudly(tmp_path):
    odd = tmp_path / "No configuration file here"  # the words the old check searched the message for
    odd.mkdir()
    path = str(odd / "config.toml")
    assert not is_configured(str(odd / "absent.toml"), {})
    for unconfigured in (PACKAGED, "timezone = 'UTC'\n", "", "# nothing yet\n[window]\nbootstrap_days = 3\n"):
        (odd / "config.toml").write_text(unconfigured)
        assert not is_configured(path, {}), unconfigured
    # Configured, so the run fails loudly (78) and alerts: invalid TOML, a misspelt table or key, a bad
    # value in a table before or after [source]'s place, a [source] that is wrong.
    for mistake in ("this is = not toml\n", PACKAGED + "[sources]\ntype = 'xapi-ndjson'\npath = '/srv'\n",
                    "[source]\n", "timezone = 'Mars/Olympus'\n", "[window]\nbootstrap_day = 3\n",
                    "[privacy]\nmax_noise = -1\n", "[publication]\ngroup = 5\n", "[sources]\n",
                    "min_cel_size = 5\n"):
        (odd / "config.toml").write_text(mistake)
        assert is_configured(path, {}), mistake


def test_is_configured_says_which_of_the_two_unconfigured_states_it_found(sqlite_project):
    sqlite_project.config.write_text(PACKAGED)
    result = sqlite_project.invoke("is-configured")
    assert result.returncode == 1 and f"{sqlite_project.config} has no [source] table yet" in result.stderr
    sqlite_project.config.unlink()
    result = sqlite_project.invoke("is-configured")
    assert result.returncode == 1, result.stderr
    assert (f"{sqlite_project.config} does not exist yet; the refresh is skipped until it is configured."
            in result.stderr and "[source]" not in result.stderr), result.stderr
    sqlite_project.config.symlink_to(sqlite_project.root / "nowhere.toml")  # a link to nothing
    result = sqlite_project.invoke("is-configured")
    assert result.returncode == 1 and "does not exist yet" in result.stderr, result.stderr


def test_an_unknown_key_lists_every_known_top_level_name_terms_included(sqlite_project):
    sqlite_project.config.write_text(sqlite_project.config.read_text().replace("[", "min_cel_size = 5\n[", 1))
    result = sqlite_project.invoke("check")
    assert result.returncode == 78 and "unknown key 'min_cel_size' (known: " in result.stderr, result.stderr
    known = result.stderr.split("(known: ", 1)[1].split(")", 1)[0].split(", ")
    assert "terms" in known and "min_cell_size" in known and "source" in known, known


def test_a_misspelt_table_is_not_skipped_it_runs_and_fails_with_78(sqlite_project):
    sqlite_project.config.write_text(PACKAGED + '[sources]\ntype = "xapi-ndjson"\npath = "/srv/xapi"\n')
    assert sqlite_project.invoke("is-configured").returncode == 0
    result = sqlite_project.invoke("run")
    assert result.returncode == 78 and "unknown key 'sources'" in result.stderr, result.stderr


def test_the_docs_quote_the_lock_message_as_the_program_prints_it(sqlite_project):
    quotes = re.findall(r"`(Another refresh holds the lock \(held by pid N on HOST\)[^`]*)`", DOCS)
    assert len(quotes) == 3 and len(set(quotes)) == 2  # the timer's run (twice), an operator's rebuild
    assert "(held by pid N host)" not in DOCS
    sqlite_project.write("a.ndjson", [statement()])
    sqlite_project.state.mkdir()
    with RunLock(str(sqlite_project.state / "refresh.lock")):
        run = sqlite_project.cli("run")
        rebuild = sqlite_project.cli("rebuild", "--since", "2026-11-01")
    assert (run.returncode, rebuild.returncode) == (0, 69)
    for quote in set(quotes):
        printed = quote.replace("pid N", f"pid {os.getpid()}").replace("HOST", socket.gethostname())
        assert printed in (run.stderr if "nothing to do" in quote else rebuild.stderr)


@pytest.mark.parametrize("on_path", [False, True], ids=["not-on-path", "on-path"])
def test_the_demo_hint_is_a_command_that_works(tmp_path, on_path):
    """The console script next to this interpreter: a virtualenv's (the README's demo) or /usr/bin's (the
    installed package, debian/tests/suite). Off PATH the hint names it in full; on PATH, by its bare name."""
    script = os.path.join(os.path.dirname(sys.executable), "lms-refresh")
    # Off PATH: a directory with nothing in it (the script's shebang and the shell are absolute paths).
    path = f"{os.path.dirname(script)}:/usr/bin:/bin" if on_path else str(tmp_path / "empty")
    environment = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    demo = subprocess.run([script, "demo", "--dir", str(tmp_path / "demo"), "--learners", "50", "--days", "3"],
                          capture_output=True, text=True, env=environment, timeout=300)
    assert demo.returncode == 0, demo.stderr
    hint = demo.stdout.strip().splitlines()[-1]
    assert hint == f"Try: {'lms-refresh' if on_path else script} --config {tmp_path / 'demo' / 'config.toml'} status"
    status = subprocess.run(hint.removeprefix("Try: "), shell=True, capture_output=True, text=True, env=environment)
    assert status.returncode == 0 and "last success: success (exit 0) run" in status.stdout, status.stderr


def test_the_demo_hint_names_the_bare_command_only_when_path_finds_this_one(tmp_path):
    script = tmp_path / "bin" / "lms-refresh"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    # This script first on PATH: with the package installed, /usr/bin has an lms-refresh of its own.
    assert command_hint(str(script), {"PATH": f"{script.parent}:/usr/bin"}, "/usr/bin/python3") == "lms-refresh"
    assert command_hint(str(script), {"PATH": "/usr/bin"}, "/usr/bin/python3") == str(script)
    assert command_hint("/x/lms_refresh/__main__.py", {"PATH": "/usr/bin"}, "/opt/py/bin/python3") == \
        "/opt/py/bin/python3 -m lms_refresh"


def test_the_sample_has_nothing_stored_in_the_future():
    now = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.UTC)
    start = dt.date(2026, 11, 23)
    everything = list(generate(7, start, 7, learners=300))
    assert max(stored for stored, _ in everything) > now  # late syncs of the last days would lie ahead
    arrived = list(generate(7, start, 7, learners=300, until=now))
    assert arrived and max(stored for stored, _ in arrived) < now
    assert set(arrived) <= set(everything)  # the same sample, minus what has not arrived yet
    late = [1 for stored, _ in everything if stored >= now - dt.timedelta(seconds=1)]
    assert len(everything) - len(arrived) == len(late)


def test_the_demo_says_what_its_numbers_of_days_mean(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "lms-refresh")
    demo = subprocess.run([script, "--now", "2026-11-30T09:00:00+01:00", "demo", "--dir", str(tmp_path / "d"),
                           "--learners", "50", "--days", "21"], capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr
    assert "50 learners active on the 21 days 2026-11-09 .. 2026-11-29 (--days)" in demo.stdout
    assert ("A first run reads back bootstrap_days = 28 days (the sample's 21 plus a week), so it rebuilt the "
            "29 local days 2026-11-02 .. 2026-11-30, today included") in demo.stdout
    assert ("(last 24 of the 40 published rows, the whole site's '(site)' included; '-' = withheld because "
            "fewer than 10 learners; every other count is perturbed by "
            "up to ±3 (cell key method), so columns need not add up)") in demo.stdout
    names = sorted(os.listdir(tmp_path / "d" / "statements"))
    assert names[-1] <= "statements-2026-11-30.ndjson"  # no file of a day still to come
