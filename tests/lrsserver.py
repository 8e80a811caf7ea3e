"""A real xAPI LRS for the tests: Ralph (PyPI ralph-malph 5.x) on loopback (../shared/recipes/servers.md).

Ralph runs in its own virtualenv (`.venv-ralph`, made by tests/run.sh) so its
dependencies never meet ours. Its file-system backend is patched to append
(stock 5.1.0 refuses a second write), and a small ASGI layer in front of it
can be told, through a JSON file, to fail chosen GET requests: that is how the
tests make page 7 of 10 answer 500 or a `more` link point at another host.
Everything else — validation, `stored`, paging, filtering — is Ralph's own.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("LMS_REFRESH_RALPH_VENV", os.path.join(ROOT, ".venv-ralph"))

SERVE = r'''
import json, os, sys
import uvicorn
from ralph.backends.data.base import BaseOperationType
from ralph.backends.lrs.fs import FSLRSBackend

# Stock 5.1.0 answers 500 on every write after the first: it will not append to its file.
FSLRSBackend.default_operation_type = BaseOperationType.APPEND
from ralph.api import app

FAULTS = sys.argv[2]


class Faults:
    """Answer chosen GET /statements requests (counted per plan) with a canned response."""

    def __init__(self, app):
        self.app, self.counts = app, {}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].rstrip("/").endswith("/statements") \
                and os.path.exists(FAULTS):
            with open(FAULTS) as handle:
                plan = json.load(handle)
            number = self.counts[plan["id"]] = self.counts.get(plan["id"], 0) + 1
            if plan["first"] <= number <= plan["last"]:
                body = json.dumps(plan.get("body", {"error": "injected"})).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                headers += [(k.encode(), v.encode()) for k, v in plan.get("headers", {}).items()]
                await send({"type": "http.response.start", "status": plan["status"], "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


tls = dict(ssl_certfile=sys.argv[3], ssl_keyfile=sys.argv[4]) if len(sys.argv) > 3 else {}
uvicorn.run(Faults(app), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", **tls)
'''


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RalphServer:
    USER, PASSWORD = "lms-refresh", "lrs-secret"

    def __init__(self, tls=False):
        """Start Ralph; with `tls`, over HTTPS with a fresh self-signed certificate (`self.certificate`)."""
        python = os.path.join(VENV, "bin", "python")
        if not os.path.exists(python):
            raise RuntimeError(f"Ralph's virtualenv {VENV} is missing; tests/run.sh creates it.")
        self.base = tempfile.mkdtemp(prefix="lmsr-ralph-")
        self.port = free_port()
        self.faults = os.path.join(self.base, "faults.json")
        data = os.path.join(self.base, "data")
        os.mkdir(data)
        auth = os.path.join(self.base, "auth.json")
        environment = dict(os.environ, RALPH_RUNSERVER_BACKEND="fs", RALPH_AUTH_FILE=auth,
                           RALPH_BACKENDS__LRS__FS__DEFAULT_DIRECTORY_PATH=data,
                           RALPH_BACKENDS__DATA__FS__DEFAULT_DIRECTORY_PATH=data)
        subprocess.run([os.path.join(VENV, "bin", "ralph"), "auth", "-u", self.USER, "-p", self.PASSWORD,
                        "-s", "all", "-M", f"mailto:{self.USER}@example.org", "-w"],
                       check=True, capture_output=True, env=environment, timeout=120)
        script = os.path.join(self.base, "serve.py")
        with open(script, "w") as handle:
            handle.write(SERVE)
        arguments = [python, script, str(self.port), self.faults]
        self.certificate, self.verify, scheme = None, True, "http"
        if tls:
            self.certificate, key = os.path.join(self.base, "cert.pem"), os.path.join(self.base, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", key, "-out", self.certificate], check=True, capture_output=True, timeout=60)
            arguments += [self.certificate, key]
            self.verify, scheme = self.certificate, "https"
        self.log = open(os.path.join(self.base, "server.log"), "w")
        self.process = subprocess.Popen(arguments, env=environment, stdout=self.log, stderr=subprocess.STDOUT,
                                        cwd=self.base)
        self.endpoint = f"{scheme}://127.0.0.1:{self.port}/xAPI/"
        self.password_file = os.path.join(self.base, "lrs-password")
        with open(self.password_file, "w") as handle:
            handle.write(self.PASSWORD + "\n")
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{scheme}://127.0.0.1:{self.port}/__heartbeat__", timeout=2, verify=self.verify).ok:
                    break
            except requests.ConnectionError:  # SSLError included: not listening yet
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Ralph did not start: {open(self.log.name).read()[-2000:]}")
            time.sleep(0.2)

    def post(self, statements, chunk=500):
        """Store statements through Ralph's HTTP API; Ralph sets `stored`."""
        for start in range(0, len(statements), chunk):
            response = requests.post(f"{self.endpoint}statements", json=statements[start:start + chunk],
                                     auth=(self.USER, self.PASSWORD), timeout=60, verify=self.verify,
                                     headers={"X-Experience-API-Version": "1.0.3"})
            assert response.status_code == 200, (response.status_code, response.text[:500])

    def all_statements(self):
        """Every statement as Ralph stores it (with `stored`), read back over its API."""
        statements, url, params = [], f"{self.endpoint}statements", {"limit": 100}
        while url:
            response = requests.get(url, params=params, auth=(self.USER, self.PASSWORD), timeout=60,
                                    verify=self.verify, headers={"X-Experience-API-Version": "1.0.3"})
            response.raise_for_status()
            page = response.json()
            statements += page["statements"]
            url = requests.compat.urljoin(url, page["more"]) if page.get("more") else None
            params = None
        return statements

    def inject(self, status, first=1, last=10**6, headers=None, body=None):
        """Answer GET /statements requests number `first`..`last` (from now on) with `status`."""
        plan = {"id": str(uuid.uuid4()), "first": first, "last": last, "status": status,
                "headers": headers or {}, "body": body if body is not None else {"error": "injected"}}
        with open(self.faults + ".tmp", "w") as handle:
            json.dump(plan, handle)
        os.replace(self.faults + ".tmp", self.faults)

    def heal(self):
        if os.path.exists(self.faults):
            os.remove(self.faults)

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)
