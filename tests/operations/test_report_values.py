"""The HTML report's values against the publication's rows (an independent review): a row with `suppressed = 1`
withholds only its NULL values, the learners who completed, passed and failed are the period's row (never summed),
the page a backfill writes judges freshness as `status --check` does (its banner's times written as the page's
others), and a course is never shown with the whole site's label. The page is read back with html.parser
(tests/helpers/report_page.py)."""

import contextlib
import json
import sqlite3

from helpers.publication import publication
from helpers.report_page import Page, build, month_label, period_row
from helpers.statements import HOME, statement
from lms_refresh.run import report_data, report_page

RUN = "2026-12-01T04:20:00+01:00"  # a Tuesday's scheduled run (Europe/Paris), a little late
COURSE = f"{HOME}/course/BIO101"
FRESH = {"last_success": "2026-12-02T04:15:00Z", "watermark": "2026-12-02T04:10:00Z", "stale": None,
         "written": "2026-12-02T04:16:00Z"}


def weekly_rows(path):
    """{(course, period): (active_learners, completions, passed, failed, suppressed)} of the publication."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {(row[0], row[1]): row[2:] for row in db.execute(
            "SELECT course, period, active_learners, completions, passed, failed, suppressed FROM weekly_metrics "
            "UNION ALL SELECT NULL, period, active_learners, completions, passed, failed, suppressed "
            "FROM site_weekly_metrics")}


def monthly_learners(path):
    """{(course, period): (completed_learners, passed_learners, failed_learners)} of the publication's months."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {(row[0], row[1]): row[2:] for row in db.execute(
            "SELECT course, period, completed_learners, passed_learners, failed_learners FROM monthly_metrics "
            "UNION ALL SELECT NULL, period, completed_learners, passed_learners, failed_learners "
            "FROM site_monthly_metrics")}


def shown(value):
    """A published value as the page shows it."""
    return "withheld" if value is None else f"{value:,}"


def twelve_complete_ten_pass(project):
    """12 learners complete BIO101 in the week of 23 November 2026: 10 pass, 2 fail (fewer than min_cell_size 10)."""
    project.write("a.ndjson", [statement(learner=f"u{n}", course="BIO101", timestamp="2026-11-24T10:00:00Z",
                                         completion=True, success=n < 10) for n in range(12)])
    result = project.invoke("run", now=RUN)
    assert result.returncode == 0, result.stderr


def test_a_partly_withheld_row_shows_its_published_values(sqlite_project):
    project = sqlite_project
    twelve_complete_ten_pass(project)
    rows = weekly_rows(publication(project))
    assert rows == {(COURSE, "2026-W48"): (12, 12, 10, None, 1), (None, "2026-W48"): (12, 12, 10, None, 1)}
    months = monthly_learners(publication(project))
    assert months == {(COURSE, "2026-11"): (12, 10, None), (None, "2026-11"): (12, 10, None)}
    page = Page((publication(project).parent / "report.html").read_text())
    assert page.tables["weekly-table"][0][1:] == ["2026-W48"]
    weekly, outcomes = page.rows("weekly-table"), page.rows("outcomes-table")
    for course, label in ((None, "Whole site"), (COURSE, COURSE)):
        learners, completions, passed, failed, _ = rows[course, "2026-W48"]
        assert weekly[label] == [shown(learners)] == ["12"]
        # The month's learners (the latest month published, begun by 1 December): `failed_learners` is the row's
        # withheld value, shown as withheld (never as 0, never as no row).
        assert outcomes[label] == [shown(value) for value in months[course, "2026-11"]] == ["12", "10", "withheld"]
    # 2 weekly values and 2 × 3 outcome values shown; the 2 failed learners are the withheld ones.
    assert (page.texts["withheld"], page.texts["cells"], page.texts["withheld-share"]) == ("2", "8", "25.0%")


def test_the_share_counts_withheld_values_among_those_shown(tmp_path):
    weekly = [period_row(week, "https://lms.example.edu/course/1", 20, completions=5, passed=4, failed=1)
              for week in range(3)]
    whole = period_row(3, "https://lms.example.edu/course/1", 0, suppressed=1)  # every value NULL
    months = [period_row(10, "https://lms.example.edu/course/1", 40, completions=15, passed=12, failed=3,
                         outcome_learners=(11, 10, 3), period=month_label),
              period_row(11, "https://lms.example.edu/course/1", 0, suppressed=1, period=month_label)]
    path = build(tmp_path / "serving.sqlite", {}, [*weekly, whole], monthly=months)
    data = report_data.read_publication(path, today="2026-12-02")
    # 4 weeks: 4 learners' values (1 withheld); December's 3 outcome values (all withheld, the whole row's).
    assert (data.cells, data.withheld) == (7, 4)
    page = Page(report_page.render(data, FRESH))
    assert page.rows("weekly-table")["https://lms.example.edu/course/1"] == ["20", "20", "20", "withheld"]
    assert page.rows("outcomes-table")["https://lms.example.edu/course/1"] == ["withheld"] * 3
    assert page.texts["withheld-share"] == "57.1%"


