"""Course names from xAPI definitions, in the publication's `courses` table (SQLite, read with sqlite3) and the
PostgreSQL serving view `courses`: language fallback, the latest stored wins, hostile text, republication."""

import contextlib
import os
import re
import sqlite3

import pytest

from helpers.paths import REPO
from helpers.project import Project
from helpers.publication import COURSE_COLUMNS as COLUMNS, publication, published_courses
from helpers.statements import HOME, statement
from lms_refresh.sources.records import PREFILTER_STREAK
from lms_refresh.sources.xapi import COURSE_TYPE

NOW = "2026-11-20T04:15:00Z"


def iri(course):
    return f"{HOME}/course/{course}"


def named(course, names, *, learners=2, stored="2026-11-02T10:00:00Z", form="parent", prefix="u"):
    """Statements of `learners` learners in `course`, whose course activity carries `names` (a language map):
    in the context's parent (`form` "parent", Open edX's en-US form) or as the object (an enrolment, "object")."""
    found = []
    for number in range(learners):
        body = statement(learner=f"{prefix}{number}", course=course, timestamp=stored, stored=stored)
        activity = {"objectType": "Activity", "id": iri(course), "definition": {"type": COURSE_TYPE}}
        if names is not None:
            activity["definition"]["name"] = names
        if form == "object":  # as Open edX sends an enrolment: the course is the object, there is no parent
            body["object"], body["context"] = activity, {}
            body["verb"] = {"id": "http://adlnet.gov/expapi/verbs/registered", "display": {"en": "registered"}}
        else:
            body["context"]["contextActivities"]["parent"] = [activity]
        found.append(body)
    return found


def configure(project, language=None):
    project.configure(extra_top="min_cell_size = 2")
    if language is not None:
        project.config.write_text(project.config.read_text() + f'[publication]\nlanguage = "{language}"\n')


def test_names_come_in_the_configured_language_then_en_us_then_en_then_any(project):
    configure(project, language="fr")
    project.write("a.ndjson",
                  named("DEMO", {"en-US": "Demonstration Course", "fr": "Cours de démonstration"})
                  + named("BIO", {"en": "Biology"}, form="object")  # Open edX's enrolment form
                  + named("CHEM", {"de": "Chemie", "en": "Chemistry", "en-US": "Chemistry (US)"})
                  + named("ZETA", {"zz": "Zeta", "aa": "Alpha", "mm": "Mu"})
                  + named("PLAIN", None)  # no name: published with none
                  + named("FEW", {"en": "Too few learners"}, learners=1))  # no published rows: not named
    project.invoke("run", now=NOW, check=0)
    expected = [(iri("BIO"), "Biology"), (iri("CHEM"), "Chemistry (US)"), (iri("DEMO"), "Cours de démonstration"),
                (iri("PLAIN"), None), (iri("ZETA"), "Alpha")]
    assert published_courses(project) == [(course, name, None, None, None, None) for course, name in expected]
    # Exactly the courses of daily_metrics, so a dashboard's join loses no row.
    assert sorted({row[1] for row in project.serving()}) == [course for course, _ in expected]


def test_the_latest_stored_name_wins_and_an_older_statement_read_again_does_not(project):
    configure(project)
    # In one file, the later-stored statement first: order in the input does not matter.
    project.write("a.ndjson", named("BIO", {"en": "Biology II"}, stored="2026-11-03T09:00:00Z", prefix="b")
                  + named("BIO", {"en": "Biology I"}, stored="2026-11-02T09:00:00Z"))
    project.invoke("run", now="2026-11-04T04:15:00Z", check=0)
    assert published_courses(project) == [(iri("BIO"), "Biology II", None, None, None, None)]
    first = publication(project).read_bytes() if not project.postgres else None
    # A rename, stored later: it replaces the name, and the publication is written again.
    project.write("b.ndjson", named("BIO", {"en": "Biology: Cells & Genes"}, stored="2026-11-05T09:00:00Z",
                                    prefix="c"))
    project.invoke("run", now="2026-11-06T04:15:00Z", check=0)
    assert published_courses(project) == [(iri("BIO"), "Biology: Cells & Genes", None, None, None, None)]
    if first is not None:
        assert publication(project).read_bytes() != first
    # A backfill reads every file again, and a late file with an older statement: the newest name stays.
    project.write("c.ndjson", named("BIO", {"en": "Biology (draft)"}, stored="2026-11-01T09:00:00Z", prefix="d"))
    project.invoke("backfill", "--since", "2026-10-25", "--until", "2026-11-06", now="2026-11-06T05:00:00Z", check=0)
    assert published_courses(project) == [(iri("BIO"), "Biology: Cells & Genes", None, None, None, None)]
    assert project.query("SELECT named_at FROM course_names") == [("2026-11-05T09:00:00.000000Z",)]


