"""The source tree passes the linter with no finding: ruff, at the version tests/run.sh pins, with the
rules of pyproject.toml's [tool.ruff]. A source-tree test: debian/tests/suite, which tests the installed
package without ruff, deselects it."""

import os
import re
import subprocess
import sys

from helpers.paths import REPO

ROOT = REPO  # the repository
# The ruff of the virtualenv this interpreter runs in (tests/run.sh installs it there).
RUFF = os.path.join(os.path.dirname(sys.executable), "ruff")


def pinned_version():
    with open(os.path.join(ROOT, "tests", "run.sh"), encoding="utf-8") as handle:
        found = re.findall(r"\bruff==([0-9][0-9.]*)\b", handle.read())
    assert len(found) == 1, f"tests/run.sh should install ruff pinned to one exact version (ruff==X.Y.Z), found {found}"
    return found[0]


def ruff(*args, cwd=ROOT):
    """Run the virtualenv's ruff; fail (never skip) if it is not there: tests/run.sh installs it."""
    version = pinned_version()
    install = f"{sys.executable} -m pip install ruff=={version}"
    assert os.access(RUFF, os.X_OK), f"ruff is not installed next to {sys.executable}: run tests/run.sh, or {install}"
    installed = subprocess.run([RUFF, "--version"], capture_output=True, text=True, check=True).stdout.split()
    assert installed == ["ruff", version], f"{RUFF} is {' '.join(installed)}, tests/run.sh pins {version}: {install}"
    # No cache: a test leaves nothing in the tree (debian/rules clean's check sees every ignored file too).
    return subprocess.run([RUFF, *args, "--no-cache", "--output-format", "concise"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_tree_has_no_lint_finding():
    result = ruff("check")
    assert result.returncode == 0 and "All checks passed!" in result.stdout, (
        f"ruff check found problems (fix them, or `{RUFF} check --fix` for the safe ones, and review the diff):\n"
        f"{result.stdout}{result.stderr}")


def test_the_configured_rules_are_the_ones_in_force(tmp_path):
    """The tree's clean bill means something only if pyproject.toml's rules are applied: a finding of each
    of its main families (E, W, F, I, B, UP), and a line of 120 characters allowed where 121 is not."""
    lines = [  # (line, the findings ruff must report on it)
        ("import sys", ["I001"]),  # the block is unsorted
        ("import os", []),
        ("import datetime as dt", []),
        ("", []),
        ("UTC = dt.timezone.utc", ["UP017"]),
        ("", []),
        ("", []),
        ("def parse(text):", []),
        ("    try:", []),
        ("        return int(text, base=len(sys.argv) + len(os.sep))", []),
        ("    except ValueError:", []),
        ("        raise RuntimeError('not a number')", ["B904"]),
        ("    unused = 1 ", ["F841", "W291"]),
        ("    return " + repr("x" * 107), []),  # 120 characters
        ("    return " + repr("x" * 108), ["E501"]),  # 121
    ]
    assert [len(line) for line, _ in lines[-2:]] == [120, 121]
    (tmp_path / "sample.py").write_text("".join(line + "\n" for line, _ in lines))
    result = ruff("check", "--config", os.path.join(ROOT, "pyproject.toml"), "sample.py", cwd=tmp_path)
    found = [(int(number), code) for number, code in re.findall(r"^sample\.py:(\d+):\d+: ([A-Z]+[0-9]+)", result.stdout,
                                                                  re.MULTILINE)]
    expected = [(number, code) for number, (_, codes) in enumerate(lines, 1) for code in codes]
    assert result.returncode == 1 and sorted(found) == expected, result.stdout + result.stderr
