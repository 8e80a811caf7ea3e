"""A run publishes no e-mail address a source slipped into what it publishes: not in a course's name, however the
address is hidden from the redaction rule (a variation selector, a full-width "＠"), and not as a course IRI — the
key of the published rows, which is never redacted: the statements naming such a course are quarantined (as
malformed: they count toward max_quarantine_share), with a reason that does not repeat the address. With either
JSON parser, on either store."""

import json

import pytest

from helpers.publication import published_courses
from helpers.statements import HOME, statement
from lms_refresh.disclosure.redaction import REDACTED
from lms_refresh.sources.xapi import COURSE_TYPE
from lms_refresh.store.periods import GRAINS

pytestmark = pytest.mark.usefixtures("json_parser")
NOW = "2026-11-03T04:15:00+01:00"
COURSE = f"{HOME}/course/BIO101"


def named(learner, name):
    body = statement(learner=learner)
    body["context"]["contextActivities"]["parent"][0]["definition"]["name"] = {"en": name}
    return body


def in_course(learner, iri):
    body = statement(learner=learner)
    body["object"]["id"] = f"{HOME}/x/activity/1"
    body["context"]["contextActivities"]["parent"] = [{"id": iri, "definition": {"type": COURSE_TYPE}}]
    return body


def published_text(project):
    """What a dashboard reads — the daily rows, each period's, the course names — and on SQLite the report page
    (PostgreSQL has none), as one text."""
    rows = [project.serving(site=True), *(project.grain_rows(grain, site=True) for grain in GRAINS),
            published_courses(project)]
    page = "" if project.postgres else next(project.state.parent.rglob("report.html")).read_text()
    return json.dumps(rows, ensure_ascii=False, default=str) + page


def test_no_address_reaches_the_publication_as_a_course_name_or_a_course_iri(project):
    project.configure(extra_top="min_cell_size = 2")
    good = [named(f"u{i}", "Biology \u2014 tutor jane.doe\ufe0f@example.edu") for i in range(12)]
    bad = ([in_course(f"v{i}", "mailto:victim.student@example.edu") for i in range(3)]
           + [in_course("w1", f"{HOME}/course/bob\uff20example.edu")])
    project.write("a.ndjson", good + bad)
    refused = project.invoke("run", now=NOW)
    assert refused.returncode == 65 and "4 of 16 records in the window were malformed" in refused.stderr
    project.invoke("run", "--accept-bad-input", now=NOW, check=0)
    assert [row[:2] for row in published_courses(project)] == [(COURSE, f"Biology \u2014 tutor {REDACTED}")]
    assert {row[1] for row in project.serving()} == {COURSE}
    reasons = sorted(reason for reason, in project.query("SELECT reason FROM quarantine"))
    assert reasons[0].startswith(f"its course IRI '{HOME}/course/[redacted]' carries an e-mail address")
    assert reasons[1:] == [reasons[-1]] * 3 and reasons[-1].startswith(
        "its course IRI 'mailto:[redacted]' carries an e-mail address, which would be published")
    everything = published_text(project) + json.dumps(project.query("SELECT origin, reason, raw FROM quarantine"))
    assert "victim" not in everything and "jane" not in everything and "bob" not in everything
    assert "\ufe0f" not in published_text(project)



def test_identifiers_written_with_unicode_dashes_reach_no_publication_no_journal_and_no_quarantine(project):
    """The third hostile review's forms: an address with U+2011 NON-BREAKING HYPHEN in its domain, one with
    U+2010 HYPHEN in its local part, a course named after its writer with U+2011 where the writer's name has "-"
    (the first reached `courses`, the report and a journal warning; the second left "jean‐" before [redacted])."""
    project.configure(extra_top="min_cell_size = 2")
    sandbox = [named(f"u{i}", "Sandbox of Jean\u2011Pierre Dupont") for i in range(12)]
    for body in sandbox:
        body["actor"]["name"] = "Jean-Pierre Dupont"
    other = f"{HOME}/course/CHEM1"
    tutor = [named(f"t{i}", "Chemistry \u2014 jane.doe@uni\u2011bonn.de") for i in range(12)]
    for body in tutor:
        body["context"]["contextActivities"]["parent"][0]["id"] = other
    bad = [in_course("v1", f"{HOME}/course/jean\u2010pierre.dupont@example.edu")]
    project.write("a.ndjson", sandbox + tutor + bad)
    ran = project.invoke("run", "--accept-bad-input", now=NOW, check=0)
    assert sorted(row[:2] for row in published_courses(project)) == [
        (COURSE, f"Sandbox of {REDACTED}"), (other, f"Chemistry \u2014 {REDACTED}")]
    everything = (published_text(project) + ran.stderr
                  + json.dumps(project.query("SELECT origin, reason, raw FROM quarantine"), ensure_ascii=False))
    for word in ("jean", "pierre", "dupont", "jane", "bonn"):
        assert word not in everything.casefold(), word
