"""The data dictionary: every table and view a dashboard reads, and every column of each, described once.

A column's entry says its type in each store, its unit, what it means, what it counts (statements or distinct
learners, or neither), whether the cell key method perturbs it, whether it can be withheld, and what NULL means in
it. docs/data-dictionary.md is rendered from here (lms_refresh.cli.reference), and a test compares the entries with
the columns of a real publication and of a real PostgreSQL serving schema, so neither can drift from the other.
"""

import collections

# What a column counts: statements (events), distinct learners, or neither (a label, a sum, a flag).
STATEMENTS, LEARNERS, NEITHER = "statements", "distinct learners", "—"


class Column(collections.namedtuple("Column", "name sqlite postgresql unit meaning counts perturbed withheld null")):
    """One published column: its SQLite and PostgreSQL types, unit, meaning, what it counts, whether it is
    perturbed (noise of at most ± max_noise), whether it can be withheld, and what NULL in it means."""

    __slots__ = ()


def noise(column):
    """How a column is perturbed, in a few words (the dictionary's tables and Datasette say it alike): a count is
    within ± max_noise of the truth; a sum or mean has a noise of its own in units of the cell's largest record,
    which ± max_noise would misstate (a score runs −1..1)."""
    if not column.perturbed:
        return "no"
    if column.counts in (STATEMENTS, LEARNERS):
        return "yes, ± max_noise"
    return "yes, a noise of its own (see its meaning)"


WITHHELD_NULL = "withheld: derived from fewer than min_cell_size learners (or the whole row is withheld)"

_COURSE = Column("course", "TEXT", "text", "—", "The course's IRI (Moodle: <site_url>/course/view.php?id=N; xAPI: "
                 "the course activity's id): a row of `courses` (a declared foreign key in the SQLite publication; "
                 "on PostgreSQL, join on it). Course tables hold courses only: the whole site's rows are in the "
                 "site tables.", NEITHER, False, False, "never NULL")

# The metric columns every grain shares, in their published order after the grain's own columns and `course`.
_METRICS = [
    Column("active_learners", "INTEGER", "bigint", "learners", "Distinct learners with at least one counted "
           "statement in the row's day or period (a learner active on five days of a week counts once in the week; "
           "once on the site's row whatever the number of their courses).", LEARNERS, True, True, WITHHELD_NULL),
    Column("statements", "INTEGER", "bigint", "statements", "Counted statements (Moodle: log events) of the row.",
           STATEMENTS, True, True, WITHHELD_NULL),
    Column("attempts", "INTEGER", "bigint", "statements", "Statements with the verb attempted "
           "(Moodle: a quiz attempt or an assignment submitted).", STATEMENTS, True, True, WITHHELD_NULL),
    Column("completions", "INTEGER", "bigint", "statements", "Statements with the verb completed or "
           "result.completion = true (Moodle: an activity's completion marked complete, passed or failed, and a "
           "course completed). Statements, not learners: a learner who completes three activities counts three.",
           STATEMENTS, True, True, WITHHELD_NULL),
    Column("passed", "INTEGER", "bigint", "statements", "Statements with the verb passed or result.success = true "
           "(Moodle: an activity completed with a pass).",
           STATEMENTS, True, True, WITHHELD_NULL),
    Column("failed", "INTEGER", "bigint", "statements", "Statements with the verb failed or result.success = false "
           "(Moodle: an activity completed with a fail).",
           STATEMENTS, True, True, WITHHELD_NULL),
    Column("avg_scaled_score", "REAL", "double precision", "score, −1 to 1", "The mean of result.score.scaled over "
           "the row's scored statements (a perturbed sum over the perturbed number of scores, kept within −1..1). "
           "Multiply by 100 for a percentage of the maximum.", NEITHER, True, True,
           WITHHELD_NULL + "; also when no statement of the row has a score"),
    Column("total_duration_seconds", "REAL", "double precision", "seconds", "The sum of result.duration over the "
           "row's statements that have one (a perturbed sum, never below 0).", NEITHER, True, True,
           WITHHELD_NULL + "; also when no statement of the row has a duration"),
    Column("suppressed", "INTEGER", "bigint", "0 or 1", "1 when at least one value of this row is withheld (NULL), "
           "not that the whole row is; 0 when every value is published.", NEITHER, False, False, "never NULL"),
]

