"""Each xAPI 1.0.3 statement form: how it counts (flags, day, course, learner) or why it is quarantined.

The statements are written here, one per form; the mapper's learner is the
identifier text (an identity pseudonymiser) so that tests can name it. The last
sections map whole statements through a mapper that prefixes its pseudonyms
(so a test sees that the learner went through it), and the fields' own parsers
(stored cursors, durations).
"""

import collections
import copy
import hashlib
import json
import random
import re

import pytest

from helpers.statements import HOME, statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.sources import json_decoding
from lms_refresh.sources.records import CLEANED, title_of
from lms_refresh.sources.xapi import ADL, COURSE_TYPE, StatementMapper, name_id
from lms_refresh.sources.xapi_fields import InvalidStatement, parse_duration_ms, stored_cursor

# Each statement is written out and decoded again by each JSON parser in turn (an export line's way into
# the mapper), so that the mapper is seen to read what either parser gives it alike.
pytestmark = pytest.mark.usefixtures("json_parser")
COURSE = f"{HOME}/course/BIO101"
ANN = f"account:{HOME}|ann"


def mapper():
    return StatementMapper("Europe/Paris", lambda identifier: identifier, r"^(.+?/course/[^/?#]+)")


def decoded(body):
    """The statement as the parser in use reads it back from an export line."""
    return json_decoding.decode_line(json.dumps(body).encode())


def counted(body):
    """Return (day, course IRI, learner, (attempt, completion, passed, failed), score_micro, duration_ms)."""
    kind, row = mapper().map(decoded(body))
    assert kind == "event"
    courses = {name_id(iri): iri for iri in (COURSE, "unknown", "https://other.example/course/X")}
    return row[0], courses.get(row[1], row[1]), row[2], row[7:11], row[11], row[12]


def quarantined(body, reason):
    with pytest.raises(InvalidStatement) as caught:
        mapper().map(decoded(body))
    assert str(caught.value) == reason


def ann(**facts):
    facts.setdefault("timestamp", "2026-11-02T10:00:00Z")
    return statement(learner="ann", stored="2026-11-03T08:00:00.000Z", **facts)


def without_context(body):
    del body["context"]
    return body


# -- objects that are not Activities ------------------------------------------------------------

def test_a_substatement_is_an_event_of_the_actor_and_its_own_verb_and_result_do_not_count():
    body = ann(verb="planned")
    body["object"] = {"objectType": "SubStatement",
                      "actor": {"mbox": "mailto:bob@example.edu"},
                      "verb": {"id": ADL + "completed"},
                      "object": {"id": f"{HOME}/course/BIO101/lab/3"},
                      "result": {"success": True, "completion": True, "score": {"scaled": 0.9}}}
    assert counted(body) == ("2026-11-02", COURSE, ANN, (0, 0, 0, 0), None, None)


def test_the_outer_verb_and_result_of_a_statement_about_a_substatement_do_count():
    body = ann(verb="attempted", success=False, score=0.25)
    body["object"] = {"objectType": "SubStatement", "actor": {"mbox": "mailto:bob@example.edu"},
                      "verb": {"id": ADL + "passed"}, "object": {"id": f"{HOME}/x"}}
    assert counted(body) == ("2026-11-02", COURSE, ANN, (1, 0, 0, 1), 250_000, None)


@pytest.mark.parametrize("target", [
    {"objectType": "Agent", "mbox": "mailto:tutor@example.edu"},
    {"objectType": "Group", "account": {"homePage": HOME, "name": "study-group-4"}},
    {"objectType": "Group", "member": [{"mbox": "mailto:a@example.edu"}]},
    {"objectType": "StatementRef", "id": "6a3f0c2e-3c1b-4d7e-9f10-2b3c4d5e6f70"},
])
def test_agent_group_and_statementref_objects_are_events_in_the_context_course(target):
    body = ann(verb="interacted")
    body["object"] = target
    assert counted(body) == ("2026-11-02", COURSE, ANN, (0, 0, 0, 0), None, None)
    # Without a context there is no activity id for the course pattern: the course is unknown.
    assert counted(without_context(body))[1] == "unknown"


def test_activity_ids_feed_the_course_pattern_but_other_objects_ids_do_not():
    body = without_context(ann())
    body["object"] = {"id": "https://other.example/course/X/page/2"}  # objectType may be left out
    assert counted(body)[1] == "https://other.example/course/X"
    body["object"] = {"objectType": "StatementRef", "id": "6a3f0c2e-3c1b-4d7e-9f10-2b3c4d5e6f70"}
    assert counted(body)[1] == "unknown"


