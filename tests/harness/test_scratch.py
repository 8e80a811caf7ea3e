"""The suite's scratch (tests/conftest.py): a passing test's tmp_path and the databases it created go with it, a
failing test's stay for a look; the autopkgtest puts the scratch on disk, not in /tmp (a tmpfs on Debian 13)."""

import os
import re
import subprocess
import sys

import pytest

from helpers.paths import REPO


@pytest.mark.postgresql  # the probe's databases are a real server's: its tier is the servers'
def test_a_passing_tests_scratch_goes_and_a_failing_tests_stays(tmp_path):
    report = tmp_path / "report"
    inner = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--basetemp",
                            str(tmp_path / "inner"), "tests/harness/scratch_probe.py"],
                           capture_output=True, text=True, cwd=REPO, timeout=300,
                           env=dict(os.environ, SCRATCH_PROBE_REPORT=str(report)))
    assert "1 failed, 2 passed" in inner.stdout, inner.stdout + inner.stderr  # the third saw the databases
    left = dict(line.split(" ", 1) for line in report.read_text().splitlines())
    assert not os.path.exists(left["passes"])
    assert os.path.exists(os.path.join(left["fails"], "scratch"))


def test_the_autopkgtest_puts_its_scratch_on_disk_and_not_in_tmp():
    with open(os.path.join(REPO, "debian", "tests", "suite")) as handle:
        suite = handle.read()
    assert re.search(r"^SCRATCH=\$\(mktemp -d /var/tmp/", suite, re.M)
    assert re.search(r'^export TMPDIR="\$SCRATCH"$', suite, re.M)
    assert '--basetemp "$SCRATCH/pytest"' in suite