# The learner outcome columns, last in every metrics table (as they were added).
_OUTCOMES = [
    Column("completed_learners", "INTEGER", "bigint", "learners", "Distinct learners with at least one statement "
           "counted in `completions` in the row's day or period: at most `active_learners` and at most `completions`.",
           LEARNERS, True, True, WITHHELD_NULL + "; withheld exactly when `completions` is"),
    Column("passed_learners", "INTEGER", "bigint", "learners", "Distinct learners with at least one statement "
           "counted in `passed`. A learner who passed in one statement and failed in another counts here and in "
           "`failed_learners`: passed_learners + failed_learners need not equal anything.",
           LEARNERS, True, True, WITHHELD_NULL + "; withheld exactly when `passed` is"),
    Column("failed_learners", "INTEGER", "bigint", "learners", "Distinct learners with at least one statement "
           "counted in `failed` (also in `passed_learners` if they passed in another statement).",
           LEARNERS, True, True, WITHHELD_NULL + "; withheld exactly when `failed` is"),
    Column("completed_share", "REAL", "double precision", "share, 0 to 1", "completed_learners ÷ active_learners, "
           "computed from the published (perturbed) values of this row, never from true counts. Multiply by 100 "
           "for a percentage.", NEITHER, False, True, "either term is withheld"),
    Column("pass_rate", "REAL", "double precision", "share, 0 to 1", "passed_learners ÷ (passed_learners + "
           "failed_learners), computed from the published values of this row. A learner who both passed and "
           "failed counts in both terms.", NEITHER, False, True,
           "either term is withheld, or both are 0 (no learner passed or failed)"),
]

# The enrolment columns, last in every metrics table (as they were added; after `course_name` in the by-name views).
_ENROLMENT = [
    Column("enrolled_learners", "INTEGER", "bigint", "learners", "Distinct learners enrolled in the course (the "
           "site's row: in any course, each once) at any moment of the row's day or period: Moodle's active "
           "enrolments (the enrolment and its method both enabled, from `timestart` until before `timeend`, 0 "
           "meaning open) of users holding a learner role (`source.learner_roles`, by default the student "
           "archetype) in the course. State, not events: counted from the enrolments as the source holds them when "
           "a run recomputes the day or period; each run that recomputes it while it is open counts it again, and "
           "the first run after it is complete (its end and the safety lag past) settles it: an enrolment deleted, "
           "suspended or whose dates are edited afterwards changes no settled day or period (only `lms-refresh "
           "rebuild` counts them again, from the enrolments as they are then). A nightly run counts only the "
           "enrolments overlapping the days and periods it recomputes, never the settled history. Not bounded by "
           "`active_learners`: a learner can be active without a learner role (or after the enrolment ended).",
           LEARNERS, True, True, WITHHELD_NULL.replace("learners (or the whole row is withheld)", "enrolled learners")
           + "; also when none was enrolled, on a day or period no run recomputed since the store had this column "
           "(schema version 12: a backfill or rebuild of it counts it), and always for xAPI sources, which read no "
           "enrolments"),
    Column("active_share", "REAL", "double precision", "share", "active_learners ÷ enrolled_learners, computed from "
           "the published (perturbed) values of this row. Can exceed 1: active learners without a learner role "
           "are counted in the numerator only.", NEITHER, False, True,
           "either term is withheld, or enrolled_learners is 0"),
]

