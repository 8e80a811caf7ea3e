"""The one range of instants (lms_refresh.instants), property-based across everything a datetime can hold.

Each property compares with an oracle computed another way: whole seconds since 0001-01-01 from the
text's own fields, never the module's conversions. Derandomised: CI runs the same examples every time.
"""

import datetime as dt
import zoneinfo

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.times import t
from lms_refresh import instants
from lms_refresh.disclosure import policy
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.errors import StateError
from lms_refresh.instants import parse_user_time
from lms_refresh.sources.moodle import InvalidRow, RowMapper
from lms_refresh.sources.xapi import StatementMapper
from lms_refresh.sources.xapi_fields import InvalidStatement

FUZZ = settings(max_examples=600, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
UTC = dt.UTC
ZONES = ["UTC", "Europe/Paris", "America/Los_Angeles", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kolkata"]
# Seconds since 0001-01-01T00:00:00 of the range's ends: the oracle's own arithmetic.
FIRST_S = (dt.date(1970, 1, 1).toordinal() - 1) * 86400
END_S = (dt.date(3000, 1, 1).toordinal() - 1) * 86400
NOW = dt.datetime(2026, 11, 3, 3, 15, tzinfo=UTC)

offsets = st.builds(dt.timezone, st.timedeltas(min_value=-dt.timedelta(hours=23, minutes=59),
                                                max_value=dt.timedelta(hours=23, minutes=59)).map(
    lambda d: dt.timedelta(minutes=round(d.total_seconds() / 60))))
naive = st.datetimes(min_value=dt.datetime.min, max_value=dt.datetime.max)
# Years near both ends of the range and of what a datetime can hold, and anything between.
edge_years = st.sampled_from([1, 2, 999, 1000, 1969, 1970, 1971, 2026, 2998, 2999, 3000, 3001, 9998, 9999])
near_edges = st.builds(lambda year, rest: rest.replace(year=year) if not (rest.month == 2 and rest.day == 29) else
                       rest.replace(year=year, day=28), edge_years, naive)


def seconds_of(moment, offset_seconds):
    """The oracle: whole seconds since 0001-01-01 UTC of a naive local time at an offset."""
    return ((moment.toordinal() - 1) * 86400 + moment.hour * 3600 + moment.minute * 60 + moment.second
            - offset_seconds)


def in_range(moment, offset_seconds):
    return FIRST_S <= seconds_of(moment, offset_seconds) < END_S


@FUZZ
@given(naive | near_edges, offsets | st.none())
def test_an_iso_time_is_accepted_exactly_when_its_instant_lies_in_the_range(moment, offset):
    text = moment.isoformat() + ("" if offset is None else dt.datetime(2000, 1, 1, tzinfo=offset).isoformat()[19:])
    expected = in_range(moment, 0 if offset is None else int(offset.utcoffset(None).total_seconds()))
    try:
        parsed = instants.parse_iso(text, "timestamp")
    except instants.NotAnInstant as error:
        assert not expected, (text, error)
        assert str(error) == f"timestamp {text[:40]!r} is out of range"
        return
    assert expected, text
    cursor = instants.iso_cursor(text)
    assert len(cursor) == 27 and instants.from_cursor(cursor) == parsed
    assert instants.cursor_moment(cursor) == parsed


@FUZZ
@given(st.lists(naive | near_edges, min_size=2, max_size=6))
def test_cursor_text_sorts_as_time_across_the_whole_range(moments):
    moments = [m.replace(tzinfo=UTC) for m in moments if in_range(m, 0)]
    cursors = [instants.to_cursor(m) for m in moments]
    assert all(len(c) == 27 and c[4] == "-" for c in cursors)  # four digits of year, always
    assert sorted(cursors) == [instants.to_cursor(m) for m in sorted(moments)]


fields = st.tuples(*(st.integers(0, 99) for _ in range(5)), st.integers(0, 9999), st.integers(0, 999))


@FUZZ
@given(fields, st.sampled_from(["{f}", ""]), st.sampled_from(["ms", "short", "none"]))
def test_the_fast_path_of_utc_times_agrees_with_parsing_including_impossible_values(values, _, fraction):
    """Month 13, 31 November, hour 25, second 60: the text forms LRSs write are checked, not just shaped."""
    month, day, hour, minute, second, year, millis = values
    tail = {"ms": f".{millis:03d}", "short": f".{millis % 10}", "none": ""}[fraction]
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{tail}Z"
    try:
        real = dt.datetime(year, month, day, hour, minute, min(second, 59), tzinfo=UTC)
        real = real if second <= 60 and FIRST_S <= seconds_of(real.replace(tzinfo=None), 0) < END_S else None
    except ValueError:
        real = None
    try:
        cursor = instants.iso_cursor(text)
    except instants.NotAnInstant as error:
        assert real is None, (text, error)
        return
    assert real is not None, text
    assert instants.cursor_moment(cursor).replace(microsecond=0) == real


@FUZZ
@given(st.text(max_size=40) | st.from_regex(r"\A[0-9]{1,5}-[0-9]{1,3}-[0-9]{1,3}[T ][0-9:.]{0,15}[Z+\-0-9:]{0,7}\Z"))
def test_malformed_text_is_refused_with_a_reason_never_an_exception(text):
    try:
        cursor = instants.iso_cursor(text)
    except instants.NotAnInstant as error:
        assert str(error).startswith("stored ")
        return
    assert instants.cursor_moment(cursor) is not None


@FUZZ
@given(st.text(max_size=30) | st.builds(instants.to_cursor, st.datetimes(timezones=st.just(UTC))))
def test_a_cursor_read_back_from_the_store_is_an_instant_in_range_or_a_damaged_store(text):
    try:
        moment = instants.from_cursor(text)
    except StateError as error:
        assert "the store is damaged" in str(error)
        return
    assert instants.FIRST <= moment < instants.END and instants.to_cursor(moment) == text


@FUZZ
@given(naive | near_edges, st.sampled_from(ZONES), st.sampled_from(["date", "minutes", "offset"]))
def test_a_command_line_time_is_in_range_or_one_sentence(moment, zone, form):
    text = {"date": moment.date().isoformat(), "minutes": moment.isoformat(timespec="minutes"),
            "offset": moment.isoformat(timespec="seconds") + "+05:30"}[form]
    try:
        utc = instants.parse_user_time(text, zone)
    except instants.NotAnInstant as error:
        message = str(error)
        assert message.startswith(repr(text)) and message.endswith(f"is outside the times lms-refresh handles "
                                                                   f"({instants.RANGE})")
        assert "\n" not in message
        local = dt.datetime.fromisoformat(text)
        if local.tzinfo is not None:  # a fixed offset: the oracle can say exactly
            assert not in_range(local.replace(tzinfo=None), 19800)
        return
    assert instants.FIRST <= utc < instants.END
    assert utc == dt.datetime.fromisoformat(text).replace(
        tzinfo=dt.datetime.fromisoformat(text).tzinfo or zoneinfo.ZoneInfo(zone)).astimezone(UTC)


def test_the_examples_of_the_issue_get_one_sentence():
    for text, zone in [("0001-01-01", "Europe/Paris"), ("9999-12-31T23:00", "America/Los_Angeles"),
                       ("0999-06-01", "UTC"), ("1970-01-01", "Europe/Paris"), ("3000-01-01", "UTC")]:
        with pytest.raises(instants.NotAnInstant, match="is outside the times lms-refresh handles"):
            instants.parse_user_time(text, zone)
    assert instants.parse_user_time("1970-01-01", "America/Los_Angeles") == dt.datetime(1970, 1, 1, 8, tzinfo=UTC)
    assert instants.to_cursor(instants.parse_user_time("2999-12-31T23:59:59.999999Z", "UTC")) == \
        "2999-12-31T23:59:59.999999Z"


def test_user_times_are_local_unless_they_carry_an_offset():
    assert parse_user_time("2026-11-02", "Europe/Paris") == t("2026-11-01T23:00:00+00:00")
    assert parse_user_time("2026-07-02T04:15", "Europe/Paris") == t("2026-07-02T02:15:00+00:00")
    assert parse_user_time("2026-07-02T04:15Z", "Europe/Paris") == t("2026-07-02T04:15:00+00:00")
    with pytest.raises(ValueError):
        parse_user_time("last tuesday", "UTC")


# -- the mappers: a day for every instant in range up to now + tolerance, a reason for anything else ----------

MAPPER = StatementMapper("Etc/GMT-14", Pseudonymiser(b"k" * 32), r"^(.+?/course/[^/?#]+)", now=NOW)


def body(timestamp, stored="2026-11-02T10:00:00Z"):
    return {"id": "8f0e9b3c-1d2e-4f5a-9b8c-7d6e5f4a3b2c", "actor": {"mbox": "mailto:a@example.edu"},
            "verb": {"id": "http://adlnet.gov/expapi/verbs/experienced"},
            "object": {"id": "https://lms.example.edu/course/BIO101"}, "timestamp": timestamp, "stored": stored}


@FUZZ
@given(naive | near_edges, offsets | st.none())
def test_a_timestamp_counts_on_its_day_only_if_in_range_and_not_in_the_future(moment, offset):
    text = moment.isoformat() + ("Z" if offset is None else dt.datetime(2000, 1, 1, tzinfo=offset).isoformat()[19:])
    offset_s = 0 if offset is None else int(offset.utcoffset(None).total_seconds())
    latest_s = seconds_of(dt.datetime(2026, 11, 5, 3, 15), 0)  # NOW + 2 days
    utc_s = seconds_of(moment, offset_s)
    expected = in_range(moment, offset_s) and (utc_s, moment.microsecond) <= (latest_s, 0)
    try:
        kind, event = MAPPER.map(body(text))
    except InvalidStatement as error:
        assert not expected, (text, error)
        assert str(error) in (f"timestamp {text[:40]!r} is out of range",
                              f"timestamp {text[:40]!r} lies in the future (after 2026-11-05T03:15:00.000000Z, "
                              "2 days past this run's time): a device's clock was wrong")
        return
    assert expected, text
    day = (dt.date(1, 1, 1) + dt.timedelta(seconds=utc_s + 14 * 3600)).isoformat()  # Etc/GMT-14 is UTC+14
    assert event.day == day


@FUZZ
@given(st.integers(-2 ** 63, 2 ** 63) | st.integers(0, 40_000_000_000) | st.booleans() | st.floats())
def test_a_moodle_timecreated_counts_only_in_range_and_not_in_the_future(timecreated):
    mapper = RowMapper("America/Los_Angeles", str, "https://moodle.example.edu/", site_course_id=1, guest_user_id=1,
                       now=NOW)
    row = (7, "\\core\\event\\course_viewed", "r", 2, 5, 9, None, 0, None, timecreated, None)
    latest = int(NOW.timestamp()) + 2 * 86400
    try:
        kind, event = mapper.map(row)
    except InvalidRow as error:
        assert not (type(timecreated) is int and 0 < timecreated <= latest), (timecreated, error)
        assert str(error).startswith(f"timecreated {timecreated!r} ")
        return
    assert type(timecreated) is int and 0 < timecreated <= latest
    los_angeles = zoneinfo.ZoneInfo("America/Los_Angeles")
    assert event.day == dt.datetime.fromtimestamp(timecreated, los_angeles).date().isoformat()


# -- the existence rule is bounded whatever a store holds -----------------------------------------------------

def test_the_existence_rule_neither_overflows_nor_spans_past_the_range_on_days_an_earlier_version_staged():
    cell = {name: 0 for name in ("learners", "learner_key", "statements", "statement_key")}
    settings_ = policy.PrivacySettings(1, "none", 0, 0.0, False)
    cells = {day: dict(cell, learners=5) for day in ("2026-11-02", "2026-11-04", "9999-12-31", "5000-01-01")}
    rows = policy.course_rows({d: _full(c) for d, c in cells.items()}, settings_)
    assert [row[0] for row in rows] == ["2026-11-02", "2026-11-03", "2026-11-04"]


def _full(cell):
    names = ("attempts", "completions", "passed", "failed")
    full = dict(cell)
    for stem in ("attempt", "completion", "passed", "failed", "score", "duration"):
        full[f"{stem}_learners"] = 0
        full[f"{stem}_key"] = 0
        full[f"{stem}_learner_key"] = 0
    full.update({name: 0 for name in names})
    full.update(score_count=0, score_sum_micro=0, duration_count=0, duration_ms=0)
    return full