def test_a_name_change_alone_republishes_the_sqlite_file(sqlite_project):
    """The digest covers the names: rows unchanged, name changed, the file is written again."""
    project = sqlite_project
    configure(project)
    project.write("a.ndjson", named("BIO", {"en": "Biology"}))
    project.invoke("run", now=NOW, check=0)
    rows = project.serving()
    with contextlib.closing(sqlite3.connect(project.store)) as db:  # as a later statement's name would
        db.execute("UPDATE course_names SET name = 'Biology (renamed)'")
        db.commit()
    result = project.invoke("run", now="2026-11-20T05:15:00Z", check=0)
    assert "Published 2 rows" in result.stderr  # the course's and the site's
    assert project.serving() == rows
    assert published_courses(project) == [(iri("BIO"), "Biology (renamed)", None, None, None, None)]


HOSTILE = {
    "SCRIPT": ("<script>alert('x')</script> Intro", "<script>alert('x')</script> Intro"),
    "CONTROLS": ("Intro\x00\x07\x1b[31m to\r\n\tLogic\x7f\x9b", "Intro[31m to Logic"),
    "BIDI": ("Safe \u202egnp.exe\u202c \u2066course\u2069\u200b\ufeff", "Safe gnp.exe course"),
    "LONG": ("Long " + "x" * 9995, "Long " + "x" * 195),
    "MAIL": ("Office hours with jane.doe+tutor@example.edu (ask)", "Office hours with [redacted] (ask)"),
    "SELF": ("Supervision of JDoe0 by jdoe0@x", "Supervision of [redacted] by [redacted]@x"),
    "SPACES": ("   Many     spaces\u2028and\u2029lines   ", "Many spaces and lines"),
    "EMPTY": ("\u202e\x00 \u200b", None),
}


def test_hostile_names_are_bounded_stripped_and_keep_no_learner_identifier(project):
    configure(project)
    statements = []
    for course, (text, _) in HOSTILE.items():
        if course == "SELF":  # named by the learner "jdoe0": its own identifier goes from the name, in any case
            statements += named(course, {"en": text}, learners=1, prefix="jdoe") + named(course, None, learners=1)
        else:
            statements += named(course, {"en": text}, learners=2)
    project.write("a.ndjson", statements)
    project.invoke("run", now=NOW, check=0)
    expected = sorted((iri(course), name, None, None, None, None) for course, (_, name) in HOSTILE.items())
    found = published_courses(project)
    assert found == expected
    assert all(name is None or len(name) <= 200 for _, name, *_ in found)
    assert not any(name and re.search(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]", name)
                   for _, name, *_ in found)
    if not project.postgres:
        data = publication(project).read_bytes()
        assert b"jane.doe" not in data and b"\xe2\x80\xae" not in data  # no address, no U+202E anywhere


DICTIONARY = open(os.path.join(REPO, "docs", "data-dictionary.md"), encoding="utf-8").read()


def readme_query():
    """The data dictionary's query of daily active learners per course, by name, as written there."""
    section = DICTIONARY[DICTIONARY.index("### Daily active learners per course, by name"):]
    return re.search(r"```sql\n(.*?)```", section, re.S).group(1)