_PERIOD = [
    Column("period", "TEXT", "text", "—", "The period's label: an ISO week YYYY-Www (weekly), a month YYYY-MM "
           "(monthly), or the term's configured name (term).", NEITHER, False, False, "never NULL"),
    Column("period_start", "TEXT", "date", "local day", "The period's first local day in `timezone`, inclusive "
           "(ISO date text in SQLite).", NEITHER, False, False, "never NULL"),
    Column("period_end", "TEXT", "date", "local day", "The period's last local day, inclusive.", NEITHER, False,
           False, "never NULL"),
]

_COMPLETE = Column("complete", "INTEGER", "smallint", "0 or 1", "1 once the period has ended in local time and the "
                   "safety lag after its end has passed (as of the last run); 0 while it is still filling. A late "
                   "statement can still change a complete period.", NEITHER, False, False, "never NULL")

_GRAIN_NOTE = ("One row per {what} and course from a course's first to its last {what} with at least min_cell_size "
               "learners (gap-filled, so a withheld row does not tell whether anyone was active); courses only, so a "
               "SUM over it is a sum of courses (the whole site's rows are in `site_{table}`).")
_SITE_NOTE = ("One row per {what} for the whole site (all courses together: each learner once, however many courses "
              "they were in; not the sum of the courses' rows), with the columns of `{table}` but `course`.")
_COURSE_NAME = Column("course_name", "TEXT", "text", "—", "What a chart calls the course: its `name`, else the last "
                      "path segment of its IRI, cleaned and bounded like a name (never blank).", NEITHER, False,
                      False, "never NULL")
_BY_NAME_NOTE = ("The rows of `{table}` with `course_name` from `courses` after its columns but the enrolment ones, "
                 "which come last (a view: its columns are always those of `{table}`).")


_CATEGORY_NOTE = ("One row per {what} and course category from a category's first to its last {what} with at least "
                  "min_cell_size learners (gap-filled, withheld and perturbed as a course's row is), counted over the "
                  "courses of the category and of every category in it (Moodle's course_categories.path): each "
                  "learner once, however many of its courses they were in, so a category's row is not the sum of its "
                  "courses' or sub-categories' rows. A category's rows of a day or period are counted with the "
                  "courses it holds when a run counts that day or period: a course moved to another category counts "
                  "in the new one in the days and periods counted from then on (and in the periods a late statement "
                  "counts again), while the rows already counted, closed periods among them, stay as they are; a "
                  "rebuild counts every day and period again with the categories as they are then.")
_CATEGORY_ID = Column("category_id", "INTEGER", "bigint", "—", "The category's id: Moodle's course_categories.id; "
                      "for xAPI, a 64-bit id of its configured name. A row of `categories`.", NEITHER, False, False,
                      "never NULL")
_CATEGORY_NAME = Column("category_name", "TEXT", "text", "—", "The category's `name` in `categories`, else "
                        "\"Category <category_id>\" (never blank).", NEITHER, False, False, "never NULL")


class Table(collections.namedtuple("Table", "name grain key description columns")):
    """One published table (SQLite publication) or view (PostgreSQL `<schema>_serving`)."""

    __slots__ = ()


_DAY = Column("day", "TEXT", "date", "local day", "The local calendar day in `timezone` (ISO date text in SQLite).",
              NEITHER, False, False, "never NULL")

# The course tables: (name, grain, the note's word, what the note adds, their columns).
_GRAINS = [
    ("daily_metrics", "local day", "day", "", [_DAY, _COURSE, *_METRICS, *_OUTCOMES, *_ENROLMENT]),
    ("weekly_metrics", "ISO week, Monday to Sunday", "week",
     " Learners are distinct over the whole week, never summed from days.",
     [*_PERIOD, _COURSE, *_METRICS, _COMPLETE, *_OUTCOMES, *_ENROLMENT]),
    ("monthly_metrics", "calendar month", "month", " Learners are distinct over the whole month.",
     [*_PERIOD, _COURSE, *_METRICS, _COMPLETE, *_OUTCOMES, *_ENROLMENT]),
    ("term_metrics", "configured term ([[terms]])", "term",
     " Only the terms the configuration declares; rows ordered by period_start.",
     [*_PERIOD, _COURSE, *_METRICS, _COMPLETE, *_OUTCOMES, *_ENROLMENT]),
]


