"""Weeks and months (issue 22, part 1): every published row against an independent recount
(tests/helpers/period_reference.py) in exact mode, on both stores."""

import contextlib
import datetime as dt
import itertools
import pathlib
import random
import sqlite3
import zoneinfo

import pytest
from hypothesis import given, settings, strategies as st

from helpers.paths import REPO
from helpers.period_reference import expected_periods
from helpers.publication import publication
from helpers.statements import HOME, statement, voiding
from lms_refresh.store import grains, periods

K = 3


def configure(project, timezone="Europe/Paris", lag='"0s"'):
    project.configure(safety_lag=lag, bootstrap_days=400)
    text = project.config.read_text().replace('timezone = "Europe/Paris"', f'timezone = "{timezone}"')
    project.config.write_text(text.replace("[privacy]", f"min_cell_size = {K}\n[privacy]", 0)
                              .replace("\n[window]", f"\nmin_cell_size = {K}\n[window]", 1))


def moment(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def stamp(when):
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def activity(seed, first, days, courses=("BIO101", "CHEM1", "TINY"), per_day=14):
    """Statements over `days` local days from `first`: learners come back on several days of a week."""
    rng, made = random.Random(seed), []
    for offset in range(days):
        day = first + dt.timedelta(days=offset)
        for course in courses:
            pool = 2 if course == "TINY" else 9
            for _ in range(rng.randrange(per_day if course != "TINY" else 3)):
                hour = rng.randrange(24)
                extra = rng.choice([{}, {"score": rng.choice([0.5, 0.25, 1.0])}, {"success": True},
                                    {"success": False}, {"duration": "PT2M30S"}, {"completion": True}])
                made.append(statement(learner=f"l{rng.randrange(pool)}", course=course,
                                      verb=rng.choice(["experienced", "attempted", "completed", "passed"]),
                                      timestamp=f"{day.isoformat()}T{hour:02d}:{rng.randrange(60):02d}:00Z",
                                      stored=f"{day.isoformat()}T23:59:00Z" if hour < 22 else None, **extra))
    return made


def check_every_grain(project, written, timezone, closed_before, terms=()):
    """Every grain's rows, the site's with the courses', against the independent recount (`terms` as configured)."""
    for grain in periods.GRAINS:
        expected = expected_periods(written, timezone, K, grain, closed_before, terms)
        assert project.grain_rows(grain, site=True) == expected, grain


def test_weeks_and_months_are_true_distinct_counts_of_their_periods(project):
    configure(project)
    written = activity(1, dt.date(2026, 9, 21), 49)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-20T04:15:00Z", check=0)
    check_every_grain(project, written, "Europe/Paris", moment("2026-11-20T04:15:00Z"))
    weeks = project.grain_rows("week")
    days = project.serving()
    # A week's learners are not its days' sum: learners come back on several days.
    week = next(row for row in weeks if row[0] == "2026-W40" and row[3].endswith("BIO101"))
    assert week[4] < sum(row[2] or 0 for row in days if row[1] == week[3] and week[1] <= row[0] <= week[2])
    assert not any(row[3].endswith("TINY") for row in weeks)  # never k learners in a period: no row


def test_a_late_statement_recomputes_its_week_and_month(project):
    configure(project)
    written = activity(2, dt.date(2026, 10, 1), 31)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-02T04:15:00Z", check=0)
    before = project.grain_rows("week", site=True)
    late = [statement(learner=f"new{n}", course="BIO101", verb="passed", timestamp="2026-10-14T09:00:00Z",
                      stored="2026-11-02T05:00:00Z") for n in range(3)]
    project.write("b.ndjson", late)
    project.invoke("run", now="2026-11-02T06:00:00Z", check=0)
    check_every_grain(project, written + late, "Europe/Paris", moment("2026-11-02T06:00:00Z"))
    after = project.grain_rows("week", site=True)
    changed = {(row[0], row[3]) for row in set(after) ^ set(before)}
    assert changed == {("2026-W42", None), ("2026-W42", f"{HOME}/course/BIO101")}  # 2026-10-14's week, no other


def test_voids_take_a_learner_out_of_a_week_only_once_no_day_of_it_holds_them(project):
    configure(project)
    crowd = [statement(learner=f"l{n}", course="BIO101", timestamp=f"2026-10-{day}T10:00:00Z")
             for n in range(K) for day in (12, 13)]
    twice = [statement(learner="gone", course="BIO101", verb="passed", timestamp=f"2026-10-{day}T11:00:00Z")
             for day in (12, 14)]
    project.write("a.ndjson", crowd + twice)
    project.invoke("run", now="2026-10-20T04:15:00Z", check=0)
    assert [row[4] for row in project.grain_rows("week")] == [K + 1]
    project.write("b.ndjson", [voiding(twice[0]["id"], "2026-10-20T05:00:00Z")])  # still there on the 14th
    project.invoke("run", now="2026-10-20T06:00:00Z", check=0)
    check_every_grain(project, crowd + twice[1:], "Europe/Paris", moment("2026-10-20T06:00:00Z"))
    project.write("c.ndjson", [voiding(twice[1]["id"], "2026-10-20T07:00:00Z")])  # and now on no day of it
    project.invoke("run", now="2026-10-20T08:00:00Z", check=0)
    check_every_grain(project, crowd, "Europe/Paris", moment("2026-10-20T08:00:00Z"))
    assert [row[4] for row in project.grain_rows("week")] == [K]
    assert project.query("SELECT COUNT(*) FROM learner_periods WHERE days <= 0") == [(0,)]


def presence_recount(project):
    """learner_periods' weeks and months as learner_days says they are: each learner's days, and days doing each
    thing, in each (period, course)."""
    counted = {}
    for day, course, actor, key, *flags in project.query("SELECT * FROM learner_days"):
        for grain in periods.CALENDAR_GRAINS:
            row = counted.setdefault((grain, periods.period_of(grain, day)[0], course, actor), [key, 0] + [0] * 6)
            row[1:] = [row[1] + 1] + [total + flag for total, flag in zip(row[2:], flags, strict=True)]
    return sorted(key + tuple(row) for key, row in counted.items())


def test_a_period_filled_whole_and_then_moved_by_a_late_day_equals_the_recount(project):
    # The first run fills its weeks and its month whole (on PostgreSQL, an insert into periods with no learner yet);
    # the second re-delivers a day of them with late statements (its old presence moved out, its new in) and opens
    # a week that holds no learner yet, in the same month.
    configure(project)
    written = activity(4, dt.date(2026, 10, 5), 13)  # to 2026-10-18, local (Paris), at the latest
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-10-19T04:15:00Z", check=0)
    assert project.query("SELECT COUNT(*) FROM learner_periods WHERE grain = 'week' AND period = '2026-W43'") == [(0,)]
    late = [statement(learner=f"l{n}", course=course, verb="passed", timestamp="2026-10-08T09:00:00Z",
                      stored="2026-10-20T05:00:00Z") for n in (0, 1, 7, 8) for course in ("BIO101", "CHEM1")]
    late += activity(5, dt.date(2026, 10, 19), 2)
    project.write("b.ndjson", late)
    project.invoke("run", now="2026-10-21T04:15:00Z", check=0)
    check_every_grain(project, written + late, "Europe/Paris", moment("2026-10-21T04:15:00Z"))
    assert project.query("SELECT grain, period, course_id, actor, learner_key, days, attempt_days, completion_days, "
                         "passed_days, failed_days, score_days, duration_days FROM learner_periods "
                         "ORDER BY grain, period, course_id, actor") == presence_recount(project)


def test_iso_week_53_and_the_week_year_boundary(project):
    configure(project, timezone="UTC")
    written = [statement(learner=f"l{n}", course="BIO101", timestamp=f"{day}T12:00:00Z")
               for day in ("2026-12-28", "2026-12-31", "2027-01-01", "2027-01-03", "2027-01-04") for n in range(K)]
    project.write("a.ndjson", written)
    project.invoke("run", now="2027-01-20T04:15:00Z", check=0)
    check_every_grain(project, written, "UTC", moment("2027-01-20T04:15:00Z"))
    course = f"{HOME}/course/BIO101"
    assert [row[:4] for row in project.grain_rows("week")] == [
        ("2026-W53", "2026-12-28", "2027-01-03", course), ("2027-W01", "2027-01-04", "2027-01-10", course)]
    assert [row[:3] for row in project.grain_rows("month")] == [
        ("2026-12", "2026-12-01", "2026-12-31"), ("2027-01", "2027-01-01", "2027-01-31")]


@pytest.mark.parametrize("timezone, boundary", [
    ("Europe/Paris", "2026-10-25T23:00:00Z"),  # DST ends on Sunday 25 October: Monday begins at 23:00 UTC
    ("America/New_York", "2026-11-02T05:00:00Z"),  # DST ends on Sunday 1 November: Monday begins at 05:00 UTC
])
def test_weeks_across_a_dst_change_follow_the_local_calendar(project, timezone, boundary):
    configure(project, timezone=timezone)
    edge = moment(boundary)
    written = [statement(learner=f"l{n}", course="BIO101", timestamp=stamp(edge + dt.timedelta(minutes=shift)),
                         stored=stamp(edge - dt.timedelta(hours=1))) for n in range(K) for shift in (-30, 30)]
    project.write("a.ndjson", written)
    project.invoke("run", now=stamp(edge + dt.timedelta(hours=1)), check=0)
    check_every_grain(project, written, timezone, edge + dt.timedelta(hours=1))
    weeks = project.grain_rows("week")
    # 30 minutes either side of local midnight: two weeks of K learners, the first over (lag 0), the second not.
    assert [(row[4], row[13]) for row in weeks] == [(K, 1), (K, 0)]
    assert weeks[1][1] == edge.astimezone(zoneinfo.ZoneInfo(timezone)).date().isoformat()
    assert dt.date.fromisoformat(weeks[1][1]).weekday() == 0


def test_a_period_is_complete_once_its_end_and_the_lag_have_passed(project):
    configure(project, timezone="America/New_York", lag='"1h"')
    written = [statement(learner=f"l{n}", course="BIO101", timestamp="2026-11-01T15:00:00Z") for n in range(K)]
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-02T05:59:59Z", check=0)  # the week ended at 05:00 UTC; the lag is 1 h
    assert [row[13] for row in project.grain_rows("week")] == [0]
    project.invoke("run", now="2026-11-02T06:00:00Z", check=0)  # nothing new to read: the run still closes it
    assert [row[13] for row in project.grain_rows("week")] == [1]
    assert [row[13] for row in project.grain_rows("month")] == [0]  # November goes on
    check_every_grain(project, written, "America/New_York", moment("2026-11-02T05:00:00Z"))


def daily_runs_and_one_backfill(daily, once, written, first, runs):
    """Give `daily` a run at 04:15 UTC on each of `runs` days from `first` (a date), each reading what was stored
    since the one before, and `once` one backfill of all of `written`, until the last run's time."""
    written, sent = sorted(written, key=lambda s: s["stored"]), 0
    for offset in range(runs):
        now = stamp(dt.datetime.combine(first + dt.timedelta(days=offset), dt.time(4, 15), tzinfo=dt.UTC))
        todays = [s for s in written if s["stored"] < now][sent:]
        sent += len(todays)
        daily.write(f"d{offset}.ndjson", todays)
        daily.invoke("run", now=now, check=0)
    once.write("all.ndjson", written)
    once.invoke("backfill", "--since", (first - dt.timedelta(days=30)).isoformat(), "--until", now, now=now, check=0)


def test_daily_runs_over_a_month_equal_one_backfill_on_every_grain(tmp_path, make_project):
    daily, once = make_project(tmp_path / "daily"), make_project(tmp_path / "once")
    configure(daily)
    configure(once)
    written = activity(3, dt.date(2026, 10, 1), 31)
    daily_runs_and_one_backfill(daily, once, written, dt.date(2026, 10, 1), 32)
    for grain in periods.GRAINS:
        assert daily.grain_rows(grain) == once.grain_rows(grain), grain
    assert daily.serving() == once.serving()
    check_every_grain(once, written, "Europe/Paris", moment("2026-11-01T04:15:00Z"))


@settings(max_examples=300, deadline=None)
@given(st.dates(min_value=dt.date(1970, 1, 1), max_value=dt.date(2999, 12, 31)))
def test_every_day_lies_in_one_week_and_one_month_that_hold_it(day):
    for grain in periods.CALENDAR_GRAINS:
        label, first, last = periods.period_of(grain, day)
        assert first <= day.isoformat() <= last and periods.Calendar().bounds(grain, label) == (first, last)
    label, first, last = periods.period_of("week", day)
    assert dt.date.fromisoformat(first).weekday() == 0 and (dt.date.fromisoformat(last) - dt.date.fromisoformat(
        first)).days == 6 and label == "{}-W{:02d}".format(*day.isocalendar()[:2])
    assert periods.period_of("month", day)[0] == day.strftime("%Y-%m")


@settings(max_examples=100, deadline=None)
@given(st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2100, 1, 1)), st.integers(0, 800))
def test_the_periods_between_two_days_are_contiguous(first, length):
    last = first + dt.timedelta(days=length)
    for grain in periods.CALENDAR_GRAINS:
        labels = periods.periods_between(grain, first.isoformat(), last.isoformat())
        spans = [periods.Calendar().bounds(grain, label) for label in labels]
        assert spans[0][0] <= first.isoformat() and spans[-1][1] >= last.isoformat()
        assert all(dt.date.fromisoformat(a[1]) + dt.timedelta(days=1) == dt.date.fromisoformat(b[0])
                   for a, b in itertools.pairwise(spans))


