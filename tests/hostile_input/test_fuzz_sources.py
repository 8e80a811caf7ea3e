"""Property-based fuzzing of what reads hostile input: the NDJSON line parser, the bounded line readers and the
Moodle row mapper. Whatever they are given, each record is mapped, left out or quarantined with a reason —
never an unexpected exception.

Derandomised, so that CI runs the same few thousand examples every time; a failure prints the example.
"""

import datetime as dt
import gzip
import io
import json
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.statements import statement, voiding
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.sources.files import chunk_lines, numbered_lines
from lms_refresh.sources.moodle import COLUMNS, EVENTS, InvalidRow, RowMapper
from lms_refresh.sources.ndjson_worker import ChunkResult, oversized, parse_lines
from lms_refresh.sources.records import Event
from lms_refresh.sources.xapi import StatementMapper


def fuzz(examples):
    # A test given `json_parser` (tests/conftest.py) keeps that parser for all of its examples: set once per
    # test, not per example, which is what Hypothesis's function_scoped_fixture warns of.
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
PSEUDONYMISE = Pseudonymiser(b"k" * 32)
EVERYTHING = ("", "\uffff")  # a window no cursor lies outside of: every line must be accounted for

# -- NDJSON lines -------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=6,
)
moments = st.datetimes(
                       timezones=st.sampled_from([None, dt.UTC]) | st.builds(
                           dt.timezone, st.timedeltas(min_value=-dt.timedelta(hours=23, minutes=59),
                                                     max_value=dt.timedelta(hours=23, minutes=59))))
# Times at the edges of what a date can hold, once shifted by their offset or by the local time zone.
EXTREME_TIMES = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59.999999Z",
                 "0001-01-01T00:00:00Z", "9999-12-31T23:00:00+00:00"]
# Values an export really holds in these places, and near misses of them.
interesting = {
    ("id",): st.uuids().map(str) | st.text(max_size=40),
    ("stored",): moments.map(lambda m: m.isoformat()) | st.text(max_size=30) | st.sampled_from(EXTREME_TIMES),
    ("timestamp",): moments.map(lambda m: m.isoformat()) | st.text(max_size=30) | st.sampled_from(EXTREME_TIMES),
    ("verb", "id"): st.sampled_from(["http://adlnet.gov/expapi/verbs/voided", "http://adlnet.gov/expapi/verbs/passed",
                                     ""]) | st.text(max_size=10),
    ("actor",): st.fixed_dictionaries({"mbox": st.text(max_size=10)}) | st.fixed_dictionaries(
        {"account": st.fixed_dictionaries({"homePage": st.text(max_size=5), "name": st.text(max_size=5)})}),
    ("object",): st.fixed_dictionaries({"objectType": st.just("StatementRef"), "id": st.uuids().map(str)}),
    ("result",): st.fixed_dictionaries({}, optional={
        "score": st.fixed_dictionaries({"scaled": st.floats() | st.integers() | st.text(max_size=3)}),
        "duration": st.from_regex(r"\AP(\d{1,4}D)?(T(\d{1,3}H)?(\d{1,3}M)?(\d{1,3}(\.\d{1,3})?S)?)?\Z")
        | st.text(max_size=12) | st.sampled_from(["P" + "9" * 400 + "D", "PT1,5S", "P1W", "PT" + "9" * 400 + "S"]),
        "success": json_values, "completion": json_values}),
    ("context", "contextActivities", "parent"): json_values,
}


@st.composite
def statement_lines(draw):
    """A statement, valid or voiding to start with, then with a few fields replaced by anything."""
    body = draw(st.sampled_from([statement(), statement(score=0.5, duration="PT1M"),
                                 voiding("0f6c2bd2-4c2a-4f39-9e0b-1c5a2e6f7a10", "2026-11-02T10:00:00Z")]))
    body = json.loads(json.dumps(body))
    for path in draw(st.lists(st.sampled_from(sorted(interesting)), max_size=3, unique=True)):
        target = body
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = draw(interesting[path] | json_values)
    return json.dumps(body).encode()  # NaN and Infinity included: Python's decoder reads them back


lines = st.lists(st.one_of(statement_lines(), json_values.map(lambda v: json.dumps(v).encode()),
                           st.binary(max_size=60), st.text(max_size=60).map(str.encode),
                           st.integers(1, 200_000).map(lambda depth: b"[" * depth + b"]" * depth)), max_size=8)


def parsed(raw_lines, since, until):
    mapper = StatementMapper("Europe/Paris", PSEUDONYMISE, r"^(.+?/course/[^/?#]+)")
    result = ChunkResult()
    parse_lines(mapper, oversized(enumerate(raw_lines, 1), result.batch, 64 << 10), since, until=until, result=result)
    return result.batch


@fuzz(500)
@given(lines)
def test_every_line_is_mapped_or_quarantined_with_a_reason(json_parser, raw_lines):
    batch = parsed(raw_lines, *EVERYTHING)
    counted = [n for n, line in enumerate(raw_lines, 1) if line.strip()]
    assert batch.read == len(counted) == len(batch.events) + len(batch.voids) + len(batch.quarantined)
    for number, reason, raw in batch.quarantined:
        assert number in counted and isinstance(reason, str) and reason and isinstance(raw, str)
    for event in batch.events:
        assert type(event) is Event and dt.date.fromisoformat(event.day)
        assert isinstance(event.event_id, bytes) and len(event.event_id) == 16
        assert event.score_micro is None or -1_000_000 <= event.score_micro <= 1_000_000