def test_open_edx_group_activities_and_activities_without_an_id_count():
    body = ann(verb="attempted")
    body["object"] = {"objectType": "GroupActivity", "id": f"{HOME}/xblock/problem-7"}
    assert counted(body) == ("2026-11-02", COURSE, ANN, (1, 0, 0, 0), None, None)
    interaction = "http://adlnet.gov/expapi/activities/cmi.interaction"
    body["object"] = {"objectType": "Activity", "definition": {"type": interaction}}
    assert counted(body) == ("2026-11-02", COURSE, ANN, (1, 0, 0, 0), None, None)


def test_an_activity_id_that_is_not_an_iri_is_quarantined():
    body = ann()
    body["object"] = {"objectType": "Activity", "id": "quiz 1"}
    quarantined(body, "object.id 'quiz 1' is not an IRI")


def test_a_course_typed_context_activity_whose_id_is_not_an_iri_is_passed_over():
    body = ann()
    body["context"]["contextActivities"]["parent"].insert(0, {"id": "BIO 101", "definition": {"type": COURSE_TYPE}})
    assert counted(body)[1] == COURSE


# RFC 3987 4.1: no bidirectional formatting character in an IRI; 2.2: none of what ucschar leaves out (noncharacters,
# specials, tags), and private use characters in the query only.
HOSTILE_IRI_CHARACTERS = ["\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067",
                          "\u2068", "\u2069", "\ufdd0", "\ufffe", "\ufff9", "\U0001fffe", "\U000e0041", "\ue000",
                          "\U000f0000"]


@pytest.mark.parametrize("character", HOSTILE_IRI_CHARACTERS, ids=lambda c: f"U+{ord(c):04X}")
def test_an_iri_with_a_character_rfc_3987_excludes_is_not_an_iri(character):
    hostile = f"{HOME}/course/abc{character}lmth.exe"
    body = ann()
    body["object"] = {"objectType": "Activity", "id": hostile}
    quarantined(body, f"object.id {hostile[:60]!r} is not an IRI")  # as any object id that is no IRI
    body = ann()
    body["verb"] = {"id": f"https://verbs.example/did{character}"}
    quarantined(body, f"verb.id {body['verb']['id']!r} is not an IRI")
    for parent in ({"id": hostile, "definition": {"type": COURSE_TYPE}}, {"id": hostile}):
        body = ann()
        body["object"] = {"objectType": "Agent", "mbox": "mailto:bo@example.edu"}  # the context names the course
        body["context"]["contextActivities"]["parent"] = [parent]
        assert counted(body)[1] == "unknown"  # passed over, course-typed or not, as any context id that is no IRI


def test_private_use_characters_are_allowed_in_an_iris_query_only():
    body = ann()
    body["object"]["id"] = f"{COURSE}/quiz/1?x=\ue000"
    assert counted(body)[1] == COURSE
    body["object"]["id"] = f"{COURSE}/quiz/1#\ue000"
    quarantined(body, f"object.id {body['object']['id'][:60]!r} is not an IRI")


# -- durations ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, milliseconds", [
    ("PT4H35M59.14S", 16_559_140),
    ("P1W", 7 * 86_400_000),
    ("P4W", 28 * 86_400_000),
    ("P0.5W", 302_400_000),
    ("PT1,5S", 1500),
    ("P1DT12H", 129_600_000),
    ("PT0S", 0),
    ("P0Y0M2D", 172_800_000),  # zero years and months: the length is known
    ("P3Y1M29DT4H35M59.14S", None),  # years and months have no fixed length
    ("P1M", None),
    ("P2Y", None),
])
def test_durations_of_every_iso_8601_designator_form(text, milliseconds):
    assert counted(ann(duration=text))[5] == milliseconds


