"""Builders of xAPI statements for the tests: one statement with the given facts, and a voiding one."""

import uuid

from lms_refresh.sources.xapi import ADL, COURSE_TYPE

HOME = "https://lms.example.edu"


def statement(learner="u1", verb="experienced", course="BIO101", timestamp="2026-11-02T10:00:00Z",
              stored=None, score=None, success=None, completion=None, duration=None, id=None):
    """Return one xAPI statement dict with the given facts."""
    result = {}
    if score is not None:
        result["score"] = {"scaled": score}
    if success is not None:
        result["success"] = success
    if completion is not None:
        result["completion"] = completion
    if duration is not None:
        result["duration"] = duration
    body = {
        "id": id or str(uuid.uuid4()),
        "actor": {"objectType": "Agent", "account": {"homePage": HOME, "name": learner}},
        "verb": {"id": ADL + verb},
        "object": {"objectType": "Activity", "id": f"{HOME}/course/{course}/quiz/1"},
        "context": {"contextActivities": {"parent": [{"id": f"{HOME}/course/{course}",
                                                      "definition": {"type": COURSE_TYPE}}]}},
        "timestamp": timestamp,
        "stored": stored or timestamp,
    }
    if result:
        body["result"] = result
    return body


def voiding(target, stored):
    return {"id": str(uuid.uuid4()), "actor": {"mbox": "mailto:teacher@example.edu"},
            "verb": {"id": ADL + "voided"}, "object": {"objectType": "StatementRef", "id": target},
            "stored": stored, "timestamp": stored}
