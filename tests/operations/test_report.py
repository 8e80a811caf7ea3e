"""The HTML report (issue 22, part 6): `lms-refresh report`, and the page every run writes beside the
publication. The page is read back with html.parser (tests/helpers/report_page.py), never with regexes; the
same page in Debian's headless chromium: tests/operations/test_report_chromium.py."""

import csv
import json
import os
import pwd
import re
import sqlite3
import stat

import pytest

from helpers import inprocess
from helpers.period_reference import expected_periods
from helpers.publication import publication
from helpers.report_page import Page, build, learner_columns, month_label, period_row, week_label
from helpers.statements import HOME, statement
from lms_refresh.run import report_data, report_files, report_html, report_page
from lms_refresh.store.tables import PERIOD_SERVING_COLUMNS

HOSTILE = {
    "https://lms.example.edu/course/1": "<script>alert(1)</script>",
    "https://lms.example.edu/course/2": '"><svg onload=alert(1)>',
    "https://lms.example.edu/course/3": "abc\u202egpj.exe",
    "https://lms.example.edu/course/4": "x" * 10_000,
    'https://lms.example.edu/course/"><img src=x onerror=alert(1)>': None,  # no name: the IRI is shown
}
TODAY = "2026-12-02"  # the local date of FRESH's "written"
FRESH = {"last_success": "2026-12-02T04:15:00Z", "watermark": "2026-12-02T04:10:00Z", "stale": None,
         "written": "2026-12-02T04:16:00Z"}


def hostile_publication(path, site=True):
    weekly = [period_row(week, course, 10 + week + index, completions=week, passed=index, failed=1)
              for index, course in enumerate(HOSTILE) for week in range(20)]
    weekly.append(period_row(19, "https://lms.example.edu/course/small", 0, suppressed=1))
    rows = [period_row(week, None, 100 + week, completions=50, passed=30, failed=5) for week in range(20)]
    # Months (the outcomes, without terms): each course's own learners, the small course's row withheld whole.
    monthly = [period_row(month, course, 40 + index, completions=30, passed=20, failed=10,
                          outcome_learners=(20 + index, 15, 9), period=month_label)
               for index, course in enumerate(HOSTILE) for month in range(4)]
    monthly.append(period_row(3, "https://lms.example.edu/course/small", 0, suppressed=1, period=month_label))
    monthly += [period_row(month, None, 400, completions=90, passed=60, failed=20,
                           outcome_learners=(80, 50, 18), period=month_label) for month in range(4) if site]
    return build(path, HOSTILE, weekly, site=rows if site else None, monthly=monthly)


def test_the_page_shows_the_publications_numbers_and_the_site_as_whole_site(tmp_path):
    path = hostile_publication(tmp_path / "serving.sqlite")
    page = Page(report_page.render(report_data.read_publication(path, today=TODAY), FRESH))
    with sqlite3.connect(path) as db:
        published = {(course, period): learners for course, period, learners in db.execute(
            "SELECT course, period, active_learners FROM weekly_metrics WHERE NOT suppressed UNION ALL "
            "SELECT NULL, period, active_learners FROM site_weekly_metrics WHERE NOT suppressed")}
        names = dict(db.execute("SELECT course, name FROM courses"))
    weeks = page.tables["weekly-table"][0][1:]
    assert weeks == [week_label(week)[0] for week in range(8, 20)]  # the last 12 weeks, oldest first
    shown = page.rows("weekly-table")
    assert list(shown)[0] == "Whole site"
    assert shown["Whole site"] == [f"{published[None, week]:,}" for week in weeks]
    for course in names:
        label = report_data.label(course, names)
        assert len(label) <= 200
        assert shown[label] == [str(published[course, week]) for week in weeks]
    assert shown["https://lms.example.edu/course/small"][-1] == "withheld"
    # The learners who completed, passed and failed: the current month's row of each (2026-04, the latest begun by
    # 2 December in this publication), never a sum of rows; the small course's row withheld whole.
    assert page.texts["outcomes-about"].startswith("In the month 2026-04 (2026-04-01 to 2026-04-30): distinct "
                                                   "learners, each counted once per course")
    outcomes = page.rows("outcomes-table")
    assert page.tables["outcomes-table"][0] == ["Course", "Learners who completed", "Learners who passed",
                                                "Learners who failed"]
    assert outcomes["Whole site"] == ["80", "50", "18"]
    assert outcomes[names["https://lms.example.edu/course/2"]] == ["21", "15", "9"]
    assert outcomes["https://lms.example.edu/course/small"] == ["withheld"] * 3
    assert page.texts["threshold"] == "10" and page.texts["noise"] == "3"
    cells = int(page.texts["cells"])
    assert cells == 12 * 6 + 1 + 3 * (6 + 1) and page.texts["withheld"] == "4"
    assert "need not add up" in page.texts["privacy"] and "by at most 3" in page.texts["privacy"]
    assert all(tag != "svg" or attrs.get("role") == "img" for tag, attrs in page.elements)
    # A chart per series (the site's and each course's, all of them few) and the outcomes' chart, its legend in it.
    svgs = sum(tag == "svg" for tag, _ in page.elements)
    assert svgs == len(shown) + 1 and len(page.titles) >= svgs + 1


