"""The report's size and memory follow its courses, not what strangers put in their names: a name of 200 '"' and
an IRI ending in '&' take six and five characters each once escaped, and the page writes a label five times and
an IRI twice per course (9,000 such courses made a 68.8 MiB page, and a run that peaked at 302 MiB). Each label
is bounded in HTML, and the page is written piece by piece, never held whole."""

import os
import re
import tracemalloc

from helpers.report_page import Page, build, month_label, period_row
from lms_refresh.run import report_page

FRESH = {"last_success": "2026-12-02T04:15:00Z", "watermark": "2026-12-02T04:10:00Z", "stale": None,
         "written": "2026-12-02T04:16:00Z"}


def _hostile(path, courses):
    names = {f"https://lms.example.edu/course/view.php?id={number}&" + "&" * 180: '"' * 196 + f"{number:04d}"
             for number in range(courses)}
    weekly = [period_row(week, course, 12 + week) for course in names for week in range(12)]
    monthly = [period_row(11, course, 40, completions=12, passed=10, failed=2, period=month_label)
               for course in [*names, None]]  # the outcomes' month, 2026-12
    return build(path, names, weekly, site=[period_row(week, None, 500) for week in range(12)], monthly=monthly)


def test_a_hostile_label_takes_a_bounded_share_of_the_page(tmp_path):
    path = _hostile(tmp_path / "serving.sqlite", 40)
    output = report_page.write_report(str(path), str(tmp_path / "report.html"), FRESH, today="2026-12-02")
    with open(output, encoding="utf-8") as handle:
        text = handle.read()
    # Every label and IRI as written, escapes and all, is at most 240 characters of HTML.
    written = re.findall(r'data-course="([^"]*)"|title="([^"]*)"|<a href="report-files/[^"]*">([^<]*)</a></th>',
                         text)
    # Per table row (the weekly table's and the outcomes' 41 each): its IRI, its title, its link (not the site's);
    # and the title of the site's chart.
    assert len(written) == 2 * (3 * 41 - 1) + 1 and max(len(piece) for match in written for piece in match) <= 240
    page = Page(text)
    labels = list(page.rows("weekly-table"))
    assert labels[0] == "Whole site" and all(label.startswith('"' * 30) and label.endswith("…")
                                             for label in labels[1:])
    assert len(text) < 3_000 * 41


def test_the_page_is_written_without_being_held_whole(tmp_path):
    path = _hostile(tmp_path / "serving.sqlite", 1000)
    output = str(tmp_path / "report.html")
    tracemalloc.start()
    try:
        report_page.write_report(str(path), output, FRESH, today="2026-12-02")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert os.path.getsize(output) > 1_800_000
    assert peak < 2 * os.path.getsize(output)  # the page held whole as text and as bytes would be twice it