def check(project, now):
    """`status --check` at `now`: (exit code, its line)."""
    result = project.invoke("status", "--check", now=now)
    return result.returncode, result.stdout.strip()


def test_the_page_a_backfill_writes_is_stale_only_when_status_check_says_so(sqlite_project):
    project = sqlite_project
    twelve_complete_ten_pass(project)
    beside = publication(project).parent / "report.html"
    backfill = ("backfill", "--since", "2026-11-23", "--until", "2026-11-30")
    # Forty minutes after the scheduled run: fresh, as `status --check` says at the same moment.
    assert project.invoke(*backfill, now="2026-12-01T05:00:00+01:00").returncode == 0
    code, line = check(project, "2026-12-01T05:00:00+01:00")
    assert code == 0 and line.startswith("LMS-REFRESH OK - "), line
    page = Page(beside.read_text())
    assert "stale" not in page.texts and page.texts["fresh"].startswith("Fresh: ")
    assert page.texts["last-success"] == "Tue 1 Dec 2026, 04:20 CET"  # the run's, not the backfill's
    # Why the page is no fresher than the last refresh is the operator's business: `status` says it, the page not.
    assert "note" not in page.texts and "backfill" not in beside.read_text()
    said = project.invoke("status", now="2026-12-01T05:00:00+01:00").stdout
    assert ("the last run was a backfill, which refreshes no new data: the freshness is that of the last "
            "successful refresh (a run or a rebuild)") in said, said
    assert not any(attrs.get("class") == "stale" for _, attrs in page.elements)
    # Three days later, without a run since: stale on the page and for `status --check`, the same sentence.
    later = "2026-12-04T09:00:00+01:00"
    assert project.invoke(*backfill, now=later).returncode == 0
    code, line = check(project, later)
    stale = project.invoke("status", "--json", now=later)
    sentence = json.loads(stale.stdout)["stale"]
    assert code == 2 and sentence and sentence in line, line
    # The same rule and the same times; the page writes them as it writes every other time (report_html.local_time).
    assert sentence == ("the last success started at 2026-12-01T04:20+01:00, before the run due at "
                        "2026-12-04T04:15+01:00 (grace 120 min)")
    page = Page(beside.read_text())
    assert page.texts["stale"] == ("STALE: the last success started at Tue 1 Dec 2026, 04:20 CET, before the run due "
                                   "at Fri 4 Dec 2026, 04:15 CET (grace 120 min)")
    assert page.texts["last-success"] in page.texts["stale"]


def test_a_course_is_never_shown_with_the_sites_label(tmp_path):
    named = "https://lms.example.edu/course/1"
    names = {named: "Whole site", "https://lms.example.edu/course/2": "WHOLE  site", "Whole site": None,
             "https://lms.example.edu/course/3": "Whole site (course)"}
    weekly = [period_row(week, course, 20 + 10 * index + week, completions=index, passed=index, failed=0)
              for index, course in enumerate(names) for week in range(2)]
    site = [period_row(week, None, 500 + week, completions=9, passed=8, failed=1) for week in range(2)]
    monthly = [period_row(11, course, 30 + index, completions=index + 10, passed=10, failed=0, period=month_label)
               for index, course in enumerate([*names, None])]  # 2026-12, the site's last
    path = build(tmp_path / "serving.sqlite", names, weekly, site=site, monthly=monthly)
    page = Page(report_page.render(report_data.read_publication(path, today="2026-12-02"), FRESH))
    rows = weekly_rows(path)
    for table in ("weekly-table", "outcomes-table"):
        labels = [row[0] for row in page.tables[table][1:]]
        assert labels == ["Whole site", "Whole site (course)", "Whole site (course)", "WHOLE site (course)",
                          "Whole site (course)"], labels
    weeks = page.tables["weekly-table"][0][1:]
    # The one "Whole site" row is the site's (course NULL); each course is marked, with its own numbers.
    assert page.tables["weekly-table"][1][1:] == [shown(rows[None, week][0]) for week in weeks]
    courses = [attrs["data-course"] for tag, attrs in page.elements if tag == "tr" and "data-course" in attrs]
    assert courses[:5] == ["", "Whole site", named, "https://lms.example.edu/course/2",  # by label, then IRI
                           "https://lms.example.edu/course/3"]
    for row, course in zip(page.tables["weekly-table"][2:], courses[1:5], strict=True):
        assert row[1:] == [shown(rows[course, week][0]) for week in weeks]
    assert [attrs["title"] for tag, attrs in page.elements if tag == "figcaption"] == \
        ["Whole site", "Whole site (course)", "Whole site (course)", "WHOLE site (course)", "Whole site (course)"]
    assert page.tables["outcomes-table"][1][1:] == ["14", "10", "0"]  # the site's row, from its rows alone
    # Marked, a course named "Whole site" reads like one really named "Whole site (course)": both are courses.
    assert report_data.label(named, names) == "Whole site (course)"
    assert report_data.label(None, names) == "Whole site"