@fuzz(300)
@given(lines, moments, st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=3)))
def test_a_window_keeps_only_its_own_statements_whatever_the_lines(json_parser, raw_lines, since, width):
    since = since.replace(tzinfo=None)
    low = since.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    high = min(since + width, dt.datetime(9999, 12, 31)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    batch = parsed(raw_lines, low, high)
    assert batch.read == len(batch.events) + len(batch.voids) + len(batch.quarantined)
    assert all(low <= event.stored < high for event in batch.events)
    assert all(low <= void.stored < high for void in batch.voids)


# -- the bounded line readers -------------------------------------------------------

def reference_lines(data, limit):
    pieces = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")  # a byte order mark opening the file is no content
    if pieces[-1] == b"":
        pieces.pop()
    return [piece if len(piece) <= limit else len(piece) for piece in pieces]


file_contents = st.lists(st.sampled_from([b"", b"a", b"{}", b"x" * 7, b"y" * 8, b"z" * 9, b"w" * 40]) | st.binary(
    max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=30).flatmap(
    lambda parts: st.sampled_from([b"\n".join(parts), b"\n".join(parts) + b"\n"]))


@fuzz(500)
@given(file_contents, st.integers(1, 40), st.integers(1, 20), st.none() | st.integers(1, 5))
def test_chunks_cut_anywhere_give_every_line_once_and_long_ones_as_their_length(data, chunk, limit, max_lines):
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        got = []
        for start in range(0, max(len(data), 1), chunk):
            end = min(start + chunk, len(data))
            lines, resume, tail = chunk_lines(handle, start, end, size=len(data), limit=limit, max_lines=max_lines)
            while resume is not None:  # a chunk holding more than max_lines lines goes on where it stopped
                assert len(lines) == max_lines and start < resume < end and tail is None
                got += lines
                lines, resume, tail = chunk_lines(handle, resume, end, size=len(data), limit=limit,
                                                  max_lines=max_lines)
            got += lines
            if tail is not None:  # the last line, without a newline and within the limit: its offset and bytes
                assert tail[0] == data.rfind(b"\n") + 1 and not data.endswith(b"\n")
                got.append(tail[1])
    assert got == reference_lines(data, limit)


@fuzz(300)
@given(file_contents, st.integers(1, 20))
def test_a_stream_gives_every_line_once_and_long_ones_as_their_length(data, limit):
    stream = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data)), mode="rb")
    assert [line for _, line in numbered_lines(stream, limit)] == reference_lines(data, limit)


# -- Moodle log rows ---------------------------------------------------------------

bigints = st.integers(-(2 ** 63), 2 ** 63 - 1)
ids = st.none() | st.sampled_from([0, 1, 2, 5, 7]) | bigints
others = st.none() | json_values.map(json.dumps) | st.text(max_size=40) | st.builds(
    lambda name, value: f'a:1:{{s:{len(name)}:"{name}";{value}}}',
    st.sampled_from(["completionstate", "itemid", "finalgrade", "x"]),
    st.sampled_from(["i:1;", "i:-5;", "d:2.5;", "d:INF;", "d:NAN;", "d:-;", "b:1;", "N;", "s:1:\"a\";"])) | st.builds(
    lambda item, grade: json.dumps({"itemid": item, "finalgrade": grade}), st.integers(-3, 8) | st.text(max_size=2),
    json_values)
times = st.none() | st.integers(-5, 2 ** 35) | st.integers(253402200000, 253402400000) | bigints  # year 9999
events = st.sampled_from(sorted(EVENTS) + ["\\core\\event\\course_viewed", ""]) | st.text(max_size=30)
arbitrary_rows = st.tuples(
    bigints,  # id
    events,  # eventname
    st.sampled_from(["c", "r", "u", "d", ""]),  # crud
    st.sampled_from([0, 1, 2]) | st.integers(-(2 ** 15), 2 ** 15 - 1),  # edulevel
    ids, ids, ids,  # userid, courseid, relateduserid
    st.sampled_from([0, 1]) | st.integers(-(2 ** 15), 2 ** 15 - 1),  # anonymous
    others,  # other
    times,  # timecreated
    st.none() | bigints,  # realuserid
)
# Rows that get past the first filters (a learner's own activity in a course), so the rest is fuzzed too.
learner_rows = st.tuples(bigints, events, st.just("r"), st.just(2), st.integers(2, 9), st.integers(2, 9),
                         st.none() | st.integers(2, 9), st.just(0), others, times, st.none())
rows = arbitrary_rows | learner_rows
grade_ranges = st.dictionaries(st.integers(-3, 8), st.none() | st.tuples(
    st.floats(-99999.99999, 99999.99999), st.floats(-99999.99999, 99999.99999)), max_size=6)


@fuzz(600)
@given(st.lists(rows, max_size=8), grade_ranges, st.sampled_from(["Europe/Paris", "Pacific/Kiritimati", "UTC"]))
def test_every_log_row_is_mapped_left_out_or_quarantined_with_a_reason(json_parser, batch, ranges, zone):
    assert len(COLUMNS) == 11
    mapper = RowMapper(zone, PSEUDONYMISE, "https://moodle.example.edu/", site_course_id=1, guest_user_id=1)
    mapper.grade_ranges.update(ranges)
    for row in batch:
        try:
            kind, event = mapper.map(row)
        except InvalidRow as error:
            assert str(error)
            continue
        if kind is None:
            assert event is None
            continue
        assert kind == "event"
        assert type(event) is Event and dt.date.fromisoformat(event.day)
        assert event.score_micro is None or (isinstance(event.score_micro, int) and 0 <= event.score_micro <= 1_000_000)
