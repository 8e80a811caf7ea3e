"""A course IRI is published as it is — the key of its course's rows (daily_metrics.course, the periods' tables,
courses.course) — so it cannot be redacted without making two courses one: a statement whose course IRI carries
an e-mail address (as the redaction rule finds one, hidden or not) is quarantined, with a reason that shows the
IRI redacted, by the mapper and by the NDJSON reader's parsing workers alike, with either JSON parser."""

import json

import pytest

from helpers.batches import collect_batches
from helpers.readers import MAPPER, WINDOW
from helpers.statements import HOME, statement
from lms_refresh.disclosure.names import carries_address
from lms_refresh.sources import json_decoding
from lms_refresh.sources.ndjson import NdjsonSource
from lms_refresh.sources.xapi import COURSE_TYPE, StatementMapper, name_id
from lms_refresh.sources.xapi_fields import InvalidStatement

# Each statement is written out and read back by each JSON parser in turn, as an export line reaches the mapper.
pytestmark = pytest.mark.usefixtures("json_parser")
WHY = ("carries an e-mail address, which would be published: a course IRI is the key of its published rows and is "
       "never redacted; send the course's activity with an IRI that names no one")
# (the course IRI, how the reason shows it)
COURSE_IRIS = {
    "a mailto: IRI": ("mailto:victim.student@example.edu", "'mailto:[redacted]'"),
    "an address in the path": (f"{HOME}/course/jane@example.edu", f"'{HOME}/course/[redacted]'"),
    "percent-encoded": (f"{HOME}/course/jane%40example.edu", f"'{HOME}/course/[redacted]'"),
    "a user name before the host": ("https://jane.doe@lms.example.edu/course/BIO101",
                                    "'https://[redacted]@lms.example.edu/course/BIO101'"),
    "a full-width at": (f"{HOME}/course/jane\uff20example.edu", f"'{HOME}/course/[redacted]'"),
    "a variation selector before the @": (f"{HOME}/course/jane\ufe0f@example.edu", f"'{HOME}/course/[redacted]'"),
}


def decoded(body):
    return json_decoding.decode_line(json.dumps(body).encode())


def with_course_parent(iri):
    body = statement(learner="ann", stored="2026-11-02T08:00:00.000Z")
    body["context"]["contextActivities"]["parent"] = [{"id": iri, "definition": {
        "type": COURSE_TYPE, "name": {"en": "Nice course"}}}]
    return body


def with_object(iri):
    """A statement whose course is the pattern's (^(.+?/course/[^/?#]+)) on its object's id."""
    body = statement(learner="ann", stored="2026-11-02T08:00:00.000Z")
    body["object"]["id"] = f"{iri}/quiz/1"
    del body["context"]
    return body


@pytest.mark.parametrize(("iri", "shown"), COURSE_IRIS.values(), ids=COURSE_IRIS.keys())
def test_a_course_typed_activity_whose_iri_carries_an_address_quarantines_its_statement(iri, shown):
    mapper = StatementMapper("Europe/Paris", lambda identifier: identifier, r"^(.+?/course/[^/?#]+)")
    for _ in range(2):  # and again: a refused IRI is never remembered as a course
        with pytest.raises(InvalidStatement) as caught:
            mapper.map(decoded(with_course_parent(iri)))
        assert str(caught.value) == f"its course IRI {shown} {WHY}"
    assert mapper.take_new_names() == {}  # no course id, no name, for the store
    kind, row = mapper.map(decoded(statement(learner="ann")))  # the mapper goes on with the next statement
    assert kind == "event" and row.course_id == name_id(f"{HOME}/course/BIO101")


@pytest.mark.parametrize(("iri", "shown"), [value for key, value in COURSE_IRIS.items() if key != "a mailto: IRI"],
                         ids=[key for key in COURSE_IRIS if key != "a mailto: IRI"])
def test_a_course_that_the_pattern_finds_with_an_address_in_it_quarantines_its_statement(iri, shown):
    mapper = StatementMapper("Europe/Paris", lambda identifier: identifier, r"^(.+?/course/[^/?#]+)")
    with pytest.raises(InvalidStatement) as caught:
        mapper.map(decoded(with_object(iri)))
    assert str(caught.value) == f"its course IRI {shown} {WHY}"


def test_the_parsing_workers_quarantine_it_with_the_same_reason_and_no_address(tmp_path):
    good = [statement(learner=f"u{i}", stored="2026-11-02T08:00:00.000Z") for i in range(300)]
    bad = [with_course_parent("mailto:victim.student@example.edu"), with_object(f"{HOME}/course/jane\uff20example.edu")]
    (tmp_path / "a.ndjson").write_text("\n".join(json.dumps(body) for body in good + bad) + "\n")
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=50, workers=2, parallel_min_bytes=0)
    events, quarantined, _ = collect_batches(source, WINDOW)
    assert len(events) == 300 and {event[1] for event in events} == {name_id(f"{HOME}/course/BIO101")}
    assert [(origin, reason) for origin, reason, _ in quarantined] == [
        (f"{tmp_path / 'a.ndjson'}:301", f"its course IRI 'mailto:[redacted]' {WHY}"),
        (f"{tmp_path / 'a.ndjson'}:302", f"its course IRI '{HOME}/course/[redacted]' {WHY}")]


def test_what_carries_an_address_and_what_does_not():
    assert carries_address("mailto:victim.student@example.edu") and carries_address("urn:x:jane\u200b@example.edu")
    assert carries_address(f"{HOME}/course/ｊａｎｅ＠ｅｘａｍｐｌｅ．ｅｄｕ")
    for iri in (f"{HOME}/course/BIO101", "unknown", f"{HOME}/course/@home", "mailto:nobody", "urn:uuid:1@2",
                "https://moodle.example.edu/course/view.php?id=7", f"{HOME}/cours/économie-été",
                # Versions and sections: no top-level domain has no letter (the review: these quarantined whole
                # courses), nor one letter.
                f"{HOME}/course/BIO101@2026.1", f"{HOME}/course/v1@2.0", "urn:course:BIO101@v1.2",
                f"{HOME}/course/@scope/pkg@1.2.3", f"{HOME}/x?ref=a@b.c", f"{HOME}/course/x@v1.2"):
        assert not carries_address(iri), iri
    # An address followed by a version is still one.
    assert carries_address("mailto:jane@example.edu.1") and carries_address(f"{HOME}/c/jane@example.edu.2026.1")
    assert carries_address("mailto:a@b.xn--p1ai") and carries_address("mailto:a@例え.テスト")
    # A top-level domain with something glued on, or percent-encoded, is still one (the second review).
    for iri in (f"{HOME}/course/jane.doe@example.edu-2026", f"{HOME}/course/jane.doe@example.edu_fall",
                f"{HOME}/course/jane@uni.edu2026", "mailto:jane.doe@example.c%6Fm", "mailto:jane@example.%63om",
                "mailto:jane%40example.%65du"):
        assert carries_address(iri), iri
