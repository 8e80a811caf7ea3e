"""The same statement delivered again (issue 20, class 2): xAPI 1.0.3 Data 2.3.1, Statement Immutability.

A re-delivery — a new `stored`, the same instant spelt otherwise, another serialisation of
what an LRS may change — counts once and is not quarantined; only a real difference of
content is a conflict ("conflicting statement id", quarantined, counted toward
max_quarantine_share). The forms are drawn by Hypothesis, mapped by the real mapper and,
end to end, run through the CLI on both stores.
"""

import copy
import datetime as dt
import itertools
import json

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from helpers.reference import expected_serving
from helpers.statements import HOME, statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.sources.redelivery import canonical_iri, same_statement, same_time
from lms_refresh.sources.xapi import ADL, StatementMapper

UTC = dt.UTC
PARIS = "Europe/Paris"
T = dt.datetime(2026, 11, 3, 3, 15, tzinfo=UTC)  # Tuesday 04:15 in Paris
CONFLICT = "conflicting statement id: already staged with other content"
VERBS = ["experienced", "attempted", "completed", "passed", "failed"]

moments = st.datetimes(min_value=dt.datetime(2026, 11, 1, 23, 0), max_value=dt.datetime(2026, 11, 2, 22, 59),
                       timezones=st.just(UTC))


def utc_text(moment, digits=6):
    """An ISO time in UTC with `digits` fraction digits (truncated)."""
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{moment.microsecond:06d}"[:digits]
    return text + (f".{fraction}" if digits else "") + "Z"


@st.composite
def statements(draw, learner=None):
    """An xAPI statement of an account learner on 2 November (Paris), with a result sometimes."""
    body = statement(learner=learner or draw(st.sampled_from(["u1", "u2", "Ana", "x-9"])),
                     verb=draw(st.sampled_from(VERBS)), course=draw(st.sampled_from(["BIO101", "CHEM200"])),
                     timestamp=utc_text(draw(moments), draw(st.sampled_from([3, 6]))),
                     score=draw(st.none() | st.sampled_from([0.5, 0.25, 1, -0.75])),
                     success=draw(st.none() | st.booleans()),
                     duration=draw(st.none() | st.sampled_from(["PT1M", "PT4.5S"])))
    body["stored"] = body["timestamp"]
    body["verb"]["display"] = {"en-US": body["verb"]["id"].rsplit("/", 1)[1]}
    body["object"]["definition"] = {"name": {"en-US": "Quiz 1"}}
    return body


def shout_scheme_and_host(iri, how):
    """`iri` with its scheme and/or host in upper (or mixed) case: the same IRI (RFC 3987)."""
    scheme, rest = iri.split("://", 1)
    host, path = rest.split("/", 1)
    if how in ("scheme", "both"):
        scheme = scheme.upper()
    if how in ("host", "both"):
        host = host.title()
    return f"{scheme}://{host}/{path}"