@pytest.mark.parametrize("text, reason", [
    ("P4W1D", "result.duration 'P4W1D' is not an ISO 8601 duration"),  # weeks stand alone in ISO 8601:2004
    ("P", "result.duration 'P' is not an ISO 8601 duration"),
    ("PT", "result.duration 'PT' is not an ISO 8601 duration"),
    ("P1DT", "result.duration 'P1DT' is not an ISO 8601 duration"),
    ("PT1M2H", "result.duration 'PT1M2H' is not an ISO 8601 duration"),
    ("P0001-02-03", "result.duration 'P0001-02-03' is not an ISO 8601 duration"),  # the alternative format
    ("P1.5DT2H", "result.duration 'P1.5DT2H' has a fraction before its last part"),
    ("P" + "9" * 400 + "D", f"result.duration {('P' + '9' * 400)[:40]!r} is longer than 10000 days"),
    ("P10001D", "result.duration 'P10001D' is longer than 10000 days"),
    (90, "result.duration '90' is not an ISO 8601 duration"),
])
def test_durations_that_are_not_iso_8601_or_too_long_are_quarantined(text, reason):
    quarantined(ann(duration=text), reason)


# -- actors -------------------------------------------------------------------------------------

def with_actor(actor, **facts):
    body = ann(**facts)
    body["actor"] = actor
    return body


def sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


def test_an_mbox_and_its_sha1_form_are_one_learner():
    address = "mailto:Ann.Lee@example.edu"
    by_mbox = counted(with_actor({"mbox": address}))[2]
    assert by_mbox == "mbox_sha1sum:" + sha1(address)
    assert counted(with_actor({"mbox_sha1sum": sha1(address).upper()}))[2] == by_mbox
    real = StatementMapper("UTC", Pseudonymiser(b"k" * 32), "x")
    assert real.map(with_actor({"mbox": address}))[1][2] == real.map(with_actor({"mbox_sha1sum": sha1(address)}))[1][2]
    # Accounts and OpenIDs stay identities of their own.
    assert counted(with_actor({"openid": "https://id.example.edu/ann"}))[2] == "openid:https://id.example.edu/ann"


def test_an_anonymous_group_is_one_learner_named_by_its_sorted_members():
    members = [{"mbox": "mailto:b@example.edu"}, {"account": {"homePage": HOME, "name": "ann"}},
               {"objectType": "Agent", "mbox_sha1sum": sha1("mailto:c@example.edu")}]
    group = {"objectType": "Group", "member": members}
    learner = counted(with_actor(group, verb="completed"))
    expected = sorted([ANN, "mbox_sha1sum:" + sha1("mailto:b@example.edu"),
                       "mbox_sha1sum:" + sha1("mailto:c@example.edu")])
    assert learner == ("2026-11-02", COURSE, "group:" + json.dumps(expected), (0, 1, 0, 0), None, None)
    # The same members in another order, one of them by the SHA-1 form of its mbox: the same group.
    reordered = [members[2], {"mbox_sha1sum": sha1("mailto:b@example.edu")}, members[1]]
    assert counted(with_actor({"objectType": "Group", "member": reordered}))[2] == learner[2]


def test_an_identified_group_is_its_identifier_whatever_its_members():
    group = {"objectType": "Group", "account": {"homePage": HOME, "name": "team-7"},
             "member": [{"mbox": "mailto:b@example.edu"}]}
    assert counted(with_actor(group))[2] == f"account:{HOME}|team-7"


@pytest.mark.parametrize("actor, reason", [
    ({"mbox": "mailto:ann@example.edu", "mbox_sha1sum": sha1("mailto:ann@example.edu")},
     "actor has more than one inverse functional identifier (mbox, mbox_sha1sum)"),
    ({"objectType": "Group", "openid": "https://id.example.edu/g", "account": {"homePage": HOME, "name": "g"}},
     "actor has more than one inverse functional identifier (openid, account)"),
    ({"mbox": "https://example.edu/ann"}, "actor.mbox is not a mailto: IRI with an address"),
    ({"mbox": "mailto:example.edu"}, "actor.mbox is not a mailto: IRI with an address"),
    ({"mbox_sha1sum": "not-a-hash"}, "actor.mbox_sha1sum is not 40 hexadecimal digits"),
    ({"openid": "ab=c://id.example.edu"}, "actor.openid is not a URI"),
    ({"account": {"homePage": "lms.example.edu", "name": "ann"}}, "actor.account.homePage is not an IRL"),
    ({"account": {"homePage": HOME, "name": 42}}, "actor.account.name is not a non-empty string"),
    ({"account": "ann"}, "actor.account is not an object"),
    ({"objectType": "Person", "account": {"homePage": HOME, "name": "ann"}},
     "actor.objectType 'Person' is neither Agent nor Group"),
    ({"name": "Ann"}, "actor has no inverse functional identifier (mbox, mbox_sha1sum, openid, account)"),
    ({"member": [{"mbox": "mailto:a@example.edu"}]},  # members make a Group only with objectType Group
     "actor has no inverse functional identifier (mbox, mbox_sha1sum, openid, account)"),
    ({"objectType": "Group", "member": []}, "actor is an anonymous Group without members"),
    ({"objectType": "Group", "member": [{"name": "Bob"}]},
     "actor.member holds an Agent without an inverse functional identifier"),
    ({"objectType": "Group", "member": [{"mbox": "mailto:a@example.edu", "openid": "https://id.example.edu/a"}]},
     "actor.member has more than one inverse functional identifier (mbox, openid)"),
    ({"objectType": "Group", "member": ["mailto:a@example.edu"]}, "actor.member holds something that is not an Agent"),
])
def test_actors_that_do_not_name_exactly_one_learner_are_quarantined(actor, reason):
    quarantined(with_actor(actor), reason)


