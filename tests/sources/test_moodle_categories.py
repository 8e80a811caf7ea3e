"""Course categories from Moodle's `course_categories` (nested by `path`), in a real PostgreSQL and a real MariaDB
with Moodle's columns: each category's rows of every grain against a recount from the log rows the test wrote, on
both stores: a category counts its sub-categories' courses, a learner in two of its courses counts once, a category
of one learner is never published, a row written late counts again its day, week, month and term, a course moved to
another category moves from the days counted after, and a rebuild counts everything again with the tree of its day."""

import datetime as dt

import pytest

from helpers import docs
from helpers.category_reference import TABLES, published, read, recount
from helpers.downgrade import before_categories
from helpers.moodle_mariadb import MariaDBMoodle
from helpers.moodledb import moodle_project
from lms_refresh.config import load_config
from lms_refresh.store import open_store, tables

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


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgresql),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def any_moodle(request):
    """A Moodle database on each kind of server in turn, and its reader's password file."""
    if request.param == "mariadb":
        reader = request.getfixturevalue("mariadb_reader")  # the account first: the new database grants to it
        return MariaDBMoodle(request.getfixturevalue("mariadb_server")), reader
    return request.getfixturevalue("moodle"), request.getfixturevalue("moodle_reader")


def make_site(moodle):
    for number, (name, parent, path) in CATEGORIES.items():
        moodle.category(number, name, parent, path)
    for course, category in COURSES.items():
        moodle.course(course, f"Course {course}", f"C{course}", category=category)


def write(moodle, rows):
    for kind, user, course, at in rows:
        moodle.log(kind, user, course, f"{at}+01:00", related=user if kind == "quiz" else None)


def members(courses=None):
    """{category: the courses whose own category's path holds it}: the tree above, read by the test."""
    return {category: {course for course, own in (courses or COURSES).items()
                       if own and str(category) in CATEGORIES[own][2].split("/")} for category in CATEGORIES}


def activity(rows):
    return [(user, course, dt.date.fromisoformat(at[:10]), kind == "quiz") for kind, user, course, at in rows]


def check_every_grain(project, rows, courses=None):
    for grain in TABLES:
        found, names = published(project, grain)
        assert found == recount(activity(rows), members(courses), grain, K, TERM), grain
        assert names == {category: NAMES[category] for _, category in found}


def configure(project):
    text = project.config.read_text()
    project.config.write_text(text + f'\n[[terms]]\nname = "{TERM[0]}"\nfirst_day = {TERM[1]}\n'
                                     f'last_day = "{TERM[2]}"\n')


