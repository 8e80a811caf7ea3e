"""Both JSON parsers (lms_refresh/sources/json_decoding.py) read hostile input alike: the same value, or the
same refusal with the same reason, for an export line and for a whole document (an LRS page, Moodle's
`other`); and a run over hostile export files stages, quarantines and publishes the same bytes with either.

The standard library's reading is the reference: each case also states what it is, so that the two
agreeing on a wrong answer would fail too. The orjson half needs orjson (marker `orjson`).
"""

import json
import math
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.batches import collect_batches
from helpers.publication import publication, read_publication
from helpers.readers import MAPPER, WINDOW, lrs_source
from helpers.statements import statement
from lms_refresh.sources import json_decoding
from lms_refresh.sources.json_decoding import MAX_DEPTH, NotJSON, TooDeep, nesting_depth
from lms_refresh.sources.ndjson import NdjsonSource

FUZZ = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NOW = "2026-11-04T04:15:00Z"
DEEP = TooDeep.__name__, f"nested more than {MAX_DEPTH} levels deep"


def nested(depth, inner=b"1"):
    return b"[" * depth + inner + b"]" * depth


# name: (data, what the line reader gives, what the document reader gives); a value is compared by repr,
# which tells an int from a float, NaN and -0.0, and dict order (so where a duplicate key lands).
# The reasons are the standard library's own words, which Python 3.13 (Debian 13) changed for this one.
TRAILING_COMMA = ("Illegal trailing comma before end of array: line 1 column 3 (char 2)" if sys.version_info >= (3, 13)
                  else "Expecting value: line 1 column 4 (char 3)")