def test_a_cached_account_is_still_checked_for_its_object_type():
    m = mapper()
    assert m.map(ann())[0] == "event"
    body = ann()
    body["actor"]["objectType"] = "Activity"
    with pytest.raises(InvalidStatement, match=r"^actor.objectType 'Activity' is neither Agent nor Group$"):
        m.map(body)


# -- verbs and results --------------------------------------------------------------------------

def test_a_verb_id_that_is_not_an_iri_is_quarantined():
    body = ann()
    body["verb"] = {"id": "ab=c://verbs.example/did"}
    quarantined(body, "verb.id 'ab=c://verbs.example/did' is not an IRI")


@pytest.mark.parametrize("facts, reason", [
    ({"success": "true"}, "result.success is not true or false"),
    ({"success": 1}, "result.success is not true or false"),
    ({"completion": "false"}, "result.completion is not true or false"),
])
def test_booleans_sent_as_anything_else_are_quarantined(facts, reason):
    quarantined(ann(**facts), reason)


@pytest.mark.parametrize("score, reason", [
    (87, "result.score is not an object"),
    ("0.87", "result.score is not an object"),
    ({"scaled": 1.01}, "result.score.scaled is not a number between -1 and 1"),
    ({"scaled": "0.5"}, "result.score.scaled is not a number between -1 and 1"),
])
def test_scores_that_are_not_objects_or_out_of_range_are_quarantined(score, reason):
    body = ann()
    body["result"] = {"score": score}
    quarantined(body, reason)


@pytest.mark.parametrize("score, micro", [
    ({"scaled": 0.5, "raw": 0, "min": 0, "max": 0}, 500_000),  # Open edX zero-weight problem
    ({"raw": 0, "min": 0, "max": 0}, None),
    ({"scaled": -1, "raw": 12, "min": 10, "max": 5}, -1_000_000),  # raw, min and max are not read
    ({"scaled": None}, None),
])
def test_scores_count_by_scaled_alone(score, micro):
    body = ann(success=True)
    body["result"]["score"] = score
    assert counted(body) == ("2026-11-02", COURSE, ANN, (0, 0, 1, 0), micro, None)


# -- timestamps ---------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", ["Z", "+00:00", "-00:00", "-0000", "-00"])
def test_utc_timestamps_in_every_spelling_have_the_same_day(suffix):
    # 23:30 UTC is the next day in Paris, whichever way UTC is written.
    assert counted(ann(timestamp="2026-11-02T23:30:00.250" + suffix))[0] == "2026-11-03"


def test_a_leap_second_is_on_the_day_of_the_second_before_it():
    assert counted(ann(timestamp="2016-12-31T23:59:60.5Z"))[0] == "2017-01-01"  # 00:59:60 in Paris
    assert counted(ann(timestamp="2016-12-31T18:59:60-05:00"))[0] == "2017-01-01"
    body = ann(timestamp="2016-12-31T22:59:60Z")
    assert StatementMapper("UTC", str, "x").map(body)[1][0] == "2016-12-31"
    quarantined(ann(timestamp="2016-12-31T23:59:61Z"), "timestamp '2016-12-31T23:59:61Z' is not an ISO 8601 time")


def test_the_day_cache_keeps_offsets_apart():
    m = mapper()
    assert m.map(ann(timestamp="2026-11-02T20:30:00+00:00"))[1][0] == "2026-11-02"
    assert m.map(ann(timestamp="2026-11-02T20:30:00-05:00"))[1][0] == "2026-11-03"
    assert m.map(ann(timestamp="2026-11-02T20:30:59.5+00:00"))[1][0] == "2026-11-02"


