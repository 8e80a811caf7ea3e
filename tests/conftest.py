"""Shared fixtures: a configured project directory and the installed CLI as a subprocess."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

import inprocess
from lms_refresh.sources.xapi import ADL, COURSE_TYPE
from lrsserver import VENV as RALPH_VENV, RalphServer
from moodledb import READER, READER_PASSWORD, MoodleDatabase
from pgserver import PostgresServer

HOME = "https://lms.example.edu"

# What the marked tests need, checked before each of them. Without it a test is skipped with a
# sentence saying what to install, except under tests/run.sh, which installs everything and sets
# LMS_REFRESH_REQUIRE_ALL=1: there a missing server, and any other skip, fails the test instead.
REQUIRE_ALL = "LMS_REFRESH_REQUIRE_ALL"


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


REQUIREMENTS = {"postgresql": _missing_postgresql, "ralph": _missing_ralph, "systemd": _missing_systemd}
# The fixtures that reach each kind of server: a test using one is marked without saying so itself.
MARKING_FIXTURES = {"postgres_server": "postgresql", "ralph_server": "ralph"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marker in MARKING_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if item.get_closest_marker("system") is not None and item.get_closest_marker("systemd") is None:
            item.add_marker("systemd")


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
    _no_skip_allowed(outcome.get_result(), "test")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _no_skip_allowed(outcome.get_result(), "module")  # e.g. pytest.importorskip at the top of a test module


def cli_command():
    """The installed console script next to this interpreter, else `python -m lms_refresh`."""
    script = os.path.join(os.path.dirname(sys.executable), "lms-refresh")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "lms_refresh"]


def statement(learner="u1", verb="experienced", course="BIO101", timestamp="2026-11-02T10:00:00Z",
              stored=None, score=None, success=None, completion=None, duration=None, id=None):
    """Return one xAPI statement dict with the given facts."""
    result = {}
    if score is not None:
        result["score"] = {"scaled": score}
    if success is not None:
        result["success"] = success
    if completion is not None:
        result["completion"] = completion
    if duration is not None:
        result["duration"] = duration
    body = {
        "id": id or str(uuid.uuid4()),
        "actor": {"objectType": "Agent", "account": {"homePage": HOME, "name": learner}},
        "verb": {"id": ADL + verb},
        "object": {"objectType": "Activity", "id": f"{HOME}/course/{course}/quiz/1"},
        "context": {"contextActivities": {"parent": [{"id": f"{HOME}/course/{course}",
                                                      "definition": {"type": COURSE_TYPE}}]}},
        "timestamp": timestamp,
        "stored": stored or timestamp,
    }
    if result:
        body["result"] = result
    return body


def reachable_cli(directory):
    """The CLI as a command that another user can run: a clone under /root (0700) is out of its reach.

    Copies the package into `directory` (which that user can traverse) and runs it with the real
    interpreter behind this one (a virtualenv's python is a symlink inside the clone).
    """
    import lms_refresh

    code = directory / "code"
    shutil.copytree(os.path.dirname(lms_refresh.__file__), code / "lms_refresh",
                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    return ["env", f"PYTHONPATH={code}", "PYTHONDONTWRITEBYTECODE=1",
            os.path.realpath(sys.executable), "-m", "lms_refresh"]


# Runs a command as the grandchild of a small interpreter and reports its peak RSS. Measured from
# the test process directly, a child's ru_maxrss starts at the RSS the test process had when it
# forked (Linux keeps the larger high-water mark across exec), which says nothing of the command.
_PEAK_RSS = """\
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)  # the child's peak, and its reaped children's (the parsing workers)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_for_peak_rss(command, environment):
    """Run `command`; return (exit code, stderr, peak RSS in MiB of it and of its children)."""
    with tempfile.TemporaryDirectory() as scratch:
        figure = os.path.join(scratch, "maxrss")
        result = subprocess.run([sys.executable, "-c", _PEAK_RSS, figure] + list(command),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment)
        with open(figure) as handle:
            return result.returncode, result.stderr.decode(), int(handle.read()) / 1024


def collect_batches(source, window, index=None):
    """Read a source's whole window, after restoring `index` (its saved state) if given:
    (events, quarantined records, source state)."""
    events, quarantined, state = [], [], {}
    if index is not None:
        source.restore(lambda paths: {path: index[path] for path in paths if path in index})
    for batch in source.batches(window):
        events += batch.events
        quarantined += batch.quarantined
        state.update(batch.state)
    return events, quarantined, state


def voiding(target, stored):
    return {"id": str(uuid.uuid4()), "actor": {"mbox": "mailto:teacher@example.edu"},
            "verb": {"id": ADL + "voided"}, "object": {"objectType": "StatementRef", "id": target},
            "stored": stored, "timestamp": stored}


