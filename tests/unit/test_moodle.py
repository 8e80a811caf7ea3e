"""The Moodle source's row mapping (lms_refresh.sources.moodle): outcomes, grades, what is not learner activity."""

import pytest

from lms_refresh.sources.moodle import GRADED, InvalidRow, RowMapper
from lms_refresh.sources.xapi import name_id

# Every test here runs with each JSON parser (lms_refresh/sources/json_decoding.py).
pytestmark = pytest.mark.usefixtures("json_parser")


def moodle_mapper():
    return RowMapper("Europe/Paris", lambda actor: actor, "https://moodle.example.edu/", site_course_id=1,
                     guest_user_id=1)


def event_of(mapper, log_row):
    """Map a row that must be learner activity; return its Event."""
    kind, event = mapper.map(log_row)
    assert kind == "event"
    return event


def outcomes(event):
    return event.is_attempt, event.is_completion, event.is_passed, event.is_failed


def row(eventname, edulevel=2, userid=5, courseid=7, related=None, anonymous=0, other=None, timecreated=1795420800,
        realuserid=None):
    return (1, eventname, "u", edulevel, userid, courseid, related, anonymous, other, timecreated, realuserid)


def test_completion_state_from_json_or_php_serialised_other():
    mapper = moodle_mapper()
    name = "\\core\\event\\course_module_completion_updated"
    passed = event_of(mapper, row(name, related=5, other='{"relateduserid":5,"completionstate":2}'))
    failed = event_of(mapper, row(name, related=5,
                                  other='a:2:{s:13:"relateduserid";i:5;s:15:"completionstate";i:3;}'))
    incomplete = event_of(mapper, row(name, related=5, other='{"completionstate":0}'))
    assert outcomes(passed) == (0, 1, 1, 0) and outcomes(failed) == (0, 1, 0, 1)
    assert outcomes(incomplete) == (0, 0, 0, 0)
    assert passed.actor == "moodle:https://moodle.example.edu|5" and passed.day == "2026-11-23"
    with pytest.raises(InvalidRow, match="without other.completionstate"):
        mapper.map(row(name, related=5, other="null"))
    with pytest.raises(InvalidRow, match="has no relateduserid"):
        mapper.map(row("\\core\\event\\course_completed"))
    for impossible in (-5, 10 ** 15, 10 ** 30):  # a damaged row is quarantined, not the end of the run
        with pytest.raises(InvalidRow, match="is not a Unix time"):
            mapper.map(row("\\core\\event\\course_viewed", timecreated=impossible))
    # A boolean is no state (Python counts True as 1: a completion no Moodle wrote), nor a negative id an id.
    with pytest.raises(InvalidRow, match="whose other.completionstate true is not a number"):
        mapper.map(row(name, related=5, other='{"completionstate": true}'))
    for hostile, column in ((row("\\core\\event\\course_viewed", courseid=-5), "courseid -5"),
                            (row("\\core\\event\\course_viewed", userid=-7), "userid -7"),
                            (row("\\core\\event\\course_completed", related=-2), "relateduserid -2")):
        with pytest.raises(InvalidRow, match=f"^{column} is not a Moodle id$"):
            mapper.map(hostile)


def test_grades_are_scaled_by_their_items_range():
    mapper = moodle_mapper()
    mapper.grade_ranges.update({5: (0.0, 10.0), 6: (1.0, 5.0), 7: (3.0, 3.0)})

    def score(other):
        return event_of(mapper, row(GRADED, edulevel=1, userid=900, related=102, other=other)).score_micro

    assert score('{"itemid":5,"overridden":false,"finalgrade":8.0}') == 800000
    assert score('{"itemid":6,"overridden":false,"finalgrade":4}') == 750000  # a scale of 1 to 5
    assert score('{"itemid":5,"overridden":true,"finalgrade":12.5}') == 1000000  # unlimited grades: clamped
    assert score('a:3:{s:6:"itemid";i:5;s:10:"overridden";b:0;s:10:"finalgrade";d:2.5;}') == 250000
    for none in ('{"itemid":5,"overridden":false,"finalgrade":null}',  # a grade removed
                 'a:3:{s:6:"itemid";i:5;s:10:"overridden";b:0;s:10:"finalgrade";N;}',
                 '{"itemid":99,"finalgrade":8.0}',  # an item we could not read
                 '{"itemid":7,"finalgrade":3.0}',  # an empty range
                 '{"itemid":5,"finalgrade":"8"}', "null", None,
                 'a:2:{s:6:"itemid";i:5;s:10:"finalgrade";d:-;}', 'a:2:{s:6:"itemid";i:5;s:10:"finalgrade";d:1e999;}'):
        assert score(none) is None, none


def test_rows_that_are_not_learner_activity_are_left_out():
    mapper = moodle_mapper()
    viewed = "\\core\\event\\course_viewed"
    assert event_of(mapper, row(viewed)).course_id == name_id("https://moodle.example.edu/course/view.php?id=7")
    for excluded in (row(viewed, courseid=None), row(viewed, courseid=0), row(viewed, courseid=1),
                     row(viewed, userid=0), row(viewed, userid=1), row(viewed, anonymous=1),
                     row(viewed, realuserid=2), row("\\core\\event\\course_module_created", edulevel=1)):
        assert mapper.map(excluded) == (None, None), excluded
