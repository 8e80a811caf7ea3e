"""Statement forms and hostile records through the installed CLI, on both stores."""

import hashlib
import re

from helpers.statements import statement
from lms_refresh.sources.xapi import ADL, COURSE_TYPE

NOW = "2026-11-03T04:15:00+01:00"  # a Tuesday, 04:15 in Paris
COURSE = "https://lms.example.edu/course/BIO101"


def test_records_that_ended_the_run_with_a_traceback_are_quarantined_with_a_reason(project):
    good = [statement(learner=f"u{i % 12}", timestamp="2026-11-02T10:00:00Z") for i in range(100)]
    nines = statement(learner="u1", duration="P" + "9" * 400 + "D")
    far = statement(learner="u1", timestamp="9999-12-31T23:59:59-23:59", stored="2026-11-02T10:00:00Z")
    path = project.write("a.ndjson", good + ["[" * 100_000 + "]" * 100_000, nines, far])
    failed = project.invoke("run", now=NOW)  # 3 of 103 is more than the default max_quarantine_share (1%)
    assert failed.returncode == 65, failed.stderr
    assert "3 of 103 records in the window were malformed (2.9%, more than max_quarantine_share = 1.0%); " \
           "nothing was committed." in failed.stderr
    assert "Traceback" not in failed.stderr and project.serving() == []
    project.configure(extra_top="max_quarantine_share = 0.05")
    result = project.invoke("run", now=NOW)
    assert result.returncode == 0, result.stderr
    assert sorted(set(project.query("SELECT origin, reason FROM quarantine"))) == [
        (f"{path}:101", "JSON nested too deeply to parse"),
        (f"{path}:102", "result.duration 'P999999999999999999999999999999999999999' is longer than 10000 days"),
        (f"{path}:103", "timestamp '9999-12-31T23:59:59-23:59' is out of range"),
    ]
    assert [row[:4] for row in project.serving()] == [("2026-11-02", COURSE, 12, 100)]


def test_new_statement_forms_count_as_the_readme_says(project):
    """12 learners by account, one more sent once as mbox and once as its SHA-1, an anonymous pair,
    and statements about a SubStatement, an Agent and with a duration in weeks or years."""
    statements = [statement(learner=f"u{i}", verb="attempted", success=True, duration="PT1M") for i in range(12)]
    by_mbox, by_sha1 = statement(verb="attempted"), statement(verb="experienced", completion=True)
    by_mbox["actor"] = {"mbox": "mailto:ann@example.edu"}
    by_sha1["actor"] = {"mbox_sha1sum": hashlib.sha1(b"mailto:ann@example.edu").hexdigest()}
    pair = statement(verb="passed", duration="P1W")
    pair["actor"] = {"objectType": "Group", "member": [{"mbox": "mailto:bo@example.edu"},
                                                       {"account": {"homePage": "https://lms.example.edu",
                                                                    "name": "u3"}}]}
    planned = statement(learner="u4", verb="planned")
    planned["object"] = {"objectType": "SubStatement", "actor": {"mbox": "mailto:u4@example.edu"},
                         "verb": {"id": ADL + "completed"}, "object": {"id": f"{COURSE}/lab/1"},
                         "result": {"completion": True, "success": False}}
    mentored = statement(learner="u5", verb="mentored", duration="P1Y2M")
    mentored["object"] = {"objectType": "Agent", "mbox": "mailto:u6@example.edu"}
    project.write("a.ndjson", statements + [by_mbox, by_sha1, pair, planned, mentored])
    project.invoke("run", now=NOW, check=0)
    # learners: 12 accounts + ann (both forms) + the pair = 14; statements 17; attempts 12 + 1;
    # completions: ann's; passed: 12 + the pair (too few learners: withheld); failed 0;
    # duration: 12 minutes + 1 week (years and months: no duration), from 13 learners; learners who completed:
    # withheld with completions; who passed: 13, failed: none, so a pass rate of 1 and no completed share.
    assert project.serving() == [("2026-11-02", COURSE, 14, 17, 13, None, 13, 0, None,
                                  12 * 60 + 7 * 86400, 1, None, 13, 0, None, 1.0, None, None)]
    assert project.query("SELECT count(*) FROM quarantine") == [(0,)]


def test_an_iri_with_a_bidi_override_never_becomes_a_published_course(project):
    """RFC 3987 4.1: U+202E (and the other bidirectional formatting characters) make no IRI. An object id with one
    is quarantined, as any object id that is no IRI; a context activity's, course-typed or not, is passed over."""
    hostile = "https://lms.example.edu/course/abc\u202elmth.exe"
    good = [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(12)]
    in_object = [statement(learner=f"v{i}", timestamp="2026-11-02T10:00:00Z") for i in range(12)]
    for body in in_object:
        body["object"] = {"objectType": "Activity", "id": hostile + "/quiz/1"}
        body["context"]["contextActivities"]["parent"] = [{"id": hostile}]
    in_context = [statement(learner=f"w{i}", timestamp="2026-11-02T10:00:00Z") for i in range(12)]
    for index, body in enumerate(in_context):
        body["object"] = {"objectType": "Agent", "mbox": "mailto:tutor@example.edu"}
        parent = {"id": hostile, "definition": {"type": COURSE_TYPE}} if index % 2 else {"id": hostile}
        body["context"]["contextActivities"]["parent"] = [parent]
    path = project.write("a.ndjson", good + in_object + in_context)
    project.configure(extra_top="max_quarantine_share = 0.5")
    project.invoke("run", now=NOW, check=0)
    # The value is quoted as what the quarantine keeps of it (no free text at rest: disclosure/free_text.py).
    assert sorted({(origin, re.sub("keyed hash [0-9a-f]{16}", "keyed hash H", reason))
                   for origin, reason in project.query("SELECT origin, reason FROM quarantine")}) == [
        (f"{path}:{line}", "object.id '[text: 50 characters, format characters, not only ASCII, keyed hash H]' is not "
         "an IRI") for line in range(13, 25)]
    assert [row[:4] for row in project.serving()] == [("2026-11-02", COURSE, 12, 12), ("2026-11-02", "unknown", 12, 12)]
    published = {row[1] for row in project.serving()} | {row[0] for row in project.query("SELECT iri FROM courses")}
    assert not any(character in iri for iri in published for character in "\u200e\u200f\u202a\u202b\u202c\u202d"
                   "\u202e\u2066\u2067\u2068\u2069")
