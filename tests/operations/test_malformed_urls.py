"""Malformed URLs get one sentence that never shows them; a bad ping URL never stops a run.

The URLs of alerts and pings hold tokens. Whatever form a wrong one takes —
no scheme, a bad port, spaces, control characters, broken IPv6 brackets, a
user name and password, far too long — the token must not reach stdout,
stderr, the journal's fields or the metrics textfile, and no traceback may
print it.
"""

import json
import logging
import string

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.rawhttp import answering
from helpers.statements import statement
from lms_refresh.config import validate
from lms_refresh.config.validators import LONGEST_URL, url_problem
from lms_refresh.errors import ConfigError

NOW = "2026-11-03T04:15:00+01:00"

TOKENS = st.text(alphabet=string.ascii_letters + string.digits, min_size=20, max_size=40)
CONTROL = st.sampled_from([" ", "\t", "\r\n", "\x00", "\x01", "\x1b", "\x7f", "\u2028", "\x85"])


@st.composite
def malformed(draw):
    """Return (a malformed URL holding a token, the token)."""
    token = draw(TOKENS)
    forms = [
        f"hooks.example.com/services/{token}",  # no scheme
        f"//hooks.example.com/services/{token}",
        f"hooks.example.com:443/{token}",
        f"https:/hooks.example.com/{token}",
        f"https://hooks.example.com:{token}/x",  # the token where the port goes
        f"https://hooks.example.com:{draw(st.integers(65536, 10**9))}/{token}",
        f"https://hooks.example.com:0/{token}",
        f"https://hooks.example.com:-1/{token}",
        f"https://[::1/{token}",  # IPv6 brackets
        f"https://[{token}]/x",
        f"https://::1/{token}",
        f"https://[::1]x/{token}",
        f"https://host]/{token}",
        f"https://user:{token}@hooks.example.com/x",  # userinfo
        f"https://{token}@hooks.example.com/x",
        f"https://hooks.example.com/{token}/" + "a" * LONGEST_URL,  # very long
        f"ftp://hooks.example.com/{token}",
        f"{token}://hooks.example.com/x",
        f"https://hooks.éxample.com/{token}",
        f"https://hooks_example com/{token}",
        f"https:///{token}",
    ]
    url = draw(st.sampled_from(forms))
    if draw(st.booleans()):  # a space or a control character somewhere inside
        at = draw(st.integers(1, len(url) - 1))
        url = url[:at] + draw(CONTROL) + url[at:]
    return url, token


@settings(max_examples=400, deadline=None, derandomize=True)
@given(malformed())
def test_every_malformed_url_gets_a_reason_that_never_quotes_it(case):
    url, token = case
    problem = url_problem(url)
    assert problem and token not in problem and "\n" not in problem


@pytest.mark.parametrize("url", ["https://lrs.example.edu/xAPI/", "http://127.0.0.1:8080/x?y=1#z",
                                 "https://[2001:db8::1]:8443/xAPI/", "https://hc-ping.com/0b8e5d29-aaaa/", "http://h:/x",
                                 "https://Hooks.Example.COM/services/T0/B0/XXXX"])
def test_well_formed_urls_pass(url):
    assert url_problem(url) is None


@settings(max_examples=150, deadline=None, derandomize=True)
@given(malformed(), st.sampled_from(["endpoint", "site_url"]))
def test_a_malformed_url_in_the_configuration_is_refused_in_one_sentence_without_it(case, key):
    url, token = case
    source = ({"type": "xapi-lrs", "endpoint": url, "username": "u", "password_file": "/x"} if key == "endpoint"
              else {"type": "moodle", "url": "postgresql://r@db/m", "site_url": url})
    with pytest.raises(ConfigError) as refused:
        validate({"state_directory": "/nonexistent/state", "source": source}, "/etc/lms-refresh/config.toml", {})
    sentence = str(refused.value)
    assert f"key 'source.{key}'" in sentence and token not in sentence and "\n" not in sentence


