"""The report's files beside the overview (run/report_files.py): a page per course named from a digest of its IRI,
hostile names escaped there as on the overview, a CSV of every table that no spreadsheet reads as a formula,
pages rewritten only when their rows change and removed with their course; and the site's rows read from
`site_*` tables when the publication has them (run/report_data.site_rows)."""

import csv
import os
import re
import sqlite3

import pytest

from helpers.report_page import Page, build, month_label, period_row
from lms_refresh.run import report_data, report_files, report_page

FRESH = {"last_success": "2026-12-02T04:15:00.000000Z", "watermark": "2026-12-02T04:10:00.000000Z", "stale": None,
         "written": "2026-12-02T04:16:00.000000Z", "timezone": "Europe/Paris"}
HOSTILE = {"https://lms.example.edu/course/1": "<script>document.title='pwned'</script>",
           "https://lms.example.edu/course/2": '"><img src=x onerror=alert(1)>',
           "https://lms.example.edu/course/../../etc/passwd": "=HYPERLINK(\"http://evil.example\",\"click\")",
           "https://lms.example.edu/course/4": '"' * 200,
           "https://lms.example.edu/course/5": "-2+3 @SUM(A1)"}


@pytest.mark.parametrize("value, written", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("a=b", "a=b"), ("Algebra", "Algebra"), (12, 12), (0.5, 0.5), (None, ""), ("", ""),
])
def test_a_csv_cell_that_starts_as_a_formula_is_written_after_an_apostrophe(value, written):
    assert report_files.neutral(value) == written


def test_the_csv_of_hostile_names_holds_them_as_text(tmp_path):
    names = {"https://lms.example.edu/course/1": "=cmd|' /C calc'!A0", "https://lms.example.edu/course/2": "Plain"}
    data = report_files.csv_bytes(["course", "name", "2026-W01"], [[iri, name, 12] for iri, name in names.items()])
    rows = list(csv.reader(data.decode().splitlines()))
    assert rows == [["course", "name", "2026-W01"], ["https://lms.example.edu/course/1", "'=cmd|' /C calc'!A0", "12"],
                    ["https://lms.example.edu/course/2", "Plain", "12"]]


def publication(tmp_path, courses=HOSTILE, weeks=3, bump=()):
    weekly = [period_row(week, course, 20 + index + week + (100 if course in bump else 0), completions=week,
                         passed=1, failed=0) for index, course in enumerate(courses) for week in range(weeks)]
    site = [period_row(week, None, 400 + week, completions=9, passed=8, failed=1) for week in range(weeks)]
    return build(tmp_path / "serving.sqlite", courses, weekly, site=site)


def files(tmp_path):
    return tmp_path / "report-files"


def test_course_pages_are_named_from_a_digest_and_escape_hostile_names(tmp_path):
    path = publication(tmp_path)
    report_page.write_report(str(path), str(tmp_path / "report.html"), FRESH, today="2026-12-02")
    written = sorted(os.listdir(files(tmp_path)))
    assert all(re.fullmatch(r"course-[0-9a-f]{24}(\.html|-week\.csv)|overview-[a-z]+\.csv|pages\.json", name)
               for name in written), written
    assert sum(name.endswith(".html") for name in written) == len(HOSTILE)
    assert not (tmp_path / "etc").exists()
    overview = Page((tmp_path / "report.html").read_text())
    links = {attrs["href"] for tag, attrs in overview.elements if tag == "a" and "course-" in attrs.get("href", "")}
    assert links == {f"report-files/{report_files.page_name(course)}.html" for course in HOSTILE}
    for course in HOSTILE:
        text = (files(tmp_path) / f"{report_files.page_name(course)}.html").read_text()
        page = Page(text)
        assert not any(tag in ("script", "img") for tag, _ in page.elements)
        assert not any(attribute.startswith("on") for _, attrs in page.elements for attribute in attrs)
        shown = report_data.label(course, HOSTILE)
        heading = re.search(r'<h1 id="course-name">([^<]*)</h1>', text).group(1)
        assert len(heading) <= 240  # the label's bound in HTML: 200 '"' are 1,200 characters escaped
        assert page.texts["course-name"] == shown or (page.texts["course-name"].endswith("…")
                                                      and shown.startswith(page.texts["course-name"][:-1]))
        with sqlite3.connect(path) as db:
            published = db.execute("SELECT period, active_learners, statements FROM weekly_metrics WHERE course = ? "
                                   "ORDER BY period", (course,)).fetchall()
        assert [(row[0], row[3], row[4]) for row in page.tables["table-week"][1:]] == \
            [(period, str(learners), str(statements)) for period, learners, statements in published]
        with open(files(tmp_path) / f"{report_files.page_name(course)}-week.csv", newline="") as handle:
            rows = list(csv.reader(handle))
        assert rows[0][:4] == ["period", "period_start", "period_end", "active_learners"]
        assert [(row[0], int(row[3]), int(row[4])) for row in rows[1:]] == published
    with open(files(tmp_path) / "overview-weekly.csv", newline="") as handle:
        names = {row[0]: row[1] for row in csv.reader(handle)}
    assert names["https://lms.example.edu/course/../../etc/passwd"] == "'" + HOSTILE[
        "https://lms.example.edu/course/../../etc/passwd"]
    assert names["https://lms.example.edu/course/5"] == "'-2+3 @SUM(A1)"
    assert names[""] == "Whole site"


def inodes(tmp_path):
    return {name: os.stat(files(tmp_path) / name).st_ino for name in os.listdir(files(tmp_path))
            if name.startswith("course-")}