CASES = {
    "NaN": (b'{"a": NaN}', "{'a': nan}", "{'a': nan}"),
    "Infinity": (b'[Infinity, -Infinity]', "[inf, -inf]", "[inf, -inf]"),
    "1e400": (b'[1e400, -1e400, 1e-400]', "[inf, -inf, 0.0]", "[inf, -inf, 0.0]"),
    "a huge integer": (b'[123456789012345678901234567890]', "[123456789012345678901234567890]",
                       "[123456789012345678901234567890]"),
    "just past 64 bits": (b'[18446744073709551616, -9223372036854775809]', "[18446744073709551616, "
                          "-9223372036854775809]", "[18446744073709551616, -9223372036854775809]"),
    "64-bit edges": (b'[18446744073709551615, -9223372036854775808]', "[18446744073709551615, "
                     "-9223372036854775808]", "[18446744073709551615, -9223372036854775808]"),
    "digits in a string": (b'{"id": "12345678901234567890123"}', "{'id': '12345678901234567890123'}",
                           "{'id': '12345678901234567890123'}"),
    "5000 digits": (b"1" * 5000, ("NotJSON", "Exceeds the limit (4300 digits) for integer string conversion: "
                                            "value has 5000 digits; use sys.set_int_max_str_digits() to increase "
                                            "the limit"), None),
    "a lone surrogate": (b'["\\ud800", "\\udc00x"]', r"['\ud800', '\udc00x']", r"['\ud800', '\udc00x']"),
    "a surrogate pair": (b'"\\ud83d\\ude00"', "'\U0001f600'", "'\U0001f600'"),
    "a surrogate in UTF-8": (b'"\xed\xa0\x80"', ("NotJSON", "'utf-8' codec can't decode byte 0xed in position 1: "
                                                           "invalid continuation byte"), r"'\ud800'"),
    "invalid UTF-8": (b'{"a": "\xff"}', ("NotJSON", "'utf-8' codec can't decode byte 0xff in position 7: invalid "
                                                    "start byte"), None),
    "an overlong form": (b'"\xc0\xaf"', ("NotJSON", "'utf-8' codec can't decode byte 0xc0 in position 1: invalid "
                                                    "start byte"), None),
    "duplicate keys": (b'{"a": 1, "b": 2, "a": 3}', "{'a': 3, 'b': 2}", "{'a': 3, 'b': 2}"),
    "a BOM": (b'\xef\xbb\xbf{"a": 1}', ("NotJSON", "Expecting value: line 1 column 1 (char 0)"), "{'a': 1}"),
    "UTF-16": ('{"a": 1}'.encode("utf-16"), ("NotJSON", "'utf-8' codec can't decode byte 0xff in position 0: "
                                                        "invalid start byte"), "{'a': 1}"),
    "trailing data": (b'{"a": 1} x', ("NotJSON", "extra data after the JSON value at character 8"),
                      ("NotJSON", "Extra data: line 1 column 10 (char 9)")),
    "two values": (b"{}{}", ("NotJSON", "extra data after the JSON value at character 2"),
                   ("NotJSON", "Extra data: line 1 column 3 (char 2)")),
    "JSON whitespace around": (b' \t{"a": 1} \t\r\n', "{'a': 1}", "{'a': 1}"),
    "a leading carriage return": (b'\r{"a": 1}', ("NotJSON", "Expecting value: line 1 column 1 (char 0)"),
                                  "{'a': 1}"),
    "a leading tab and no-break space": (' \t\u00a0{"a": 1}'.encode(), "{'a': 1}",
                                         ("NotJSON", "Expecting value: line 1 column 3 (char 2)")),
    "a trailing no-break space": ('{"a": 1}\u00a0'.encode(), "{'a': 1}",
                                  ("NotJSON", "Extra data: line 1 column 9 (char 8)")),
    "a trailing form feed": (b'{"a": 1}\x0c', "{'a': 1}", ("NotJSON", "Extra data: line 1 column 9 (char 8)")),
    "a trailing NUL": (b'{"a": 1}\x00', ("NotJSON", "extra data after the JSON value at character 8"),
                       ("NotJSON", "Extra data: line 1 column 9 (char 8)")),
    "a control character": (b'"a\x01"', ("NotJSON", "Invalid control character at: line 1 column 3 (char 2)"), None),
    "an invalid escape": (b'"\\x"', ("NotJSON", "Invalid \\escape: line 1 column 2 (char 1)"), None),
    "a trailing comma": (b"[1,]", ("NotJSON", TRAILING_COMMA), None),
    "a leading zero": (b"01", ("NotJSON", "extra data after the JSON value at character 1"),
                       ("NotJSON", "Extra data: line 1 column 2 (char 1)")),
    "floats": (b"[-0.0, -0, 1E5, 0.1000000000000000055511151231257827, 2.2250738585072011e-308, 5e-324]",
               "[-0.0, 0, 100000.0, 0.1, 2.225073858507201e-308, 5e-324]",
               "[-0.0, 0, 100000.0, 0.1, 2.225073858507201e-308, 5e-324]"),
    f"{MAX_DEPTH} levels": (nested(MAX_DEPTH), None, None),
    f"{MAX_DEPTH + 1} levels": (nested(MAX_DEPTH + 1), DEEP, DEEP),
    "1024 levels (orjson's limit)": (nested(1024), DEEP, DEEP),
    "100,000 levels": (nested(100_000), DEEP, DEEP),
    "deep and unterminated": (b"[" * 600, DEEP, DEEP),
    "brackets in a string": (b'["' + b"[" * 2000 + b'"]', None, None),
}


def outcome(decode, data):
    try:
        return repr(decode(data))
    except NotJSON as error:
        return type(error).__name__, str(error)


def expected(data, stated):
    if stated is None:  # the value itself: what Python's own reading gives
        return repr(json.loads(data))
    return stated


@pytest.mark.parametrize("name", list(CASES))
def test_the_standard_librarys_reading_of_each_hostile_case_is_as_stated(name):
    data, line, document = CASES[name]
    stdlib_line, stdlib_document = json_decoding.PATHS[json_decoding.STDLIB]
    assert outcome(stdlib_line, data) == expected(data, line)
    assert outcome(stdlib_document, data) == expected(data, document if document is not None else line)


@pytest.mark.orjson
@pytest.mark.parametrize("name", list(CASES))
def test_orjson_reads_each_hostile_case_as_the_standard_library_does(name):
    data, _, _ = CASES[name]
    for which in (0, 1):  # the export line, the whole document
        decoders = [json_decoding.PATHS[parser][which] for parser in (json_decoding.STDLIB, json_decoding.ORJSON)]
        assert outcome(decoders[1], data) == outcome(decoders[0], data), which
        assert outcome(decoders[1], data.decode("utf-8", "surrogatepass")) == \
            outcome(json_decoding.PATHS[json_decoding.STDLIB][1], data.decode("utf-8", "surrogatepass")) \
            if which and b"\xff" not in data and b"\xc0" not in data and not data.startswith(b"\xff") else True


