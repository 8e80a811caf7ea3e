"""The HTML report as Debian's headless chromium renders it (issue 22, part 6): the DOM the browser built
holds the publication's numbers and no element or attribute a hostile course name tried to inject, and a
screenshot of the page is kept as the test's artifact: under pytest's tmp path and, copied, at
$LMS_REFRESH_ARTIFACTS (default /tmp/lms-refresh-artifacts)/report.png, the path the test prints."""

import os
import shutil
import sqlite3
import subprocess

import pytest

from helpers.report_page import Page, build, period_row
from lms_refresh.run import report_data, report_page

pytestmark = pytest.mark.chromium

# Run if a browser ran it: the handler would mark the body (it never may: the name is text, and the page
# allows no script at all).
INJECTED = '<img src=x onerror="document.body.setAttribute(\'data-pwned\', \'1\')">'
NAMES = {"https://lms.example.edu/course/1": "Algebra <script>document.title='pwned'</script>",
         "https://lms.example.edu/course/2": INJECTED,
         "https://lms.example.edu/course/3": '"><svg onload=alert(1)>',
         "https://lms.example.edu/course/4": "Biology \u202eevil",
         "https://lms.example.edu/course/5": "Long " + "y" * 10_000}
FRESHNESS = {"last_success": "2026-12-02T04:15:00Z", "watermark": "2026-12-02T04:10:00Z",
             "stale": "the last success started at 2026-11-27T04:15+01:00, before the run due at "
                      "2026-11-30T04:15+01:00 (grace 60 min)", "written": "2026-12-02T09:00:00Z"}


def chromium(tmp_path, *args):
    profile = tmp_path / "profile"
    command = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               f"--user-data-dir={profile}", "--disable-dev-shm-usage", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_chromium_renders_the_publications_numbers_and_runs_nothing_injected(tmp_path):
    weekly = [period_row(week, course, 12 + 7 * index + week, completions=week, passed=1, failed=0)
              for index, course in enumerate(NAMES) for week in range(14)]
    site = [period_row(week, None, 300 + week, completions=40, passed=20, failed=3) for week in range(14)]
    path = build(tmp_path / "serving.sqlite", NAMES, weekly, site=site)
    page_path = report_page.write_report(str(path), str(tmp_path / "report.html"), FRESHNESS, today="2026-12-02")
    url = f"file://{page_path}"

    dom = Page(chromium(tmp_path, "--dump-dom", url))
    assert not any(tag in ("img", "script") for tag, _ in dom.elements)
    assert not any("data-pwned" in attrs or any(name.startswith("on") for name in attrs)
                   for _, attrs in dom.elements)
    assert dom.texts["stale"] == f"STALE: {FRESHNESS['stale']}"
    shown = dom.rows("weekly-table")
    with sqlite3.connect(path) as db:
        published = {(course, period): learners for course, period, learners in db.execute(
            "SELECT course, period, active_learners FROM weekly_metrics UNION ALL "
            "SELECT NULL, period, active_learners FROM site_weekly_metrics")}
    weeks = dom.tables["weekly-table"][0][1:]
    assert len(weeks) == 12
    assert shown["Whole site"] == [str(published[None, week]) for week in weeks]
    for course in NAMES:
        assert shown[report_data.label(course, NAMES)] == [str(published[course, week]) for week in weeks]
    assert INJECTED in shown and "Biology evil" in shown  # shown as text; the override removed
    assert dom.rows("outcomes-table")["Whole site"] == ["160", "80", "12", "0"]

    screenshot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1280,2000", url)
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 10_000
    artifacts = os.environ.get("LMS_REFRESH_ARTIFACTS", "/tmp/lms-refresh-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    kept = shutil.copy(screenshot, os.path.join(artifacts, "report.png"))
    print(f"screenshot of the HTML report: {kept}")