def _key(columns):
    """A course table's natural key: its day or period, and the course."""
    return f"{columns[0].name}, course"


TABLES = [
    *(Table(name, grain, _key(columns), _GRAIN_NOTE.format(what=what, table=name) + extra, columns)
      for name, grain, what, extra, columns in _GRAINS),
    *(Table(f"site_{name}", f"{grain}, whole site", _key(columns)[:-len(", course")],
            _SITE_NOTE.format(what=what, table=name) + extra, [column for column in columns if column is not _COURSE])
      for name, grain, what, extra, columns in _GRAINS),
    *(Table(f"{name}_by_name", f"{grain} and course", _key(columns), _BY_NAME_NOTE.format(table=name),
            [*(column for column in columns if column not in _ENROLMENT), _COURSE_NAME, *_ENROLMENT])
      for name, grain, _, _, columns in _GRAINS),
    Table("courses", "course", "course",
          "One row per course that has a row in any metrics table; no row for the whole site. Join on `course`.",
          [Column("course", "TEXT", "text", "—", "The course's IRI, as in the metrics tables.", NEITHER, False,
                  False, "never NULL"),
           Column("name", "TEXT", "text", "—", "Moodle: course.fullname; xAPI: the course activity's "
                  "definition.name in publication.language. People's identifiers found in it are removed.",
                  NEITHER, False, False, "the source gives no name"),
           Column("short_name", "TEXT", "text", "—", "Moodle: course.shortname.", NEITHER, False, False,
                  "no short name (always NULL for xAPI)"),
           Column("category", "TEXT", "text", "—", "Moodle: the course category's name.", NEITHER, False, False,
                  "no category (always NULL for xAPI)"),
           Column("start_date", "TEXT", "date", "local day", "Moodle: course.startdate as a local date.",
                  NEITHER, False, False, "none set in Moodle (always NULL for xAPI)"),
           Column("end_date", "TEXT", "date", "local day", "Moodle: course.enddate as a local date.",
                  NEITHER, False, False, "none set in Moodle (always NULL for xAPI)"), _COURSE_NAME]),
    *(Table(f"category_{name}", f"{grain}, course category", f"{columns[0].name}, category_id",
            _CATEGORY_NOTE.format(what=what) + extra,
            [*columns[:columns.index(_COURSE)], _CATEGORY_ID, _CATEGORY_NAME,
             *(column for column in columns[columns.index(_COURSE) + 1:] if column not in _ENROLMENT)])
      for name, grain, what, extra, columns in _GRAINS),  # a category has no enrolments: they are a course's
    Table("categories", "course category", "category_id",
          "One row per course category that has a row in any category table (a category above one always has): "
          "Moodle's course categories, or those `[[categories]]` maps xAPI courses to. Join on `category_id`.",
          [_CATEGORY_ID,
           Column("name", "TEXT", "text", "—", "Moodle: course_categories.name in publication.language; xAPI: the "
                  "configured name. People's identifiers found in it are removed.", NEITHER, False, False,
                  "the source gives no name"),
           Column("parent", "INTEGER", "bigint", "—", "The category it is in (`category_id`).", NEITHER, False,
                  False, "a top-level category"),
           Column("path", "TEXT", "text", "—", "The ids of the categories from the top down to this one, "
                  "\"/1/4/7\" (Moodle's course_categories.path): a category counts the courses of every category "
                  "whose path begins with its own.", NEITHER, False, False, "never NULL"),
           Column("depth", "INTEGER", "integer", "—", "1 for a top-level category (a faculty, say), 2 for one in it, "
                  "and so on.", NEITHER, False, False, "never NULL")]),
    Table("freshness", "one row", "—",
          "How fresh the published rows are, and the protection they were published with: one row (none before the "
          "first run). Times are ISO 8601 to the second.",
          [Column("published_at", "TEXT", "text", "UTC time", "When the rows were published: the commit of the run "
                  "that wrote them (SQLite: the file; PostgreSQL: the last run that committed).", NEITHER, False,
                  False, "only in a publication written without a store"),
           Column("data_as_of", "TEXT", "text", "local time", "The time the data is complete up to, in `timezone` "
                  "with its offset (\"2026-12-08T04:10:00+01:00\"): the watermark of the last run, or (Moodle's log, "
                  "read by id) that run's start.", NEITHER, False, False, "no run has read up to its own time yet"),
           Column("data_as_of_utc", "TEXT", "text", "UTC time", "`data_as_of` in UTC (\"2026-12-08T03:10:00Z\").",
                  NEITHER, False, False, "no run has read up to its own time yet"),
           Column("last_success", "TEXT", "text", "UTC time", "When the last successful run (or rebuild) started: "
                  "what `lms-refresh status` calls the last success. A backfill is not one.", NEITHER, False, False,
                  "no successful run yet"),
           Column("timezone", "TEXT", "text", "—", "The configured `timezone` that days, weeks and `data_as_of` are "
                  "local to.", NEITHER, False, False, "only in a publication written without a store"),
           Column("schema_version", "INTEGER", "integer", "—", "The store's schema version the rows were published "
                  "by.", NEITHER, False, False, "never NULL"),
           Column("min_cell_size", "INTEGER", "bigint", "learners", "The threshold in force: a value derived from "
                  "fewer learners is withheld.", NEITHER, False, False, "never NULL"),
           Column("method", "TEXT", "text", "—", "cell-key (counts perturbed) or none (exact counts).", NEITHER,
                  False, False, "never NULL"),
           Column("max_noise", "INTEGER", "bigint", "count", "D: every perturbed count is within ± D of the true "
                  "one.", NEITHER, False, False, "never NULL")]),
    Table("publication", "one row", "—",
          "SQLite publication only: the privacy settings the file was computed with, and a digest of its rows.",
          [Column("digest", "TEXT", None, "—", "A digest of the file's rows and settings (a run republishes when "
                  "the store's differs).", NEITHER, False, False, "never NULL"),
           Column("min_cell_size", "INTEGER", None, "learners", "The threshold in force.", NEITHER, False, False,
                  "never NULL"),
           Column("method", "TEXT", None, "—", "cell-key (perturbed counts) or none (exact counts).", NEITHER,
                  False, False, "never NULL"),
           Column("max_noise", "INTEGER", None, "count", "D: every perturbed count is within ± D of the true one.",
                  NEITHER, False, False, "never NULL"),
           Column("variance", "REAL", None, "count²", "The noise's variance.", NEITHER, False, False, "never NULL"),
           Column("withhold_zeros", "INTEGER", None, "0 or 1", "1: zero counts are withheld like small ones.",
                  NEITHER, False, False, "never NULL")]),
]


