"""The LRS source's overall bounds, and what it never repeats, against a real Ralph LRS.

A layer in front of Ralph (tests/helpers/lrsserver.py) misbehaves on demand: it
trickles a body one byte at a time, streams hundreds of megabytes, or sends a
new `more` link forever. Each must end the run with 69 and one sentence
naming the setting, within the memory bound, committing nothing. And nothing
the LRS sends — an error body, a header, a status line — may reach stderr,
the run log or a Healthchecks ping.
"""

import time

import pytest

from helpers.commands import cli_command, run_for_peak_rss
from helpers.lrs_sample import lrs_project, post_then_mark, sample_statements, text
from helpers.rawhttp import answering
from helpers.receiver import Receiver

MEMORY_BOUND_MIB = 200  # README, "Bad input": the peak resident memory of any run
SECRET = "alice@example.edu token=SECRET123"


def measured(project, *args, now):
    """Run the CLI; return (exit code, stderr, peak RSS in MiB of it and its children)."""
    command = cli_command() + ["--config", str(project.config), "--now", now] + list(args)
    return run_for_peak_rss(command, project.environment())


@pytest.fixture
def posted(ralph):
    """Ralph holding a few statements; returns a time after they were stored."""
    return post_then_mark(ralph, sample_statements(21, learners=60)[:120])


def test_a_body_trickling_one_byte_at_a_time_is_cut_at_the_response_deadline(tmp_path, ralph, posted):
    """Each byte comes well within `timeout` (per read), so only a whole-response deadline ends it."""
    project = lrs_project(tmp_path / "lrs", ralph, timeout="2s", response_deadline="3s")
    # 230 bytes at one every half second: two minutes for the whole body, if nothing cut it.
    ralph.inject(mode="trickle", interval=0.5, body={"statements": [], "padding": "x" * 200})
    started = time.monotonic()
    result = project.cli("run", now=text(posted))
    assert result.returncode == 69, result.stderr
    assert time.monotonic() - started < 30
    assert (f"The LRS at {ralph.endpoint}statements could not be read after 2 attempt(s) "
            "(no complete answer within 3 s (source.response_deadline)); nothing was committed.") in result.stderr
    assert "no complete answer within 3 s (source.response_deadline); attempt 1 of 2" in result.stderr


def test_a_body_of_hundreds_of_megabytes_is_abandoned_while_it_streams(tmp_path, ralph, posted):
    """No Content-Length: the body is counted as it arrives and abandoned past max_response_bytes."""
    project = lrs_project(tmp_path / "lrs", ralph)
    ralph.inject(mode="huge", size=400 << 20, first=2)  # the pages; the first GET (a probe) is Ralph's own
    code, stderr, peak = measured(project, "run", now=text(posted))
    assert code == 69, stderr
    assert (f"The LRS at {ralph.endpoint}statements sent a response larger than source.max_response_bytes "
            "(4194304 bytes); it was abandoned unread and nothing was committed.") in stderr
    assert peak < MEMORY_BOUND_MIB, f"peak RSS {peak:.0f} MiB"
    assert project.query("SELECT outcome, exit_code FROM runs") == [("failed", 69)]
    assert "watermark" not in project.meta()


def test_a_declared_length_beyond_the_maximum_is_refused_before_reading(tmp_path, ralph, posted):
    project = lrs_project(tmp_path / "lrs", ralph, max_response_bytes=1 << 20)
    ralph.inject(mode="huge", size=400 << 20, length=True, first=2)
    started = time.monotonic()
    result = project.cli("run", now=text(posted))
    assert result.returncode == 69, result.stderr
    assert "sent a response larger than source.max_response_bytes (1048576 bytes)" in result.stderr
    assert time.monotonic() - started < 30


def test_endless_distinct_more_links_end_at_the_page_budget(tmp_path, ralph, posted):
    project = lrs_project(tmp_path / "lrs", ralph, max_pages=40)
    ralph.inject(mode="endless", first=2)
    result = project.cli("run", now=text(posted))
    assert result.returncode == 69, result.stderr
    sentence = (f"The LRS at {ralph.endpoint}statements still sent a 'more' link after 40 pages (source.max_pages); "
                "its paging may never end, so nothing was committed.")
    assert sentence in result.stderr
    assert project.query("SELECT exit_code, message FROM runs")[0][0] == 69
    assert sentence in project.query("SELECT message FROM runs")[0][0]
    assert project.serving() == [] and "watermark" not in project.meta()


