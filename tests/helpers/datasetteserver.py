"""A real Datasette for the tests: PyPI's datasette 0.65.5 in its own virtualenv (`.venv-datasette`, made by
tests/run.sh), serving a publication read-only on loopback, started the way a dashboard author starts it.

Its own virtualenv, as Ralph has, so that its dependencies (uvicorn, Jinja2, PyYAML, pint ...) never meet ours.
"""

import os
import subprocess
import tempfile
import time

import requests

from helpers.paths import REPO
from helpers.ports import held_port

VERSION = "0.65.5"
VENV = os.environ.get("LMS_REFRESH_DATASETTE_VENV", os.path.join(REPO, ".venv-datasette"))
PROGRAM = os.path.join(VENV, "bin", "datasette")


def missing():
    """Return why the Datasette tests cannot run here, or None."""
    if not os.access(PROGRAM, os.X_OK):
        return (f"Datasette is not installed: create {VENV} with 'datasette=={VERSION}' "
                "(tests/run.sh does; $LMS_REFRESH_DATASETTE_VENV names another place)")
    return None


class DatasetteServer:
    """`datasette serve ARGS` (the words after `datasette` of the command a user is told to run) on a free
    loopback port, until stop(). `url(path)` is the address of a page of it."""

    def __init__(self, arguments):
        self.holder = held_port()  # uvicorn binds with SO_REUSEADDR: the port stays ours until it listens
        self.port = self.holder.getsockname()[1]
        self.log = tempfile.NamedTemporaryFile(prefix="datasette-", suffix=".log", delete=False)
        # -h: loopback only, whatever the command said; no browser, no reload.
        self.process = subprocess.Popen([PROGRAM, *arguments, "-h", "127.0.0.1", "-p", str(self.port)],
                                        stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env={**os.environ, "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"})
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def output(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def _wait(self, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"datasette exited with {self.process.returncode}:\n{self.output()}")
            try:
                if requests.get(self.url("/-/versions.json"), timeout=5).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"datasette did not answer within {seconds} s:\n{self.output()}")

    def get(self, path, **params):
        """GET `path`; assert a 200 and return the response."""
        response = requests.get(self.url(path), params=params, timeout=30)
        assert response.status_code == 200, (path, response.status_code, response.text[:2000])
        return response

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.holder.close()
        self.log.close()
        os.unlink(self.log.name)