def test_hostile_names_are_text_never_markup(tmp_path):
    path = hostile_publication(tmp_path / "serving.sqlite")
    text = report_page.render(report_data.read_publication(path, today=TODAY), FRESH)
    page = Page(text)
    assert {tag for tag, _ in page.elements} <= {"html", "head", "meta", "title", "style", "body", "h1", "h2",
                                                 "section", "p", "dl", "dt", "dd", "b", "span", "div", "figure",
                                                 "figcaption", "svg", "rect", "line", "text", "g", "defs",
                                                 "pattern", "circle", "table", "thead", "tbody", "tr", "th", "td",
                                                 "a", "h3", "ul", "li", "footer"}
    # Links only to the report's own files (course pages, CSVs) and the privacy page: none a name could write.
    links = [attrs["href"] for tag, attrs in page.elements if tag == "a"]
    assert all(re.fullmatch(r"report-files/(course-[0-9a-f]{24}\.html|overview-[a-z]+\.csv)", link)
               or link == "file:///usr/share/doc/lms-refresh/docs/privacy.md" for link in links), links
    assert not any(name.startswith("on") for _, attrs in page.elements for name in attrs)
    assert "<script" not in text and "<img" not in text and "\u202e" not in text
    labels = page.rows("weekly-table")
    assert "<script>alert(1)</script>" in labels and '"><svg onload=alert(1)>' in labels
    assert "abcgpj.exe" in labels  # the override is gone, the text stays
    assert 'https://lms.example.edu/course/"><img src=x onerror=alert(1)>' in labels
    assert "x" * 200 in labels and len(text) < 60_000


def test_a_publication_without_site_rows_or_weeks(tmp_path):
    path = hostile_publication(tmp_path / "serving.sqlite", site=False)
    page = Page(report_page.render(report_data.read_publication(path, today=TODAY), FRESH))
    assert "Whole site" not in page.rows("weekly-table") and len(page.rows("weekly-table")) == 6
    assert "Whole site" not in page.rows("outcomes-table") and len(page.rows("outcomes-table")) == 6
    empty = build(tmp_path / "empty.sqlite", {}, [])
    page = Page(report_page.render(report_data.read_publication(empty, today=TODAY), FRESH))
    assert page.rows("weekly-table") == {} and page.texts["cells"] == "0"
    assert page.rows("outcomes-table") == {} and "outcomes-chart" not in page.texts
    assert page.texts["outcomes-about"].startswith("In the current term or month (none published yet): ")


def _term(name, first, last, completed):
    return (name, first, last, None, 500, 900, 80, completed * 2, 1, 1, 0.5, 1.0, 0, 0,
            *learner_columns(500, (completed, 1, 1)), None, None)  # no enrolments read (an xAPI source)