@pytest.mark.parametrize("timestamp, reason", [
    ("9999-12-31T23:59:59-23:59", "timestamp '9999-12-31T23:59:59-23:59' is out of range"),
    ("9999-12-31T23:30:00Z", "timestamp '9999-12-31T23:30:00Z' is out of range"),  # Paris is past year 9999
    ("2026-11-02", "timestamp '2026-11-02' has no time of day"),
    ("02/11/2026 10:00", "timestamp '02/11/2026 10:00' is not an ISO 8601 time"),
])
def test_timestamps_without_a_day_here_are_quarantined(timestamp, reason):
    quarantined(ann(timestamp=timestamp), reason)


def test_a_timestamp_key_in_other_letter_case_is_not_replaced_by_stored():
    body = ann()
    body["timeStamp"] = body.pop("timestamp")
    quarantined(body, "timestamp is spelt with other letter case (keys are case-sensitive)")


def test_stored_times_outside_the_range_are_refused_so_every_cursor_has_four_digits_of_year():
    assert stored_cursor("1970-01-01T00:00:00+00:00") == "1970-01-01T00:00:00.000000Z"
    for text in ("0999-01-02T03:04:05+00:00", "0001-01-01T00:00:00+01:00", "1970-01-01T00:30:00+01:00",
                 "3000-01-01T00:00:00Z"):
        with pytest.raises(InvalidStatement, match=rf"^stored '{re.escape(text)}' is out of range$"):
            stored_cursor(text)


# -- a whole statement through a mapper whose pseudonyms can be told apart from identifiers -----

MAPPER = StatementMapper("Europe/Paris", lambda actor: "h:" + actor, r"^(.+?/course/[^/?#]+)")


def test_mapping_of_a_complete_statement():
    fresh = StatementMapper("Europe/Paris", lambda actor: "h:" + actor, r"^(.+?/course/[^/?#]+)")  # no names met yet
    kind, row = fresh.map(decoded(statement(learner="ann", verb="passed", timestamp="2026-11-02T23:30:00Z",
                                             stored="2026-11-03T00:00:00.5+00:00", score=0.875,
                                             duration="PT1H2M3.5S")))
    assert kind == "event"
    course, verb = "https://lms.example.edu/course/BIO101", "http://adlnet.gov/expapi/verbs/passed"
    assert row[:3] == ("2026-11-03", name_id(course), "h:account:https://lms.example.edu|ann")
    assert len(row[3]) == 16
    assert row[4:] == ("2026-11-03T00:00:00.500000Z", "2026-11-02T23:30:00Z", name_id(verb), 0, 0, 1, 0, 875000,
                       3723500, None, None)  # no record keys: this mapper was given none
    names = fresh.take_new_names()
    assert names[("course", name_id(course))] == course and names[("verb", name_id(verb))] == verb
    assert fresh.take_new_names() == {}


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
    if cursor is None:
        with pytest.raises(InvalidStatement, match="not an ISO 8601 time"):
            stored_cursor(text)
    else:
        assert stored_cursor(text) == cursor