def test_a_slow_lrs_whose_paging_never_ends_ends_at_the_read_deadline(tmp_path, ralph, posted):
    """Every page comes in time and the page budget is far away: only the run's own deadline ends it."""
    project = lrs_project(tmp_path / "lrs", ralph, read_deadline="3s")
    ralph.inject(mode="endless", interval=0.2, first=2)
    started = time.monotonic()
    result = project.cli("run", now=text(posted))
    assert result.returncode == 69, result.stderr
    assert time.monotonic() - started < 30
    assert (f"Reading the LRS at {ralph.endpoint}statements did not finish within source.read_deadline (3 s); "
            "nothing was committed.") in result.stderr


def test_a_page_of_far_more_statements_than_asked_for_is_refused(tmp_path, ralph, posted):
    """Two megabytes of empty statements would each become a quarantined record held at once."""
    project = lrs_project(tmp_path / "lrs", ralph, page_size=100)
    ralph.inject(200, first=2, body={"statements": [{}] * 700_000})
    code, stderr, peak = measured(project, "run", now=text(posted))
    assert code == 69, stderr
    assert (f"The LRS at {ralph.endpoint}statements sent 700000 statements on page 1, more than 4 x "
            "source.page_size (100) it was asked for; nothing was committed.") in stderr
    assert peak < MEMORY_BOUND_MIB, f"peak RSS {peak:.0f} MiB"


def test_the_bounds_leave_a_normal_lrs_alone(tmp_path, ralph, posted):
    """Tight but sufficient bounds: thirteen pages of Ralph's 100 statements come through."""
    statements = sample_statements(23, learners=400)[:1100]
    assert len(statements) == 1100
    mark = post_then_mark(ralph, statements)
    project = lrs_project(tmp_path / "lrs", ralph, max_pages=15, max_response_bytes=1 << 20,
                          response_deadline="5s", read_deadline="60s")
    project.cli("run", now=text(mark), check=0)
    assert project.query("SELECT statements_read FROM runs") == [(1220,)]


# -- nothing the LRS sends is repeated ----------------------------------------

def _garbage_server():
    """A server answering every connection with a status line that is the secret itself."""
    return answering(f"{SECRET}\r\n\r\n".encode(), forever=True)


@pytest.mark.parametrize("case, code, sentence", [
    ("an error body and header", 78, "answered HTTP 400 (Bad Request); check source.endpoint"),
    ("a 'more' that is not a URL", 69, "sent a 'more' that is not a URL (a JSON dict, page 1)"),
    ("a foreign 'more'", 78, "sent a 'more' link to http://127.0.0.1:9, another scheme, host or port"),
    ("a redirect", 78, "redirects to http://example.edu:80 (HTTP 302)"),
    ("a status line", 69, "could not be read after 2 attempt(s) (cannot connect (BadStatusLine))"),
])
def test_what_the_lrs_sends_is_never_copied_into_messages_the_run_log_or_pings(tmp_path, ralph, posted, case, code,
                                                                              sentence):
    receiver, listener = Receiver(), None
    try:
        endpoint = None
        if case == "an error body and header":
            ralph.inject(400, first=2, body={"error": SECRET}, headers={"X-Detail": SECRET})
        elif case == "a 'more' that is not a URL":
            ralph.inject(200, first=2, body={"statements": [], "more": {"next": SECRET}})
        elif case == "a foreign 'more'":
            ralph.inject(200, first=2, body={"statements": [], "more": f"http://alice:SECRET123@127.0.0.1:9/{SECRET}"})
        elif case == "a redirect":
            ralph.inject(302, first=2, headers={"Location": f"http://alice@example.edu/?{SECRET}"})
        else:
            listener = _garbage_server()
            endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}/xAPI/"
        project = lrs_project(tmp_path / "lrs", ralph, endpoint=endpoint)
        (tmp_path / "hc-url").write_text(f"{receiver.url}/ping/hc-token\n")
        project.config.write_text(project.config.read_text()
                                  + f'[alerts]\nhealthchecks_url_file = "{tmp_path / "hc-url"}"\n')
        result = project.cli("run", now=text(posted))
    finally:
        receiver.server.shutdown()
        if listener is not None:
            listener.close()
    assert result.returncode == code, result.stderr
    assert f"The LRS at {project.source_settings['endpoint']}statements " in result.stderr and sentence in result.stderr
    pings = dict(receiver.received)
    assert list(pings) == ["/ping/hc-token/start", f"/ping/hc-token/{code}"]
    assert sentence in pings[f"/ping/hc-token/{code}"].decode()
    messages = [m for (m,) in project.query("SELECT message FROM runs")] if project.has_store() else []
    if case != "a status line":  # that one fails at the first request (a probe), before the run's transaction
        assert len(messages) == 1 and sentence in messages[0]
    everything = result.stderr + result.stdout + "".join(messages) + b"".join(pings.values()).decode()
    for fragment in ("SECRET123", "alice", "token="):
        assert fragment not in everything, case
