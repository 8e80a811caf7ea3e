"""Small pure functions: windows, days, statement mapping."""

import collections
import copy
import datetime as dt
import random

import pytest

from helpers.statements import statement
from lms_refresh.config import validate
from lms_refresh.instants import parse_user_time
from lms_refresh.sources import BaseSource
from lms_refresh.sources.xapi import COURSE_TYPE, StatementMapper, name_id
from lms_refresh.sources.xapi_fields import InvalidStatement, parse_duration_ms
from lms_refresh.window import Window, next_watermark

UTC = dt.UTC
CONFIG = validate({"source": {"type": "xapi-ndjson", "path": "/x"}, "window": {"safety_lag": "10m",
                  "lookback": "1h"}}, "test.toml", {})


def t(text):
    return dt.datetime.fromisoformat(text).astimezone(UTC)


def test_local_days_of_a_window_across_the_dst_change():
    window = Window(t("2026-10-24T04:15:00+02:00"), t("2026-10-26T04:15:00+01:00"))
    assert window.local_days("Europe/Paris") == ["2026-10-24", "2026-10-25", "2026-10-26"]
    one_day = Window(t("2026-10-25T00:00:00+02:00"), t("2026-10-26T00:00:00+01:00"))
    assert one_day.until - one_day.since == dt.timedelta(hours=25)
    assert one_day.local_days("Europe/Paris") == ["2026-10-25"]


class CompleteThrough(BaseSource):
    """A source on the time axis that says it is complete through `through` (None: it does not say)."""

    def __init__(self, through=None):
        self.through = through

    def complete_through(self, now):
        return self.through


def test_run_window_bootstrap_lag_lookback_and_completeness():
    now = t("2026-11-03T04:15:00+01:00")
    assert CompleteThrough().run_window(None, now, CONFIG) == Window(now - dt.timedelta(days=7),
                                                                     now - dt.timedelta(minutes=10))
    mark = t("2026-11-02T03:05:00+00:00")
    assert CompleteThrough().run_window(mark, now, CONFIG).since == mark - dt.timedelta(hours=1)
    complete = t("2026-11-03T01:00:00+00:00")
    assert CompleteThrough(complete).run_window(mark, now, CONFIG).until == complete


def test_next_watermark_rules():
    mark = t("2026-11-02T00:00:00+00:00")
    later = Window(t("2026-11-01T00:00:00+00:00"), t("2026-11-03T00:00:00+00:00"))
    gap = Window(t("2026-11-02T12:00:00+00:00"), t("2026-11-03T00:00:00+00:00"))
    earlier = Window(t("2026-10-01T00:00:00+00:00"), t("2026-10-03T00:00:00+00:00"))
    assert next_watermark(mark, later, is_backfill=True) == later.until
    assert next_watermark(mark, gap, is_backfill=True) == mark
    assert next_watermark(mark, earlier, is_backfill=True) == mark
    assert next_watermark(None, earlier, is_backfill=True) == earlier.until
    assert next_watermark(mark, earlier, is_backfill=False) == mark


def test_user_times_are_local_unless_they_carry_an_offset():
    assert parse_user_time("2026-11-02", "Europe/Paris") == t("2026-11-01T23:00:00+00:00")
    assert parse_user_time("2026-07-02T04:15", "Europe/Paris") == t("2026-07-02T02:15:00+00:00")
    assert parse_user_time("2026-07-02T04:15Z", "Europe/Paris") == t("2026-07-02T04:15:00+00:00")
    with pytest.raises(ValueError):
        parse_user_time("last tuesday", "UTC")


MAPPER = StatementMapper("Europe/Paris", lambda actor: "h:" + actor, r"^(.+?/course/[^/?#]+)")


