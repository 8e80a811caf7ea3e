"""A published course name keeps no identifier of anyone in the statement that names it, however it is written.

The naming statement's every person is looked for, where the quarantine's Redactor finds them (its actor and
authority, an Agent or Group object, the context's instructor and team, a SubStatement's people, Group members),
and each identifier is found as a reader sees it: next to "_" ("sandbox_jdoe"), next to digits ("jdoe2026"),
written full-width ("ｊｄｏｅ") or with a combining mark ("j\u0301doe"). Review of the names path, defects 1a
and 1b: each test here failed before its fix."""

import json

import pytest

from helpers.publication import publication, published_courses
from helpers.statements import HOME, statement
from lms_refresh.disclosure import folding
from lms_refresh.disclosure.names import actor_identifiers, clean_name
from lms_refresh.disclosure.redaction import REDACTED, Redactor
from lms_refresh.sources.xapi import COURSE_TYPE
from lms_refresh.sources.xapi_fields import actor_identifier

NOW = "2026-11-20T04:15:00Z"
KEY = bytes(range(32))


def agent(name):
    return {"objectType": "Agent", "account": {"homePage": HOME, "name": name}}


JDOE = {"objectType": "Agent", "name": "Jane Doe", "account": {"homePage": HOME, "name": "jdoe"}}
JANE = {"objectType": "Agent", "mbox": "mailto:jane.doe@example.edu"}

# (actor, name as written, name as published)
WRITTEN = {
    "an underscore before": (JDOE, "sandbox_jdoe", f"sandbox_{REDACTED}"),
    "an underscore after": (JDOE, "jdoe_sandbox", f"{REDACTED}_sandbox"),
    "full-width letters": (JDOE, "\uff4a\uff44\uff4f\uff45", REDACTED),
    "full-width upper case": (JDOE, "Notes \uff2a\uff24\uff2f\uff25", f"Notes {REDACTED}"),
    "a full-width name": (JDOE, "\uff2a\uff41\uff4e\uff45\u3000\uff24\uff4f\uff45", REDACTED),
    "a name written with an underscore": (JDOE, "Jane_Doe", REDACTED),
    "a name written with underscores and spaces": (JDOE, "Jane _ Doe", REDACTED),
    "an mbox's local part before an underscore": (JANE, "jane.doe_notes", f"{REDACTED}_notes"),
    "a combining mark inside": (JDOE, "j\u0301doe", REDACTED),
    "a combining mark after": (JDOE, "Notes jdoe\u0301", f"Notes {REDACTED}"),
    "an invisible character inside": (JDOE, "Notes jd\u200boe", f"Notes {REDACTED}"),
    "a year after": (JDOE, "jdoe2026 plan", f"{REDACTED}2026 plan"),
    "a number before": (JDOE, "2026jdoe", f"2026{REDACTED}"),
    "a non-breaking hyphen": ({"name": "Jean-Pierre Dupont", "account": {"homePage": HOME, "name": "jpd"}},
                              "Sandbox of Jean\u2011Pierre Dupont", f"Sandbox of {REDACTED}"),
    "an address with a non-breaking hyphen": (JANE, "Notes jane.doe@uni\u2011bonn.de", f"Notes {REDACTED}"),
    "Cyrillic look-alike letters": (JDOE, "Notes j\u0501\u043e\u0435", f"Notes {REDACTED}"),
}


@pytest.mark.parametrize("actor, text, expected", WRITTEN.values(), ids=WRITTEN.keys())
def test_the_writers_identifier_goes_however_it_is_written(actor, text, expected):
    assert clean_name(text, identifiers=actor_identifiers(actor)) == expected


KEPT = {
    # Letters glued to letters are another word: "ann" is not in "Annual".
    "a letter before": ({"name": "Ann Lee", "account": {"homePage": HOME, "name": "ann"}}, "Annual review"),
    "a letter after": (JDOE, "jdoes and don'ts"),
    # A number glued to digits is another number (an account "123" in "1234"), and glued to letters a code.
    "digits after a number": (agent("123"), "Room 1234"),
    "letters before a number": (agent("123"), "Room B123"),
    "a name in another script": (agent("jdoe"), "\u8ba1\u7b97\u673a\u79d1\u5b66 \u00e9conomie"),
}


@pytest.mark.parametrize("actor, text", KEPT.values(), ids=KEPT.keys())
def test_a_longer_word_that_holds_an_identifier_is_kept(actor, text):
    assert clean_name(text, identifiers=actor_identifiers(actor)) == text


def test_a_short_identifier_still_goes_only_where_it_is_the_whole_name():
    actor = {"name": "Jo", "account": {"homePage": HOME, "name": "jd"}}
    assert clean_name("Jo_Jd and jd2", identifiers=actor_identifiers(actor)) == "Jo_Jd and jd2"
    assert clean_name("\uff2a\uff4f", identifiers=actor_identifiers(actor)) == REDACTED  # full-width "Jo"