def test_nesting_depth_counts_brackets_outside_strings_only():
    assert nesting_depth(b'{"a": [1, {"b": "[[[{{{"}], "c": "\\"]]]"}') == 3
    assert nesting_depth(b"[]") == 1 and nesting_depth(b"1") == 0 and nesting_depth(nested(700)) == 700
    assert nesting_depth('["\\ud800", [[]]]') == 3  # text too, lone surrogates and all


# Lines as an export may hold them, valid or nearly so: mutated statements, numbers at the edges, text.
VALID = json.dumps(statement(score=0.5, duration="PT1M")).encode()
numbers = st.one_of(st.integers(), st.integers(min_value=2 ** 62, max_value=2 ** 70), st.floats(),
                    st.integers(-(2 ** 70), -(2 ** 62)))
json_values = st.recursive(st.none() | st.booleans() | numbers | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=4), max_leaves=12)
mutated = st.tuples(st.integers(0, len(VALID)), st.integers(0, 8), st.binary(max_size=8)).map(
    lambda cut: VALID[:cut[0]] + cut[2] + VALID[cut[0] + cut[1]:])
hostile_lines = st.one_of(
    json_values.map(lambda value: json.dumps(value).encode()),
    json_values.map(lambda value: json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    mutated, st.binary(max_size=80), numbers.map(lambda n: repr(n).encode()),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f"{f:.17e}".encode()),
    st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3).map(nested),
    st.tuples(st.sampled_from([b" ", b"\t", b"\r", b"\xef\xbb\xbf", b"\xc2\xa0", b""]), mutated,
              st.sampled_from([b" ", b"\r\n", b"\x0b", b"\x00", b"\xc2\xa0", b""])).map(b"".join),
)


@pytest.mark.orjson
@FUZZ
@given(hostile_lines)
def test_any_line_or_document_is_read_alike_by_both_parsers(data):
    if not data or data.isspace():
        return  # a blank line is no record: the line reader never decodes it
    for which in (0, 1):
        stdlib, fast = (json_decoding.PATHS[parser][which] for parser in (json_decoding.STDLIB, json_decoding.ORJSON))
        assert outcome(fast, data) == outcome(stdlib, data), which


@pytest.mark.orjson
@FUZZ
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["{!r}", "{:.17e}", "{:.25g}", "{:.3e}"]))
def test_every_float_is_read_to_the_same_bits(number, form):
    text = form.format(number).encode()
    fast = json_decoding.PATHS[json_decoding.ORJSON][0](text)
    stdlib = json_decoding.PATHS[json_decoding.STDLIB][0](text)
    assert type(fast) is type(stdlib) and (math.copysign(1, fast) == math.copysign(1, stdlib)) and fast == stdlib


# -- a whole run over hostile export files --------------------------------------------------------

GOOD = json.dumps(statement(learner="h", timestamp="2026-11-02T10:00:00Z")).encode()
GOOD_ID = json.loads(GOOD)["id"].encode()


def extended(value):
    """The good statement with one more field, before its actor (a duplicate key if it is one already)."""
    return GOOD.replace(b'"actor"', value + b', "actor"', 1)