def readme_query(title):
    """The SQL block that follows `title` in the data dictionary, exactly as written there."""
    text = (pathlib.Path(REPO) / "docs" / "data-dictionary.md").read_text().split(title, 1)[1]
    return text.split("```sql\n", 1)[1].split("```", 1)[0]


def dashboard(project, query):
    """Run `query` as a dashboard does: on the SQLite publication file, or in PostgreSQL's serving schema."""
    if not project.postgres:
        with contextlib.closing(sqlite3.connect(f"file:{publication(project)}?mode=ro", uri=True)) as db:
            return db.execute(query).fetchall()
    store = project.open_store()
    try:
        store.db.execute(f"SET search_path TO {store.schema}_serving")
        return [tuple(row) for row in store.db.execute(query).fetchall()]
    finally:
        store.close()


def test_the_readme_weekly_query_runs_as_written(project):
    configure(project)
    written = activity(4, dt.date(2026, 10, 5), 18)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-10-23T04:15:00Z", check=0)
    rows = dashboard(project, readme_query("### Weekly active learners per course\n"))
    expected = [(row[0], row[3], row[4]) for row in
                expected_periods(written, "Europe/Paris", K, "week", moment("2026-10-23T04:15:00Z"))
                if row[13] == 1 and row[4] is not None and row[3] is not None]
    assert rows == expected and {row[0] for row in rows} == {"2026-W41", "2026-W42"}  # W43 goes on