def test_mapping_of_a_complete_statement():
    kind, row = MAPPER.map(statement(learner="ann", verb="passed", timestamp="2026-11-02T23:30:00Z",
                                     stored="2026-11-03T00:00:00.5+00:00", score=0.875, duration="PT1H2M3.5S"))
    assert kind == "event"
    course, verb = "https://lms.example.edu/course/BIO101", "http://adlnet.gov/expapi/verbs/passed"
    assert row[:3] == ("2026-11-03", name_id(course), "h:account:https://lms.example.edu|ann")
    assert len(row[3]) == 16
    assert row[4:] == ("2026-11-03T00:00:00.500000Z", "2026-11-02T23:30:00Z", name_id(verb), 0, 0, 1, 0, 875000,
                       3723500)
    names = MAPPER.take_new_names()
    assert names[("course", name_id(course))] == course and names[("verb", name_id(verb))] == verb
    assert MAPPER.take_new_names() == {}


def test_course_falls_back_to_the_pattern_then_unknown():
    body = statement()
    del body["context"]
    assert MAPPER.map(body)[1][1] == name_id("https://lms.example.edu/course/BIO101")
    body["object"]["id"] = "https://elsewhere.example/activity/9"
    assert MAPPER.map(body)[1][1] == name_id("unknown")


def test_course_activities_without_a_usable_course_id_are_passed_over():
    body = statement()
    parent = body["context"]["contextActivities"]["parent"]
    parent.insert(0, {"id": 7, "definition": {"type": COURSE_TYPE}})  # not an IRI
    parent.insert(1, {"id": "https://lms.example.edu/course/X", "definition": "course"})  # not an object
    assert MAPPER.map(body)[1][1] == name_id("https://lms.example.edu/course/BIO101")


def test_the_account_cache_does_not_let_a_second_identifier_or_a_bad_name_through():
    mapper = StatementMapper("UTC", lambda actor: actor, r"course/(\w+)")
    account = {"homePage": "https://lms.example.edu", "name": "ann"}
    assert mapper.map(statement(learner="ann"))[1][2] == "account:https://lms.example.edu|ann"
    both = statement()
    both["actor"] = {"mbox": "mailto:ann@example.edu", "account": account}  # cached account, plus an mbox
    with pytest.raises(InvalidStatement, match=r"^actor has more than one inverse functional identifier "
                                               r"\(mbox, account\)$"):
        mapper.map(both)
    odd = statement()
    odd["actor"] = {"account": {"homePage": "https://lms.example.edu", "name": 7}}
    with pytest.raises(InvalidStatement, match=r"^actor.account.name is not a non-empty string$"):
        mapper.map(odd)


@pytest.mark.parametrize("change, reason", [
    (lambda s: s.pop("actor"), "actor is missing"),
    (lambda s: s["actor"].pop("account"), "no inverse functional identifier"),
    (lambda s: s.update(id="42"), "not a UUID"),
    (lambda s: s.update(stored="tuesday"), "stored 'tuesday' is not an ISO 8601 time"),
    (lambda s: s.pop("stored"), "stored is missing"),
    (lambda s: s.update(verb={}), "verb.id is missing"),
    (lambda s: s.update(result={"duration": "1 hour"}), "is not an ISO 8601 duration"),
    (lambda s: s.update(result={"score": {"scaled": "high"}}), "score.scaled is not a number"),
    # Malformed contexts are bad records, not a crash of the run.
    (lambda s: s.update(context=["BIO101"]), "context is not an object"),
    (lambda s: s.update(context={"contextActivities": []}), "contextActivities is not an object"),
    (lambda s: s["context"]["contextActivities"].update(parent=[7]), "parent is not an activity or a list"),
    (lambda s: s["context"]["contextActivities"].update(parent=[], grouping="x"),
     "grouping is not an activity or a list"),
])
def test_invalid_statements_say_why(change, reason):
    body = statement()
    change(body)
    with pytest.raises(InvalidStatement, match=reason):
        MAPPER.map(body)