def test_the_readme_dashboard_query_joins_daily_metrics_to_course_names(project):
    configure(project)
    project.write("a.ndjson", named("BIO", {"en": "Biology"}, learners=3) + named("CHEM", {"en": "Chemistry"})
                  + named("BIO", {"en": "Biology"}, learners=2, stored="2026-11-03T10:00:00Z", prefix="v"))
    project.invoke("run", now=NOW, check=0)
    query = readme_query()
    if project.postgres:
        rows = project.query(query.replace("daily_metrics", "lms_refresh_serving.daily_metrics")
                             .replace("courses", "lms_refresh_serving.courses"))
        rows = [(str(row[0]),) + tuple(row[1:]) for row in rows]
    else:
        with contextlib.closing(sqlite3.connect(f"file:{publication(project)}?mode=ro", uri=True)) as db:
            rows = db.execute(query).fetchall()
    # Independently: the serving rows, named by hand.
    names = {iri("BIO"): "Biology", iri("CHEM"): "Chemistry"}
    expected = sorted(((day, names[course], learners) for day, course, learners, *_ in project.serving()),
                      key=lambda row: (row[0], row[1]))
    assert rows == expected and len(rows) == 3


def test_a_rebuild_names_the_courses_again_from_what_it_reads(project):
    configure(project)
    project.write("a.ndjson", named("BIO", {"en": "Biology"}) + named("CHEM", {"en": "Chemistry"}))
    project.invoke("run", now=NOW, check=0)
    named_before = published_courses(project)
    assert [row[1] for row in named_before] == ["Biology", "Chemistry"]
    result = project.invoke("rebuild", "--since", "2026-10-25", now="2026-11-20T05:15:00Z", check=0)
    assert "Rebuilding the store" in result.stderr
    assert published_courses(project) == named_before


