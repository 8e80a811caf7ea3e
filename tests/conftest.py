"""The suite's fixtures, markers and hooks; what they build lives in the helpers package (tests/helpers/)."""

import os
import shutil

import pytest

from helpers import datasetteserver, mariadbserver
from helpers.lrsserver import VENV as RALPH_VENV, RalphServer
from helpers.moodle_mariadb import create_reader
from helpers.moodledb import READER, READER_PASSWORD, MoodleDatabase
from helpers.pgserver import PostgresServer
from helpers.project import Project

# What the marked tests need, checked before each of them. Without it a test is skipped with a
# sentence saying what to install, except under tests/run.sh, which installs everything and sets
# LMS_REFRESH_REQUIRE_ALL=1: there a missing server, and any other skip, fails the test instead.
REQUIRE_ALL = "LMS_REFRESH_REQUIRE_ALL"

# Under tests/run.sh (and so CI, faketime.sh and the autopkgtest) every property test draws the same
# examples on every run: a failure there is one that reproduces, never a lucky draw that turns CI red
# once. Run pytest without that variable to explore fresh examples. Loaded here, before any test
# module is imported, so that each @settings inherits it. (Not imported otherwise: the package build's
# tests run with Build-Depends only, which have no hypothesis.)
if os.environ.get(REQUIRE_ALL) == "1":
    import hypothesis

    hypothesis.settings.register_profile("reproducible", derandomize=True, database=None)
    hypothesis.settings.load_profile("reproducible")


# Every HTTP server the tests reach listens on loopback (Ralph, tests/helpers' receivers and raw servers). A proxy
# in the environment (http_proxy, https_proxy: a CI machine may reach the internet through one, e.g. for the
# autopkgtest's pip) would carry those requests, urllib's (pings, webhooks) and requests' (the LRS source, the
# Ralph helper) alike, to the proxy, which cannot reach this machine's loopback: "Connection refused" in place
# of the answer under test. Both honour no_proxy, as the program does on purpose (README: "HTTPS_PROXY and
# NO_PROXY from the environment are honoured"), so loopback joins it, in this process and every CLI it starts.
LOOPBACK = ("127.0.0.1", "localhost")
for _name in ("no_proxy", "NO_PROXY"):
    _hosts = [host.strip() for host in os.environ.get(_name, "").split(",") if host.strip()]
    os.environ[_name] = ",".join(_hosts + [host for host in LOOPBACK if host not in _hosts])


def _missing_postgresql():
    import glob
    import importlib.util

    if not glob.glob("/usr/lib/postgresql/*/bin/initdb") or importlib.util.find_spec("psycopg") is None:
        return ("PostgreSQL is not installed: install the Debian packages postgresql and python3-psycopg "
                "(tests/run.sh does)")
    return None


def _missing_ralph():
    if not os.access(os.path.join(RALPH_VENV, "bin", "ralph"), os.X_OK):
        return (f"Ralph is not installed: create {RALPH_VENV} with 'ralph-malph[cli,lrs]==5.1.0' "
                "(tests/run.sh does; $LMS_REFRESH_RALPH_VENV names another place)")
    return None


def _missing_systemd():
    absent = [tool for tool in ("systemd-nspawn", "mmdebstrap") if shutil.which(tool) is None]
    if absent or os.geteuid() != 0:
        return ("booting Debian under systemd needs root and systemd-nspawn and mmdebstrap "
                f"({', '.join(absent) or 'not root'}): "
                "install the Debian packages systemd-container and mmdebstrap and run as root (tests/run.sh does)")
    return None


def _missing_orjson():
    import importlib.util

    if importlib.util.find_spec("orjson") is None:
        return "orjson is not installed: pip install orjson (tests/run.sh does; Debian 13: python3-orjson)"
    return None


def _missing_chromium():
    if shutil.which("chromium") is None:
        return "chromium is not installed: install the Debian package chromium (tests/run.sh does)"
    return None