def test_voiding_statement():
    target = "0A1B2C3D-4E5F-4A6B-8C7D-8E9F0A1B2C3D"
    kind, row = MAPPER.map({"id": "8f0e9b3c-1d2e-4f5a-9b8c-7d6e5f4a3b2c", "stored": "2026-11-02T10:00:00Z",
                            "verb": {"id": "http://adlnet.gov/expapi/verbs/voided"},
                            "object": {"objectType": "StatementRef", "id": target}})
    assert kind == "void"
    assert row == (bytes.fromhex("0a1b2c3d4e5f4a6b8c7d8e9f0a1b2c3d"), bytes.fromhex("8f0e9b3c1d2e4f5a9b8c7d6e5f4a3b2c"),
                   "2026-11-02T10:00:00.000000Z")


@pytest.mark.parametrize("text, cursor", [
    ("2026-11-02T10:00:00Z", "2026-11-02T10:00:00.000000Z"),
    ("2026-11-02T10:00:00.5Z", "2026-11-02T10:00:00.500000Z"),
    ("2026-11-02T10:00:00.596Z", "2026-11-02T10:00:00.596000Z"),
    ("2026-11-02T10:00:00.59xZ", None),
    ("2026-11-02T11:00:00.123456+01:00", "2026-11-02T10:00:00.123456Z"),
    ("2026-11-02T10:00:00.1234567Z", "2026-11-02T10:00:00.123456Z"),
])
def test_stored_cursors_are_fixed_width_utc(text, cursor):
    from lms_refresh.sources.xapi_fields import stored_cursor

    if cursor is None:
        with pytest.raises(InvalidStatement, match="not an ISO 8601 time"):
            stored_cursor(text)
    else:
        assert stored_cursor(text) == cursor


@pytest.mark.parametrize("text, ms", [("PT0S", 0), ("PT1.25S", 1250), ("P1DT1H", 90000000), ("PT90M", 5400000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


def test_forked_helpers_do_not_keep_the_run_lock_alive(tmp_path):
    import os
    import signal

    from lms_refresh.run.lock import RunLock

    path = str(tmp_path / "refresh.lock")
    lock = RunLock(path).__enter__()
    ready, started = os.pipe()
    child = os.fork()
    if child == 0:  # a parsing worker, still alive after the run that forked it died
        os.write(started, b"x")  # fork's child-side hooks have run by now
        signal.pause()
        os._exit(0)
    os.read(ready, 1)
    try:
        os.close(lock.fd)  # the run dies: its descriptor closes without an explicit unlock
        lock.fd = None
        with RunLock(path):  # free at once, although the worker lives on
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(ready)
        os.close(started)


def _nodes(value, path=()):
    """Yield the path of every value inside a parsed JSON document."""
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield from _nodes(inner, path + (key,))


def test_no_malformed_statement_raises_anything_but_a_quarantine_reason():
    """Thousands of statements with parts replaced by wrong types, odd values or nothing: each is
    mapped or quarantined; none may end the run with another exception."""
    from lms_refresh.disclosure.pseudonyms import Pseudonymiser

    mapper = StatementMapper("Europe/Paris", Pseudonymiser(b"k" * 32), r"^(.+?/course/[^/?#]+)")
    odd = [None, 0, -1, 1.5, True, "", "x", "P", "PT", "2026-13-45T99:99:99Z", [], [1], [{}], {}, {"id": 5},
           {"definition": "x"}, "\ud800", 10 ** 30, float("nan"), float("inf")]
    rng = random.Random(7)
    outcomes = collections.Counter()
    for _ in range(4000):
        body = statement(score=0.5, duration="PT1M", success=True)
        body["context"]["contextActivities"]["grouping"] = [{"id": "g", "definition": {"type": "t"}}]
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(list(_nodes(body))[1:])
            parent = body
            for key in path[:-1]:
                parent = parent[key]
            if rng.random() < 0.75 or not isinstance(parent, dict):
                parent[path[-1]] = copy.deepcopy(rng.choice(odd))
            else:
                del parent[path[-1]]
        try:
            outcomes[mapper.map(body)[0]] += 1
        except InvalidStatement:
            outcomes["quarantined"] += 1
    assert outcomes["event"] > 500 and outcomes["quarantined"] > 500  # both sides were exercised