def test_a_publication_written_before_the_learner_columns_says_so(tmp_path):
    """A publication of a version before the learner counts (no such columns): the overview says the next run
    writes them, and shows no statement counts in their place."""
    path = build(tmp_path / "serving.sqlite", {}, [period_row(0, None, 100)],
                 terms=[_term("Autumn", "2026-09-01", "2026-12-20", 70)])
    with sqlite3.connect(path) as db:
        for table in ("term_metrics", "site_term_metrics"):
            db.execute(f"DROP VIEW IF EXISTS {table.removeprefix('site_')}_by_name")
            for column in ("completed_share", "pass_rate", *report_data.LEARNER_OUTCOMES):
                db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    page = Page(report_page.render(report_data.read_publication(path, today=TODAY), FRESH))
    assert page.texts["outcomes-missing"] == ("This publication has no learner counts yet: the next run writes "
                                              "them.")
    assert page.rows("outcomes-table") == {} and page.texts["cells"] == "1"


@pytest.mark.parametrize("today, current", [
    ("2026-10-01", "Autumn"),  # inside Autumn alone; the later-starting Spring 2027 (with rows) is not current
    ("2026-10-06", "Block week"),  # inside Autumn and Block week: the one that started last
    ("2026-12-24", "Autumn"),  # between terms: the one that ended most recently, not the next one
    ("2027-06-30", "Spring 2027"),  # after them all
    ("2026-08-01", "Summer 2026"),  # before Autumn: Summer ended most recently, though Spring 2026 began later
])
def test_the_current_term_is_the_one_that_holds_today(tmp_path, today, current):
    terms = [_term("Spring 2027", "2027-01-11", "2027-05-28", 1), _term("Autumn", "2026-09-14", "2026-12-18", 2),
             _term("Block week", "2026-10-05", "2026-10-09", 3), _term("Summer 2026", "2026-06-01", "2026-07-31", 4),
             _term("Spring 2026", "2026-07-01", "2026-07-15", 5)]
    path = build(tmp_path / "serving.sqlite", {}, [period_row(0, None, 100)], terms=terms)
    data = report_data.read_publication(path, today=today)
    first, last, completed = next(term[1:3] + (term[14],) for term in terms if term[0] == current)
    assert data.outcome_span == f"the term {current} ({first} to {last}" + (", so far)" if today <= last else ")")
    assert Page(report_page.render(data, FRESH)).rows("outcomes-table")["Whole site"][0] == str(completed)


def test_today_is_the_local_date_of_the_run():
    import datetime as dt

    late = dt.datetime(2026, 10, 4, 22, 30, tzinfo=dt.UTC)  # 00:30 on 5 October in Paris: Block week's first day
    assert report_data.local_today(late, "Europe/Paris") == "2026-10-05"
    assert report_data.local_today(late, "America/New_York") == "2026-10-04"


def test_without_a_term_begun_yet_the_current_month_is_shown(tmp_path):
    months = [period_row(month, None, 100, completions=20, passed=12, failed=3, period=month_label)
              for month in range(10, 13)]  # 2026-11, 2026-12 and 2027-01: the one holding today
    path = build(tmp_path / "serving.sqlite", {}, [period_row(week, None, 100) for week in range(6)],
                 terms=[_term("Spring 2027", "2027-01-11", "2027-05-28", 1)], monthly=months)
    data = report_data.read_publication(path, today="2026-12-02")
    assert data.outcome_span == "the month 2026-12 (2026-12-01 to 2026-12-31, so far)"
    assert [(o.course, o.completed, o.passed, o.failed) for o in data.outcomes] == [(None, 20, 12, 3)]


# The terms of the outcomes' tests, as [[terms]] declares them and expected_periods takes them.
TERMS = (("Spring 2026", "2026-01-05", "2026-06-30"), ("Autumn 2026", "2026-09-01", "2026-12-20"))