@pytest.mark.parametrize("text, ms", [("PT0S", 0), ("PT1.25S", 1250), ("P1DT1H", 90000000), ("PT90M", 5400000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


# -- malformed statements: mapped or quarantined, never another exception ------------------

def _nodes(value, path=()):
    """Yield the path of every value inside a parsed JSON document."""
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield from _nodes(inner, path + (key,))


def test_no_malformed_statement_raises_anything_but_a_quarantine_reason():
    """Thousands of statements with parts replaced by wrong types, odd values or nothing: each is
    mapped or quarantined; none may end the run with another exception."""
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


# -- course names (lms_refresh/disclosure/names.py makes them safe; the store keeps the latest) ----------

def _named(name, stored="2026-11-02T10:00:00Z", **facts):
    body = statement(stored=stored, **facts)
    body["context"]["contextActivities"]["parent"][0]["definition"]["name"] = {"en-US": name}
    return body


def test_the_course_activity_names_the_course_the_latest_stored_in_a_batch_wins():
    import datetime as dt

    names = StatementMapper("UTC", lambda identifier: identifier, r"^(.+?/course/[^/?#]+)",
                            now=dt.datetime(2026, 11, 10, tzinfo=dt.UTC), language="fr")
    names.map(_named("Second", stored="2026-11-03T10:00:00Z"))
    names.map(_named("First", stored="2026-11-02T10:00:00Z"))
    names.map(_named("Future", stored="2026-11-20T10:00:00Z"))  # past the future limit: quarantined, never a name
    with pytest.raises(InvalidStatement):  # a statement quarantined for another reason names nothing either
        names.map(dict(_named("Broken", stored="2026-11-04T10:00:00Z"), verb={"id": "not an iri"}))
    taken = names.take_new_names()
    # Every naming statement's name, newest first: which one names the course waits for which of them count
    # (records.names_without; tests/store/test_course_names.py). The newest is cleaned where it was mapped (in a
    # parsing worker): its statement does not travel to the staging process; an older one's waits to be read.
    assert [(title[0], title[2], title[3] == CLEANED) for title in taken[("title", name_id(COURSE))]] == [
        ("2026-11-03T10:00:00.000000Z", "Second", True), ("2026-11-02T10:00:00.000000Z", {"en-US": "First"}, False)]
    assert title_of(taken[("title", name_id(COURSE))]) == ("2026-11-03T10:00:00.000000Z", "Second", None, None, None,
                                                            None)
    assert ("title", name_id(COURSE)) not in names.take_new_names()  # taken once


def test_a_course_found_by_the_pattern_is_named_only_by_the_activity_that_is_the_course():
    names = mapper()
    unit = statement()
    unit["context"] = {}
    unit["object"]["definition"] = {"name": {"en": "Quiz 1"}}  # .../course/BIO101/quiz/1: not the course
    names.map(unit)
    assert not any(kind == "title" for kind, _ in names.take_new_names())
    enrolment = statement()
    enrolment["context"] = {}
    enrolment["object"] = {"objectType": "Activity", "id": COURSE,
                           "definition": {"type": COURSE_TYPE, "name": {"en": "Biology"}}}
    names.map(enrolment)
    assert title_of(names.take_new_names()[("title", name_id(COURSE))])[1] == "Biology"


def test_a_batch_keeps_only_the_newest_naming_statements_of_a_course_first_read_first_among_equals():
    """Every naming statement's name map and actor went to the staging process (3.4 MB a 20,000-statement chunk of
    the benchmark); a batch keeps the NAMING_KEPT newest of a course, which is all the store needs unless that many
    of the newest are all quarantined (README, "Course names")."""
    from lms_refresh.sources.xapi import NAMING_KEPT

    names = mapper()
    order = [5, 1, 9, 3, 9, 7, 2, 8, 6, 4, 0, 9] * 3  # out of order, with equal times
    for number, minute in enumerate(order):
        names.map(_named(f"n{number}", stored=f"2026-11-02T10:{minute:02d}:00Z"))
    taken = names.take_new_names()[("title", name_id(COURSE))]
    # All of minute 9 (six of them) are newer than any other: the first NAMING_KEPT read, in the order read.
    expected = [f"n{number}" for number, minute in enumerate(order) if minute == 9][:NAMING_KEPT]
    assert NAMING_KEPT == 4 and [title[2] for title in taken] == expected  # all the newest: cleaned already
    assert {title[0] for title in taken} == {"2026-11-02T10:09:00.000000Z"}


@pytest.mark.parametrize("nothing", [{"en-US": ""}, "Biology", {}, {"en": "\u200b\u200b"}])
def test_a_name_that_cleans_to_nothing_names_nothing_and_the_next_newest_names_the_course(nothing):
    """Across batches the store never keeps an empty name, so an older statement's name stands; in one batch the
    newest statement's empty name (an empty or invisible text, a plain string instead of a language map) took
    the batch's name away instead (review of c3f45a0)."""
    names = mapper()
    newer = _named("ignored", stored="2026-11-02T10:01:00Z")
    newer["context"]["contextActivities"]["parent"][0]["definition"]["name"] = nothing
    names.map(newer)
    names.map(_named("Biology", stored="2026-11-02T10:00:00Z"))
    names.map(_named("Aardvark", stored="2026-11-02T10:00:00Z"))  # the same stored: the greater name wins
    assert title_of(names.take_new_names()[("title", name_id(COURSE))]) == (
        "2026-11-02T10:00:00.000000Z", "Biology", None, None, None, None)
