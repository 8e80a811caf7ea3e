"""A Moodle whose tables are in a PostgreSQL schema other than `public`: the source names its tables without a
schema, so they are found through the reading role's search_path (docs/sources/moodle.md says how to set it)."""

from helpers.moodledb import (
    COURSE_DDL,
    EXPECTED_TWO_DAYS,
    GRADE_ITEMS_DDL,
    MOODLE_DDL,
    READER,
    MoodleDatabase,
    load_two_days,
    moodle_project,
)

TABLES = "mdl_logstore_standard_log, mdl_grade_items, mdl_course, mdl_course_categories"


def test_a_moodle_in_its_own_schema_is_read_once_the_role_searches_it(tmp_path, postgres_server, moodle_reader):
    moodle = object.__new__(MoodleDatabase)  # Moodle's tables, in the schema `moodle` of a new database
    moodle.server, moodle.name = postgres_server, postgres_server.new_database()
    # The superuser's sessions in this database create and fill the tables in that schema, as Moodle's own would.
    postgres_server.admin(f"ALTER ROLE postgres IN DATABASE {moodle.name} SET search_path = moodle")
    moodle.sql("CREATE SCHEMA moodle")
    moodle.sql(MOODLE_DDL + GRADE_ITEMS_DDL + COURSE_DDL)
    moodle.sql(f"GRANT USAGE ON SCHEMA moodle TO {READER}")
    moodle.sql(f"GRANT SELECT ON {TABLES} TO {READER}")
    assert moodle.sql("SELECT DISTINCT schemaname FROM pg_tables WHERE tablename LIKE 'mdl\\_%'") == [("moodle",)]
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)

    # There is no schema key: with the role's default search_path ("$user", public) the log is not found.
    result = project.invoke("run", now="2026-11-25T04:15:00+01:00")
    assert result.returncode == 78, result.stderr
    assert "has no table mdl_logstore_standard_log; check source.prefix" in result.stderr
    assert not project.serving()
    checked = project.invoke("check", now="2026-11-25T04:15:00+01:00")
    assert checked.returncode == 78 and "has no table mdl_logstore_standard_log" in checked.stderr, checked.stderr

    # What the page tells the DBA to run, as the database's owner or a superuser.
    moodle.sql(f"ALTER ROLE {READER} IN DATABASE {moodle.name} SET search_path = moodle")
    checked = project.invoke("check", now="2026-11-25T04:15:00+01:00", check=0)
    assert "session read-only: yes" in checked.stdout, checked.stdout
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert project.serving() == EXPECTED_TWO_DAYS