def outcome_statements():
    """Autumn's statements: BIO101's 30 learners each complete an activity, passing (20) or failing (10) it, and 12
    of them complete another, failing it (two who passed the first: learners who passed and failed); CHEM201's 12
    learners complete one, 11 passing and 1 failing (fewer than min_cell_size 10: withheld); HIST110's 5 learners
    (no row at all). Spring's: 15 other learners complete CHEM201 (not the current term)."""
    made = [statement(learner=f"b{n}", course="BIO101", timestamp="2026-10-05T10:00:00Z", completion=True,
                      success=n < 20) for n in range(30)]
    made += [statement(learner=f"b{n}", course="BIO101", timestamp="2026-10-12T10:00:00Z", completion=True,
                       success=False) for n in range(18, 30)]
    made += [statement(learner=f"c{n}", course="CHEM201", timestamp="2026-11-03T10:00:00Z", completion=True,
                       success=n < 11) for n in range(12)]
    made += [statement(learner=f"h{n}", course="HIST110", timestamp="2026-11-03T10:00:00Z", completion=True)
             for n in range(5)]
    made += [statement(learner=f"s{n}", course="CHEM201", timestamp="2026-03-03T10:00:00Z", completion=True,
                       success=True) for n in range(15)]
    return made


@pytest.mark.parametrize("terms", [TERMS, ()], ids=["terms", "months"])
def test_the_outcomes_are_the_learners_an_independent_recount_finds(sqlite_project, tmp_path, terms):
    """A refresh of generated statements: the overview's learners who completed, passed and failed (table, chart and
    CSV) are the current term's rows (or, without terms, the current month's), as tests/helpers/period_reference.py
    recounts them from the statements, a withheld value shown as withheld; the statement counts, other numbers,
    are on the course pages, labelled as statements."""
    project = sqlite_project
    project.configure(bootstrap_days=400)
    project.config.write_text(project.config.read_text() + "".join(
        f'[[terms]]\nname = "{name}"\nfirst_day = {first}\nlast_day = {last}\n' for name, first, last in terms))
    statements = outcome_statements()
    project.write("a.ndjson", statements)
    run = inprocess.invoke(["--config", str(project.config), "--now", "2026-12-01T05:00:00+00:00", "run"],
                           environment())
    assert run.returncode == 0, run.stderr
    grain, period = ("term", "Autumn 2026") if terms else ("month", "2026-11")
    outcomes = PERIOD_SERVING_COLUMNS.index("completed_learners")
    recount = expected_periods(statements, "Europe/Paris", 10, grain, terms=terms)
    expected = {row[3]: row[outcomes:outcomes + 3] for row in recount if row[0] == period}
    bio, chem = f"{HOME}/course/BIO101", f"{HOME}/course/CHEM201"
    # What the recount says, written out: the two who passed and failed count in both; CHEM201's one failure withheld.
    # The site counts HIST110's 5 learners too (its own row never published); in November its 1 failure is withheld.
    assert expected == ({None: (47, 31, 13), bio: (30, 20, 12), chem: (12, 11, None)} if terms else
                        {None: (17, 11, None), chem: (12, 11, None)}), expected
    beside = publication(project).parent / "report.html"
    page = Page(beside.read_text())
    span = ("the term Autumn 2026 (2026-09-01 to 2026-12-20, so far)" if terms
            else "the month 2026-11 (2026-11-01 to 2026-11-30)")  # the latest month published, begun by 1 December
    assert page.texts["outcomes-about"].startswith(f"In {span}: distinct learners")

    def shown(values):
        return ["withheld" if value is None else f"{value:,}" for value in values]

    assert page.rows("outcomes-table") == {("Whole site" if course is None else course): shown(values)
                                           for course, values in expected.items()}
    # The chart: a course's three bars, each number followed by its word, most learners who completed first.
    words = ("completed", "passed", "failed")
    bars = [f"{value} {word}" if value != "withheld" else f"withheld ({word})"
            for course in sorted((c for c in expected if c), key=lambda c: -expected[c][0])
            for value, word in zip(shown(expected[course]), words, strict=True)]
    assert [text for kind, text in page.svg_texts["outcomes-chart"] if "v" in kind.split()] == bars
    with open(beside.parent / "report-files" / "overview-outcomes.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["course", "name", "completed_learners", "passed_learners", "failed_learners"]
    assert {row[0] or None: tuple(None if value == "" else int(value) for value in row[2:]) for row in rows[1:]} == \
        expected
    # A course's page keeps the statement counts, named as statements (BIO101: 42 completion statements).
    course_page = Page((beside.parent / "report-files" / f"{report_files.page_name(bio if terms else chem)}.html")
                       .read_text())
    grain_table = course_page.tables[f"table-{grain}"]
    assert {"Completion statements", "Passed statements", "Failed statements", "Learners who completed"} <= \
        set(grain_table[0])
    row = next(row for row in grain_table[1:] if row[0] == period)
    assert row[grain_table[0].index("Completion statements")] == ("42" if terms else "12")


def environment():
    return {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "LMS_REFRESH_CONFIG")}


