"""The NDJSON source: chunking, worker processes, gzip, the file index, line numbers."""

import datetime as dt
import gzip
import json
import os

import pytest

from helpers.batches import collect_batches
from helpers.statements import statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.sources.ndjson import NdjsonSource
from lms_refresh.sources.xapi import StatementMapper, name_id
from lms_refresh.window import Window

UTC = dt.UTC
WINDOW = Window(dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 11, 3, tzinfo=UTC))
MAPPER = StatementMapper("Europe/Paris", Pseudonymiser(b"k" * 32), r"^(.+?/course/[^/?#]+)")


def lines(count):
    out = []
    for i in range(count):
        stored = f"2026-11-0{1 + i % 4}T10:{i % 60:02d}:00Z"  # half of them outside the window
        out.append(json.dumps(statement(learner=f"u{i}", timestamp=stored)))
        if i % 97 == 0:
            out.append('{"broken": ')
    return out


def collect(source, index=None):
    return collect_batches(source, WINDOW, index)


@pytest.mark.parametrize("workers", [1, 2])
def test_chunks_and_workers_give_what_one_pass_gives(tmp_path, workers):
    text = lines(3000)
    (tmp_path / "a.ndjson").write_text("\n".join(text) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(text[:500]))  # no final newline
    one_pass = collect(NdjsonSource(str(tmp_path), MAPPER, batch_size=100_000, workers=1))
    chunked = collect(NdjsonSource(str(tmp_path), MAPPER, batch_size=50, workers=workers, parallel_min_bytes=0))
    expected = [line for line in text + text[:500]
                if not line.startswith('{"broken') and json.loads(line)["stored"] < "2026-11-03"]
    assert len(one_pass[0]) == len(expected) > 1700
    assert chunked[0] == one_pass[0]
    assert chunked[1] == one_pass[1]
    broken = [n for n, line in enumerate(text, 1) if line.startswith('{"broken')]
    assert [origin for origin, _, _ in one_pass[1]] == (
        [f"{tmp_path}/a.ndjson:{n}" for n in broken] + [f"{tmp_path}/b.jsonl:{n}" for n in broken if n <= 500])
    assert chunked[2] == one_pass[2]


def test_gzip_files_are_streamed_in_batches(tmp_path):
    text = lines(1000)
    with gzip.open(tmp_path / "a.ndjson.gz", "wt") as handle:
        handle.write("\n".join(text) + "\n")
    batches = list(NdjsonSource(str(tmp_path), MAPPER, batch_size=100, workers=2).batches(WINDOW))
    assert sum(len(b.events) for b in batches) == 500
    assert max(len(b.events) + len(b.quarantined) for b in batches) <= 100
    assert batches[-1].state[str(tmp_path / "a.ndjson.gz")][3:5] == ["2026-11-01T10:00:00.000000Z",
                                                                     "2026-11-04T10:59:00.000000Z"]


