"""The xAPI LRS source against a real, independently written LRS (Ralph), started by the harness."""

import datetime as dt
import json
import socket
import threading
import time
import uuid

import pytest

from helpers.lrs_sample import PARIS, lrs_project, post_then_mark, sample_statements, text
from helpers.lrsserver import RalphServer
from helpers.ports import unused_port
from helpers.project import Project
from helpers.reference import expected_serving


def ndjson_twin(root, statements):
    """A project reading the same statements (as the LRS stored them) from an NDJSON file."""
    twin = Project(root)
    twin.write("lrs-export.ndjson", statements)
    return twin


def test_lrs_refreshes_equal_the_ndjson_source_of_the_same_statements(tmp_path, ralph, store_kind, request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    statements = sample_statements(3)
    first, second = statements[:len(statements) * 3 // 5], statements[len(statements) * 3 // 5:]
    assert len(statements) > 1500 and any(s["verb"]["id"].endswith("voided") for s in second)
    project = lrs_project(tmp_path / "lrs", ralph, postgres)
    t1 = post_then_mark(ralph, first)
    project.invoke("run", now=text(t1), check=0)
    t2 = post_then_mark(ralph, second)
    result = project.invoke("-v", "run", now=text(t2), check=0)
    assert "Refresh committed" in result.stderr

    stored = ralph.all_statements()  # with the `stored` times Ralph gave them
    assert len(stored) == len(statements)
    twin = ndjson_twin(tmp_path / "twin", stored)
    twin.invoke("run", now=text(t2), check=0)
    assert project.dump() == twin.dump()
    since = t2 - dt.timedelta(days=30)
    expected = expected_serving([json.dumps(s) for s in stored], since, t2, PARIS, 10)
    assert [row[:8] for row in project.serving(site=True)] == [row[:8] for row in expected]
    # Every statement came through pages of at most 100 (Ralph caps limit), voids included.
    runs = project.runs()
    assert [r[:3] for r in runs] == [("run", "success", 0)] * 2 and runs[1][3] == text(t1)
    # The product records each voided statement once, however many voids aim at it.
    voided = project.query("SELECT COUNT(*) FROM voided_events")[0][0]
    assert voided == len({s["object"]["id"] for s in statements if s["verb"]["id"].endswith("voided")})


def test_a_500_on_page_7_of_10_commits_nothing_and_the_next_run_converges(tmp_path, ralph):
    project = lrs_project(tmp_path / "lrs", ralph)
    statements = sample_statements(5, learners=240)[:990]  # ten pages of Ralph's 100
    assert len(statements) == 990  # (seed 5 drew 854 from 200 learners: nine pages, not the ten the name says)
    mark = post_then_mark(ralph, statements)
    # GET 1 asks for the consistent-through header, GET 2..11 are pages 1..10.
    ralph.inject(500, first=8)
    failed = project.invoke("run", now=text(mark))
    assert failed.returncode == 69, failed.stderr
    assert f"The LRS at {ralph.endpoint}statements could not be read after 2 attempt(s) (HTTP 500)" in failed.stderr
    assert project.serving() == [] and "watermark" not in project.meta()
    assert project.runs() == [("run", "failed", 69, text(mark - dt.timedelta(days=30)), text(mark))]
    ralph.heal()
    project.invoke("run", now=text(mark), check=0)
    twin = ndjson_twin(tmp_path / "twin", ralph.all_statements())
    twin.invoke("run", now=text(mark), check=0)
    assert project.dump() == twin.dump() and len(project.serving()) > 10


def test_lrs_down_exits_69_naming_the_url_and_commits_nothing(tmp_path, ralph):
    with unused_port() as port:
        endpoint = f"http://127.0.0.1:{port}/xAPI/"
        project = lrs_project(tmp_path / "lrs", ralph, endpoint=endpoint)
        result = project.invoke("run")
    assert result.returncode == 69, result.stderr
    assert f"The LRS at {endpoint}statements could not be read after 2 attempt(s) (cannot connect" in result.stderr
    assert ralph.PASSWORD not in result.stderr + result.stdout
    assert "watermark" not in (project.meta() if project.has_store() else {})


def test_a_wrong_password_exits_78(tmp_path, ralph):
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    project = lrs_project(tmp_path / "lrs", ralph, password_file=str(wrong))
    result = project.invoke("run")
    assert result.returncode == 78, result.stderr
    assert f"refused the credentials of user '{ralph.USER}' (HTTP 401)" in result.stderr
    assert "not-the-password" not in result.stderr


def test_a_more_link_to_another_host_is_not_followed(tmp_path, ralph):
    """Credentials must not leak: a `more` on another port is refused, and nothing connects there."""
    connections = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connections.append(listener.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        project = lrs_project(tmp_path / "lrs", ralph)
        mark = post_then_mark(ralph, sample_statements(7, learners=50)[:50])
        ralph.inject(200, first=2, body={"statements": [], "more": f"http://127.0.0.1:{port}/xAPI/statements?p=2"})
        result = project.invoke("run", now=text(mark))
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert result.returncode == 78, result.stderr
    assert f"sent a 'more' link to http://127.0.0.1:{port}" in result.stderr and "was not followed" in result.stderr
    assert connections == []
    assert project.serving() == [] and "watermark" not in project.meta()


def test_429_with_retry_after_is_honoured(tmp_path, ralph):
    project = lrs_project(tmp_path / "lrs", ralph, request_delay="30s")  # Retry-After, not the backoff, decides
    mark = post_then_mark(ralph, sample_statements(9, learners=100)[:300])
    ralph.inject(429, first=3, last=3, headers={"Retry-After": "1"})
    started = time.monotonic()
    result = project.invoke("run", now=text(mark), check=0)
    assert 1 <= time.monotonic() - started < 25
    assert "HTTP 429; attempt 1 of 2, retrying in 1.0 s" in result.stderr
    twin = ndjson_twin(tmp_path / "twin", ralph.all_statements())
    twin.invoke("run", now=text(mark), check=0)
    assert project.dump() == twin.dump()


def test_check_reports_how_ralph_deviates_from_the_spec(tmp_path, ralph):
    project = lrs_project(tmp_path / "lrs", ralph, overlap="1d")
    post_then_mark(ralph, sample_statements(11, learners=100)[:400])
    result = project.invoke("check", check=0)
    out = result.stdout
    assert f"ok  source: LRS {ralph.endpoint}statements: reachable, credentials of 'lms-refresh' accepted" in out
    assert "note  source: deviation: no X-Experience-API-Consistent-Through header" in out
    assert "deviation: caps limit at 100 per page (asked for 500)" in out
    assert "deviation: ascending=true returns newest first (reversed)" in out
    assert "deviation: since/until filter on timestamp, not stored" in out
    assert "more than source.overlap (1 day, 0:00:00)" in out  # the sample's timestamps are days old
    assert not project.has_store()  # check writes nothing


def test_consistent_through_bounds_the_window(tmp_path, ralph):
    """An LRS that says it is complete only up to T gets a window ending at T (Ralph never says; we make it)."""
    statements = sample_statements(13, learners=100)
    middle = post_then_mark(ralph, statements[:200])
    later = post_then_mark(ralph, statements[200:400])
    ralph.inject(200, first=1, last=1, body={"statements": []},
                 headers={"X-Experience-API-Consistent-Through": middle.isoformat()})
    project = lrs_project(tmp_path / "lrs", ralph)
    project.invoke("run", now=text(later), check=0)
    assert project.runs()[-1][3:] == (text(later - dt.timedelta(days=30)), text(middle))
    assert project.query("SELECT statements_read FROM runs")[0][0] == 200
    assert project.meta()["watermark"] == text(middle)


def test_check_shows_the_consistent_through_time_as_read_never_the_headers_text(tmp_path, ralph):
    """`check` printed the header's value as the LRS wrote it: any text, an address or a URL to follow included."""
    project = lrs_project(tmp_path / "lrs", ralph)
    post_then_mark(ralph, sample_statements(16, learners=100)[:50])
    hostile = "2026-01-01T00:00:00Z) PWNED; see https://evil.example/reset?u=lms-refresh ("
    for value, line in (("2026-11-30T12:00:00+01:00", "ok  source: LRS sends X-Experience-API-Consistent-Through "
                                                       "(2026-11-30T11:00:00.000000Z); it bounds the window"),
                        (hostile, "note  source: deviation: the LRS's X-Experience-API-Consistent-Through header "
                                  "is not an ISO 8601 time; a run ignores it, and the safety lag alone bounds the "
                                  "window")):
        ralph.inject(200, first=1, last=1, body={"statements": [], "more": ""},
                     headers={"X-Experience-API-Consistent-Through": value})
        out = project.invoke("check", check=0).stdout
        ralph.heal()
        assert line in out, out
        assert "PWNED" not in out and "evil.example" not in out


@pytest.mark.ralph  # starts its own Ralph, with TLS
def test_tls_is_verified_and_a_ca_bundle_makes_a_private_certificate_trusted(tmp_path):
    server = RalphServer(tls=True)
    try:
        mark = post_then_mark(server, sample_statements(15, learners=100)[:200])
        untrusted = lrs_project(tmp_path / "untrusted", server)
        result = untrusted.invoke("run", now=text(mark))
        assert result.returncode == 78, result.stderr
        assert f"TLS verification of the LRS at {server.endpoint}statements failed" in result.stderr
        assert "set source.ca_bundle" in result.stderr and "watermark" not in untrusted.meta()
        trusted = lrs_project(tmp_path / "trusted", server, ca_bundle=server.certificate)
        trusted.invoke("run", now=text(mark), check=0)
        assert trusted.query("SELECT statements_read FROM runs")[0][0] == 200
    finally:
        server.stop()


def test_a_wrong_endpoint_path_exits_78_naming_the_status(tmp_path, ralph):
    project = lrs_project(tmp_path / "lrs", ralph, endpoint=ralph.endpoint.replace("/xAPI/", "/lrs/"))
    result = project.invoke("run")
    assert result.returncode == 78, result.stderr
    assert "answered HTTP 404" in result.stderr and "check source.endpoint" in result.stderr


def test_dry_run_reads_the_lrs_and_writes_nothing(tmp_path, ralph):
    mark = post_then_mark(ralph, sample_statements(17, learners=100)[:150])
    project = lrs_project(tmp_path / "lrs", ralph)
    out = project.invoke("run", "--dry-run", now=text(mark), check=0).stdout
    assert "read:        150 statements" in out and not project.has_store()


def test_a_credential_name_is_read_from_the_units_credentials_then_the_credentials_directory(tmp_path, ralph):
    loaded = tmp_path / "loaded"  # what systemd's LoadCredential= puts in $CREDENTIALS_DIRECTORY
    loaded.mkdir()
    (loaded / "lrs-password").write_text(ralph.PASSWORD + "\n")
    directory = tmp_path / "etc-credentials"  # /etc/lms-refresh/credentials, for manual commands
    directory.mkdir()
    project = lrs_project(tmp_path / "lrs", ralph, password_file="lrs-password")
    outside = project.invoke("check", env={"LMS_REFRESH_CREDENTIALS": str(directory)})
    assert outside.returncode == 78, outside.stderr
    assert (f"Credential 'lrs-password' is not at {directory}/lrs-password and no unit loaded it; put it there "
            f"as root (install -m 0640 -o root -g lms-refresh /dev/stdin {directory}/lrs-password") in outside.stderr
    inside = project.invoke("check", env={"CREDENTIALS_DIRECTORY": str(loaded),
                                          "LMS_REFRESH_CREDENTIALS": str(directory)}, check=0)
    assert "credentials of 'lms-refresh' accepted" in inside.stdout
    (directory / "lrs-password").write_text("not the password\n")  # the unit's own copy wins
    inside = project.invoke("check", env={"CREDENTIALS_DIRECTORY": str(loaded),
                                          "LMS_REFRESH_CREDENTIALS": str(directory)}, check=0)
    assert "credentials of 'lms-refresh' accepted" in inside.stdout
    (directory / "lrs-password").write_text(ralph.PASSWORD + "\n")  # a manual command: the directory's file
    manual = project.invoke("check", env={"LMS_REFRESH_CREDENTIALS": str(directory)}, check=0)
    assert "credentials of 'lms-refresh' accepted" in manual.stdout
    (loaded / "lrs-password").unlink()  # the unit loaded other credentials, not this one: the directory's
    other = project.invoke("check", env={"CREDENTIALS_DIRECTORY": str(loaded),
                                         "LMS_REFRESH_CREDENTIALS": str(directory)}, check=0)
    assert "credentials of 'lms-refresh' accepted" in other.stdout


def test_statements_the_engine_cannot_use_are_quarantined_once_by_id(tmp_path, ralph):
    """Valid xAPI the engine cannot count (a duration beyond the 10000-day bound) is quarantined with its origin."""
    statements = sample_statements(19, learners=100)[:300]
    odd = dict(statements[0], id=str(uuid.uuid4()), result={"duration": "P20000D"})
    mark = post_then_mark(ralph, statements + [odd])
    project = lrs_project(tmp_path / "lrs", ralph)
    project.invoke("run", now=text(mark), check=0)
    project.invoke("backfill", "--since", text(mark - dt.timedelta(days=1)), "--until", text(mark), now=text(mark),
                check=0)  # reads it again
    assert project.query("SELECT origin, reason FROM quarantine") == [
        (f"{ralph.endpoint}statements id {odd['id']}",
         "result.duration 'P20000D' is longer than 10000 days")]