def test_the_command_writes_the_page_and_says_where_and_that_it_is_stale(sqlite_project, tmp_path):
    project = sqlite_project
    missing = inprocess.invoke(["--config", str(project.config), "report"], environment())
    assert missing.returncode == 78
    assert f"There is no publication at {publication(project)} yet: `lms-refresh run` writes it" in missing.stderr
    project.write("a.ndjson", [])
    assert inprocess.invoke(["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00", "run"],
                            environment()).returncode == 0
    output = tmp_path / "out.html"
    # Days later, without a run since: stale, as `status` says.
    later = ["--config", str(project.config), "--now", "2026-12-04T09:00:00+00:00"]
    result = inprocess.invoke([*later, "report", "--output", str(output)], environment())
    assert result.returncode == 0, result.stderr
    status = json.loads(inprocess.invoke([*later, "status", "--json"], environment()).stdout)
    # `status` says why in ISO 8601; the page, and the command that wrote it, in the page's own form of a time.
    assert status["stale"] == ("the last success started at 2026-11-30T06:00+01:00, before the run due at "
                               "2026-12-04T04:15+01:00 (grace 120 min)")
    banner = ("the last success started at Mon 30 Nov 2026, 06:00 CET, before the run due at Fri 4 Dec 2026, "
              "04:15 CET (grace 120 min)")
    assert result.stdout.strip() == f"Wrote the report {output} (STALE: {banner})"
    page = Page(output.read_text())
    assert page.texts["stale"] == f"STALE: {banner}"
    assert f"started at {page.texts['last-success']}, before" in banner  # as the freshness below writes it
    # In the configured zone, to the minute: the run started at 05:00 UTC.
    assert page.texts["last-success"] == "Mon 30 Nov 2026, 06:00 CET" and page.texts["timezone"] == "Europe/Paris"
    assert page.texts["watermark"] == report_html.local_time(status["watermark"], "Europe/Paris")
    assert page.texts["data-as-of"] == f"Data as of {page.texts['watermark']}"
    assert oct(os.stat(output).st_mode & 0o777) == oct(os.stat(publication(project)).st_mode & 0o777)
    # Fresh right after the run: no banner.
    fresh = inprocess.invoke(["--config", str(project.config), "--now", "2026-11-30T05:01:00+00:00", "report",
                              "--output", str(output)], environment())
    assert fresh.stdout.strip() == f"Wrote the report {output}"
    assert "stale" not in Page(output.read_text()).texts


