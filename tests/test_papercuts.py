"""Small things an administrator meets first: the unconfigured install, the demo's hint and data, the lock message."""

import datetime as dt
import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import statement
from lms_refresh.config import has_source
from lms_refresh.demo import command_hint
from lms_refresh.run.lock import RunLock
from lms_refresh.demo.sample import generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
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


def test_has_source_decides_by_the_kind_of_error_not_its_wording(tmp_path):
    odd = tmp_path / "No configuration file here"  # the words the old check searched the message for
    odd.mkdir()
    (odd / "config.toml").write_text("this is = not toml\n")
    assert has_source(str(odd / "config.toml"))  # invalid: configured, so the run fails loudly (78)
    assert not has_source(str(odd / "absent.toml"))
    (odd / "config.toml").write_text("timezone = 'UTC'\n")
    assert not has_source(str(odd / "config.toml"))
    (odd / "config.toml").write_text("[source]\n")
    assert has_source(str(odd / "config.toml"))


def test_the_readme_quotes_the_lock_message_as_the_program_prints_it(sqlite_project):
    quotes = re.findall(r"`(Another refresh holds the lock \(held by pid N on HOST\)[^`]*)`", README)
    assert len(quotes) == 2 and len(set(quotes)) == 1
    assert "(held by pid N host)" not in README
    sqlite_project.write("a.ndjson", [statement()])
    sqlite_project.state.mkdir()
    with RunLock(str(sqlite_project.state / "refresh.lock")):
        result = sqlite_project.cli("run")
    assert result.returncode == 0
    printed = quotes[0].replace("pid N", f"pid {os.getpid()}").replace("HOST", socket.gethostname())
    assert printed in result.stderr


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
    now = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.timezone.utc)
    start = dt.date(2026, 11, 23)
    everything = list(generate(7, start, 7, learners=300))
    assert max(stored for stored, _ in everything) > now  # late syncs of the last days would lie ahead
    arrived = list(generate(7, start, 7, learners=300, until=now))
    assert arrived and max(stored for stored, _ in arrived) < now
    assert set(arrived) <= set(everything)  # the same sample, minus what has not arrived yet
    assert len(everything) - len(arrived) == len([1 for stored, _ in everything if stored >= now - dt.timedelta(seconds=1)])


def test_the_demo_says_what_its_numbers_of_days_mean(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "lms-refresh")
    demo = subprocess.run([script, "--now", "2026-11-30T09:00:00+01:00", "demo", "--dir", str(tmp_path / "d"),
                           "--learners", "50", "--days", "21"], capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr
    assert "50 learners active on the 21 days 2026-11-09 .. 2026-11-29 (--days)" in demo.stdout
    assert ("A first run reads back bootstrap_days = 28 days (the sample's 21 plus a week), so it rebuilt the "
            "29 local days 2026-11-02 .. 2026-11-30, today included") in demo.stdout
    assert ("(all of 21 rows; '-' = withheld because fewer than 10 learners; every other count is perturbed by up to ±3 "
            "(cell key method), so columns need not add up)") in demo.stdout
    names = sorted(os.listdir(tmp_path / "d" / "statements"))
    assert names[-1] <= "statements-2026-11-30.ndjson"  # no file of a day still to come
