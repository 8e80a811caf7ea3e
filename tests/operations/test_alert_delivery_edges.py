"""Alert and ping deliveries against receivers that misbehave: a redirect, an answer that trickles in, and
a run that finds the lock held after its /start ping."""

import fcntl
import http.server
import socket
import threading
import time

import pytest

from helpers.receiver import Receiver
from helpers.statements import statement


@pytest.fixture
def project(sqlite_project):
    return sqlite_project


NOW = "2026-11-03T04:15:00+01:00"


class Redirecting:
    """A webhook that answers every POST with `code` to /landed, and records what it is sent."""

    def __init__(self, code):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                received.append((self.command, self.path, self.rfile.read(length)))

            def do_POST(self):
                self._record()
                if self.path.startswith("/landed"):
                    self.send_response(200)
                else:
                    self.send_response(code)
                    self.send_header("Location", "/landed")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def trickling_server():
    """A server that answers one byte of its status line every 0.5 s: each read returns within any timeout
    of a second or more, the whole answer takes minutes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve():
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=trickle, args=(connection,), daemon=True).start()

    def trickle(connection):
        try:
            connection.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                connection.sendall(bytes([byte]))
                time.sleep(0.5)
        except OSError:
            pass
        finally:
            connection.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def with_alerts(project, tmp_path, **files):
    lines = []
    for key, url in files.items():
        (tmp_path / key).write_text(url + "\n")
        lines.append(f'{key} = "{tmp_path / key}"')
    lines.append('timeout = "2s"')
    project.config.write_text(project.config.read_text() + "\n[alerts]\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize("code", [301, 302, 303])
def test_a_webhook_that_redirects_is_not_reported_as_delivered(project, tmp_path, code):
    """urllib turns a redirected POST into a GET without the body: the alert never reaches anyone, so the
    channel has failed (exit 1, the only channel), not 'Alert delivered'."""
    server = Redirecting(code)
    try:
        with_alerts(project, tmp_path, webhook_url_file=f"{server.url}/hook/secret-token")
        result = project.invoke("alert", "--exit-status", "65")
        delivered = [body for _, path, body in server.received if path.startswith("/landed") and body]
        assert delivered or (result.returncode == 1 and "Alert delivered" not in result.stderr), (
            server.received, result.stderr)
    finally:
        server.server.shutdown()


def test_a_webhook_that_trickles_its_answer_does_not_hold_the_alert_past_its_timeout(project, tmp_path):
    with_alerts(project, tmp_path, webhook_url_file=f"{trickling_server()}/hook/secret-token")
    began = time.monotonic()
    process = project.start("alert", "--exit-status", "65")
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    # timeout = "2s", one retry at most: seconds, where the unbounded exchange took 500 s (1,000 bytes, 0.5 s each)
    assert time.monotonic() - began < 40, stderr
    assert process.returncode == 1 and "secret-token" not in stderr


def test_a_run_that_finds_the_lock_held_leaves_no_unfinished_healthchecks_start(project, tmp_path):
    """Healthchecks marks a check down when a /start is not followed by a finish within its grace time: a
    run that found the lock held (exit 0, nothing to do) must not leave one."""
    receiver = Receiver()
    try:
        with_alerts(project, tmp_path, healthchecks_url_file=f"{receiver.url}/ping/secret-token")
        project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
        project.invoke("run", now=NOW, check=0)
        receiver.received.clear()
        with open(project.state / "refresh.lock", "r+") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            result = project.cli("run", now="2026-11-04T04:15:00+01:00")
        assert result.returncode == 0 and "Another refresh holds the lock" in result.stderr
        paths = receiver.paths()
        assert paths.count("/ping/secret-token/start") <= len([p for p in paths if not p.endswith("/start")]), paths
    finally:
        receiver.server.shutdown()


def test_a_sendmail_that_queues_and_exits_0_is_a_delivery_even_if_its_child_lingers(tmp_path):
    """An MTA may hand the mail to a background delivery process and exit 0: the alert was accepted. A
    child that keeps the inherited output open made the alert wait out its timeout and call the mail failed."""
    from lms_refresh.config.sections import Alerts
    from lms_refresh.ops.alerts import compose, deliver

    stub = tmp_path / "sendmail"
    stub.write_text(f"#!/bin/sh\ncat > {tmp_path / 'mail.txt'}\n( sleep 30 ) &\nexit 0\n")
    stub.chmod(0o755)
    alert = compose("lms-refresh.service", "69", "exit-code", invocation=None, last_run=None, lines=[], secrets=[])
    # No clock in the assertion: before the fix, the lingering child outlived the timeout and the mail was
    # reported failed, (1, 0).
    settings = Alerts(mail_to="data-team@example.edu", sendmail=str(stub), webhook_url_file=None, timeout=10,
                      healthchecks_url_file=None)
    assert deliver(alert, settings, {}) == (1, 1)


def test_a_lock_held_past_the_schedule_is_stale_to_every_monitor(project, tmp_path):
    """A lock held night after night (a run that never ends, a lock that is not a run's) made every run exit 0 with
    a success ping to Healthchecks, nothing refreshed. The exit stays 0; once the data is stale for the schedule the
    ping is a failure saying so, `status --check` is CRITICAL and the textfile keeps its last success."""
    receiver = Receiver()
    try:
        with_alerts(project, tmp_path, healthchecks_url_file=f"{receiver.url}/ping/secret-token")
        prom = tmp_path / "lms_refresh.prom"
        project.config.write_text(project.config.read_text() + f'\n[monitoring]\ntextfile = "{prom}"\n')
        project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
        project.invoke("run", now=NOW, check=0)
        written = prom.read_text()
        receiver.received.clear()
        with open(project.state / "refresh.lock", "r+") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.write("4242 dashboards\n")
            held.flush()
            fresh = project.cli("run", now="2026-11-03T05:00:00+01:00")  # the same morning: not stale yet
            assert fresh.returncode == 0 and "Another refresh holds the lock (held by pid 4242 on dashboards)" \
                in fresh.stderr
            assert receiver.paths() == ["/ping/secret-token/start", "/ping/secret-token"]
            receiver.received.clear()
            late = project.cli("run", now="2026-11-05T04:15:00+01:00")  # Wednesday's run and Thursday's missed
            assert late.returncode == 0 and "Another refresh holds the lock" in late.stderr
            assert receiver.paths() == ["/ping/secret-token/start", "/ping/secret-token/fail"]
            assert receiver.received[-1][1].decode() == (
                "Another refresh holds the lock (held by pid 4242 on dashboards) and the data is stale: the last "
                "success started at 2026-11-03T04:15+01:00, before the run due at 2026-11-04T04:15+01:00 (grace "
                "120 min).")
            check = project.invoke("status", "--check", now="2026-11-05T04:20:00+01:00")
        assert check.returncode == 2 and "LMS-REFRESH CRITICAL - stale: the last success started" in check.stdout
        assert prom.read_text() == written
    finally:
        receiver.server.shutdown()
