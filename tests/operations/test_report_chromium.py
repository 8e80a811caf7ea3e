"""The HTML report as Debian's headless chromium renders it: the DOM the browser built holds the publication's
numbers (tables, the numbers printed on the charts, the headline figures, a course's page), every chart has its
axes and the charts their legends, times are in the configured zone (the STALE banner's too), and no element or
attribute a hostile course name tried to inject exists. The demo's publication (real, with withheld values) is laid
out at 1440 and 375 px wide (tests/helpers/browser.py): the learners who completed, passed and failed, their
legend, scale and numbers are there, at least 10 px high, inside the window and overlapping no other text.
Screenshots of the overview at 375 and 1440 px wide, and of its outcomes, are kept as the test's artifacts: under
pytest's tmp path and, copied, in $LMS_REFRESH_ARTIFACTS (default /tmp/lms-refresh-artifacts) as report-375.png,
report-1440.png, outcomes-375.png and outcomes-1440.png, the paths the test prints."""

import datetime as dt
import html.parser
import os
import shutil
import sqlite3
import subprocess

import pytest

from helpers import inprocess
from helpers.browser import Browser
from helpers.report_page import Page, week_label
from lms_refresh.disclosure.policy import PrivacySettings
from lms_refresh.run import freshness, report_data, report_files, report_html, report_page
from lms_refresh.run.publication import write_publication

pytestmark = pytest.mark.chromium

# Run if a browser ran it: the handler would mark the body (it never may: the name is text, and the page
# allows no script at all).
INJECTED = '<img src=x onerror="document.body.setAttribute(\'data-pwned\', \'1\')">'
NAMES = {"https://lms.example.edu/course/1": "Algebra <script>document.title='pwned'</script>",
         "https://lms.example.edu/course/2": INJECTED,
         "https://lms.example.edu/course/3": '"><svg onload=alert(1)>',
         "https://lms.example.edu/course/4": "Biology \u202eevil",
         "https://lms.example.edu/course/5": "Long " + "y" * 10_000}
TODAY = "2026-04-02"
# Paris is on summer time since 29 March: CEST, two hours ahead of UTC. The banner's sentence as a run writes it
# for the page: the last success on Friday 27 March (winter time), due again on Monday 30 March (summer time).
STALE = freshness.staleness({"started_at": "2026-03-27T03:15:00.000000Z"},
                            dt.datetime(2026, 3, 30, 9, 0, tzinfo=dt.UTC), "Europe/Paris", grace=3600,
                            shown=report_html.local_times("Europe/Paris"))
FRESHNESS = {"last_success": "2026-04-02T02:15:00.000000Z", "watermark": "2026-04-02T02:10:00.000000Z",
             "stale": STALE, "written": "2026-04-02T07:00:30.123456Z", "timezone": "Europe/Paris"}
MONTHS = (("2026-01", "2026-01-01", "2026-01-31", 1), ("2026-02", "2026-02-01", "2026-02-28", 1),
          ("2026-03", "2026-03-01", "2026-03-31", 1), ("2026-04", "2026-04-01", "2026-04-30", 0))
TERMS = (("2025 autumn", "2025-09-01", "2025-12-20", 1), ("2026 spring", "2026-01-05", "2026-06-30", 0))


def metrics(learners, outcomes=(None, None, None)):
    return (learners, learners * 3, learners, *outcomes, 0.5, 60.0, 0)


def learner_outcomes(learners, outcomes=(None, None, None)):
    """The learner outcome columns that follow a row's others: as many learners as statements (within the active
    learners), and the shares computed from them, as the publication computes them."""
    if learners is None or None in outcomes:
        return (None,) * 5
    completed, passed, failed = (min(count, learners) for count in outcomes)
    return (completed, passed, failed, completed / learners, passed / (passed + failed) if passed + failed else None)


