"""Course categories of an xAPI source: the configuration's [[categories]] patterns of course IRIs, nested by `parent`,
each category's rows of every grain against the recount of the statements the test wrote, on both stores: a learner
in two courses of a category counts once, a category of one learner is never published, statements that arrive late
count again their days and periods, and a category taken out of the configuration is no longer counted."""

import csv
import datetime as dt

from helpers.category_reference import TABLES, published, read, recount
from helpers.publication import publication
from helpers.report_page import Page
from helpers.statements import statement
from lms_refresh.run.category_mapping import category_id

K = 2
NOW = "2026-11-25T04:15:00Z"
TERM = ("Autumn", "2026-11-01", "2026-11-30")
MAPPING = """
[[categories]]
name = "Science"
courses = ["https://lms.example.edu/course/BIO*"]

[[categories]]
name = "Genetics"
parent = "Science"
courses = ["*/course/GEN?"]

[[categories]]
name = "Arts"
courses = ["*/course/ART*", "*/course/BIO1"]
"""
SCIENCE, GENETICS, ARTS = (category_id(name) for name in ("Science", "Genetics", "Arts"))
# What the mapping means, written out by hand: Genetics is in Science; BIO1 is Science's (its first match).
MEMBERS = {SCIENCE: {"BIO1", "BIO2", "GEN1"}, GENETICS: {"GEN1"}, ARTS: {"ART1"}}
NAMES = {SCIENCE: "Science", GENETICS: "Genetics", ARTS: "Arts"}

# (learner, course, day, attempted). u1 is in GEN1 and BIO1 (Science counts them once); Arts has one learner;
# MATH1 is in no category; GEN10 matches no pattern (GEN? is one character).
ACTIVITY = [
    ("u1", "GEN1", "2026-11-20", False), ("u2", "GEN1", "2026-11-20", True),
    ("u1", "GEN1", "2026-11-23", True), ("u2", "GEN1", "2026-11-23", True), ("u1", "BIO1", "2026-11-23", False),
    ("u3", "BIO2", "2026-11-23", False), ("u3", "BIO2", "2026-11-23", True), ("u4", "BIO2", "2026-11-24", False),
    ("u1", "GEN1", "2026-11-24", False), ("u5", "ART1", "2026-11-23", False), ("u5", "ART1", "2026-11-24", False),
    ("u6", "MATH1", "2026-11-23", False), ("u7", "MATH1", "2026-11-23", False), ("u8", "GEN10", "2026-11-23", False),
    ("u9", "GEN10", "2026-11-23", False),
]
LATE = [("u8", "BIO1", "2026-11-23", True), ("u9", "GEN1", "2026-11-20", False)]


def statements(activity, stored=None):
    """The statements of `activity`, stored when they happened or (arriving late) at `stored`."""
    return [statement(learner=learner, course=course, verb="attempted" if attempted else "experienced",
                      timestamp=f"{day}T10:00:00Z", stored=stored) for learner, course, day, attempted in activity]


def configure(project, mapping=MAPPING):
    project.configure(extra_top=f"min_cell_size = {K}")
    text = project.config.read_text()
    project.config.write_text(text + f'\n[[terms]]\nname = "{TERM[0]}"\nfirst_day = {TERM[1]}\n'
                                     f'last_day = "{TERM[2]}"\n' + mapping)


def check_every_grain(project, activity):
    rows = [(learner, course, dt.date.fromisoformat(day), attempted) for learner, course, day, attempted in activity]
    for grain in TABLES:
        found, names = published(project, grain)
        assert found == recount(rows, MEMBERS, grain, K, TERM), grain
        assert names == {category: NAMES[category] for _, category in found}


def test_categories_from_the_mapping_count_each_learner_once_on_every_grain(project):
    configure(project)
    project.write("a.ndjson", statements(ACTIVITY))
    project.invoke("run", now=NOW, check=0)
    check_every_grain(project, ACTIVITY)
    assert published(project, "week")[0][("2026-W48", SCIENCE)] == (4, 7, 3)  # u1 in GEN1 and BIO1 once
    assert SCIENCE > 0 and read(project, "SELECT category_id, name, parent, path, depth FROM categories "
                                         "ORDER BY depth") == [(SCIENCE, "Science", None, f"/{SCIENCE}", 1),
                                                               (GENETICS, "Genetics", SCIENCE,
                                                                f"/{SCIENCE}/{GENETICS}", 2)]
    # Statements that arrive late count again their days, weeks, month and term.
    project.write("b.ndjson", statements(LATE, stored="2026-11-25T04:45:00Z"))
    project.invoke("run", now="2026-11-25T05:15:00Z", check=0)
    check_every_grain(project, ACTIVITY + LATE)
    assert published(project, "day")[0][("2026-11-20", GENETICS)] == (3, 3, None)
    assert not any(category == ARTS for _, category in published(project, "month")[0])


def test_without_the_mapping_a_run_counts_no_category(project):
    configure(project)
    project.write("a.ndjson", statements(ACTIVITY))
    project.invoke("run", now=NOW, check=0)
    assert published(project, "month")[0]
    configure(project, mapping="")
    project.write("b.ndjson", statements(LATE, stored="2026-11-25T04:45:00Z"))
    project.invoke("run", now="2026-11-25T05:15:00Z", check=0)
    # The days and periods this run counted again have no category row left; the categories' names are gone.
    found = published(project, "month")[0]
    assert ("2026-11", SCIENCE) not in found and ("2026-11", GENETICS) not in found
    assert read(project, "SELECT category_id FROM categories") == []


def test_the_report_shows_each_category_this_week_and_last_under_the_one_it_is_in(sqlite_project):
    configure(sqlite_project)
    sqlite_project.write("a.ndjson", statements(ACTIVITY))
    sqlite_project.invoke("run", now=NOW, check=0)
    page = Page((publication(sqlite_project).parent / "report.html").read_text())
    # The recount's weeks, Genetics after Science (which it is in); Arts (one learner) has no row to show.
    weeks = recount([(learner, course, dt.date.fromisoformat(day), attempted)
                     for learner, course, day, attempted in ACTIVITY], MEMBERS, "week", K, TERM)
    assert page.tables["categories-table"][0] == ["Category", "2026-W47", "2026-W48"]
    assert page.tables["categories-table"][1:] == [
        [name, *(str(weeks[(week, category)][0]) for week in ("2026-W47", "2026-W48"))]
        for name, category in (("Science", SCIENCE), ("Genetics", GENETICS))]
    assert ("th", {"scope": "row", "title": "Genetics", "style": "padding-left:1em"}) in page.elements
    with open(publication(sqlite_project).parent / "report-files" / "overview-categories.csv", newline="") as handle:
        assert list(csv.reader(handle)) == [["category_id", "name", "depth", "2026-W47", "2026-W48"]] + [
            [str(category), name, str(depth), *(str(weeks[(week, category)][0]) for week in ("2026-W47", "2026-W48"))]
            for name, category, depth in (("Science", SCIENCE, 1), ("Genetics", GENETICS, 2))]