def respelt_time(text, draw):
    """The instant of `text` spelt otherwise: another offset, another precision (kept to the millisecond)."""
    moment = dt.datetime.fromisoformat(text)
    offset = dt.timedelta(minutes=draw(st.integers(-14 * 4, 14 * 4)) * 15)
    digits = draw(st.sampled_from([3, 6, 9]))
    micro = moment.microsecond
    if digits == 3 and micro % 1000 and draw(st.booleans()):
        moment = moment + dt.timedelta(microseconds=(micro + 500) // 1000 * 1000 - micro)  # rounded, not truncated
    local = moment.astimezone(dt.timezone(offset))
    body = local.strftime("%Y-%m-%dT%H:%M:%S") + "." + (f"{local.microsecond:06d}" + "000")[:digits]
    if offset:
        sign, span = ("+", offset) if offset > dt.timedelta(0) else ("-", -offset)
        minutes = int(span.total_seconds() // 60)
        return body + f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return body + draw(st.sampled_from(["Z", "+00:00", "-00:00"]))


@st.composite
def redelivered(draw, original, stored):
    """`original` delivered again, stored at `stored`, in forms xAPI says are the same statement."""
    again = copy.deepcopy(original)
    again["stored"] = stored
    if draw(st.booleans()):
        again["timestamp"] = respelt_time(again["timestamp"], draw)
    if draw(st.booleans()):
        again["id"] = again["id"].upper()
    for place in draw(st.sets(st.sampled_from(["verb", "object", "parent"]))):
        how = draw(st.sampled_from(["scheme", "host", "both"]))
        if place == "verb":
            again["verb"]["id"] = shout_scheme_and_host(again["verb"]["id"], how)
        elif place == "object":
            again["object"]["id"] = shout_scheme_and_host(again["object"]["id"], how)
        else:
            parent = again["context"]["contextActivities"]["parent"][0]
            parent["id"] = shout_scheme_and_host(parent["id"], how)
    if draw(st.booleans()):
        again["authority"] = {"objectType": "Agent",
                              "account": {"homePage": "https://lrs2.example.edu", "name": "import"}}
    if draw(st.booleans()):
        again["version"] = draw(st.sampled_from(["1.0.0", "1.0.3"]))
    if draw(st.booleans()):
        again["verb"]["display"] = {"fr-FR": "autre chose"}
    if draw(st.booleans()):
        again["object"]["definition"] = {"name": {"de-DE": "Test 1"}, "description": {"en-US": "changed"}}
    if draw(st.booleans()):
        again = dict(reversed(list(again.items())))  # another key order
    return again


DIFFERENCES = ["learner", "verb", "verb path case", "success", "score", "duration", "time", "course", "completion"]


@st.composite
def changed(draw, original, stored):
    """`original` delivered again with one real difference of content (and maybe a new form as well)."""
    again = draw(redelivered(original, stored))
    what = draw(st.sampled_from(DIFFERENCES))
    result = again.setdefault("result", {})
    if what == "learner":
        again["actor"] = {"objectType": "Agent", "account": {"homePage": HOME, "name": "someone-else"}}
    elif what == "verb":
        again["verb"]["id"] = ADL + ("answered" if original["verb"]["id"] != ADL + "answered" else "experienced")
    elif what == "verb path case":  # only the scheme and host are case-insensitive
        again["verb"]["id"] = again["verb"]["id"][:-3] + again["verb"]["id"][-3:].upper()
    elif what == "success":  # a value that changes a flag (success = true on a "passed" changes no number)
        was = original.get("result", {}).get("success")
        result["success"] = (not was) if was is not None else original["verb"]["id"] != ADL + "passed"
    elif what == "score":
        result["score"] = {"scaled": 0.125 if original.get("result", {}).get("score") != {"scaled": 0.125} else 0.375}
    elif what == "duration":
        result["duration"] = "PT2H" if original.get("result", {}).get("duration") != "PT2H" else "PT3H"
    elif what == "completion":  # (on a "completed" statement it changes no number: not staged, not compared)
        assume(original["verb"]["id"] != ADL + "completed")
        result["completion"] = True
    elif what == "time":  # another instant: at least two milliseconds away, either way
        shift = dt.timedelta(milliseconds=draw(st.integers(2, 3 * 86_400_000))) * draw(st.sampled_from([1, -1]))
        again["timestamp"] = utc_text(dt.datetime.fromisoformat(original["timestamp"]) + shift)
    else:
        parent = again["context"]["contextActivities"]["parent"][0]
        parent["id"] = parent["id"].replace("BIO101", "PHYS1") if "BIO101" in parent["id"] else \
            parent["id"].replace("CHEM200", "PHYS1")
    if not result:
        del again["result"]
    return again


def mapped(*documents):
    """Map statements with one mapper; return (events, name_of) as the store would see them."""
    mapper = StatementMapper(PARIS, Pseudonymiser(bytes(range(32))), r"^(.+?/course/[^/?#]+)")
    names, events = {}, []
    for document in documents:
        kind, event = mapper.map(json.loads(json.dumps(document)))
        events.append(event)
        names.update(mapper.take_new_names())
    return events, lambda kind, number: names.get((kind, number))


# -- the comparison, through the real mapper ---------------------------------------------------

@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_a_redelivery_in_any_equivalent_form_is_the_same_statement(data):
    original = data.draw(statements())
    again = data.draw(redelivered(original, "2026-11-20T08:00:00.000Z"))
    (first, second), name_of = mapped(original, again)
    assert first.event_id == second.event_id
    assert same_statement(tuple(first), second, name_of)
    assert same_statement(tuple(second), first, name_of)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_a_real_difference_of_content_is_a_conflict(data):
    original = data.draw(statements())
    again = data.draw(changed(original, "2026-11-20T08:00:00.000Z"))
    (first, second), name_of = mapped(original, again)
    assert not same_statement(tuple(first), second, name_of)
    assert not same_statement(tuple(second), first, name_of)


def test_times_are_the_same_to_the_millisecond_whether_truncated_or_rounded():
    assert same_time("2026-11-02T10:00:00.123456Z", "2026-11-02T11:00:00.123+01:00")  # truncated
    assert same_time("2026-11-02T10:00:00.1236Z", "2026-11-02T10:00:00.124-00:00")  # rounded
    assert same_time("2026-11-02T23:59:59.9996Z", "2026-11-03T00:00:00.000Z")  # rounded over midnight
    assert same_time("2026-11-02T10:00:00Z", "2026-11-02T10:00:00.000000000+00:00")
    assert not same_time("2026-11-02T10:00:00.123Z", "2026-11-02T10:00:00.125Z")
    assert not same_time("2026-11-02T10:00:00Z", "2026-11-02T10:00:00+01:00")  # an hour apart


def test_only_the_scheme_host_and_escapes_of_an_iri_ignore_case():
    assert canonical_iri("HTTPS://LMS.Example.EDU/Course/%3a") == "https://lms.example.edu/Course/%3A"
    assert canonical_iri("https://user:PW@Host.example/x") == "https://user:PW@host.example/x"
    assert canonical_iri("URN:Example:Thing") == "urn:Example:Thing"
    assert canonical_iri("unknown") == "unknown"


def test_a_version_without_a_timestamp_takes_its_time_from_stored():
    """The LRS sets a missing timestamp to `stored` (Data 2.4.7): a re-delivery with a new `stored` is the
    same statement, whatever day either `stored` falls on."""
    original = statement(timestamp="2026-11-02T10:00:00Z")
    del original["timestamp"]
    again = dict(original, stored="2026-11-09T10:00:00Z")
    assigned = dict(original, stored="2026-11-09T10:00:00Z", timestamp="2026-11-09T10:00:00Z")
    (first, second, third), name_of = mapped(original, again, assigned)
    assert first.occurred == "" and first.day != second.day
    assert same_statement(tuple(first), second, name_of) and same_statement(tuple(first), third, name_of)


# -- end to end: the CLI on both stores ------------------------------------------------------

def base_statements(learners=12):
    return [dict(statement(learner=f"u{i}", verb=VERBS[i % 5], timestamp=f"2026-11-02T10:00:{i:02d}.{i * 37:03d}Z",
                           score=0.5 if i % 3 else None, success=None if i % 4 else True),
                 version="1.0.3") for i in range(learners)]


def first_run(project, base):
    project.write("a.ndjson", base)
    project.invoke("run", now=T.isoformat(), check=0)


def window_rows(base, fresh):
    return expected_serving([json.dumps(s) for s in base + fresh], T - dt.timedelta(days=30),
                            T + dt.timedelta(days=1), PARIS, 10)


_projects = itertools.count()


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_an_lrs_reimport_counts_once_and_quarantines_nothing(tmp_path, make_project, data):
    project = make_project(tmp_path / f"p{next(_projects)}")
    base = base_statements()
    first_run(project, base)
    # The LRS re-imports everything a day later, in its own forms; new statements wait behind them.
    again = [data.draw(redelivered(s, f"2026-11-03T08:{i:02d}:00.5+01:00")) for i, s in enumerate(base)]
    fresh = [statement(learner=f"n{i}", timestamp="2026-11-03T08:30:00Z") for i in range(11)]
    project.write("b.ndjson", again + fresh)
    later = project.invoke("run", now=(T + dt.timedelta(days=1)).isoformat(), check=0)
    assert "quarantined 0" in later.stderr, later.stderr
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(len(base) + len(fresh),)]
    assert project.serving(site=True) == window_rows(base, fresh)
    # and so does every later run over the same re-import
    project.invoke("backfill", "--since", "2026-11-03T00:00", "--until", "2026-11-04T00:00",
                   now=(T + dt.timedelta(days=1, hours=1)).isoformat(), check=0)
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]
    assert project.serving(site=True) == window_rows(base, fresh)


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_a_real_difference_is_quarantined_and_counted_against_the_share(tmp_path, make_project, data):
    project = make_project(tmp_path / f"q{next(_projects)}")
    base = base_statements()
    first_run(project, base)
    which = data.draw(st.integers(0, len(base) - 1))
    different = data.draw(changed(base[which], "2026-11-03T08:00:00Z"))
    same = [data.draw(redelivered(s, "2026-11-03T08:01:00Z")) for s in base[:which] + base[which + 1:]]
    project.write("b.ndjson", [different] + same)
    # 1 of 12 records quarantined is more than the default share of 1%: nothing is committed.
    refused = project.invoke("run", now=(T + dt.timedelta(days=1)).isoformat())
    assert refused.returncode == 65, refused.stderr
    assert "1 of 12 records in the window were malformed" in refused.stderr
    assert project.query("SELECT origin, reason FROM quarantine") == [
        (f"statement {base[which]['id'].replace('-', '')}", CONFLICT)]
    assert project.serving(site=True) == window_rows(base, [])
    # Within the share the run commits: the staged version stands, the other is not counted.
    project.configure(extra_top="max_quarantine_share = 0.1")
    project.invoke("run", now=(T + dt.timedelta(days=1)).isoformat(), check=0)
    assert project.query("SELECT COUNT(*), MAX(reason) FROM quarantine") == [(1, CONFLICT)]
    assert project.query("SELECT quarantined FROM runs ORDER BY started_at")[-1] == (1,)
    assert project.serving(site=True) == window_rows(base, [])