def test_an_output_or_a_report_path_that_is_a_device_a_fifo_or_a_link_to_one_is_refused(sqlite_project, tmp_path):
    """`report --output` replaced whatever was there by a regular file: run as root, `--output /dev/null` replaced
    the system's /dev/null, and a report.path naming a device passed `check` and was replaced by every run."""
    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    fifo, link = tmp_path / "fifo", tmp_path / "stdout"
    os.mkfifo(fifo)
    link.symlink_to("/dev/null")
    for target, kind in ((fifo, "a FIFO"), ("/dev/null", "a character device"), (link, "a character device")):
        result = inprocess.invoke([*now, "report", "--output", str(target)], environment())
        assert result.returncode == 78, (target, result.stderr)
        assert (f"Refusing to write the report there: '--output' ({target}) is {kind}, which writing a file whole "
                "there would replace by a regular file; name a regular file.") in result.stderr, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.path.islink(link)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    project.config.write_text(project.config.read_text() + f'[report]\npath = "{fifo}"\n')
    result = inprocess.invoke([*now, "check"], environment())
    assert result.returncode == 78 and (f"'report.path' ({fifo}) is a FIFO, which writing a file whole there would "
                                        "replace by a regular file") in result.stderr, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_an_output_whose_files_directory_names_a_directory_of_the_configuration_is_refused(sqlite_project):
    """`report --output X.html` writes X-files/ too (course pages, CSVs), makes it readable by every account and
    prunes it: an X-files that is the export directory, or the publication's, was written into, unchecked."""
    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    files = "the directory of the report's course pages and CSVs (beside '--output', named after it)"
    why = "where the report writes its course pages and CSVs; point them at different places."
    published, root = publication(project).parent, project.config.parent
    exports, pages = root / "exports-files", root / "published-files"  # links: X.html's files go to X-files/
    os.symlink(project.source, exports)
    os.symlink(published, pages)
    for link, sentence in (
            (exports, f"'source.path' and {files} name the same directory ({exports}, spelt {exports} and "
                      f"{project.source}), {why}"),
            (pages, f"'publication.path' ({publication(project)}) lies inside {pages}, {files}, {why}")):
        directory = os.path.realpath(link)
        listing = sorted(os.listdir(directory))
        output = str(link).removesuffix("-files") + ".html"
        result = inprocess.invoke([*now, "report", "--output", output], environment())
        assert result.returncode == 78, result.stderr
        assert f"Refusing to write the report there: {sentence}" in result.stderr, result.stderr
        assert sorted(os.listdir(directory)) == listing and not os.path.exists(output)
    elsewhere = project.config.parent / "copy.html"  # its files beside it, in copy-files/
    assert inprocess.invoke([*now, "report", "--output", str(elsewhere)], environment()).returncode == 0
    assert elsewhere.exists() and (project.config.parent / "copy-files" / "overview-weekly.csv").exists()


def test_an_output_that_names_a_file_of_the_configuration_is_refused_and_left_alone(sqlite_project):
    """`report --output` wrote the page over whatever it named: the pseudonymisation key (every later run refused
    the damaged key), the store, the publication, or a file among the exports (read back as malformed records)."""
    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    state = project.config.parent / "state"
    for target, sentence in (
            (state / "pseudonymisation.key", "'pseudonymisation.key_file' (its default, pseudonymisation.key in the "
                                             "state directory) and '--output' name the same file"),
            (state / "metrics.sqlite", "'store.path' (its default, metrics.sqlite in the state directory) and "
                                       "'--output' name the same file"),
            (state / "metrics.sqlite-wal", "the wal file of 'store.path' (its default, metrics.sqlite in the state "
                                           "directory) and '--output' name the same file"),
            (publication(project), "'publication.path' and '--output' name the same file"),
            (project.config, "'--output' and the configuration file name the same file"),
            (project.source / "a.ndjson", f"'--output' ({project.source / 'a.ndjson'}) lies inside {project.source}, "
                                          "the export directory 'source.path' names")):
        before = target.read_bytes() if target.exists() else None
        result = inprocess.invoke([*now, "report", "--output", str(target)], environment())
        assert result.returncode == 78, (target, result.stderr)
        assert f"Refusing to write the report there: {sentence}" in result.stderr, result.stderr
        assert (target.read_bytes() if target.exists() else None) == before, target
    for name, sentence in (  # the run's own notes (the catch-up timer reads the first), and any file there
            ("run-in-progress", "the note of a run in progress (run-in-progress in 'state_directory') and '--output' "
                                "name the same file"),
            ("last-interruption", "the note of the last interrupted run (last-interruption in 'state_directory') and "
                                  "'--output' name the same file"),
            ("report.html", f"'--output' ({state / 'report.html'}) lies inside 'state_directory' ({state}), which "
                            "holds the run's own files")):
        result = inprocess.invoke([*now, "report", "--output", str(state / name)], environment())
        assert result.returncode == 78 and f"Refusing to write the report there: {sentence}" in result.stderr, \
            result.stderr
        assert not (state / name).exists()
    inside = project.source / "report.html"
    result = inprocess.invoke([*now, "report", "--output", str(inside)], environment())
    assert result.returncode == 78 and f"'--output' ({inside}) lies inside {project.source}, the export directory" \
        in result.stderr, result.stderr
    assert not inside.exists()
    forged = f"{project.config.parent}/a\nERROR forged.html"  # a newline would start a line of its own
    result = inprocess.invoke([*now, "report", "--output", forged], environment())
    assert result.returncode == 78 and result.stderr.count("\n") == 1, result.stderr
    assert f"--output must not contain control or format characters: {forged!r}" in result.stderr
    missing = project.config.parent / "no-such-directory" / "report.html"  # was exit 1 and a traceback
    result = inprocess.invoke([*now, "report", "--output", str(missing)], environment())
    assert result.returncode == 78 and "Traceback" not in result.stderr, result.stderr
    assert (f"Cannot write the report {missing} (No such file or directory): its directory must exist and be "
            f"writable by '{pwd.getpwuid(os.geteuid()).pw_name}'; nothing else was changed.") in result.stderr
    beside = publication(project).parent / "report.html"  # the run's own page may be written again on demand
    assert inprocess.invoke([*now, "report", "--output", str(beside)], environment()).returncode == 0