# Lines whose decoding differs between the libraries unless the seam evens it out, and what a run makes of
# each: staged, or quarantined with this reason (the standard library's reading, as stated independently).
HOSTILE = [
    (extended(b'"result": {"score": {"scaled": NaN}}'), "result.score.scaled is not a number between -1 and 1"),
    (extended(b'"result": {"score": {"scaled": 123456789012345678901234567890}}'),
     "result.score.scaled is not a number between -1 and 1"),
    (extended(b'"result": {"score": {"scaled": 1e400}}'), "result.score.scaled is not a number between -1 and 1"),
    (extended(b'"result": {"duration": 18446744073709551616}'),
     "result.duration '18446744073709551616' is not an ISO 8601 duration"),  # orjson alone: 1.8446744073709552e+19
    (GOOD.replace(b'"id": "https://lms.example.edu/course/BIO101/quiz/1"', b'"id": -9223372036854775809'),
     "object.id '-9223372036854775809' is not an IRI"),
    (GOOD.replace(b'"h"', b'"lone \\ud800"'), "the actor's identifier is not valid Unicode"),
    (extended(b'"verb": {"id": "urn:first"}'), None),  # a duplicate key: the last (experienced) wins
    (b"\xef\xbb\xbf" + GOOD, "not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"\r" + GOOD, "not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    (b" \t" + GOOD + "\u00a0".encode(), None),
    (GOOD + b"\x00", f"not valid JSON: extra data after the JSON value at character {len(GOOD)}"),
    (GOOD[:-1] + b"\xff}", f"not valid JSON: 'utf-8' codec can't decode byte 0xff in position {len(GOOD) - 1}: "
                          "invalid start byte"),
    (extended(b'"context": {"extensions": {"urn:x": ' + nested(600, b"") + b"}}"), "JSON nested too deeply to parse"),
    (extended(b'"context": {"extensions": {"urn:x": ' + nested(100, b"") + b"}}"), None),
    (extended(b'"context": {"extensions": {"urn:x": "12345678901234567890123"}}'), None),
]


def export_lines(good=2000):
    """Good statements with the hostile lines among them, each its own id; and the (line number, reason)
    of each line quarantined."""
    lines = [json.dumps(statement(learner=f"u{i % 40}", timestamp=f"2026-11-0{1 + i % 2}T1{i % 10}:00:00Z",
                                  score=(0.25, 0.5, 1)[i % 3], duration="PT1M")).encode() for i in range(good)]
    reasons, spacing = [], good // len(HOSTILE)
    for number, (line, reason) in enumerate(HOSTILE):
        lines.insert(7 + spacing * number, line.replace(GOOD_ID, str(uuid.UUID(int=number + 1)).encode()))
        if reason:
            reasons.append((8 + spacing * number, reason))
    return lines, reasons


@pytest.mark.orjson
def test_a_run_over_hostile_export_files_stages_quarantines_and_publishes_the_same_with_either_parser(
        make_project, tmp_path):
    """The CLI as a subprocess, its parser chosen by LMS_REFRESH_JSON_PARSER (read once, at import)."""
    (lines, reasons), results = export_lines(), {}
    first = make_project(tmp_path / "first")
    assert first.cli("run", now="2026-10-01T04:15:00Z").returncode == 0  # its pseudonymisation key, for both
    path = first.source / "hostile.ndjson"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for parser in (json_decoding.STDLIB, json_decoding.ORJSON):
        project = first.copy_to(tmp_path / parser)  # the same key, store and export file
        chosen = {json_decoding.ENVIRONMENT_VARIABLE: parser if parser == json_decoding.STDLIB else ""}
        result = project.cli("run", now=NOW, env=chosen)
        assert result.returncode == 0, result.stderr  # 11 of 2015 quarantined: within max_quarantine_share
        checked = project.cli("check", now=NOW, env=chosen)
        assert checked.returncode == 0, checked.stderr
        staged = project.query("SELECT * FROM staged_events ORDER BY event_id")
        quarantined = project.query("SELECT origin, reason, raw, digest FROM quarantine ORDER BY id")
        published = read_publication(publication(project)) if project.postgres is None else None
        results[parser] = (staged, quarantined, project.dump(), published), result.stderr, checked.stdout
        assert [(origin, reason) for origin, reason, _, _ in quarantined] == [
            (f"{path}:{number}", reason) for number, reason in reasons]
        assert len(staged) == 2000 + 4 and "read 2015 statements, staged 2004, voided 0, quarantined 11" \
            in result.stderr
    assert results[json_decoding.ORJSON][0] == results[json_decoding.STDLIB][0]
    assert f"ok  JSON parser: orjson {json_decoding.orjson.__version__} " in results[json_decoding.ORJSON][2]
    assert "ok  JSON parser: the standard library's json (orjson" in results[json_decoding.STDLIB][2]


def test_parsing_workers_read_hostile_lines_alike_with_either_parser(json_parser, tmp_path):
    """Chunks read by forked workers, which inherit the parser the seam's switch chose."""
    lines, reasons = export_lines(good=600)
    (tmp_path / "a.ndjson").write_bytes(b"\n".join(lines) + b"\n")
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=50, workers=2, parallel_min_bytes=0)
    events, quarantined, _ = collect_batches(source, WINDOW)
    assert len(events) == 600 + 4
    assert [(origin, reason) for origin, reason, _ in quarantined] == [
        (f"{tmp_path / 'a.ndjson'}:{number}", reason) for number, reason in reasons]