REQUIREMENTS = {"postgresql": _missing_postgresql, "ralph": _missing_ralph, "systemd": _missing_systemd,
                "orjson": _missing_orjson, "chromium": _missing_chromium, "mariadb": mariadbserver.missing,
                "datasette": datasetteserver.missing}
# The fixtures that reach each kind of server: a test using one is marked without saying so itself.
MARKING_FIXTURES = {"postgres_server": "postgresql", "ralph_server": "ralph", "mariadb_server": "mariadb"}


# The system tests share one built .deb and one booted machine per release (session and module
# fixtures): under pytest-xdist (tests/run.sh runs `-n 3 --dist loadgroup`) they stay together on one
# worker, one after the other, and go first, since they are the longest unit (about 10 minutes): the
# other workers take the rest of the suite meanwhile. Collected last, as their directory's name puts
# them, they ran after everything else (938 s for the host suite, against 1143 s on one process). Only in
# the workers (`workerinput`), where xdist reads the group when its own hook runs after this one.
SYSTEM_GROUP = "system"


# The tiers, fastest first: tests/run.sh runs `fast` alone and stops on its failure before anything slow
# starts, then the others in one session (their workers overlap: the system tests' boots beside the servers'
# tests). A test's tier follows from what it needs, so a new test lands in the right one without saying so.
TIERS = ("fast", "behaviour", "servers", "system")
FAST_DIRECTORIES = ("unit", "repository", "harness")  # a module's own tests, the repository's checks, the harness
SERVER_MARKERS = ("postgresql", "ralph", "mariadb", "chromium", "datasette")


def tier_of(item):
    """Given a collected test (its markers already complete), return the name of its tier."""
    if item.get_closest_marker("system") is not None:
        return "system"
    if any(item.get_closest_marker(marker) is not None for marker in SERVER_MARKERS):
        return "servers"
    directory = os.path.relpath(str(item.path), os.path.dirname(__file__)).split(os.sep)[0]
    return "fast" if directory in FAST_DIRECTORIES else "behaviour"


def pytest_addoption(parser):
    parser.addoption("--tier", action="append", default=[], metavar="NAME[,NAME]",
                     help=f"run only the tests of these tiers ({', '.join(TIERS)}; tests/run.sh names them)")


def _selected_tiers(config):
    chosen = {name.strip() for value in config.getoption("--tier") for name in value.split(",") if name.strip()}
    unknown = chosen - set(TIERS)
    if unknown:
        raise pytest.UsageError(f"--tier: no tier named {', '.join(sorted(unknown))} (the tiers: {', '.join(TIERS)})")
    return chosen


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    grouped = hasattr(config, "workerinput")
    for item in items:
        for fixture, marker in MARKING_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
    chosen = _selected_tiers(config)
    if chosen:
        kept = [item for item in items if tier_of(item) in chosen]
        config.hook.pytest_deselected(items=[item for item in items if tier_of(item) not in chosen])
        items[:] = kept
    if "fast" in chosen:
        items.sort(key=lambda item: "/unit/" not in str(item.path))  # a module's own tests first: soonest found
    for item in items:
        if item.get_closest_marker("system") is not None:
            if item.get_closest_marker("systemd") is None:
                item.add_marker("systemd")
            if grouped:
                item.add_marker(pytest.mark.xdist_group(SYSTEM_GROUP))
    if grouped:
        items.sort(key=lambda item: item.get_closest_marker("system") is None)  # stable: system tests first


def pytest_runtest_setup(item):
    for marker, missing in REQUIREMENTS.items():
        if item.get_closest_marker(marker) is not None:
            reason = missing()
            if reason:
                pytest.skip(reason)


