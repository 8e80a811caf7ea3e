"""A real xAPI LRS for the tests: Ralph (PyPI ralph-malph 5.x) on loopback (../shared/recipes/servers.md).

Ralph runs in its own virtualenv (`.venv-ralph`, made by tests/run.sh) so its
dependencies never meet ours. Its file-system backend is patched to append
(stock 5.1.0 refuses a second write), and a small ASGI layer in front of it
can be told, through a JSON file, to fail chosen GET requests: that is how the
tests make page 7 of 10 answer 500 or a `more` link point at another host —
or misbehave as a hostile server would: trickle a body one byte at a time,
stream hundreds of megabytes, or send a new `more` link forever.
Everything else — validation, `stored`, paging, filtering — is Ralph's own.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

import requests

from helpers.paths import REPO
from helpers.ports import held_port

ROOT = REPO  # the repository, or the copy debian/tests/suite runs in
VENV = os.environ.get("LMS_REFRESH_RALPH_VENV", os.path.join(ROOT, ".venv-ralph"))

SERVE = r'''
import asyncio, json, os, sys, uuid
import uvicorn
from ralph.backends.data.base import BaseOperationType
from ralph.backends.lrs.fs import FSLRSBackend

# Stock 5.1.0 answers 500 on every write after the first: it will not append to its file.
FSLRSBackend.default_operation_type = BaseOperationType.APPEND
from ralph.api import app

FAULTS = sys.argv[2]


class Faults:
    """Answer chosen GET /statements requests (counted per plan) with a canned or hostile response.

    A plan's "mode": "canned" (status, headers, body), "trickle" (a 200 whose
    body comes one byte every `interval` seconds), "huge" (a 200 streaming
    `size` bytes, with or without Content-Length) or "endless" (an empty page
    whose `more` link is new every time, after `interval` seconds).
    """

    def __init__(self, app):
        self.app, self.counts = app, {}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].rstrip("/").endswith("/statements") \
                and os.path.exists(FAULTS):
            with open(FAULTS) as handle:
                plan = json.load(handle)
            number = self.counts[plan["id"]] = self.counts.get(plan["id"], 0) + 1
            if plan["first"] <= number <= plan["last"]:
                await getattr(self, plan.get("mode", "canned"))(plan, send)
                return
        await self.app(scope, receive, send)

    async def canned(self, plan, send):
        body = json.dumps(plan.get("body", {"error": "injected"})).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.encode(), v.encode()) for k, v in plan.get("headers", {}).items()]
        await send({"type": "http.response.start", "status": plan["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def trickle(self, plan, send):
        body = json.dumps(plan.get("body", {"statements": []})).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        for byte in body:
            await send({"type": "http.response.body", "body": bytes([byte]), "more_body": True})
            await asyncio.sleep(plan["interval"])
        await send({"type": "http.response.body", "body": b""})

    async def huge(self, plan, send):
        headers = [(b"content-type", b"application/json")]
        if plan.get("length"):
            headers.append((b"content-length", str(plan["size"]).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        block = b'{"statements": [' + b" " * (65536 - 16)
        for _ in range(plan["size"] // len(block)):
            await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def endless(self, plan, send):
        await asyncio.sleep(plan.get("interval", 0))
        body = json.dumps({"statements": [], "more": f"/xAPI/statements?page={uuid.uuid4()}"}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


tls = dict(ssl_certfile=sys.argv[3], ssl_keyfile=sys.argv[4]) if len(sys.argv) > 3 else {}
uvicorn.run(Faults(app), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", **tls)
'''


class RalphServer:
    USER, PASSWORD = "lms-refresh", "lrs-secret"

    def __init__(self, tls=False):
        """Start Ralph; with `tls`, over HTTPS with a fresh self-signed certificate (`self.certificate`)."""
        python = os.path.join(VENV, "bin", "python")
        if not os.path.exists(python):
            raise RuntimeError(f"Ralph's virtualenv {VENV} is missing; tests/run.sh creates it.")
        self.base = tempfile.mkdtemp(prefix="lmsr-ralph-")
        self.port_holder = held_port()  # held until the server stops: nothing else is given the port meanwhile
        self.port = self.port_holder.getsockname()[1]
        self.faults = os.path.join(self.base, "faults.json")
        data = os.path.join(self.base, "data")
        os.mkdir(data)
        auth = os.path.join(self.base, "auth.json")
        # Its own history file: Ralph's default (~/.config/ralph/history.json) is shared by every
        # Ralph of the user and rewritten whole on each write, so two servers at once (tests/faketime.sh
        # runs two suites side by side) corrupted it and Ralph answered POSTs with 500.
        environment = dict(os.environ, RALPH_RUNSERVER_BACKEND="fs", RALPH_AUTH_FILE=auth,
                           RALPH_HISTORY_FILE=os.path.join(self.base, "history.json"),
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
            assert response.status_code == 200, (response.status_code, response.text[:500], self.log_tail())

    def log_tail(self, characters=3000):
        """The end of Ralph's own log, for a failure message."""
        self.log.flush()
        with open(self.log.name) as handle:
            return handle.read()[-characters:]

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

    def inject(self, status=200, first=1, last=10**6, headers=None, body=None, mode="canned", **details):
        """Answer GET /statements requests number `first`..`last` (from now on) with `status`, or
        misbehave as `mode` says (see Faults in SERVE; `details`: interval, size, length)."""
        plan = {"id": str(uuid.uuid4()), "first": first, "last": last, "status": status, "mode": mode,
                "headers": headers or {}, "body": body if body is not None else {"error": "injected"}, **details}
        with open(self.faults + ".tmp", "w") as handle:
            json.dump(plan, handle)
        os.replace(self.faults + ".tmp", self.faults)

    def heal(self):
        if os.path.exists(self.faults):
            os.remove(self.faults)

    def reset(self):
        """Empty the LRS and heal it: what a new server would be, without the seconds it takes to start.
        The file-system backend reads its file on every request, so a deleted file is an empty LRS."""
        self.heal()
        data = os.path.join(self.base, "data")
        for name in os.listdir(data):
            os.remove(os.path.join(data, name))

    def stop(self):
        self.process.terminate()
        try:
            # uvicorn waits for open responses on SIGTERM, and a hostile one (a trickle the client gave up on)
            # goes on for minutes; nothing of a throwaway server needs keeping.
            self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.port_holder.close()
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)