@pytest.mark.orjson
def test_an_lrs_page_of_hostile_statements_is_mapped_and_kept_the_same_with_either_parser():
    """An LRS page is decoded whole; a quarantined statement is kept as its value written out again, so a
    huge integer must stay the integer it was (orjson alone would make it 1.2345678901234568e+29)."""
    statements = [line for line, _ in HOSTILE[:7]] + [HOSTILE[13][0], HOSTILE[14][0],
                                                     extended(b'"result": {"score": {"scaled": 123456789012345678901'
                                                              b'234567890}}').replace(GOOD_ID, b"0" * 8 + GOOD_ID[8:])]
    body = b'{"statements": [' + b", ".join(statements) + b'], "more": ""}'
    results = {}
    for parser in (json_decoding.STDLIB, json_decoding.ORJSON):
        payload = json_decoding.PATHS[parser][1](body)
        batch, _ = lrs_source()._map_page(payload["statements"], WINDOW.since_cursor, WINDOW.until_cursor, page=1)
        results[parser] = batch.events, batch.quarantined
    assert results[json_decoding.ORJSON] == results[json_decoding.STDLIB]
    events, quarantined = results[json_decoding.STDLIB]
    assert len(events) == 3 and [reason for _, reason, _ in quarantined] == [reason for _, reason in HOSTILE[:6]] + [
        "result.score.scaled is not a number between -1 and 1"]
    assert '"scaled": 123456789012345678901234567890}' in quarantined[1][2]
    assert '"scaled": NaN}' in quarantined[0][2] and '"scaled": Infinity}' in quarantined[2][2]


def test_an_lrs_page_nested_too_deeply_is_refused_with_either_parser_alike():
    for parser in json_decoding.PATHS:
        if parser == json_decoding.ORJSON and json_decoding.orjson is None:
            continue  # the orjson half is the test above's business; this one needs no orjson
        with pytest.raises(TooDeep):
            json_decoding.PATHS[parser][1](b'{"statements": [' + HOSTILE[12][0] + b"]}")


def test_status_and_check_say_which_json_parser_is_in_use(json_parser, sqlite_project):
    if json_parser == json_decoding.ORJSON:
        words = f"orjson {json_decoding.orjson.__version__} (the standard library's json where the two could differ)"
    elif json_decoding.orjson is not None:
        words = (f"the standard library's json (orjson {json_decoding.orjson.__version__} is installed, but "
                 "LMS_REFRESH_JSON_PARSER=stdlib says not to use it)")
    else:  # e.g. the suite against the package on Debian 12, which has no python3-orjson
        words = "the standard library's json (orjson is not installed; python3-orjson or the 'fast' extra is faster)"
    status = sqlite_project.invoke("status", check=0)
    assert f"\njson parser:  {words}\n" in status.stdout
    assert json.loads(sqlite_project.invoke("status", "--json", check=0).stdout)["json_parser"] == words
    checked = sqlite_project.invoke("check", check=0)
    assert f"\nok  JSON parser: {words}\n" in checked.stdout


@pytest.mark.parametrize("value, problem", [
    ("fast", "is 'fast', which names no parser (stdlib or orjson): ignored"),
    ("STDLIB\x1b[2J", "is 'STDLIB\\x1b[2J', which names no parser (stdlib or orjson): ignored"),  # shown escaped
])
def test_a_json_parser_setting_that_names_no_parser_is_a_warning_of_check_and_status(sqlite_project, value, problem):
    """LMS_REFRESH_JSON_PARSER is read once, when the program starts: the CLI as a subprocess, with it set."""
    environment = {json_decoding.ENVIRONMENT_VARIABLE: value}
    checked = sqlite_project.cli("check", env=environment)
    assert checked.returncode == 0, checked.stderr
    assert f"warning: LMS_REFRESH_JSON_PARSER {problem}" in checked.stdout
    status = sqlite_project.cli("status", env=environment)
    assert f"\njson parser:  warning: LMS_REFRESH_JSON_PARSER {problem}\n" in status.stdout
    assert json_decoding.setting_problem(value) == problem
    assert json_decoding.setting_problem(json_decoding.STDLIB) is None and json_decoding.setting_problem(None) is None
    assert (json_decoding.setting_problem(json_decoding.ORJSON) is None) == (json_decoding.orjson is not None)