def table(name):
    """Return the Table called `name`."""
    return next(entry for entry in TABLES if entry.name == name)


def columns(name, store="sqlite"):
    """Return [(column, type)] of table `name` as published by `store` ("sqlite" or "postgresql")."""
    return [(column.name, getattr(column, store)) for column in table(name).columns if getattr(column, store)]


class Query(collections.namedtuple("Query", "title note tested_by sql")):
    """A ready-to-paste query of the data dictionary: what it shows (`note`), the test that runs it beside the data
    dictionary's own (a path, or None), and its SQL, which runs as written on SQLite and PostgreSQL alike. Each is
    also a canned query of the Datasette metadata (lms_refresh.store.datasette)."""

    __slots__ = ()


QUERIES = [
    Query("Weekly active learners per course, by name, with the whole site",
          "The site's row comes first in each week; a course with no name is shown by the last segment of its IRI. "
          "`active_learners` is NULL where it is withheld.", None,
          "SELECT period, course_name, active_learners\n"
          "FROM (SELECT period, 'Whole site' AS course_name, active_learners, 0 AS courses_after, complete\n"
          "      FROM site_weekly_metrics\n"
          "      UNION ALL\n"
          "      SELECT period, course_name, active_learners, 1, complete\n"
          "      FROM weekly_metrics_by_name) AS w\n"
          "WHERE complete = 1\n"
          "ORDER BY period, courses_after, course_name;\n"),
    Query("Weekly active learners per course", "The published courses only, by IRI.",
          "tests/refresh/test_weeks_and_months.py",
          "SELECT period, course, active_learners\n"
          "FROM weekly_metrics\n"
          "WHERE complete = 1 AND active_learners IS NOT NULL\n"
          "ORDER BY period, course;\n"),
    Query("The site's monthly total", "", "tests/refresh/test_weeks_and_months.py",
          "SELECT period, active_learners, statements, complete\n"
          "FROM site_monthly_metrics\n"
          "ORDER BY period;\n"),
    Query("This term's completions per course",
          "The terms that hold today's date (`[[terms]]` in the configuration), the site's row first. "
          "`CURRENT_DATE` is the database's date: on SQLite it is today in UTC, on PostgreSQL in the session's "
          "`TimeZone`; near midnight it can differ from today in `timezone`, so write the date instead where that "
          "matters:", None,
          "SELECT period, course_name, completions, passed, failed\n"
          "FROM (SELECT period, period_start, period_end, 'Whole site' AS course_name, completions, passed, failed,\n"
          "        0 AS courses_after\n"
          "      FROM site_term_metrics\n"
          "      UNION ALL\n"
          "      SELECT period, period_start, period_end, course_name, completions, passed, failed, 1\n"
          "      FROM term_metrics_by_name) AS t\n"
          "WHERE period_start <= CURRENT_DATE AND CURRENT_DATE <= period_end\n"
          "ORDER BY period, courses_after, course_name;\n"),
    Query("Completions, passes and fails per course in each term", "", "tests/refresh/test_terms.py",
          "SELECT period, course, completions, passed, failed\n"
          "FROM term_metrics\n"
          "WHERE active_learners IS NOT NULL\n"
          "ORDER BY period_start, period, course;\n"),
    Query("Learners who completed and passed in each term, per course", "The shares a chart plots, from the "
          "published counts.", "tests/documentation/test_data_dictionary.py",
          "SELECT period, course, active_learners, completed_learners, completed_share, passed_learners, pass_rate\n"
          "FROM term_metrics\n"
          "WHERE active_learners IS NOT NULL\n"
          "ORDER BY period_start, period, course;\n"),
    Query("Daily active learners per course, by name", "", "tests/store/test_course_names.py",
          "SELECT m.day, c.course_name, m.active_learners\n"
          "FROM daily_metrics AS m\n"
          "JOIN courses AS c ON c.course = m.course\n"
          "ORDER BY m.day, c.course_name\n"),
    Query("Monthly active learners per faculty", "The top-level course categories (a Moodle site's faculties), "
          "each counting the learners of all the courses below it once; a category with fewer than min_cell_size "
          "learners in every month has no row.", "tests/sources/test_moodle_categories.py",
          "SELECT m.period, m.category_name AS faculty, m.active_learners\n"
          "FROM category_monthly_metrics AS m\n"
          "JOIN categories AS c ON c.category_id = m.category_id\n"
          "WHERE c.depth = 1\n"
          "ORDER BY m.period, faculty;\n"),
    Query("How fresh the data is", "", "tests/store/test_site_apart.py",
          "SELECT data_as_of, timezone, data_as_of_utc, last_success, min_cell_size, method, max_noise\n"
          "FROM freshness;\n"),
]
