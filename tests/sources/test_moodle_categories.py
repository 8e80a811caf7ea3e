"""Course categories from Moodle's `course_categories` (nested by `path`), in a real PostgreSQL with Moodle's columns:
each category's rows of every grain against a recount from the log rows the test wrote, on both stores: a category
counts its sub-categories' courses, a learner in two of its courses counts once, a category of one learner is never
published, and a row written late counts again its day, week, month and term."""

import datetime as dt

from helpers import docs
from helpers.category_reference import TABLES, published, read, recount
from helpers.moodledb import moodle_project

NOW = "2026-11-25T04:15:00+01:00"
TERM = ("Autumn 2026", "2026-09-01", "2027-01-31")
K = 2  # moodle_project's min_cell_size

# id: (name as Moodle has it, parent, path). Genetics is in Biology, in Science; Arts stands alone.
CATEGORIES = {
    1: ("Faculty of Science", 0, "/1"),
    4: ('<span lang="en" class="multilang">Biology</span><span lang="fr" class="multilang">Biologie</span>', 1,
        "/1/4"),
    7: ("Genetics", 4, "/1/4/7"),
    2: ("Arts", 0, "/2"),
}
NAMES = {1: "Faculty of Science", 4: "Biology", 7: "Genetics", 2: "Arts"}
COURSES = {10: 7, 11: 4, 12: 1, 20: 2, 30: 0}  # course: its own category (0: none)

# (kind, learner, course, local time). Learner 101 is in Genetics and Biology (one learner of Biology and Science);
# Arts has one learner only; course 30 is in no category.
ROWS = [
    ("viewed", 101, 10, "2026-11-20T10:00:00"), ("quiz", 102, 10, "2026-11-20T11:00:00"),
    ("viewed", 101, 10, "2026-11-23T09:00:00"), ("quiz", 101, 10, "2026-11-23T09:30:00"),
    ("quiz", 102, 10, "2026-11-23T10:00:00"), ("viewed", 101, 11, "2026-11-23T11:00:00"),
    ("viewed", 103, 11, "2026-11-23T12:00:00"), ("viewed", 103, 11, "2026-11-23T12:30:00"),
    ("viewed", 104, 12, "2026-11-24T08:00:00"), ("viewed", 101, 10, "2026-11-24T09:00:00"),
    ("viewed", 105, 20, "2026-11-23T10:00:00"), ("viewed", 105, 20, "2026-11-24T10:00:00"),
    ("viewed", 106, 30, "2026-11-23T10:00:00"), ("viewed", 107, 30, "2026-11-23T10:00:00"),
]
LATE = [("quiz", 108, 12, "2026-11-23T15:00:00"), ("viewed", 109, 11, "2026-11-20T16:00:00")]


def make_site(moodle):
    for number, (name, parent, path) in CATEGORIES.items():
        moodle.sql(f"INSERT INTO mdl_course_categories (id, name, parent, path, depth) VALUES ({number}, "
                   f"'{name}', {parent}, '{path}', {path.count('/')})")
    for course, category in COURSES.items():
        moodle.course(course, f"Course {course}", f"C{course}", category=category)


def write(moodle, rows):
    for kind, user, course, at in rows:
        moodle.log(kind, user, course, f"{at}+01:00", related=user if kind == "quiz" else None)


def members():
    """{category: the courses whose own category's path holds it}: the tree above, read by the test."""
    return {category: {course for course, own in COURSES.items()
                       if own and str(category) in CATEGORIES[own][2].split("/")} for category in CATEGORIES}


def activity(rows):
    return [(user, course, dt.date.fromisoformat(at[:10]), kind == "quiz") for kind, user, course, at in rows]


def check_every_grain(project, rows):
    for grain in TABLES:
        found, names = published(project, grain)
        assert found == recount(activity(rows), members(), grain, K, TERM), grain
        assert names == {category: NAMES[category] for _, category in found}


def configure(project):
    text = project.config.read_text()
    project.config.write_text(text + f'\n[[terms]]\nname = "{TERM[0]}"\nfirst_day = {TERM[1]}\n'
                                     f'last_day = "{TERM[2]}"\n')


def test_categories_count_their_sub_categories_once_per_learner_on_every_grain(tmp_path, moodle, moodle_reader,
                                                                                store_kind, request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    make_site(moodle)
    write(moodle, ROWS)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres)
    configure(project)
    project.invoke("run", now=NOW, check=0)
    check_every_grain(project, ROWS)
    # Spelled out for the nested case: on the 23rd Science holds 101, 102 (Genetics) and 103 (Biology), 101 once.
    assert published(project, "day")[0][("2026-11-23", 1)] == (3, 6, 2)
    assert published(project, "week")[0][("2026-W48", 4)] == (3, 7, 2)
    # Arts (one learner) publishes nothing, not even its name; the categories hold the three that have rows.
    assert read(project, "SELECT category_id, name, parent, path, depth FROM categories ORDER BY category_id") == [
        (1, "Faculty of Science", None, "/1", 1), (4, "Biology", 1, "/1/4", 2), (7, "Genetics", 4, "/1/4/7", 3)]

    # Rows written late (after the run, for days it counted) count again their days, weeks, month and term.
    write(moodle, LATE)
    project.invoke("run", now="2026-11-25T05:15:00+01:00", check=0)
    check_every_grain(project, ROWS + LATE)
    assert published(project, "day")[0][("2026-11-20", 4)] == (3, 3, None)  # 109 makes Biology's 20th visible

    # The dean's query of the data dictionary runs as written: Science's month holds 101-104, 108 and 109.
    page = docs.page("docs/data-dictionary.md")
    query = page.split("### Monthly active learners per faculty", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    assert read(project, query) == [("2026-11", "Faculty of Science", 6)]
