"""The Project: a temporary installation (config, source directory, state directory, its store) and the
CLI run against it, as a subprocess or in this process."""

import datetime as dt
import json
import os
import shutil
import subprocess

from helpers import inprocess
from helpers.commands import cli_command


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
        # Exact counts unless a test asks for noise: the engine's tests compare with tests/helpers/reference.py.
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
        """Run the CLI with this project's config inside this process (tests/helpers/inprocess.py): the same
        exit status, stdout and stderr as `cli`, for behaviours that are not about processes."""
        argv = ["--config", str(self.config)] + (["--now", now] if now else []) + list(args)
        result = inprocess.invoke(argv, self.environment(env))
        if check is not None:
            assert result.returncode == check, (result.returncode, result.stdout, result.stderr)
        return result

    def night_before(self, now):
        """Have the timer run a day before `now` (ISO text), with nothing new to read yet: retention counts at most
        a day past the last successful run (lms_refresh.run.retention.clock), so a test that jumps weeks ahead
        to see it act runs this first, as the nightly timer would have."""
        moment = dt.datetime.fromisoformat(now.replace("Z", "+00:00")) - dt.timedelta(days=1)
        return self.invoke("run", now=moment.isoformat(), check=0)

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

    def serving(self, site=False):
        """Return the serving view's rows (all columns, ordered, days as text) or [] if no store yet: the courses'
        only, or with the site's (course None) too when `site` (as helpers.reference.expected_serving has them)."""
        if not self.has_store():
            return []
        store = self.open_store()
        try:
            return [row for row in store.serving_rows() if site or row[1] is not None]
        finally:
            store.close()

    def grain_rows(self, grain, site=False):
        """Return the serving rows of `grain` (store.periods.GRAINS): the courses', and the site's too (course None)
        when `site`."""
        store = self.open_store()
        try:
            return [row for row in store.period_serving_rows(grain) if site or row[3] is not None]
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
