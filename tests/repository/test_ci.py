"""CI's shape (.ci/run, .ci/budget, tests/run.sh): the tiers it names are the suite's, every step it runs has
a recorded time, and a step grown past twice its recorded figure fails CI naming it."""

import os
import re
import subprocess

import conftest
from helpers.paths import REPO

RUN = os.path.join(REPO, ".ci", "run")
BUDGET = os.path.join(REPO, ".ci", "budget")


def recorded(path=RUN):
    with open(path, encoding="utf-8") as handle:
        return {line.split()[1]: [int(figure) for figure in line.split()[2:] if figure != "-"]
                for line in handle if line.startswith("#: ")}


def steps_of_ci():
    with open(RUN, encoding="utf-8") as handle:
        return re.findall(r"^[ (]*step (\S+) ", handle.read(), re.M)


def test_every_step_and_host_session_has_a_line_of_recorded_figures():
    figures = recorded()
    rest = ",".join(tier for tier in conftest.TIERS if tier != "fast")
    for step in [*steps_of_ci(), "fast", rest]:
        assert step in figures and all(figure > 0 for figure in figures[step]), \
            f".ci/run's header has no line of figures for its step {step!r} (a '-' if not measured): {figures}"
    for host_step in ("fast", rest, "host"):  # measured on every clean run: never left unmeasured
        assert figures[host_step], f".ci/run's header records no time for {host_step!r}"


def test_tests_run_sh_knows_the_suite_s_tiers_in_their_order():
    with open(os.path.join(REPO, "tests", "run.sh"), encoding="utf-8") as handle:
        named = re.search(r"^ALL_TIERS=\(([^)]*)\)", handle.read(), re.M).group(1).split()
    assert tuple(named) == conftest.TIERS


def budget(tmp_path, steps, record):
    (tmp_path / "steps").write_text("".join(f"{name} {seconds}\n" for name, seconds in steps))
    (tmp_path / "record").write_text("".join(f"#: {name} {' '.join(map(str, figures))}\n"
                                             for name, figures in record.items()))
    return subprocess.run(["bash", BUDGET, str(tmp_path / "steps"), str(tmp_path / "record")],
                          capture_output=True, text=True, timeout=60)


def test_a_step_past_twice_its_largest_recorded_figure_fails_naming_it(tmp_path):
    result = budget(tmp_path, [("fast", 150), ("host", 2001), ("new", 5)], {"fast": [70, 75], "host": [900, 1000]})
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"^  host +2001 s  OVER BUDGET: more than twice its recorded 1000 s$", result.stdout, re.M)
    assert re.search(r"^  fast +150 s  within 150 s \(recorded 75 s\)$", result.stdout, re.M), result.stdout
    assert re.search(r"^  new +5 s  no recorded figure$", result.stdout, re.M), result.stdout
    assert "a step took more than twice its recorded time" in result.stderr


def test_steps_within_twice_their_figures_pass(tmp_path):
    result = budget(tmp_path, [("fast", 150), ("host", 2000)], {"fast": [75], "host": [1000, 400]})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OVER" not in result.stdout


def test_an_unknown_tier_is_refused_with_the_tiers_named():
    result = subprocess.run(["bash", os.path.join(REPO, "tests", "run.sh"), "--tier", "fast,nightly"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no tier named 'nightly' (the tiers: fast behaviour servers system)" in result.stderr


def test_every_test_faketime_sh_names_exists():
    """tests/faketime.sh names the wall clock's readers by node id: a renamed test would end its runs with no
    summary (pytest: "not found"), and CI with them."""
    with open(os.path.join(REPO, "tests", "faketime.sh"), encoding="utf-8") as handle:
        named = re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", handle.read())
    assert named
    for path, test in named:
        assert os.path.exists(os.path.join(REPO, path)), f"tests/faketime.sh names {path}, which does not exist"
        if test:
            with open(os.path.join(REPO, path), encoding="utf-8") as handle:
                assert re.search(rf"^def {test}\(", handle.read(), re.M), f"tests/faketime.sh names {path}::{test}"