class HeldLrs:
    """A minimal LRS on loopback that serves fixed statements and holds one request until released.

    A run blocked in that request holds its lock (and, past the first request,
    which only asks how far the LRS is consistent, its store transaction) for
    as long as a test needs — no timing involved, and nothing that a run
    refuses to open (export directories hold regular files only).
    """

    PASSWORD = "held-secret"

    def __init__(self, root, statements, hold_at=2):
        import http.server
        import threading

        self.arrived, self.released, self.requests = threading.Event(), threading.Event(), 0
        held = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                held.requests += 1
                number = held.requests
                if number == hold_at:
                    held.arrived.set()
                    held.released.wait(300)
                body = json.dumps({"statements": statements if number > 1 else []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.password_file = os.path.join(str(root), "held-lrs-password")
        with open(self.password_file, "w") as handle:
            handle.write(self.PASSWORD + "\n")
        self.source = {"type": "xapi-lrs", "endpoint": f"http://127.0.0.1:{self.server.server_address[1]}/xAPI/",
                       "username": "lms-refresh", "password_file": self.password_file, "request_attempts": 1,
                       "overlap": "20d"}

    def wait_until_held(self, process, seconds=60):
        """Wait until a run is blocked in the held request (or fail if it ended first)."""
        deadline = time.monotonic() + seconds
        while not self.arrived.wait(0.05):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never reached the held request"

    def release(self):
        self.released.set()

    def stop(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