class Project:
    """A temporary installation: config, source directory, state directory, and its store."""

    def __init__(self, root, postgres=None, database=None, source=None):
        self.root = root
        # [source] keys other than the default NDJSON directory (an LRS, a Moodle database)
        self.source_settings = source
        self.source = root / "inbox"
        self.state = root / "state"
        self.config = root / "config.toml"
        self.postgres = postgres
        self.database = database or (postgres.new_database() if postgres else None)
        self.source.mkdir(parents=True)
        self.configure()

    def configure(self, extra_top="", retry_attempts=1, privacy='method = "none"', **window):
        settings = {"bootstrap_days": 30, "safety_lag": '"0s"', "lookback": '"0s"'}
        settings.update(window)
        lines = ['timezone = "Europe/Paris"', f'state_directory = "{self.state}"', extra_top, "[window]"]
        lines += [f"{k} = {v}" for k, v in settings.items()]
        if self.source_settings:
            lines += ["[source]"] + [f"{k} = {json.dumps(v)}" for k, v in self.source_settings.items()]
        else:
            lines += ["[source]", 'type = "xapi-ndjson"', f'path = "{self.source}"', "batch_size = 500"]
        lines += ["[retry]", f"attempts = {retry_attempts}", 'delay = "1s"']
        # Exact counts unless a test asks for noise: the engine's tests compare with tests/reference.py.
        lines += ["[privacy]", privacy]
        if self.postgres:
            lines += ["[store]", 'type = "postgresql"', f'url = "{self.postgres.url(self.database)}"',
                      f'password_file = "{self.postgres.password_file}"']
        self.config.write_text("\n".join(lines) + "\n")

    @property
    def store(self):
        return self.state / "metrics.sqlite"

    def write(self, name, statements):
        """Write statements (dicts or raw strings) as one NDJSON file in the source directory."""
        path = self.source / name
        with open(path, "a", encoding="utf-8") as handle:
            for item in statements:
                handle.write((item if isinstance(item, str) else json.dumps(item)) + "\n")
        return path

    def cli_args(self, *args, now=None):
        """The command line that runs the installed CLI with this project's config."""
        return cli_command() + ["--config", str(self.config)] + (["--now", now] if now else []) + list(args)

    def environment(self, env=None):
        """The environment of a CLI run here: this one without systemd's variables, plus `env`."""
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("STATE_DIRECTORY", "JOURNAL_STREAM", "INVOCATION_ID", "NOTIFY_SOCKET")}
        environment.update(env or {})
        return environment

    def cli(self, *args, now=None, env=None, check=None, **kwargs):
        """Run the installed CLI with this project's config; return the CompletedProcess."""
        result = subprocess.run(self.cli_args(*args, now=now), capture_output=True, text=True,
                                env=self.environment(env), timeout=300, **kwargs)
        if check is not None:
            assert result.returncode == check, (result.returncode, result.stdout, result.stderr)
        return result

    def invoke(self, *args, now=None, env=None, check=None):
        """Run the CLI with this project's config inside this process (tests/inprocess.py): the same
        exit status, stdout and stderr as `cli`, for behaviours that are not about processes."""
        argv = ["--config", str(self.config)] + (["--now", now] if now else []) + list(args)
        result = inprocess.invoke(argv, self.environment(env))
        if check is not None:
            assert result.returncode == check, (result.returncode, result.stdout, result.stderr)
        return result

    def start(self, *args, now=None):
        command = cli_command() + ["--config", str(self.config)] + (["--now", now] if now else []) + list(args)
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("STATE_DIRECTORY", "JOURNAL_STREAM", "INVOCATION_ID")}
        environment["PYTHONFAULTHANDLER"] = "1"  # a test that finds it stuck can ask where (SIGABRT)
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)

    def open_store(self):
        from lms_refresh.config import load_config
        from lms_refresh.store import open_store

        return open_store(load_config(str(self.config), {}), {}, create=True, read_only=True)

    def query(self, statement, parameters=()):
        """Run a read-only query (with ? placeholders) against the store, whichever it is."""
        store = self.open_store()
        try:
            return [tuple(row) for row in store.execute(statement, parameters).fetchall()]
        finally:
            store.close()

    def has_store(self):
        from lms_refresh.config import load_config
        from lms_refresh.store import store_exists

        return store_exists(load_config(str(self.config), {}), {})

    def serving(self):
        """Return the serving view's rows (all columns, ordered, days as text) or [] if no store yet."""
        if not self.has_store():
            return []
        store = self.open_store()
        try:
            return store.serving_rows()
        finally:
            store.close()

    def meta(self):
        return dict(self.query("SELECT key, value FROM meta"))

    def runs(self):
        """The run log: (kind, outcome, exit code, window since, window until), oldest first."""
        store = self.open_store()
        try:
            return [tuple(row) for row in store.execute(
                "SELECT kind, outcome, exit_code, window_since, window_until FROM runs "
                f"ORDER BY {store.run_order}").fetchall()]
        finally:
            store.close()

    def dump(self):
        """Return the serving view as text, for byte-identical comparisons."""
        return "\n".join(repr(row) for row in self.serving())

    def copy_to(self, root):
        """Copy this project's state and store (not its source) into another project at `root`."""
        database = self.postgres.new_database(template=self.database) if self.postgres else None
        other = Project(root, self.postgres, database)
        other.source.rmdir()
        other.source = self.source
        other.configure()
        if self.state.exists():
            shutil.copytree(self.state, other.state)
        return other


@pytest.fixture(scope="session")
def postgres_server():
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def store_kind(request):
    return request.param


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


@pytest.fixture
def moodle(postgres_server, moodle_reader):
    """A new database holding Moodle's log table, readable by the reader role."""
    return MoodleDatabase(postgres_server)
