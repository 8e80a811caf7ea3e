"""Defects found by an adversarial review (branch review-a), pinned: each failed before its fix."""

import datetime as dt

import pytest

from helpers.report_page import Page, build, period_row
from lms_refresh import instants
from lms_refresh.config import validators
from lms_refresh.disclosure.names import actor_identifiers, clean_name
from lms_refresh.run import report_data, report_page
from lms_refresh.sources.xapi import StatementMapper

HOME = "https://lms.example.edu"


@pytest.mark.parametrize("actor_name, text", [
    ("John  Smith", "Learning plan of John Smith"),  # two spaces in the actor, one in the name
    ("John\u00a0Smith", "Learning plan of John Smith"),  # a no-break space
    ("Jo\u200bhn Smith", "Learning plan of John Smith"),  # a zero-width space the name loses
    ("Jos\u00e9 N\u00fa\u00f1ez", "Learning plan of Jose\u0301 Nu\u0301n\u0303ez"),  # composed vs decomposed
])
def test_a_course_name_loses_its_writers_name_however_its_white_space_or_composition_differs(actor_name, text):
    actor = {"name": actor_name, "account": {"homePage": HOME, "name": "jsmith99"}}
    assert clean_name(text, identifiers=actor_identifiers(actor)) == "Learning plan of [redacted]"


def test_the_reports_course_attributes_carry_no_address_and_no_bidi_override(tmp_path):
    hostile = {f"{HOME}/course/john.smith@uni.edu": None, f"{HOME}/course/\u202eevil": None,
               f"{HOME}/c/" + "x" * 5000: None}
    weekly = [period_row(week, course, 12) for course in hostile for week in range(3)]
    path = build(tmp_path / "serving.sqlite", hostile, weekly)
    fresh = {"last_success": None, "watermark": None, "stale": None, "written": "2026-12-02T04:16:00Z"}
    page = Page(report_page.render(report_data.read_publication(path, today="2026-12-02"), fresh))
    courses = [attrs["data-course"] for tag, attrs in page.elements if "data-course" in attrs]
    assert courses and all("john.smith" not in value and "\u202e" not in value and len(value) <= 200
                           for value in courses)


def test_a_run_within_two_days_of_the_ranges_end_maps_a_timestamp_after_its_time():
    # A run at 2999-12-31T23:59:58Z (a valid --now) failed with exit 1, "TypeError: '>' not supported between
    # 'datetime.datetime' and 'NoneType'": its future limit (now + 2 days) was past the range, no cursor.
    mapper = StatementMapper("Pacific/Kiritimati", str, r"^(.+?/course/[^/?#]+)",
                             now=dt.datetime(2999, 12, 31, 23, 59, 58, tzinfo=dt.UTC))
    statement = {"id": "c4619dea-e869-46af-9cbd-10c56df79e5b", "actor": {"account": {"homePage": HOME, "name": "u1"}},
                 "verb": {"id": "http://adlnet.gov/expapi/verbs/experienced"},
                 "object": {"id": f"{HOME}/course/A/quiz/1"},
                 "timestamp": "2999-12-31T23:59:59Z", "stored": "2999-12-31T23:59:57Z"}
    kind, event = mapper.map(statement)
    assert kind == "event" and event[0] == "3000-01-01"  # its local day (UTC+14)


@pytest.mark.parametrize("day", [instants.FIRST_DAY, instants.LAST_DAY])
def test_a_term_may_hold_the_first_and_last_local_days_an_instant_can_fall_on(day):
    assert validators.calendar_day(day) == day