def test_the_command_waits_for_no_run_and_writes_nothing_while_one_holds_the_lock(sqlite_project):
    """`report` took no lock: a page read before a run's commit replaced the run's fresh report with the old numbers
    and a STALE banner (the review). It refuses (69) while the lock is held, and leaves the run's page alone."""
    import socket

    from lms_refresh.run.lock import RunLock

    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    page = publication(project).parent / "report.html"
    before = page.read_bytes()
    with RunLock(str(project.config.parent / "state" / "refresh.lock")):
        result = inprocess.invoke([*now, "report"], environment())
    assert result.returncode == 69, result.stderr
    assert (f"Another refresh holds the lock (held by pid {os.getpid()} on {socket.gethostname()}); no report was "
            "written (the run writes its own) — run lms-refresh report again when it has finished.") in result.stderr
    assert page.read_bytes() == before
    assert inprocess.invoke([*now, "report"], environment()).returncode == 0


def test_every_run_writes_it_beside_the_publication_unless_disabled(sqlite_project):
    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    beside = publication(project).parent / "report.html"
    page = Page(beside.read_text())
    assert "fresh" in page.texts and page.texts["threshold"] == "10"
    beside.unlink()
    project.config.write_text(project.config.read_text() + "[report]\nenabled = false\n")
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    assert not beside.exists()


def test_a_report_that_cannot_be_written_is_a_warning_and_the_run_succeeds(sqlite_project, tmp_path):
    project = sqlite_project
    project.write("a.ndjson", [])
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    project.config.write_text(project.config.read_text() + f'[report]\npath = "{blocked}/report.html"\n')
    result = inprocess.invoke(["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00", "run"],
                              environment())
    assert result.returncode == 0, result.stderr
    assert f"Could not write the HTML report {blocked}/report.html" in result.stderr
    assert "the publication stands" in result.stderr and publication(project).exists()