def test_a_reimport_into_a_real_lrs_counts_once(tmp_path, ralph, store_kind, request):
    """Ralph empties and takes the same statements again (a re-import), with their timestamps written
    with another offset and precision: it stores each anew, with a new `stored`."""
    from helpers.lrs_sample import lrs_project, text, utc_now

    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    project = lrs_project(tmp_path / "p", ralph, postgres)
    start = utc_now() - dt.timedelta(hours=3)
    base = [statement(learner=f"u{i}", verb=VERBS[i % 5], timestamp=text(start + dt.timedelta(seconds=i * 7)),
                      score=0.5 if i % 3 else None) for i in range(30)]
    for item in base:
        del item["stored"]  # the LRS sets it
    ralph.post(base)
    project.invoke("run", check=0)
    first = project.serving()
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(30,)]
    ralph.reset()
    again = []
    for item in base:
        moment = dt.datetime.fromisoformat(item["timestamp"]).astimezone(dt.timezone(dt.timedelta(hours=2)))
        again.append(dict(item, id=item["id"].upper(), timestamp=moment.isoformat(timespec="milliseconds")))
    ralph.post(again)
    result = project.invoke("run", check=0)
    assert "quarantined 0" in result.stderr, result.stderr
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(30,)]
    assert project.serving() == first