class Capture(logging.Handler):
    """Every record of the CLI with all its fields, as the journal handler would send them."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(json.dumps({k: str(v) for k, v in vars(record).items()}) + record.getMessage())


def invoke_captured(project, *args, **kwargs):
    capture = Capture()
    logger = logging.getLogger("lms_refresh")
    logger.addHandler(capture)
    try:
        result = project.invoke(*args, **kwargs)
    finally:
        logger.removeHandler(capture)
    return result, "\n".join(capture.records)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=malformed())
def test_a_malformed_ping_url_never_stops_a_run_nor_shows_its_token(sqlite_project, tmp_path, case):
    url, token = case
    project = sqlite_project
    (tmp_path / "hc-url").write_bytes(url.encode() + b"\n")
    prom = tmp_path / "lms_refresh.prom"
    if "[alerts]" not in project.config.read_text():
        project.config.write_text(project.config.read_text() + f'\n[monitoring]\ntextfile = "{prom}"\n'
                                  f'[alerts]\nhealthchecks_url_file = "{tmp_path / "hc-url"}"\n')
        project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    result, journal = invoke_captured(project, "run", now=NOW)
    assert result.returncode == 0, result.stderr
    assert "Healthchecks pings are off for this run: The URL in " in result.stderr
    assert "(alerts.healthchecks_url_file)" in result.stderr and "Traceback" not in result.stderr
    for text in (result.stdout, result.stderr, journal, prom.read_text()):
        assert token not in text
    checked, journal = invoke_captured(project, "check", now=NOW)
    assert checked.returncode == 0, checked.stderr
    assert "note  alerts.healthchecks_url_file: warning: The URL in " in checked.stdout
    for text in (checked.stdout, checked.stderr, journal):
        assert token not in text


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=malformed())
def test_a_malformed_webhook_url_fails_only_that_channel_in_one_sentence(sqlite_project, tmp_path, case):
    url, token = case
    project = sqlite_project
    (tmp_path / "hook-url").write_bytes(url.encode() + b"\n")
    if "[alerts]" not in project.config.read_text():
        project.config.write_text(project.config.read_text()
                                  + f'\n[alerts]\nwebhook_url_file = "{tmp_path / "hook-url"}"\n')
    result, journal = invoke_captured(project, "alert", "--exit-status", "65", now=NOW)
    assert result.returncode == 1  # its one channel failed (README: the alert unit fails only then)
    assert "The alert webhook is not sent: The URL in " in result.stderr and "Traceback" not in result.stderr
    assert "nobody was alerted" in result.stderr
    for text in (result.stdout, result.stderr, journal):
        assert token not in text


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/secret-token", "http://127.0.0.1/secret-token\x01",
                                 "hooks.example.com/secret-token"])
def test_a_url_urllib_cannot_use_is_logged_without_it(caplog, url):
    """Whatever reaches `post` (each caller checks the URL first), urllib's own words, which quote the
    URL, are never logged: one sentence by scheme and host only, and False."""
    from lms_refresh.ops.monitoring import post

    with caplog.at_level(logging.WARNING, logger="lms_refresh"):
        assert post(url, b"", "text/plain", timeout=1) is False
    [record] = caplog.records
    assert record.getMessage().startswith("Delivery to ") and "secret-token" not in record.getMessage()



def _answering(*answers):
    """A local TCP server that answers its connections with `answers` in turn (raw bytes); return its port."""
    return answering(*answers).getsockname()[1]


@pytest.mark.parametrize(("answer", "said"), [
    (b"hello\r\n", "its answer was no complete HTTP response (BadStatusLine)."),
    (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
     "its answer was no complete HTTP response (LineTooLong)."),
    (b"", "Remote end closed connection without response"),
], ids=["garbage", "a header line too long", "closed at once"])
def test_an_answer_that_is_no_http_response_is_not_called_a_malformed_url(caplog, answer, said):
    """A server that answers garbage or closes at once, twice (the delivery is tried once more): the delivery failed
    because of the answer, and the sentence says so (by its class, never quoting the URL and its token), not that
    the URL was malformed."""
    from lms_refresh.ops.monitoring import post

    port = _answering(answer, answer)
    with caplog.at_level(logging.WARNING, logger="lms_refresh"):
        assert post(f"http://127.0.0.1:{port}/hook/secret-token", b"{}", "application/json", timeout=10,
                    pause=0) is False
    [record] = caplog.records
    assert record.getMessage() == f"Delivery to http://127.0.0.1:{port} failed: {said}"


def test_one_garbled_answer_is_tried_once_more_and_the_second_delivers(caplog):
    from lms_refresh.ops.monitoring import post

    port = _answering(b"hello\r\n", b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    with caplog.at_level(logging.INFO, logger="lms_refresh"):
        assert post(f"http://127.0.0.1:{port}/hook/secret-token", b"{}", "application/json", timeout=10,
                    pause=0) is True
    assert [record.getMessage() for record in caplog.records] == [
        f"Delivery to http://127.0.0.1:{port}: its answer was cut short or garbled (BadStatusLine); trying once more."]
