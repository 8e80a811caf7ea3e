"""The markers (pyproject.toml, tests/conftest.py): a test that needs what is missing is skipped with a
sentence saying what to install, and under tests/run.sh (LMS_REFRESH_REQUIRE_ALL=1) fails instead. Each
check runs an inner pytest on one real test of the suite, with the requirement taken away."""

import os
import re
import subprocess
import sys

import pytest

from helpers.paths import REPO

ROOT = REPO  # the repository, or the copy debian/tests/suite runs in


def inner_pytest(node, **environment):
    env = {k: v for k, v in os.environ.items() if k != "LMS_REFRESH_REQUIRE_ALL"}
    env.update(environment)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", node],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


@pytest.mark.parametrize("node, take_away, reason", [
    ("tests/sources/test_lrs_against_ralph.py::test_a_wrong_password_exits_78",
     {"LMS_REFRESH_RALPH_VENV": "/nonexistent/venv-ralph"},
     "Ralph is not installed: create /nonexistent/venv-ralph with 'ralph-malph[cli,lrs]==5.1.0' (tests/run.sh does"),
    ("tests/operations/test_datasette_served.py::test_datasette_reads_the_metadata_as_generated",
     {"LMS_REFRESH_DATASETTE_VENV": "/nonexistent/venv-datasette"},
     "Datasette is not installed: create /nonexistent/venv-datasette with 'datasette==0.65.5' (tests/run.sh does"),
    ("tests/sources/test_moodle_on_mariadb.py::test_the_session_refuses_to_write_whatever_the_grants",
     {"PATH": "/nonexistent"},
     "MariaDB is not installed: install the Debian packages mariadb-server and python3-mysqldb (tests/run.sh does)"),
    ("tests/system/test_systemd.py::test_exposure_is_at_most_2", {"PATH": "/nonexistent"},
     "booting Debian under systemd needs root and systemd-nspawn and mmdebstrap (systemd-nspawn, mmdebstrap): "
     "install the Debian packages systemd-container and mmdebstrap"),
])
def test_a_missing_requirement_is_a_skip_that_says_what_to_install_and_a_failure_under_run_sh(node, take_away, reason):
    skipped = inner_pytest(node, **take_away)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert re.search(r"^\d+ skipped in ", skipped.stdout, re.M) and reason in skipped.stdout, skipped.stdout
    required = inner_pytest(node, LMS_REFRESH_REQUIRE_ALL="1", **take_away)
    assert required.returncode == 1, required.stdout + required.stderr
    assert re.search(r"^\d+ errors? in ", required.stdout, re.M) and "skipped" not in required.stdout.splitlines()[-1]
    assert ("LMS_REFRESH_REQUIRE_ALL=1 (tests/run.sh, which installs everything) allows no skip, but this test was "
            f"skipped: {reason}") in required.stdout, required.stdout


def test_a_module_skipped_at_import_fails_under_run_sh_too(tmp_path):
    """pytest.importorskip at a module's top (python3-hypothesis missing, say) skips a whole module."""
    probe = tmp_path / "test_probe.py"
    probe.write_text('import pytest\npytest.importorskip("no_such_module", reason="no_such_module is missing")\n'
                     "def test_nothing():\n    pass\n")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-q", "-rs",
               "--rootdir", str(tmp_path), str(probe)]
    env = {k: v for k, v in os.environ.items() if k != "LMS_REFRESH_REQUIRE_ALL"}
    env["PYTHONPATH"] = os.path.join(ROOT, "tests")  # this suite's conftest, as a plugin
    skipped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert skipped.returncode == 5 and "1 skipped" in skipped.stdout, skipped.stdout  # 5: no test ran
    required = subprocess.run(command, capture_output=True, text=True, env=dict(env, LMS_REFRESH_REQUIRE_ALL="1"),
                              timeout=300)
    assert required.returncode == 2 and "1 error" in required.stdout, required.stdout  # 2: collection failed
    assert ("allows no skip, but this module was skipped: no_such_module is missing") in required.stdout


def test_tests_using_a_server_carry_its_marker_without_saying_so():
    listed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only",
                             "-m", "postgresql", "tests/store/test_every_store_alike.py",
                             "tests/store/test_postgresql_store.py", "tests/sources/test_moodle_against_postgresql.py"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    nodes = [line for line in listed.stdout.splitlines() if "::" in line]
    assert "tests/store/test_every_store_alike.py::test_bootstrap_with_no_prior_state[postgresql]" in nodes
    assert "tests/store/test_every_store_alike.py::test_bootstrap_with_no_prior_state[sqlite]" not in nodes
    # By its fixture.
    assert "tests/store/test_every_store_alike.py::test_both_stores_give_identical_serving_tables" in nodes
    assert any(node.startswith("tests/store/test_postgresql_store.py::test_two_hosts") for node in nodes)
    assert any(node.startswith("tests/sources/test_moodle_against_postgresql.py::") for node in nodes)
    assert not any(node.startswith("tests/store/test_postgresql_store.py::test_grant_reader_on_sqlite")
                   for node in nodes)