def test_a_nightly_write_replaces_only_the_pages_whose_rows_changed_and_removes_those_of_courses_gone(tmp_path):
    courses = {f"https://lms.example.edu/course/{number}": f"Course {number}" for number in range(6)}
    output = str(tmp_path / "report.html")
    report_page.write_report(str(publication(tmp_path, courses)), output, FRESH, today="2026-12-02")
    first = inodes(tmp_path)
    report_page.write_report(str(publication(tmp_path, courses)), output, FRESH, today="2026-12-02")
    assert inodes(tmp_path) == first  # nothing changed: no page, no CSV replaced
    changed = "https://lms.example.edu/course/2"
    report_page.write_report(str(publication(tmp_path, courses, bump={changed})), output, FRESH, today="2026-12-02")
    again = inodes(tmp_path)
    ours = report_files.page_name(changed)
    assert {name for name in again if again[name] != first[name]} == {f"{ours}.html", f"{ours}-week.csv"}
    page = Page((files(tmp_path) / f"{ours}.html").read_text())
    assert page.tables["table-week"][1][3] == "122"  # 20 + 2 + 0 + 100
    # A page deleted by hand is written again, though its rows did not change.
    os.unlink(files(tmp_path) / f"{report_files.page_name('https://lms.example.edu/course/0')}.html")
    report_page.write_report(str(publication(tmp_path, courses, bump={changed})), output, FRESH, today="2026-12-02")
    assert f"{report_files.page_name('https://lms.example.edu/course/0')}.html" in os.listdir(files(tmp_path))
    # A course gone from the publication: its page and CSV go; a file of someone else's stays.
    (files(tmp_path) / "notes.txt").write_text("the operator's")
    gone = "https://lms.example.edu/course/5"
    del courses[gone]
    report_page.write_report(str(publication(tmp_path, courses)), output, FRESH, today="2026-12-02")
    left = os.listdir(files(tmp_path))
    assert not any(name.startswith(report_files.page_name(gone)) for name in left)
    assert sum(name.endswith(".html") for name in left) == 5 and "notes.txt" in left
    assert not any(".tmp-" in name for name in left)


def test_the_site_rows_come_from_a_site_table_when_the_publication_has_one(tmp_path):
    courses = {"https://lms.example.edu/course/1": "Algebra"}
    weekly = [period_row(week, course, 30 + week) for course in courses for week in range(3)]
    monthly = [period_row(11, course, 30, completions=5, passed=4, failed=1, period=month_label) for course in courses]
    path = build(tmp_path / "serving.sqlite", courses, weekly, monthly=monthly)  # no site rows
    with sqlite3.connect(path) as db:  # the publication's site_weekly_metrics (empty: none were given)
        assert db.execute("SELECT COUNT(*) FROM site_weekly_metrics").fetchone() == (0,)
        db.execute("INSERT INTO site_monthly_metrics (period, period_start, period_end, active_learners, statements, "
                   "attempts, completions, passed, failed, suppressed, complete, completed_learners, passed_learners, "
                   "failed_learners) VALUES ('2026-12', '2026-12-01', '2026-12-31', 900, 0, 0, 9, 8, 2, 0, 0, 7, 5, "
                   "NULL)")
        db.executemany("INSERT INTO site_weekly_metrics (period, period_start, period_end, active_learners, "
                       "statements, attempts, completions, passed, failed, avg_scaled_score, total_duration_seconds, "
                       "suppressed, complete) SELECT period, period_start, period_end, ?, 0, 0, 1, 1, 0, "
                       "NULL, NULL, 0, 1 FROM weekly_metrics WHERE period = ?",
                       [(900 + week, period_row(week, None, 0)[0]) for week in range(3)])
    data = report_data.read_publication(path, today="2026-12-02")
    site = next(series for series in data.series if series.course is None)
    assert site.label == "Whole site" and site.values == (900, 901, 902)
    assert data.headlines[0].key == "week" and data.headlines[0].value == 902 and data.headlines[0].change == 1
    site = next(outcome for outcome in data.outcomes if outcome.course is None)
    assert (site.completed, site.passed, site.failed) == (7, 5, report_data.WITHHELD)


def test_a_files_directory_made_before_a_group_was_set_is_made_again_in_it_and_a_0644_report_is_traversable(tmp_path):
    """The directory of the course pages gets its group from its parent when it is made (lms-refresh changes no
    file's group: the unit forbids chown). Made by a run before publication.group was set, it would give every
    page the service's group, and each run would fail with a GroupError: it is made again. Made under the unit's
    UMask=0027, a world-readable report's directory would keep a web server's user out: its mode is set."""
    path = publication(tmp_path, weeks=1)
    output = str(tmp_path / "report.html")
    old = os.umask(0o027)
    try:
        report_page.write_report(str(path), output, FRESH, today="2026-12-02", mode=0o644)
        directory = files(tmp_path)
        assert oct(os.stat(directory).st_mode & 0o7777) == oct(0o755)
        os.chown(tmp_path, -1, 4242)  # publication.group's tmpfiles.d line: a setgid directory of the group
        os.chmod(tmp_path, 0o2750)
        os.chown(directory, -1, 0)  # as the first run left it, made before
        report_page.write_report(str(path), output, FRESH, today="2026-12-02", mode=0o640, group=4242)
    finally:
        os.umask(old)
    info = os.stat(directory)
    assert (info.st_gid, oct(info.st_mode & 0o7777)) == (4242, oct(0o2750))
    assert {os.stat(os.path.join(directory, name)).st_gid for name in os.listdir(directory)} == {4242}
    assert len([name for name in os.listdir(directory) if name.endswith(".html")]) == len(HOSTILE)