def test_the_command_takes_the_current_term_from_now_in_the_configured_time_zone(sqlite_project, tmp_path):
    """`report --now` is an instant; the current term is the one holding its local date in `timezone`
    (Europe/Paris): 22:30 UTC on 29 November is still Autumn's last day there, 23:30 UTC already Winter's first,
    and so is 23:30 on the 29th at UTC-1."""
    from helpers.statements import statement

    project = sqlite_project
    project.configure(extra_top="min_cell_size = 2")
    project.config.write_text(project.config.read_text() + '[[terms]]\nname = "Autumn"\nfirst_day = 2026-09-01\n'
                              'last_day = 2026-11-29\n[[terms]]\nname = "Winter"\nfirst_day = 2026-11-30\n'
                              'last_day = 2027-02-28\n')
    project.write("a.ndjson", [statement(learner=f"u{n}", timestamp=f"2026-11-{day}T10:00:00Z", completion=True,
                                         stored=f"2026-11-{day}T10:00:01Z") for day in (28, 30) for n in range(3)])
    run = inprocess.invoke(["--config", str(project.config), "--now", "2026-12-01T05:00:00+00:00", "run"],
                           environment())
    assert run.returncode == 0, run.stderr
    output = tmp_path / "out.html"
    for now, span in (("2026-11-29T22:30:00+00:00", "the term Autumn (2026-09-01 to 2026-11-29, so far)"),
                      ("2026-11-29T23:30:00+00:00", "the term Winter (2026-11-30 to 2027-02-28, so far)"),
                      ("2026-11-29T23:30:00-01:00", "the term Winter (2026-11-30 to 2027-02-28, so far)")):  # 29th
        result = inprocess.invoke(["--config", str(project.config), "--now", now, "report", "--output", str(output)],
                                  environment())
        assert result.returncode == 0, result.stderr
        assert Page(output.read_text()).texts["outcomes-about"].startswith(f"In {span}: "), (now, span)


def test_the_page_a_run_no_longer_writes_is_removed_by_that_run(sqlite_project, tmp_path):
    """`[report] path` moved, then `enabled = false`: the page left behind would say "Fresh" with numbers that
    age while status --check turns CRITICAL. The run that stops writing it removes it — the one the tool wrote."""
    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    configured = project.config.read_text()
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    beside = publication(project).parent / "report.html"
    assert beside.exists()
    moved = tmp_path / "www" / "report.html"
    moved.parent.mkdir()
    project.config.write_text(configured + f'[report]\npath = "{moved}"\n')
    result = inprocess.invoke([*now, "run"], environment())
    assert result.returncode == 0, result.stderr
    assert not beside.exists() and "fresh" in Page(moved.read_text()).texts
    assert (f"Removed the HTML report {beside}: the configuration no longer has the runs write it there "
            "([report] path or enabled changed), and it would go on showing old numbers.") in result.stderr
    project.config.write_text(configured + f'[report]\npath = "{moved}"\nenabled = false\n')
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    assert not moved.exists() and list(moved.parent.iterdir()) == []  # its course pages and CSVs too
    # Enabled again where it was first: written there, and nothing else is touched.
    project.config.write_text(configured)
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    assert beside.exists()


def test_a_page_changed_since_the_tool_wrote_it_is_left_in_place_with_a_warning(sqlite_project):
    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    beside = publication(project).parent / "report.html"
    beside.write_text("<p>the web team's own page</p>")  # the name taken over by someone else
    project.config.write_text(project.config.read_text() + "[report]\nenabled = false\n")
    result = inprocess.invoke([*now, "run"], environment())
    assert result.returncode == 0, result.stderr
    assert beside.read_text() == "<p>the web team's own page</p>"
    assert (f"The HTML report {beside} is no longer written by the runs, but it changed since lms-refresh wrote it, "
            "so it is left in place: remove it if nothing else keeps it.") in result.stderr
    again = inprocess.invoke([*now, "run"], environment())  # said once: the note of the page is gone
    assert again.returncode == 0 and "no longer written" not in again.stderr and beside.exists()


def test_a_copy_written_with_output_is_never_taken_for_the_runs_page(sqlite_project, tmp_path):
    project = sqlite_project
    project.write("a.ndjson", [])
    now = ["--config", str(project.config), "--now", "2026-11-30T05:00:00+00:00"]
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    copy = tmp_path / "copy.html"
    assert inprocess.invoke([*now, "report", "--output", str(copy)], environment()).returncode == 0
    project.config.write_text(project.config.read_text() + "[report]\nenabled = false\n")
    assert inprocess.invoke([*now, "run"], environment()).returncode == 0
    assert copy.exists() and not (publication(project).parent / "report.html").exists()