def test_a_dashboard_role_reads_the_courses_view_and_a_dropped_view_comes_back(tmp_path, postgres_server):
    import psycopg  # (only where PostgreSQL is)

    project = Project(tmp_path / "p", postgres_server)
    configure(project)
    project.write("a.ndjson", named("BIO", {"en": "Biology"}))
    project.invoke("run", now=NOW, check=0)
    postgres_server.admin("DO $$ BEGIN CREATE ROLE names_reader LOGIN PASSWORD 'names'; "
                          "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    granted = project.invoke("grant-reader", "names_reader", check=0)
    assert granted.stdout.startswith(
        "names_reader may now read lms_refresh_serving.daily_metrics, lms_refresh_serving.weekly_metrics, "
        "lms_refresh_serving.monthly_metrics, lms_refresh_serving.term_metrics, lms_refresh_serving.courses, "
        "lms_refresh_serving.site_daily_metrics, "), granted.stdout
    assert "lms_refresh_serving.freshness, " in granted.stdout
    assert granted.stdout.endswith(" and lms_refresh_serving.term_metrics_by_name\n"), granted.stdout
    url = f"host=127.0.0.1 port={postgres_server.port} dbname={project.database} user=names_reader password=names"
    with psycopg.connect(url, autocommit=True) as db:
        assert db.execute(f"SELECT {COLUMNS} FROM lms_refresh_serving.courses").fetchall() == [
            (iri("BIO"), "Biology", None, None, None, None)]
        for private in ("lms_refresh.course_names", "lms_refresh.courses"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(f"SELECT * FROM {private}")
    postgres_server.admin("DROP VIEW lms_refresh_serving.courses", project.database)
    result = project.invoke("run", now="2026-11-20T05:15:00Z", check=0)
    assert "The serving view lms_refresh_serving.courses was missing and has been re-created" in result.stderr
    assert "lms_refresh_serving.daily_metrics was missing" not in result.stderr
    assert published_courses(project) == [(iri("BIO"), "Biology", None, None, None, None)]


def test_a_course_published_only_as_a_week_is_named_too(project):
    """Three learners on three days of one week, one a day: every day of the course is withheld (k = 3), its
    week and month are published, and so is its name (courses holds every course any table publishes)."""
    project.configure(extra_top="min_cell_size = 3")
    weekly = []
    for number, day in enumerate(("2026-11-02", "2026-11-03", "2026-11-04")):
        body = named("WEEKLY", {"en": "Weekly Seminar"}, learners=1, stored=f"{day}T10:00:00Z", prefix=f"w{number}")
        weekly += body
    project.write("a.ndjson", weekly + named("DAILY", {"en": "Daily Course"}, learners=3))
    project.invoke("run", now=NOW, check=0)
    assert {row[1] for row in project.serving()} == {iri("DAILY")}
    assert {row[3] for row in project.grain_rows("week")} == {iri("DAILY"), iri("WEEKLY")}
    assert published_courses(project) == [(iri("DAILY"), "Daily Course", None, None, None, None),
                                          (iri("WEEKLY"), "Weekly Seminar", None, None, None, None)]


def test_a_quarantined_statement_names_no_course(project):
    """A statement quarantined — a second version of a staged statement id, or one older than the staging
    horizon — counts for nothing, so it names nothing either, however late it was stored; in the same batch the
    newest statement that counts names the course (review-a, issue 2)."""
    project.configure(extra_top="min_cell_size = 2\nmax_quarantine_share = 0.5")
    project.config.write_text(project.config.read_text() + "[retention]\nstaging_days = 30\n")
    biology = named("BIO", {"en": "Biology"}, stored="2026-11-02T09:00:00Z")
    project.write("a.ndjson", biology)
    project.invoke("run", now="2026-11-03T04:15:00Z", check=0)
    assert published_courses(project) == [(iri("BIO"), "Biology", None, None, None, None)]
    renamed = named("BIO", {"en": "Biology II"}, stored="2026-11-03T10:00:00Z", prefix="r")
    conflicting = named("BIO", {"en": "Conflicting version"}, stored="2026-11-04T09:00:00Z", prefix="x", learners=1)
    conflicting[0]["id"] = biology[0]["id"]  # the same statement id, another learner: a conflicting version
    closed = named("BIO", {"en": "Older than the horizon"}, stored="2026-11-04T10:00:00Z", prefix="y", learners=1)
    closed[0]["timestamp"] = "2026-10-01T10:00:00Z"  # before the horizon (2026-10-06): held back
    project.write("b.ndjson", renamed + conflicting + closed)
    project.invoke("run", now="2026-11-05T04:15:00Z", check=0)
    reasons = sorted(reason.split(":")[0] for (reason,) in project.query("SELECT reason FROM quarantine"))
    assert reasons == ["conflicting statement id", "older than the staging horizon"]
    assert published_courses(project) == [(iri("BIO"), "Biology II", None, None, None, None)]
    # A later run whose only naming statement is quarantined leaves the name as it is.
    again = named("BIO", {"en": "Conflicting again"}, stored="2026-11-05T09:00:00Z", prefix="z", learners=1)
    again[0]["id"] = renamed[0]["id"]
    project.write("c.ndjson", named("BIO", None, stored="2026-11-05T08:00:00Z", prefix="n") + again)
    project.invoke("run", now="2026-11-06T04:15:00Z", check=0)
    assert project.query("SELECT count(*) FROM quarantine") == [(3,)]
    assert published_courses(project) == [(iri("BIO"), "Biology II", None, None, None, None)]


@pytest.mark.parametrize("mapped", [False, True], ids=["skipped-unread", "read-then-left-out"])
def test_a_statement_the_run_leaves_out_names_no_course_until_a_run_counts_it(project, mapped):
    """A run counts the statements stored in its window only. One stored before the window (a late export
    file: it is never counted) names nothing, however newer than the course's name; one stored after the window
    (the next run's) names nothing yet, then names the course when the run that counts it comes. Both whether the
    run skips their lines unread (its pre-filter of `stored`) or maps them first (the pre-filter pauses after
    PREFILTER_STREAK lines in a row inside the window)."""
    configure(project)
    project.write("a.ndjson", named("BIO", {"en": "Biology"}, stored="2026-11-02T09:00:00Z"))
    project.invoke("run", now="2026-11-03T04:15:00Z", check=0)
    assert published_courses(project) == [(iri("BIO"), "Biology", None, None, None, None)]
    inside = named("BIO", None, stored="2026-11-03T09:00:00Z", prefix="n", learners=PREFILTER_STREAK if mapped else 2)
    before = named("BIO", {"en": "Before the window"}, stored="2026-11-02T10:00:00Z", prefix="b")
    after = named("BIO", {"en": "After the window"}, stored="2026-11-04T05:00:00Z", prefix="a")
    project.write("b.ndjson", inside + before + after)
    result = project.invoke("run", now="2026-11-04T04:15:00Z", check=0)
    assert "window 2026-11-03T04:15:00.000000Z .. 2026-11-04T04:15:00.000000Z" in result.stderr, result.stderr
    staged = 2 + len(inside)  # before's and after's left out
    assert project.query("SELECT count(*) FROM staged_events") == [(staged,)]
    assert published_courses(project) == [(iri("BIO"), "Biology", None, None, None, None)]
    project.invoke("run", now="2026-11-05T04:15:00Z", check=0)
    assert project.query("SELECT count(*) FROM staged_events") == [(staged + 2,)]
    assert published_courses(project) == [(iri("BIO"), "After the window", None, None, None, None)]


def _linguistic(request, store_kind, tmp_path):
    """A project whose PostgreSQL database sorts text as a language does (ICU's en-US, where "B" comes after "a"),
    as a university's database often does (en_US.UTF-8); SQLite's project as it is."""
    if store_kind == "sqlite":
        return Project(tmp_path / "p")
    server = request.getfixturevalue("postgres_server")
    server.count += 1
    database = f"icu{server.count}"
    server.admin(f"CREATE DATABASE {database} OWNER lms_refresh TEMPLATE template0 LOCALE_PROVIDER icu "
                 "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
    assert server.admin("SELECT 'B' > 'a'", database) == [(True,)]  # the tie below goes the other way by code point
    return Project(tmp_path / "p", server, database)


@pytest.mark.parametrize("batches", ["one", "one-reversed", "two", "two-reversed"])
def test_names_of_one_stored_time_break_their_tie_alike_in_one_batch_or_two(request, store_kind, tmp_path, batches):
    """Two statements stored at the same instant (an LRS stamps a whole POSTed batch alike) name a course
    differently: the greater name by code point wins, whether they come in one batch (the newest of the batch,
    records.title_of) or in two runs (the store's rule), and whatever the database's collation; daily runs and one
    backfill must publish the same name (of up to NAMING_KEPT such statements in one batch: xapi._newest). It was
    the first read in one batch, and the collation's order in two."""
    project = _linguistic(request, store_kind, tmp_path)
    configure(project)
    upper = named("BIO", {"en": "B-Biology"}, stored="2026-11-02T09:00:00Z", prefix="b")
    lower = named("BIO", {"en": "a-Biology"}, stored="2026-11-02T09:00:00Z", prefix="a")
    if batches.startswith("one"):
        project.write("a.ndjson", upper + lower if batches == "one" else lower + upper)  # neither first nor last wins
        project.invoke("run", now="2026-11-03T04:15:00Z", check=0)
    else:
        first, second = (lower, upper) if batches == "two" else (upper, lower)
        project.write("a.ndjson", first)
        project.invoke("run", now="2026-11-03T04:15:00Z", check=0)
        project.write("b.ndjson", second)  # the same stored time: read by a backfill of that window
        project.invoke("backfill", "--since", "2026-11-02T00:00:00Z", "--until", "2026-11-03T00:00:00Z",
                       now="2026-11-03T05:00:00Z", check=0)
    assert published_courses(project) == [(iri("BIO"), "a-Biology", None, None, None, None)]  # "a" > "B"