def test_categories_count_their_sub_categories_once_per_learner_on_every_grain(tmp_path, any_moodle, store_kind,
                                                                                request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    moodle, reader = any_moodle
    make_site(moodle)
    write(moodle, ROWS)
    project = moodle_project(tmp_path / "p", moodle, reader, postgres)
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


def test_a_course_moved_counts_in_its_new_category_from_the_days_counted_after_and_a_rebuild_moves_all(
        tmp_path, moodle, moodle_reader, store_kind, request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    make_site(moodle)
    write(moodle, ROWS)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres)
    configure(project)
    project.invoke("run", now=NOW, check=0)
    before = {grain: published(project, grain)[0] for grain in TABLES}
    # Course 12 moves from Science to Arts: a row of the 24th (after the run) counts the 24th, its week W48, the
    # month and the term again, with course 12 in Arts; the 20th, the 23rd and W47 stay as they were counted.
    moodle.sql("UPDATE mdl_course SET category = 2 WHERE id = 12")
    moved = {**COURSES, 12: 2}
    late = [("viewed", 110, 12, "2026-11-24T18:00:00")]
    write(moodle, late)
    project.invoke("run", now="2026-11-25T05:15:00+01:00", check=0)
    counted_again = {"day": {"2026-11-24"}, "week": {"2026-W48"}, "month": {"2026-11"}, "term": {TERM[0]}}
    for grain in TABLES:
        found, expected = published(project, grain)[0], recount(activity(ROWS + late), members(moved), grain, K, TERM)
        kept = {key: value for key, value in before[grain].items() if key[0] not in counted_again[grain]}
        assert {key: value for key, value in found.items() if key[0] not in counted_again[grain]} == kept, grain
        assert {key: value for key, value in found.items() if key[0] in counted_again[grain]} == {
            key: value for key, value in expected.items() if key[0] in counted_again[grain]}, grain
    assert published(project, "week")[0][("2026-W48", 2)] == (3, 4, 0)  # Arts: 104 and 110 in course 12, and 105
    # A rebuild counts every day again with the tree as it is now.
    project.invoke("rebuild", "--since", TERM[1], now="2026-11-25T06:15:00+01:00", check=0)
    check_every_grain(project, ROWS + late, moved)


def test_a_store_of_schema_11_counts_the_categories_of_the_days_it_keeps_at_its_next_run(tmp_path, moodle,
                                                                                         moodle_reader, store_kind,
                                                                                         request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    make_site(moodle)
    write(moodle, ROWS)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres, id_lookback=0)
    configure(project)
    project.invoke("run", now=NOW, check=0)
    store = open_store(load_config(str(project.config), {}), {}, create=False)  # back to schema 11, by hand
    try:
        store.begin()
        for statement in before_categories(store.dialect, schema=getattr(store, "schema", "lms_refresh")):
            store.db.execute(statement)
        store.set_meta("schema_version", tables.CATEGORIES_SINCE - 1)
        if project.postgres:
            store.db.execute(f"DELETE FROM {store.schema}.schema_version WHERE version >= {tables.CATEGORIES_SINCE}")
        store.commit()
    finally:
        store.close()
    result = project.invoke("run", now="2026-11-25T05:15:00+01:00", check=0)
    assert "Nothing to do" in result.stderr  # no new row: the upgrade alone counts the categories' history
    check_every_grain(project, ROWS)


def test_a_broken_path_nests_nothing_a_hostile_name_is_cleaned_and_an_unreadable_table_keeps_the_categories(
        tmp_path, moodle, moodle_reader):
    moodle.category(5, "Phys\u202eics <b>&amp;</b> jane.doe@example.edu", path="/1/../5")
    moodle.category(6, "Loop", parent=6, path="/6/6")
    moodle.category(8, "Chemistry", parent=5, path="/5/8")
    for course, category in ((40, 5), (41, 6), (42, 8)):
        moodle.course(course, f"Course {course}", f"C{course}", category=category)
    rows = [("viewed", user, course, "2026-11-23T10:00:00") for course in (40, 41, 42) for user in (1001, 1002)]
    write(moodle, rows)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.invoke("run", now=NOW, check=0)
    # 5 and 6 stand alone (their paths are not theirs); 8's path puts it in 5, which counts its course too.
    assert read(project, "SELECT category_id, name, parent, path, depth FROM categories ORDER BY category_id") == [
        (5, "Physics <b>&amp;</b> [redacted]", None, "/5", 1), (6, "Loop", None, "/6", 1),
        (8, "Chemistry", 5, "/5/8", 2)]
    assert published(project, "day")[0] == {("2026-11-23", 5): (2, 4, 0), ("2026-11-23", 6): (2, 2, 0),
                                             ("2026-11-23", 8): (2, 2, 0)}
    # Without SELECT on the categories, a run goes on (a warning) and the courses count where they did.
    moodle.revoke("SELECT", "mdl_course_categories")
    write(moodle, [("viewed", 1003, 42, "2026-11-24T10:00:00")])
    result = project.invoke("run", now="2026-11-25T05:15:00+01:00", check=0)
    assert result.stderr.count("Course categories were not read") == 1, result.stderr
    assert "GRANT SELECT ON mdl_course, mdl_course_categories to source.url's user" in result.stderr
    assert published(project, "week")[0] == {("2026-W48", 5): (3, 5, 0), ("2026-W48", 6): (2, 2, 0),
                                              ("2026-W48", 8): (3, 3, 0)}