def _no_skip_allowed(report, what):
    if report.skipped and os.environ.get(REQUIRE_ALL) == "1" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (f"{REQUIRE_ALL}=1 (tests/run.sh, which installs everything) allows no skip, "
                           f"but this {what} was skipped: {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    _no_skip_allowed(report, "test")
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _no_skip_allowed(outcome.get_result(), "module")  # e.g. pytest.importorskip at the top of a test module


# Scratch a passing test leaves behind goes with it. pytest keeps every test's tmp_path until the session ends (the
# three latest sessions' even after: pytest 7.2, Debian 12's, has no retention setting), and the tests' PostgreSQL
# server keeps every test's database: the suite needed more than 2.4 GiB of /tmp, which a tmpfs /tmp (Debian 13's
# default) does not have. A failing test's directory and databases stay, for a look at what it left.
_CALL_PASSED = pytest.StashKey[bool]()  # set by pytest_runtest_makereport


def _passed(node):
    return node.stash.get(_CALL_PASSED, False)


@pytest.fixture
def tmp_path(tmp_path, request):
    """pytest's tmp_path, removed once its test has passed (the fixtures that use it are torn down first)."""
    yield tmp_path
    if _passed(request.node):
        shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _drop_new_databases(request):
    """Drop the databases a passing test created on the session's PostgreSQL server (if one runs). Fixtures of a
    wider scope are set up before this one, so what they create outlives the test."""
    before = {server: server.databases() for server in PostgresServer.running}
    yield
    if _passed(request.node):
        for server in PostgresServer.running:
            server.drop_databases(server.databases() - before.get(server, set()))


@pytest.fixture(scope="session")
def postgres_server():
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mariadb_server():
    server = mariadbserver.MariaDBServer()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def store_kind(request):
    return request.param


@pytest.fixture(params=["stdlib", pytest.param("orjson", marks=pytest.mark.orjson)])
def json_parser(request, monkeypatch):
    """Each JSON parser in turn (lms_refresh.sources.json_decoding): in this process and the workers it forks
    through the seam's switch, in the CLI's subprocesses through LMS_REFRESH_JSON_PARSER (read at import)."""
    from lms_refresh.sources import json_decoding

    if request.param == json_decoding.ORJSON and json_decoding.orjson is None:
        pytest.skip(_missing_orjson())  # the marker's check says so first; this holds without the marker too
    before = json_decoding.parser
    json_decoding.use(request.param)
    if request.param == json_decoding.STDLIB:
        monkeypatch.setenv(json_decoding.ENVIRONMENT_VARIABLE, json_decoding.STDLIB)
    else:
        monkeypatch.delenv(json_decoding.ENVIRONMENT_VARIABLE, raising=False)
    yield request.param
    json_decoding.use(before)


@pytest.fixture
def make_project(request, store_kind):
    """Return a factory of Projects on this test's kind of store."""
    server = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    return lambda root: Project(root, server)


@pytest.fixture
def project(tmp_path, make_project):
    """A project on each kind of store: the engine's behaviours must hold on both."""
    return make_project(tmp_path / "p")


@pytest.fixture
def sqlite_project(tmp_path):
    """A project on SQLite, for what only a local file can show (corruption, ownership)."""
    return Project(tmp_path / "p")


@pytest.fixture(scope="session")
def ralph_server():
    server = RalphServer()
    yield server
    server.stop()


@pytest.fixture
def ralph(ralph_server):
    """A real LRS (Ralph) on loopback, empty and healed for each test; one server for the session."""
    ralph_server.reset()
    return ralph_server


@pytest.fixture(scope="session")
def moodle_reader(postgres_server, tmp_path_factory):
    """A role that may only read Moodle's log; returns the file holding its password."""
    postgres_server.admin(f"CREATE ROLE {READER} LOGIN PASSWORD '{READER_PASSWORD}'")
    path = tmp_path_factory.mktemp("moodle") / "moodle-password"
    path.write_text(READER_PASSWORD + "\n")
    path.chmod(0o644)
    return str(path)


@pytest.fixture(scope="session")
def mariadb_reader(mariadb_server, tmp_path_factory):
    """The Moodle reader's account on the MariaDB server; returns the file holding its password."""
    create_reader(mariadb_server)
    path = tmp_path_factory.mktemp("mariadb") / "moodle-password"
    path.write_text(READER_PASSWORD + "\n")
    path.chmod(0o644)
    return str(path)


@pytest.fixture
def moodle(postgres_server, moodle_reader):
    """A new database holding Moodle's log table, readable by the reader role."""
    return MoodleDatabase(postgres_server)