def test_the_readme_site_monthly_query_runs_as_written(project):
    configure(project)
    written = activity(4, dt.date(2026, 9, 14), 40)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-10-28T04:15:00Z", check=0)
    rows = dashboard(project, readme_query("The site's monthly total"))
    expected = [(row[0], row[4], row[5], row[13]) for row in
                expected_periods(written, "Europe/Paris", K, "month", moment("2026-10-28T04:15:00Z"))
                if row[3] is None]
    assert rows == expected and [row[0] for row in rows] == ["2026-09", "2026-10"] and rows[0][3] == 1
    courses = {row[3] for row in expected_periods(written, "Europe/Paris", K, "month") if row[3] is not None}
    assert len(courses) > 1 and rows[0][1] < sum(  # distinct learners across courses, not a sum of courses'
        row[4] for row in expected_periods(written, "Europe/Paris", K, "month") if row[0] == "2026-09" and row[3])


def test_a_learner_in_more_courses_in_a_day_than_a_packed_flag_counts_is_counted_once_on_the_site(project):
    # The site's day cell sums each learner's flags packed, _SITE_FIELD bits a flag: 1,024 attempts in as many
    # courses would carry into the completions' field, and the learner would count as completing, not attempting.
    # Such a day is counted flag by flag instead.
    configure(project)
    wide = [statement(learner="wide", course=f"C{n}", verb="attempted", timestamp="2026-10-07T09:00:00Z")
            for n in range(2 ** grains._SITE_FIELD)]
    others = [statement(learner=f"l{n}", course="BIO101", verb="attempted", timestamp="2026-10-07T10:00:00Z")
              for n in range(K - 1)]
    project.write("a.ndjson", wide + others)
    project.invoke("run", now="2026-10-20T04:15:00Z", check=0)
    check_every_grain(project, wide + others, "Europe/Paris", moment("2026-10-20T04:15:00Z"))
    assert project.query("SELECT day, learners, attempt_learners, completion_learners FROM daily_metrics "
                         "WHERE course_id = 0") == [("2026-10-07", K, K, 0)]  # tables.SITE


def test_a_learner_in_thousands_of_courses_in_a_day_with_every_flag_does_not_overflow_the_site_cell(project):
    # Summed packed, a learner's highest flag in 8,192 courses would pass 2**63 if one integer held all six flags
    # (10 bits each): the sum fails ("integer overflow", "bigint out of range") before the guard on the learner's
    # rows can send the day to the exact count, and every run after fails the same way (the review of 636dce6).
    configure(project)
    wide = [statement(learner="wide", course=f"C{n}", verb="attempted", score=0.5, duration="PT1M", completion=True,
                      success=True, timestamp="2026-10-07T09:00:00Z") for n in range(2 ** 13)]
    others = [statement(learner=f"l{n}", course="BIO101", verb="attempted", timestamp="2026-10-07T10:00:00Z")
              for n in range(K - 1)]
    project.write("a.ndjson", wide + others)
    project.invoke("run", now="2026-10-20T04:15:00Z", check=0)
    assert project.query("SELECT learners, attempt_learners, completion_learners, passed_learners, score_learners, "
                         "duration_learners FROM daily_metrics WHERE course_id = 0") == [(K, K, 1, 1, 1, 1)]
    check_every_grain(project, wide + others, "Europe/Paris", moment("2026-10-20T04:15:00Z"))
