"""Course names from Moodle's `course` and `course_categories` tables, in a real PostgreSQL with Moodle's columns:
multilang markup, categories, dates, the site course, a rename, hostile text and tables that cannot be read."""

from helpers.moodledb import EXPECTED_TWO_DAYS, course_iri, load_two_days, moodle_project, unix
from helpers.publication import publication, published_courses

NOW = "2026-11-25T04:15:00+01:00"


def named_site(moodle):
    """Courses 7 and 9 (the two of load_two_days), a course without activity, in Moodle's multilang markup."""
    moodle.category(3, '<span lang="en" class="multilang">Sciences</span> <span lang="fr" class="multilang">'
                       'Sciences naturelles</span>')
    moodle.course(7, '<span lang="en" class="multilang">Biology</span><span lang="fr" class="multilang">Biologie'
                     '</span> 101', "BIO101", category=3, startdate=unix("2026-09-01T00:00:00+02:00"),
                  enddate=unix("2027-01-31T00:00:00+01:00"))
    moodle.course(9, '<lang lang="de">Chemie</lang> <lang lang="fr_ca">Chimie (Québec)</lang>',
                  "CHEM\u202e\x07 <b>1</b>")  # no category, no dates (0)
    moodle.course(8, "Never used", "NONE", category=3)


def configure(project, language="fr_ca"):
    project.config.write_text(project.config.read_text() + f'[publication]\nlanguage = "{language}"\n')


def test_names_categories_and_dates_come_from_moodle_in_the_configured_language(tmp_path, moodle, moodle_reader,
                                                                                 store_kind, request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    load_two_days(moodle)
    named_site(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres)
    configure(project)
    project.invoke("run", now=NOW, check=0)
    assert project.serving() == EXPECTED_TWO_DAYS
    # fr_ca: course 9 has that language; course 7 and the category only French, its base language. The site
    # (course 1, which has a log row) and course 8 (no activity) have no published rows, so no name.
    assert published_courses(project) == [
        (course_iri(7), "Biologie 101", "BIO101", "Sciences naturelles", "2026-09-01", "2027-01-31"),
        (course_iri(9), "Chimie (Québec)", "CHEM <b>1</b>", None, None, None),
    ]


def test_a_rename_in_moodle_republishes_without_a_new_log_row(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)
    named_site(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    configure(project, language="en")
    project.invoke("run", now=NOW, check=0)
    assert [row[:2] for row in published_courses(project)] == [(course_iri(7), "Biology 101"), (course_iri(9),
                                                                                               "Chemie")]
    before, rows = publication(project).read_bytes(), project.serving()
    moodle.rename(7, "Biology 101 \u2013 Cells <span lang=\"en\" class=\"multilang\">(2026)</span>")
    result = project.invoke("run", now="2026-11-25T05:15:00+01:00", check=0)
    assert "Published 4 rows" in result.stderr  # the two courses' and the site's of their days
    assert project.serving() == rows and publication(project).read_bytes() != before
    assert published_courses(project)[0][:2] == (course_iri(7), "Biology 101 \u2013 Cells (2026)")


def test_a_rename_reaches_the_publication_in_a_run_with_nothing_to_read(tmp_path, moodle, moodle_reader, store_kind,
                                                                         request):
    """No lookback and no new log row: the window is empty, yet the run reads the course names."""
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    load_two_days(moodle)
    named_site(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres, id_lookback=0)
    configure(project, language="en")
    project.invoke("run", now=NOW, check=0)
    rows = project.serving()
    moodle.rename(9, "Chemistry <b>2</b>")
    result = project.invoke("run", now="2026-11-25T05:15:00+01:00", check=0)
    assert "Nothing to do: the window" in result.stderr
    assert project.serving() == rows
    assert [row[:2] for row in published_courses(project)] == [(course_iri(7), "Biology 101"),
                                                               (course_iri(9), "Chemistry <b>2</b>")]


def _without(tables, tmp_path, moodle, moodle_reader):
    """The project of the two days' log and a named site, its reader refused SELECT on `tables`."""
    load_two_days(moodle)
    named_site(moodle)
    moodle.server.admin(f"REVOKE SELECT ON {tables} FROM moodle_reader", moodle.name)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    configure(project)
    return project


def test_without_access_to_the_categories_alone_check_names_that_table(tmp_path, moodle, moodle_reader):
    """The course names' query reads two tables: the sentence named mdl_course whichever the server refused."""
    project = _without("mdl_course_categories", tmp_path, moodle, moodle_reader)
    checked = project.invoke("check", check=0)
    assert "refused to let us read mdl_course_categories (permission denied for table mdl_course_categories); " \
           "GRANT SELECT ON mdl_course_categories to source.url's user." in checked.stdout, checked.stdout


def test_without_access_to_the_course_tables_runs_go_on_without_names(tmp_path, moodle, moodle_reader):
    project = _without("mdl_course, mdl_course_categories", tmp_path, moodle, moodle_reader)
    checked = project.invoke("check", check=0)
    assert "warning: The Moodle database" in checked.stdout and "refused to let us read mdl_course" in checked.stdout
    assert "courses are published without names (GRANT SELECT ON mdl_course, mdl_course_categories)" in checked.stdout
    result = project.invoke("run", now=NOW, check=0)
    assert result.stderr.count("Course names were not read") == 1
    assert "GRANT SELECT ON mdl_course, mdl_course_categories to source.url's user" in result.stderr
    assert project.serving() == EXPECTED_TWO_DAYS
    assert published_courses(project) == [(course_iri(7), None, None, None, None, None),
                                          (course_iri(9), None, None, None, None, None)]
    # Granted again, the next run names them.
    moodle.server.admin("GRANT SELECT ON mdl_course, mdl_course_categories TO moodle_reader", moodle.name)
    project.invoke("run", now="2026-11-25T05:15:00+01:00", check=0)
    assert [row[:2] for row in published_courses(project)] == [(course_iri(7), "Biologie 101"),
                                                               (course_iri(9), "Chimie (Québec)")]


def test_hostile_moodle_names_are_cleaned_bounded_and_redacted(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)
    moodle.category(3, "Staff: bob.smith@example.edu")
    moodle.course(7, "<script>alert(1)</script>\u202e\x1b[2J " + "y" * 1300, "A\u200bB", category=3)
    moodle.course(9, "\u2066\u2069 \x01", "  ")  # (PostgreSQL's text holds no NUL)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.invoke("run", now=NOW, check=0)
    long_name = ("<script>alert(1)</script>[2J " + "y" * 1300)[:200]
    assert published_courses(project) == [(course_iri(7), long_name, "AB", "Staff: [redacted]", None, None),
                                          (course_iri(9), None, None, None, None, None)]
    assert b"bob.smith" not in publication(project).read_bytes()