def test_truncated_gzip_is_a_clear_bad_input_error(tmp_path):
    data = gzip.compress(("\n".join(lines(200)) + "\n").encode())
    (tmp_path / "a.ndjson.gz").write_bytes(data[: len(data) // 2])
    # Last modified before the window's end: truncated for good, not still being written.
    os.utime(tmp_path / "a.ndjson.gz", (WINDOW.since.timestamp(), WINDOW.since.timestamp()))
    from lms_refresh.errors import BadInputError

    with pytest.raises(BadInputError, match="a.ndjson.gz to the end"):
        collect(NdjsonSource(str(tmp_path), MAPPER, batch_size=100))


def test_unchanged_files_outside_the_window_are_not_read_again(tmp_path):
    (tmp_path / "old.ndjson").write_text(json.dumps(statement(timestamp="2026-10-01T10:00:00Z")) + "\n")
    (tmp_path / "new.ndjson").write_text(json.dumps(statement(timestamp="2026-11-02T10:00:00Z")) + "\n")
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=100)
    _, _, index = collect(source)
    (tmp_path / "old.ndjson").chmod(0)  # reading it again would now fail for a non-root user; count reads instead
    reads = []
    original = source._plan

    def plan(window, *, compressed):
        for item in original(window, compressed=compressed):
            reads.append(item[0])
            yield item

    source._plan = plan
    events, _, _ = collect(source, index)
    assert reads == [str(tmp_path / "new.ndjson")] and len(events) == 1
    (tmp_path / "old.ndjson").chmod(0o644)
    with open(tmp_path / "old.ndjson", "a") as handle:  # a changed file is read again
        handle.write(json.dumps(statement(timestamp="2026-11-02T11:00:00Z")) + "\n")
    reads.clear()
    events, _, _ = collect(source, index)
    assert sorted(reads) == sorted([str(tmp_path / "new.ndjson"), str(tmp_path / "old.ndjson")]) and len(events) == 2


# -- the LRS source's rules, without a server ---------------------------------

def lrs_source(endpoint="https://lrs.example.edu/xAPI/", overlap=3600, sleeps=None):
    from lms_refresh.config import validate
    from lms_refresh.sources.lrs import LrsSource

    table = {"type": "xapi-lrs", "endpoint": endpoint, "username": "u", "password_file": "/nonexistent",
             "page_size": 100, "overlap": overlap, "timeout": 5, "request_attempts": 3, "request_delay": 2,
             "response_deadline": 60, "max_response_bytes": 1 << 20, "read_deadline": 600, "max_pages": 1000}
    settings = validate({"source": table}, "test", {}).source
    return LrsSource(settings, MAPPER, {}, sleep=(sleeps if sleeps is not None else []).append, jitter=lambda: 1.0)


def test_more_links_stay_on_the_endpoints_origin():
    from lms_refresh.errors import ConfigError

    source = lrs_source()
    assert source.follow("/xAPI/statements?page=2") == "https://lrs.example.edu/xAPI/statements?page=2"
    assert source.follow("statements?page=2") == "https://lrs.example.edu/xAPI/statements?page=2"
    assert source.follow("https://LRS.example.edu:443/xAPI/statements?p=3") == \
        "https://LRS.example.edu:443/xAPI/statements?p=3"
    for foreign in ("http://lrs.example.edu/xAPI/statements", "https://lrs.example.edu:8443/xAPI/statements",
                    "https://evil.example.org/xAPI/statements", "//evil.example.org/steal"):
        with pytest.raises(ConfigError, match="was not followed"):
            source.follow(foreign)


def test_the_query_widens_the_window_by_the_overlap():
    query = lrs_source(overlap=3600).query(WINDOW)
    assert query == {"since": "2026-10-31T22:59:59.000000Z", "until": "2026-11-03T01:00:00.000000Z",
                     "limit": 100, "ascending": "true"}


def test_retry_after_in_seconds_or_as_a_date():
    from lms_refresh.sources.lrs_http import retry_after_seconds

    now = dt.datetime(2026, 11, 30, 4, 15, tzinfo=UTC)
    assert retry_after_seconds("7", now) == 7
    assert retry_after_seconds("Mon, 30 Nov 2026 04:15:30 GMT", now) == 30
    assert retry_after_seconds("Mon, 30 Nov 2026 04:00:00 GMT", now) == 0
    assert retry_after_seconds("soon", now) is None and retry_after_seconds(None, now) is None


def test_backoff_is_exponential_and_ends_in_69():
    from lms_refresh.errors import UnavailableError
    from lms_refresh.sources import lrs_http

    sleeps = []
    source = lrs_source(sleeps=sleeps)

    def fail(url, params, where, deadline):
        raise lrs_http._Retryable("HTTP 503")

    source._attempt = fail
    with pytest.raises(UnavailableError, match=r"could not be read after 3 attempt\(s\) \(HTTP 503\)"):
        source.get("https://lrs.example.edu/xAPI/statements", {})
    assert sleeps == [2, 4]  # jitter pinned at its maximum


# -- the Moodle row mapping ----------------------------------------------------

def moodle_mapper():
    from lms_refresh.sources.moodle import RowMapper

    return RowMapper("Europe/Paris", lambda actor: actor, "https://moodle.example.edu/", site_course_id=1,
                     guest_user_id=1)


def event_of(mapper, log_row):
    """Map a row that must be learner activity; return its Event."""
    kind, event = mapper.map(log_row)
    assert kind == "event"
    return event


def outcomes(event):
    return event.is_attempt, event.is_completion, event.is_passed, event.is_failed


def row(eventname, edulevel=2, userid=5, courseid=7, related=None, anonymous=0, other=None, timecreated=1795420800,
        realuserid=None):
    return (1, eventname, "u", edulevel, userid, courseid, related, anonymous, other, timecreated, realuserid)


def test_completion_state_from_json_or_php_serialised_other():
    from lms_refresh.sources.moodle import InvalidRow

    mapper = moodle_mapper()
    name = "\\core\\event\\course_module_completion_updated"
    passed = event_of(mapper, row(name, related=5, other='{"relateduserid":5,"completionstate":2}'))
    failed = event_of(mapper, row(name, related=5,
                                  other='a:2:{s:13:"relateduserid";i:5;s:15:"completionstate";i:3;}'))
    incomplete = event_of(mapper, row(name, related=5, other='{"completionstate":0}'))
    assert outcomes(passed) == (0, 1, 1, 0) and outcomes(failed) == (0, 1, 0, 1)
    assert outcomes(incomplete) == (0, 0, 0, 0)
    assert passed.actor == "moodle:https://moodle.example.edu|5" and passed.day == "2026-11-23"
    with pytest.raises(InvalidRow, match="without other.completionstate"):
        mapper.map(row(name, related=5, other="null"))
    with pytest.raises(InvalidRow, match="has no relateduserid"):
        mapper.map(row("\\core\\event\\course_completed"))
    for impossible in (-5, 10 ** 15, 10 ** 30):  # a damaged row is quarantined, not the end of the run
        with pytest.raises(InvalidRow, match="is not a Unix time"):
            mapper.map(row("\\core\\event\\course_viewed", timecreated=impossible))


def test_grades_are_scaled_by_their_items_range():
    from lms_refresh.sources.moodle import GRADED

    mapper = moodle_mapper()
    mapper.grade_ranges.update({5: (0.0, 10.0), 6: (1.0, 5.0), 7: (3.0, 3.0)})

    def score(other):
        return event_of(mapper, row(GRADED, edulevel=1, userid=900, related=102, other=other)).score_micro

    assert score('{"itemid":5,"overridden":false,"finalgrade":8.0}') == 800000
    assert score('{"itemid":6,"overridden":false,"finalgrade":4}') == 750000  # a scale of 1 to 5
    assert score('{"itemid":5,"overridden":true,"finalgrade":12.5}') == 1000000  # unlimited grades: clamped
    assert score('a:3:{s:6:"itemid";i:5;s:10:"overridden";b:0;s:10:"finalgrade";d:2.5;}') == 250000
    for none in ('{"itemid":5,"overridden":false,"finalgrade":null}',  # a grade removed
                 'a:3:{s:6:"itemid";i:5;s:10:"overridden";b:0;s:10:"finalgrade";N;}',
                 '{"itemid":99,"finalgrade":8.0}',  # an item we could not read
                 '{"itemid":7,"finalgrade":3.0}',  # an empty range
                 '{"itemid":5,"finalgrade":"8"}', "null", None,
                 'a:2:{s:6:"itemid";i:5;s:10:"finalgrade";d:-;}', 'a:2:{s:6:"itemid";i:5;s:10:"finalgrade";d:1e999;}'):
        assert score(none) is None, none


def test_rows_that_are_not_learner_activity_are_left_out():
    mapper = moodle_mapper()
    viewed = "\\core\\event\\course_viewed"
    assert event_of(mapper, row(viewed)).course_id == name_id("https://moodle.example.edu/course/view.php?id=7")
    for excluded in (row(viewed, courseid=None), row(viewed, courseid=0), row(viewed, courseid=1),
                     row(viewed, userid=0), row(viewed, userid=1), row(viewed, anonymous=1),
                     row(viewed, realuserid=2), row("\\core\\event\\course_module_created", edulevel=1)):
        assert mapper.map(excluded) == (None, None), excluded


def test_a_more_link_that_repeats_ends_the_run_instead_of_looping():
    from lms_refresh.errors import UnavailableError

    source = lrs_source()
    page = {"statements": [], "more": "/xAPI/statements?page=2"}
    source.get = lambda url, params=None: (page, {})
    with pytest.raises(UnavailableError, match="sent the same 'more' link twice"):
        list(source.batches(WINDOW))


def test_a_bad_line_outside_the_window_is_skipped_whether_or_not_the_prefilter_has_paused(tmp_path):
    """The pre-filter pauses after a long run of lines inside the window; that must not change
    which lines are quarantined (only those in the window, or whose `stored` cannot be told)."""
    from lms_refresh.sources import ndjson_worker, records

    inside = [json.dumps(statement(learner=f"u{i}", timestamp="2026-11-01T10:00:00Z"))
              for i in range(records.PREFILTER_STREAK + 10)]
    bad_outside = json.dumps(statement(timestamp="2026-11-05T10:00:00Z")).replace('"actor"', '"actr"')
    bad_inside = json.dumps(statement(timestamp="2026-11-02T10:00:00Z")).replace('"actor"', '"actr"')
    for name, lines in (("paused", inside + [bad_outside, bad_inside]), ("active", [bad_outside, bad_inside] + inside)):
        path = tmp_path / f"{name}.ndjson"
        path.write_text("\n".join(lines) + "\n")
        result = ndjson_worker.read_chunk(MAPPER, ndjson_worker.Chunk(str(path), 0, None),
                                          ndjson_worker.Reading(WINDOW.since_cursor, WINDOW.until_cursor))
        assert [reason for _, reason, _ in result.batch.quarantined] == ["actor is missing or not an object"], name
        assert len(result.batch.events) == len(inside)
        assert result.high == "2026-11-05T10:00:00.000000Z", name  # the file index still sees the late line


def test_the_walk_yields_each_export_file_once_by_its_first_name_in_path_order(tmp_path):
    """export_files streams: its order is the sorted order of the paths (siblings like "a", "a-b"
    and the directory "a/" included), and a file with several names (symbolic links in and out of
    the tree, hard links) comes once, under the first of them in that order."""
    from lms_refresh.sources.files import export_files

    top, outside = tmp_path / "top", tmp_path / "outside"
    for folder in ("a", "a/b", "a-b", "z"):
        (top / folder).mkdir(parents=True)
    outside.mkdir()
    names = ["a.ndjson", "a/x.ndjson", "a/b/y.jsonl", "a-b/x.ndjson", "a0.ndjson", "z/late.ndjson", "z/m.ndjson.gz"]
    for name in names:
        (top / name).write_text("\n")
    (outside / "far.ndjson").write_text("\n")
    os.symlink(top / "z/late.ndjson", top / "a/early-link.ndjson")  # the link comes first: it is kept
    os.symlink(top / "a.ndjson", top / "z/later-link.ndjson")  # the file comes first: the link is left out
    os.symlink(outside / "far.ndjson", top / "a/far-1.ndjson")  # two names of a file outside: the first
    os.symlink(outside / "far.ndjson", top / "z/far-2.ndjson")
    os.link(top / "a0.ndjson", top / "a-b/hard.ndjson")  # a hard link sorts before its other name
    (top / "notes.txt").write_text("not an export")

    found = [(kind, os.path.relpath(path, top)) for kind, path, _ in export_files(str(top))]
    assert [name for _, name in found] == sorted(name for _, name in found)  # the paths' own order
    assert found == [("file", name) for name in [
        "a-b/hard.ndjson", "a-b/x.ndjson", "a.ndjson", "a/b/y.jsonl", "a/early-link.ndjson", "a/far-1.ndjson",
        "a/x.ndjson", "z/m.ndjson.gz"]]