def test_the_quarantine_finds_an_identifier_as_a_name_does():
    """One rule: a quarantined record's strings lose an identifier glued to "_" or written full-width too."""
    record = statement(learner="jdoe", score=7)  # malformed: a score is an object
    # Free text is kept as its length and keyed hash alone (test_quarantine_free_text.py); IRIs are kept, and
    # lose the identifier as a name does.
    written = [f"{HOME}/sandbox_jdoe", f"{HOME}/Annual", "\uff4a\uff44\uff4f\uff45"]
    record["context"]["extensions"] = {f"{HOME}/x": written}
    origin, _, text, _ = Redactor(KEY, actor_identifier).row("/srv/sandbox_jdoe/\uff4a\uff44\uff4f\uff45.ndjson:3",
                                                             "r", json.dumps(record))
    assert json.loads(text)["context"]["extensions"][f"{HOME}/x"] == [f"{HOME}/sandbox_{REDACTED}", f"{HOME}/Annual",
                                                                    REDACTED]
    assert origin == f"/srv/sandbox_{REDACTED}/{REDACTED}.ndjson:3"


def course(code):
    return {"objectType": "Activity", "id": f"{HOME}/course/{code}", "definition": {"type": COURSE_TYPE}}


def naming(learner, code, name, *, target=None, context=None):
    """A statement of `learner` in course `code`, whose course activity (the context's parent) is named `name`
    (None: not named)."""
    body = statement(learner=learner, course=code, stored="2026-11-02T10:00:00Z")
    activity = course(code)
    if name is not None:
        activity["definition"]["name"] = {"en-US": name}
    body["context"] = {"contextActivities": {"parent": [activity]}, **(context or {})}
    if target is not None:
        body["object"] = target
    return body


PEER = "Peer review_jsmith77 / team kbrown88 / instr t_lee99"
SUB = "Sub for mwhite55"
OTHERS = ("jsmith77", "kbrown88", "t_lee99", "mwhite55", "Pat Grey", "ralph.admin")


def peer(learner):
    """An Agent object (the learner reviewed), a team with a member and an instructor in the context."""
    return naming(learner, "PEER", PEER, target=agent("jsmith77"),
                  context={"team": {"objectType": "Group", "member": [agent("kbrown88")]},
                           "instructor": agent("t_lee99")})


def sub(learner):
    """A SubStatement object whose actor is another learner."""
    inner = {"objectType": "SubStatement", "actor": agent("mwhite55"),
             "verb": {"id": "http://adlnet.gov/expapi/verbs/attempted"}, "object": course("SUB")}
    return naming(learner, "SUB", SUB, target=inner)


def test_every_person_in_the_naming_statement_is_found():
    body = peer("u0")
    body["object"]["name"] = "Pat Grey"
    body["authority"] = {"objectType": "Agent", "mbox": "mailto:ralph.admin@example.edu"}
    found = actor_identifiers(body)
    for identifier in ("u0", "jsmith77", "kbrown88", "t_lee99", "Pat Grey", "mailto:ralph.admin@example.edu"):
        assert identifier in found
    assert "mwhite55" in actor_identifiers(sub("u0"))
    assert "PEER" not in " ".join(found)  # the course, its name and the verb are no one


def test_a_statement_too_deep_to_walk_names_no_course():
    body = peer("u0")
    deep = body["context"]["extensions"] = {}
    for _ in range(80):
        deep = deep.setdefault("x", {})
    assert clean_name(PEER, identifiers=actor_identifiers(body)) is None


def test_a_run_publishes_no_identifier_of_anyone_in_the_naming_statements(sqlite_project):
    project = sqlite_project
    project.configure(extra_top="min_cell_size = 2")
    writer = naming("jdoe", "SELF", "sandbox_jdoe / \uff4a\uff44\uff4f\uff45 / j\u0301doe / jdoe2026")
    project.write("a.ndjson", [peer("u0"), peer("u1"), sub("u0"), sub("u1"), writer, naming("u1", "SELF", None)])
    project.invoke("run", now=NOW, check=0)
    names = {iri.rsplit("/", 1)[1]: name for iri, name, *_ in published_courses(project)}
    assert names == {"PEER": f"Peer review_{REDACTED} / team {REDACTED} / instr {REDACTED}",
                     "SUB": f"Sub for {REDACTED}", "SELF": f"sandbox_{REDACTED} / {REDACTED} / {REDACTED} / "
                     f"{REDACTED}2026"}
    page = (publication(project).parent / "report.html").read_text(encoding="utf-8")
    seen = folding.one_case(folding.view(page)[0])
    assert "Peer review_" in page and "Sub for " in page
    for identifier in (*OTHERS, "jdoe"):
        assert folding.one_case(identifier) not in seen, identifier
