"""Property-based fuzzing of the statement mapper and the NDJSON line parser (Hypothesis).

Every generated statement is mapped or raises InvalidStatement — never another
exception — and every generated line is staged or quarantined. Derandomised and
bounded (about 850 examples in all) so that it is quick and repeatable in CI.
"""

import json
import string

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="python3-hypothesis is not installed (tests/run.sh installs it)")
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.statements import HOME, statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.sources import json_decoding
from lms_refresh.sources.ndjson_worker import ChunkResult, parse_lines
from lms_refresh.sources.records import EVENT_FIELDS, Event, Void
from lms_refresh.sources.xapi import StatementMapper
from lms_refresh.sources.xapi_fields import MAX_DURATION_DAYS, InvalidStatement

# Each test takes the JSON parser (`json_parser`, from tests/conftest.py) for all of its examples: a fixture
# that is set once per test, not per example, which is what Hypothesis's function_scoped_fixture warns of.
FUZZ = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
MAPPER = StatementMapper("Pacific/Kiritimati", Pseudonymiser(b"k" * 32), r"^(.+?/course/[^/?#]+)")

# Pieces that look like what the mapper reads, so that generation reaches its deeper branches.
text = st.text(alphabet=string.printable + "é\u00a0\ud800", max_size=30)
iri = st.one_of(st.sampled_from([HOME, f"{HOME}/course/BIO101", "mailto:a@example.edu", "urn:x", "ab=c://x", "x y:z"]),
                text)
digits = st.from_regex(r"\d{1,4}([.,]\d{1,3})?", fullmatch=True) | st.just("9" * 400)
duration = st.one_of(
    st.builds(lambda parts: "P" + "".join(parts), st.lists(
        st.tuples(digits, st.sampled_from("YMDWTHS")).map("".join), max_size=5)),
    st.from_regex(r"P(\d+Y)?(\d+M)?(\d+D)?(T(\d+H)?(\d+M)?(\d+([.,]\d+)?S)?)?", fullmatch=True),
    text)
timestamp = st.one_of(
    st.datetimes(timezones=st.timezones()).map(lambda moment: moment.isoformat()),
    st.from_regex(r"\d{4}-\d\d-\d\d([T ]\d\d(:\d\d(:\d\d(\.\d{1,9})?)?)?)?(Z|[+-]\d\d(:?\d\d)?)?", fullmatch=True),
    st.sampled_from(["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2026-11-02T10:00:00.5-00"]),
    text)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=8)
ifi = st.dictionaries(st.sampled_from(["mbox", "mbox_sha1sum", "openid", "account", "objectType", "name"]),
                      st.one_of(iri, st.just("a" * 40), json_value,
                                st.fixed_dictionaries({"homePage": iri, "name": text | json_value})), max_size=3)
actor = st.one_of(ifi, st.builds(lambda kind, members, extra: dict(extra, objectType=kind, member=members),
                                 st.sampled_from(["Group", "Agent", "group"]), st.lists(ifi, max_size=3) | json_value,
                                 ifi))
target = st.one_of(
    st.fixed_dictionaries({"objectType": st.sampled_from(["Activity", "Agent", "Group", "SubStatement", "StatementRef",
                                                          "GroupActivity", "activity"]) | json_value},
                          optional={"id": iri | json_value, "definition": json_value, "member": json_value,
                                    "actor": actor, "verb": json_value, "object": json_value}),
    json_value)
score = st.fixed_dictionaries({}, optional={"scaled": st.floats() | st.integers() | json_value,
                                            "raw": json_value, "min": json_value, "max": json_value})
result = st.fixed_dictionaries({}, optional={
    "success": st.booleans() | json_value, "completion": st.booleans() | json_value,
    "duration": duration | json_value, "score": score | json_value})
activities = st.lists(st.fixed_dictionaries({"id": iri | json_value, "definition": json_value}), max_size=2)
context = st.one_of(json_value, st.fixed_dictionaries({"contextActivities": st.one_of(json_value, st.fixed_dictionaries(
    {}, optional={"parent": json_value | activities, "grouping": json_value}))}))
# Each part of a well-formed statement, replaced or not by a generated one; mostly by one of the right
# shape, so that generation gets past the first checks to the later ones.
uuid = st.uuids().map(str)
parts = st.fixed_dictionaries({}, optional={
    "id": st.one_of(uuid, uuid, uuid, json_value), "stored": st.one_of(timestamp, timestamp, json_value),
    "timestamp": st.one_of(timestamp, timestamp, json_value), "actor": st.one_of(actor, actor, json_value),
    "verb": st.one_of(st.fixed_dictionaries({"id": iri}), json_value), "object": target,
    "result": st.one_of(result, result, json_value), "context": context, "timeStamp": timestamp})
removed = st.one_of(st.just(()), st.just(()), st.sets(
    st.sampled_from(["id", "stored", "timestamp", "actor", "verb", "object", "result", "context"]), max_size=2))


def decoded(value):
    """The value as the JSON parser in use reads it back from an export line."""
    return json_decoding.decode_line(json.dumps(value).encode())


def check_row(kind, row):
    """A mapped statement's row has the staging table's shape and bounded values."""
    if kind == "void":
        assert type(row) is Void and len(row.target_id) == 16 and len(row.voiding_id) == 16
        return
    assert kind == "event" and type(row) is Event and len(row) == len(EVENT_FIELDS)
    assert len(row.day) == 10 and row.day[4] == "-" and isinstance(row.actor, int)
    assert all(flag in (0, 1) for flag in (row.is_attempt, row.is_completion, row.is_passed, row.is_failed))
    assert row.score_micro is None or -1_000_000 <= row.score_micro <= 1_000_000
    assert row.duration_ms is None or 0 <= row.duration_ms <= MAX_DURATION_DAYS * 86_400_000


@FUZZ
@given(parts, removed)
def test_every_generated_statement_is_mapped_or_quarantined(json_parser, replacements, removals):
    body = statement(score=0.5, duration="PT1M", success=True)
    body.update(replacements)
    for name in removals:
        body.pop(name, None)
    try:
        kind, row = MAPPER.map(decoded(body))
    except InvalidStatement as error:
        assert str(error)  # a reason to store
        return
    check_row(kind, row)


@settings(FUZZ, max_examples=300)
@given(json_value)
def test_any_json_value_is_mapped_or_quarantined(json_parser, value):
    try:
        MAPPER.map(decoded(value))
    except InvalidStatement:
        pass


@settings(FUZZ, max_examples=150)
@given(st.lists(st.one_of(st.binary(max_size=60), st.builds(lambda s: json.dumps(s).encode(), parts),
                          st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth)), max_size=4))
def test_every_generated_line_is_staged_skipped_or_quarantined(json_parser, lines):
    result = parse_lines(MAPPER, enumerate(lines, 1), "0000", until="9999", result=ChunkResult())
    batch = result.batch
    assert len(batch.events) + len(batch.voids) + len(batch.quarantined) == batch.read
    assert all(reason for _, reason, _ in batch.quarantined)


def test_json_nested_100000_levels_deep_is_quarantined_not_a_crash(json_parser):
    good = json.dumps(statement(timestamp="2026-11-02T10:00:00Z")).encode()
    lines = [good, b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000, good]
    batch = parse_lines(MAPPER, enumerate(lines, 1), "0000", until="9999", result=ChunkResult()).batch
    assert len(batch.events) == 2
    assert [(number, reason) for number, reason, _ in batch.quarantined] == [
        (2, "JSON nested too deeply to parse"), (3, "JSON nested too deeply to parse")]