def publication(path):
    """Weeks 2026-W01..W14, four months, two terms and the days of March and April for each course and the site;
    one course week withheld."""
    weekly, monthly, terms, days = [], [], [], []
    for index, course in enumerate([None, *NAMES]):
        base = 300 if course is None else 12 + 7 * index
        for week in range(14):
            label, first, last = week_label(week)
            withheld = (course, week) == ("https://lms.example.edu/course/2", 13)
            values = (*(None,) * 8, 1) if withheld else metrics(base + week, (week, 1, 0))
            outcomes = (None,) * 5 if withheld else learner_outcomes(base + week, (week, 1, 0))
            weekly.append((label, first, last, course, *values, int(week < 13), *outcomes))
        for number, (label, first, last, complete) in enumerate(MONTHS):
            learners, counts = base * 2 + number, (4, 2, 1)
            monthly.append((label, first, last, course, *metrics(learners, counts), complete,
                            *learner_outcomes(learners, counts)))
        for number, (label, first, last, complete) in enumerate(TERMS):
            learners, counts = base * 5 + number, (40 + index, 20, 3)
            terms.append((label, first, last, course, *metrics(learners, counts), complete,
                          *learner_outcomes(learners, counts)))
        for day in range(33):
            date = (dt.date(2026, 3, 1) + dt.timedelta(days=day)).isoformat()
            days.append((date, course, *metrics(base // 3 + day % 7), *learner_outcomes(base // 3 + day % 7)))
    courses = [(iri, name, None, "Sciences &amp; <b>Maths</b>", None, None) for iri, name in NAMES.items()]
    settings = PrivacySettings(min_cell_size=10, method="cell-key", max_noise=3, variance=2.0)
    write_publication(str(path), None, (days, {"weekly_metrics": weekly, "monthly_metrics": monthly,
                                               "term_metrics": terms}),
                      settings=settings, wanted="test", euid=-1, courses=courses)
    return path


def chromium(tmp_path, *args):
    profile = tmp_path / "profile"
    command = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", "--disable-dev-shm-usage", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


class Charts(html.parser.HTMLParser):
    """The SVG charts of a DOM: {svg id: {"values": texts of class v, "x": x-axis texts, "y": y-axis texts,
    "legend": legend entries}}."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.charts, self._stack, self._svg = {}, [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg":
            self._svg = self.charts.setdefault(attrs.get("id") or f"svg-{len(self.charts)}",
                                               {"values": [], "x": [], "y": [], "legend": [], "captions": []})
        self._stack.append((tag, attrs.get("class") or ""))

    def handle_endtag(self, tag):
        while self._stack:
            if self._stack.pop()[0] == tag:
                break
        if tag == "svg":
            self._svg = None

    def handle_data(self, data):
        if self._svg is None or not self._stack or self._stack[-1][0] != "text":
            return
        classes = [cls for _, cls in self._stack]
        own = classes[-1]
        if own == "v":
            self._svg["values"].append(data)
        elif own == "legend-entry":
            self._svg["legend"].append(data)
        elif own == "y-caption":
            self._svg["captions"].append(data)
        elif "x-axis" in classes:
            self._svg["x"].append(data)
        elif "y-axis" in classes:
            self._svg["y"].append(data)


def shown(value):
    return "withheld" if value is None else f"{value:,}"


# Each text of the outcomes' chart as laid out: its class, its text, its box in the page (CSS px), and its height as
# drawn (its font size times the chart's scale); the window's width, and how wide the page is.
LAYOUT = """(() => {
  const texts = [...document.querySelectorAll('#outcomes-chart text')].map(element => {
    const box = element.getBoundingClientRect(), style = getComputedStyle(element);
    return {kind: element.getAttribute('class') || '', text: element.textContent, left: box.left, right: box.right,
            top: box.top + scrollY, bottom: box.bottom + scrollY,
            px: parseFloat(style.fontSize) * element.getScreenCTM().a,
            seen: style.visibility === 'visible' && style.display !== 'none' && style.opacity === '1'};
  });
  const swatches = [...document.querySelectorAll('#outcomes-legend rect')].map(rect => rect.getAttribute('fill'));
  const section = document.getElementById('outcomes').getBoundingClientRect();
  return {texts, swatches, window: document.documentElement.clientWidth,
          page: document.documentElement.scrollWidth,
          section: {x: 0, y: section.top + scrollY, width: document.documentElement.clientWidth,
                    height: section.height}};
})()"""
DEMO_NOW = "2026-11-30T09:00:00+01:00"  # a Monday in Paris: the demo's 21 days are in November


def overlap(one, other):
    return min(one["right"], other["right"]) - max(one["left"], other["left"]) > 0.5 and \
        min(one["bottom"], other["bottom"]) - max(one["top"], other["top"]) > 0.5


def test_the_demos_learner_outcomes_are_labelled_and_readable_at_1440_and_375_px(tmp_path):
    directory = tmp_path / "demo"
    environment = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "LMS_REFRESH_CONFIG")}
    result = inprocess.invoke(["--now", DEMO_NOW, "demo", "--dir", str(directory), "--days", "21", "--learners",
                               "300"], environment)
    assert result.returncode == 0, result.stderr
    published = directory / "state-publication"
    # The current month's row of each course and the site's, read from the publication apart from the report.
    with sqlite3.connect(f"file:{published / 'serving.sqlite'}?mode=ro", uri=True) as db:
        month = db.execute("SELECT max(period) FROM site_monthly_metrics WHERE period_start <= '2026-11-30'").fetchone()
        assert month == ("2026-11",)
        expected = {course: tuple(values) for course, *values in db.execute(
            "SELECT course, completed_learners, passed_learners, failed_learners FROM monthly_metrics "
            "WHERE period = '2026-11' UNION ALL SELECT NULL, completed_learners, passed_learners, failed_learners "
            "FROM site_monthly_metrics WHERE period = '2026-11'")}
        names = dict(db.execute("SELECT course, name FROM courses"))
    assert any(value is None for values in expected.values() for value in values)  # a withheld value among them
    assert any(isinstance(value, int) for value in expected[None])
    url = f"file://{published / 'report.html'}"
    # The chart's courses, most learners who completed first (a withheld count last), then by name.
    courses = sorted((course for course in expected if course is not None), key=lambda course: (
        -(expected[course][0] if expected[course][0] is not None else -1), report_data.label(course, names).casefold()))
    words = ("completed", "passed", "failed")
    bars = [f"{value:,} {word}" if value is not None else f"withheld ({word})"
            for course in courses for value, word in zip(expected[course], words, strict=True)]
    top = report_html.nice_top(max(value for course in courses for value in expected[course] if value is not None))
    artifacts = os.environ.get("LMS_REFRESH_ARTIFACTS", "/tmp/lms-refresh-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    with Browser(tmp_path) as browser:
        for width in (1440, 375):
            browser.open(url, width=width)
            dom = Page(browser.evaluate("document.documentElement.outerHTML"))
            assert dom.rows("outcomes-table") == {report_data.label(course, names) if course else "Whole site":
                                                  [shown(value) for value in values]
                                                  for course, values in expected.items()}
            assert dom.tables["outcomes-table"][0] == ["Course", "Learners who completed", "Learners who passed",
                                                       "Learners who failed"]
            layout = browser.evaluate(LAYOUT)
            texts = layout["texts"]
            kinds = {kind: [item["text"] for item in texts if item["kind"] == kind] for kind in
                     ("legend-entry", "x-caption", "course-name")}
            assert kinds["legend-entry"] == ["Learners who completed", "Learners who passed", "Learners who failed"]
            # The legend tells the three apart by more than colour: one plain fill and two patterns, and each bar's
            # number says its word.
            swatches = layout["swatches"]
            assert len(set(swatches)) == 3 and sum(fill.startswith("url(#") for fill in swatches) == 2
            assert kinds["x-caption"] == [f"learners (scale 0 to {top:,})"]
            assert [item["text"] for item in texts if item["kind"] == ""] == ["0", f"{top // 2:,}", f"{top:,}"]
            assert [item["text"] for item in texts if "v" in item["kind"].split()] == bars
            assert kinds["course-name"] == [report_data.label(course, names) for course in courses]
            # Readable: drawn at least 10 px high, seen, wholly inside the window, no text over another, and the page
            # no wider than the window (the table scrolls in its own box).
            assert layout["page"] <= layout["window"] == width, layout["page"]
            for item in texts:
                assert item["px"] >= 10 and item["seen"], (width, item)
                assert 0 <= item["left"] and item["right"] <= layout["window"], (width, item)
            clashes = [(one["text"], other["text"]) for index, one in enumerate(texts) for other in texts[index + 1:]
                       if overlap(one, other)]
            assert clashes == [], (width, clashes)
            for name, clip in ((f"outcomes-{width}.png", layout["section"]), (f"report-{width}.png", None)):
                screenshot = browser.screenshot(tmp_path / name, clip)
                assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 10_000
                kept = shutil.copy(screenshot, os.path.join(artifacts, name))
                print(f"screenshot of the HTML report's {name} at {width} px: {screenshot}, copied to {kept}")


def test_chromium_renders_the_publications_numbers_with_axes_legends_and_local_times(tmp_path):
    path = publication(tmp_path / "serving.sqlite")
    page_path = report_page.write_report(str(path), str(tmp_path / "report.html"), FRESHNESS, today=TODAY)
    url = f"file://{page_path}"
    text = chromium(tmp_path, "--dump-dom", url)
    dom, charts = Page(text), Charts(text).charts

    assert not any(tag in ("img", "script") for tag, _ in dom.elements)
    assert not any("data-pwned" in attrs or any(name.startswith("on") for name in attrs)
                   for _, attrs in dom.elements)
    # The banner's times as every other time of the page: the zone's own, to the minute, no ISO offsets.
    assert dom.texts["stale"] == ("STALE: the last success started at Fri 27 Mar 2026, 04:15 CET, before the run due "
                                  "at Mon 30 Mar 2026, 04:15 CEST (grace 60 min)")
    # Times in the configured zone, to the minute (no microseconds, no UTC "Z").
    assert dom.texts["data-as-of"] == "Data as of Thu 2 Apr 2026, 04:10 CEST"
    assert (dom.texts["last-success"], dom.texts["written"]) == ("Thu 2 Apr 2026, 04:15 CEST",
                                                                "Thu 2 Apr 2026, 09:00 CEST")

    with sqlite3.connect(path) as db:
        weekly = {(course, period): learners for course, period, learners in db.execute(
            "SELECT course, period, active_learners FROM weekly_metrics UNION ALL "
            "SELECT NULL, period, active_learners FROM site_weekly_metrics")}
        site = {table: {period: learners for period, learners in db.execute(
            f"SELECT period, active_learners FROM site_{table}")}  # the site's rows, apart from the courses'
            for table in ("weekly_metrics", "monthly_metrics", "term_metrics")}
    # The headline figures: the site's current week, month and term, against the previous complete one.
    assert dom.texts["headline-week-value"] == shown(site["weekly_metrics"]["2026-W14"])
    assert dom.texts["headline-week-change"] == (f"+1 (0%) against 2026-W13 "
                                                 f"({shown(site['weekly_metrics']['2026-W13'])})")
    assert dom.texts["headline-month-value"] == shown(site["monthly_metrics"]["2026-04"])
    assert dom.texts["headline-month-change"].endswith(f"against 2026-03 ({shown(site['monthly_metrics']['2026-03'])})")
    assert dom.texts["headline-term-value"] == shown(site["term_metrics"]["2026 spring"])
    assert dom.texts["headline-term-change"].endswith(f"against 2025 autumn "
                                                      f"({shown(site['term_metrics']['2025 autumn'])})")
    # The weekly table (the heat map) and the numbers printed on the site's chart.
    weeks = dom.tables["weekly-table"][0][1:]
    assert weeks == [week_label(week)[0] for week in range(2, 14)]
    rows = dom.rows("weekly-table")
    assert rows["Whole site"] == [shown(weekly[None, week]) for week in weeks]
    for course in NAMES:
        assert rows[report_data.label(course, NAMES)] == [shown(weekly[course, week]) for week in weeks]
    assert INJECTED in rows and "Biology evil" in rows  # shown as text; the override removed
    assert charts["chart-site"]["values"] == [shown(weekly[None, week]) for week in weeks]
    for chart in charts.values():
        if chart["values"]:  # every chart of numbers has both axes, its scale starting at 0
            # (the outcomes' scale is across, under its caption; the courses are its other axis)
            assert chart["x"] and chart["y"] and "0" in (chart["x"][0], chart["y"][0], *chart["x"][1:2]), chart
    assert charts["chart-site"]["x"][-1] == week_label(13)[1] and charts["chart-site"]["captions"] == ["learners"]
    assert dom.texts["shared-scale"].startswith("Every course chart below shares one scale: 0 to ")
    # Legends: the heat map's shades and the outcomes' three fills, in the outcomes' chart.
    assert dom.texts["heat-legend"].count("learners") == 5 and "withheld" in dom.texts["heat-legend"]
    assert charts["outcomes-chart"]["legend"] == ["Learners who completed", "Learners who passed",
                                                  "Learners who failed"]
    # The current term's learners, each course's row as the publication has it (its values read here apart).
    with sqlite3.connect(path) as db:
        term = {course: values for course, *values in db.execute(
            "SELECT course, completed_learners, passed_learners, failed_learners FROM term_metrics WHERE period = "
            "'2026 spring' UNION ALL SELECT NULL, completed_learners, passed_learners, failed_learners "
            "FROM site_term_metrics WHERE period = '2026 spring'")}
    outcomes = dom.rows("outcomes-table")
    assert outcomes["Whole site"] == [shown(value) for value in term[None]]
    for course in NAMES:
        assert outcomes[report_data.label(course, NAMES)] == [shown(value) for value in term[course]]

    # A course's page: its tables and chart hold its rows of every grain; its name is text.
    course = "https://lms.example.edu/course/2"
    course_url = f"file://{tmp_path}/report-files/{report_files.page_name(course)}.html"
    text = chromium(tmp_path, "--dump-dom", course_url)
    page, course_charts = Page(text), Charts(text).charts
    assert not any(tag in ("img", "script") for tag, _ in page.elements)
    assert page.texts["course-name"] == INJECTED and page.texts["category"] == "Sciences &amp; <b>Maths</b>"
    with sqlite3.connect(path) as db:
        for grain, table, key in (("week", "weekly_metrics", "period"), ("month", "monthly_metrics", "period"),
                                  ("term", "term_metrics", "period_start"), ("day", "daily_metrics", "day")):
            period = "day" if grain == "day" else "period"
            published = db.execute(f"SELECT {period}, active_learners, statements FROM {table} WHERE course = ? "
                                   f"ORDER BY {key}", (course,)).fetchall()
            index = 1 if grain == "day" else 3
            assert [(row[0], row[index], row[index + 1]) for row in page.tables[f"table-{grain}"][1:]] == \
                [(label, shown(learners), shown(statements)) for label, learners, statements in published], grain
            assert course_charts[f"chart-{grain}"]["values"] == \
                ["w" if learners is None else shown(learners) for _, learners, _ in published]
            assert course_charts[f"chart-{grain}"]["x"] and course_charts[f"chart-{grain}"]["y"]

