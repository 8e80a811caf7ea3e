"""One description of the store: its tables, keys, indexes and serving view, how daily_metrics is
computed, and how a store of every earlier schema version reaches this one.

Nothing here is written in a dialect: `dialect.Dialect` renders it, as SQLite (`sqlite_schema.py`) or as
PostgreSQL (`postgres_schema.py`). Every table, column and index says in which schema version it
appeared (`since`); `migration(N)` lists what version N brought, in the order it is applied.
A new store runs every migration in turn, so it is built exactly as an upgraded one is.
"""

import dataclasses

from lms_refresh.store.periods import TABLE_OF

# Column types; each dialect writes them its own way.
SMALL = "small"  # a 0/1 flag
INTEGER = "integer"  # a count
BIGINT = "bigint"  # an id, a key or a sum of them
REAL = "real"
TEXT = "text"
BYTES = "bytes"
SERIAL = "serial"  # a row number the store assigns

# From this version on, tables and indexes are created only if missing, so a store taken back
# past a migration by hand (as the tests do) is upgraded again; an earlier version refuses a
# name already taken, so a store never adopts a table that is not its own.
IDEMPOTENT_SINCE = 4


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str
    null: bool = False
    default: str = None  # an SQL literal
    check: str = None  # a condition on the value, refused otherwise
    since: int = 1


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    columns: tuple
    key: tuple
    unique: tuple = ()  # other column groups that identify a row
    clustered: bool = False  # stored in key order: a range of the key is read or rebuilt in one pass
    logged: bool = False  # read back in the order its rows were written (the run log)
    since: int = 1

    def columns_at(self, version):
        return [column for column in self.columns if column.since <= version]


@dataclasses.dataclass(frozen=True)
class Index:
    name: str
    table: str
    columns: tuple
    unique: bool = False
    since: int = 1


def _columns(type_, *names, **options):
    return tuple(Column(name, type_, **options) for name in names)


# A cell's record keys (the cell key method, lms_refresh.disclosure.privacy): sums of its records' keys.
KEY_SUMS = ("learner_key", "statement_key", "attempt_key", "completion_key", "passed_key", "failed_key",
            "score_key", "duration_count", "duration_key")

# The scale of the noise on a sum of values (lms_refresh.disclosure.policy), and the sum it scales.
MAGNITUDE_SCALES = {"score_max_micro": "score_sum_micro", "duration_max_ms": "duration_ms"}

# The learner outcome counts' cell keys, each the sum of the keys of the learners with that presence flag.
OUTCOME_LEARNER_KEYS = {"completion_learner_key": "has_completion", "passed_learner_key": "has_passed",
                        "failed_learner_key": "has_failed"}

# A cell's aggregates and record keys: a day's in daily_metrics, a week's or a month's in period_metrics.
_CELL = (
    *_columns(INTEGER, "learners", "statements", "attempts", "attempt_learners", "completions",
              "completion_learners", "passed", "passed_learners", "failed", "failed_learners"),
    Column("score_sum_micro", BIGINT, null=True), *_columns(INTEGER, "score_count", "score_learners"),
    Column("duration_ms", BIGINT, null=True), Column("duration_learners", INTEGER),
    *_columns(BIGINT, *KEY_SUMS, default="0", since=3),
    # The largest score (in absolute value) and duration of one of the cell's records: the scale of the noise
    # added to their sums (lms_refresh.disclosure.policy). NULL where no record had one, and in cells counted
    # before version 9 (a sum that has no scale is not published).
    *_columns(BIGINT, *MAGNITUDE_SCALES, null=True, since=9),
    # The sums of the keys of the learners who completed, passed and failed (each once): the cell keys of the
    # published learner outcome counts. NULL in cells counted before version 10 (their counts are withheld).
    *_columns(BIGINT, *OUTCOME_LEARNER_KEYS, null=True, since=10),
)
# The published learner outcome counts and the shares computed from them (lms_refresh.disclosure.policy).
OUTCOME_COLUMNS = ("completed_learners", "passed_learners", "failed_learners", "completed_share", "pass_rate")
# What a learner did in a (day, course), so that a week's or a month's distinct learners are counted
# without reading its staged events again (lms_refresh.store.grains).
PRESENCE_FLAGS = ("has_attempt", "has_completion", "has_passed", "has_failed", "has_score", "has_duration")
PERIOD_COUNTS = ("days",) + tuple(f"{flag[4:]}_days" for flag in PRESENCE_FLAGS)  # learner_periods' counts
_PUBLISHED = (
    *_columns(BIGINT, "active_learners", "statements", "attempts", "completions", "passed", "failed", null=True),
    *_columns(BIGINT, *OUTCOME_COLUMNS[:3], null=True, since=10),
    *_columns(REAL, *OUTCOME_COLUMNS[3:], null=True, since=10),
    *_columns(REAL, "avg_scaled_score", "total_duration_seconds", null=True), Column("suppressed", BIGINT),
    Column("enrolled_learners", BIGINT, null=True, since=12), Column("active_share", REAL, null=True, since=12),
)
# The published enrolment columns (lms_refresh.run.enrolment), last in every row table and view, as they were added.
ENROLMENT_COLUMNS = ("enrolled_learners", "active_share")

TABLES = (
    Table("meta", _columns(TEXT, "key", "value"), key=("key",), clustered=True),
    # Ids are 64-bit hashes of the IRIs (see sources.xapi.name_id); SITE is none of them.
    Table("courses", (Column("course_id", BIGINT), Column("iri", TEXT)), key=("course_id",), unique=(("iri",),)),
    Table("verbs", (Column("verb_id", BIGINT), Column("iri", TEXT)), key=("verb_id",), unique=(("iri",),)),
    # Canonical events, clustered by partition so a day is rebuilt from one contiguous range. The
    # key ends with the source's own id; the columns before it are functions of that (immutable)
    # record, so pulling a record twice is a no-op. `occurred` is the timestamp as sent ('' when the
    # statement had none), which lms_refresh.sources.redelivery compares with a second delivery's.
    Table("staged_events", (
        Column("day", TEXT), Column("course_id", BIGINT), Column("actor", BIGINT), Column("event_id", BYTES),
        Column("stored", TEXT), Column("occurred", TEXT), Column("verb_id", BIGINT),
        *_columns(SMALL, "is_attempt", "is_completion", "is_passed", "is_failed"),
        *_columns(BIGINT, "score_micro", "duration_ms", null=True),
        # The cell key method's record keys, computed in Python with the secret key at staging
        # time. NULL only in rows staged before version 3; the next run fills them in.
        *_columns(BIGINT, "record_key", "learner_key", null=True, since=3),
    ), key=("day", "course_id", "actor", "event_id"), clustered=True),
    # Voided ids stay here so a re-pulled target is never staged again.
    Table("voided_events", (Column("event_id", BYTES), Column("voided_by", BYTES), Column("stored", TEXT)),
          key=("event_id",), clustered=True),
    Table("daily_metrics", (Column("day", TEXT), Column("course_id", BIGINT), *_CELL), key=("day", "course_id"),
          clustered=True),
    Table("runs", (
        *_columns(TEXT, "run_id", "kind", "started_at", "finished_at", "outcome"), Column("exit_code", INTEGER),
        *_columns(TEXT, "window_since", "window_until", null=True),
        *_columns(BIGINT, "statements_read", "staged", "voided", "quarantined", default="0"),
        Column("partitions", INTEGER, default="0"), *_columns(BIGINT, "rows_written", "suppressed", default="0"),
        Column("message", TEXT, default="''"),
        # Which lms-refresh version wrote the row.
        Column("version", TEXT, default="''", since=2),
    ), key=("run_id",), logged=True),
    Table("quarantine", (Column("id", SERIAL), *_columns(TEXT, "run_id", "origin", "reason", "raw", "digest",
                                                           "recorded_at")),
          key=("id",), unique=(("origin", "digest"),)),
    Table("source_state", _columns(TEXT, "key", "value"), key=("key",), clustered=True),
    # What is published: suppressed, perturbed and gap-filled in Python (lms_refresh.disclosure.privacy).
    Table("published_metrics", (
        Column("course_id", BIGINT), Column("day", TEXT),
        *_PUBLISHED), key=("course_id", "day"), clustered=True, since=3),
    # The threshold and the noise in one typed row: a value of the wrong type or out of range is
    # refused, so nothing can switch suppression off by writing text; without the row nothing
    # is published (SqlStore.privacy_settings).
    Table("privacy_settings", (
        Column("id", BIGINT, check="id = 1"),
        Column("min_cell_size", BIGINT, check="min_cell_size >= 1"),
        Column("method", TEXT, check="method IN ('cell-key', 'none')"),
        Column("max_noise", BIGINT, check="max_noise BETWEEN 0 AND 100"),
        Column("variance", REAL, check="variance >= 0"),
        Column("withhold_zeros", BIGINT, check="withhold_zeros IN (0, 1)"),
    ), key=("id",), since=3),
    # Days whose metrics a migration left to be rebuilt by the next run.
    Table("pending_days", (Column("day", TEXT),), key=("day",), clustered=True, since=4),
    # The weeks and months (lms_refresh.store.periods): each learner once per (day, course) with their
    # key, the periods' cells, and their published rows (`closes_at`: when the period ends, UTC).
    Table("learner_days", (Column("day", TEXT), Column("course_id", BIGINT), Column("actor", BIGINT),
                           Column("learner_key", BIGINT), *_columns(SMALL, *PRESENCE_FLAGS)),
          key=("day", "course_id", "actor"), clustered=True, since=5),
    # Each learner once per (period, course): on how many of its days they were active, and did each thing.
    Table("learner_periods", (*_columns(TEXT, "grain", "period"), Column("course_id", BIGINT), Column("actor", BIGINT),
                              Column("learner_key", BIGINT), *_columns(INTEGER, *PERIOD_COUNTS)),
          key=("grain", "period", "course_id", "actor"), clustered=True, since=5),
    Table("period_metrics", (*_columns(TEXT, "grain", "period"), Column("course_id", BIGINT), *_CELL),
          key=("grain", "period", "course_id"), clustered=True, since=5),
    Table("published_periods", (
        Column("grain", TEXT), Column("course_id", BIGINT), *_columns(TEXT, "period", "period_start", "period_end"),
        *_PUBLISHED, Column("closes_at", TEXT), Column("complete", SMALL, check="complete IN (0, 1)"),
    ), key=("grain", "course_id", "period"), clustered=True, since=5),
    # The name of a course as its source names it (lms_refresh.disclosure.names made it safe to
    # publish): beside `courses`, not in it, because a table is created only if missing
    # (IDEMPOTENT_SINCE) and a column cannot be (SQLite has no ADD COLUMN IF NOT EXISTS). `named_at`
    # is the `stored` time of the xAPI statement the name came from, so an older statement read
    # again never replaces a newer name; the run's time for Moodle, whose course table every run reads.
    Table("course_names", (
        Column("course_id", BIGINT),
        *_columns(TEXT, "name", "short_name", "category", "start_date", "end_date", null=True),
        Column("named_at", TEXT),
    ), key=("course_id",), since=6),
    # What a chart calls a course that its source gives no name: its IRI's last path segment, cleaned and bounded by
    # lms_refresh.disclosure.names like any text (SqlStore.label_courses writes it, in Python, for every course).
    Table("course_labels", (Column("course_id", BIGINT), Column("label", TEXT)), key=("course_id",), since=11),
    # How fresh the published rows are, one row written by each run that commits (run/freshness_row.py):
    # `published_at` by every one, the others only by a run or rebuild that read up to its own now.
    Table("freshness", (
        Column("id", BIGINT, check="id = 1"),
        *_columns(TEXT, "published_at", "data_as_of", "data_as_of_utc", "last_success", null=True),
        Column("timezone", TEXT),
    ), key=("id",), since=11),
    # The learners enrolled in a course at any moment of a day or period (lms_refresh.run.enrolment): how many, and
    # the sum of their keys modulo 2**32 (the cell key of the published count). No row: none enrolled, or a source
    # that reads no enrolments. The site's under SITE. Aggregates only: no learner is kept here.
    Table("enrolled_cells", (*_columns(TEXT, "grain", "period"), Column("course_id", BIGINT),
                             Column("enrolled", INTEGER), Column("enrolled_key", BIGINT)),
          key=("grain", "period", "course_id"), clustered=True, since=12),
    # The days and periods whose enrolled cells were counted, and whether they are settled: counted by a run after
    # the period closed (its end and the safety lag past), and never counted again but by a rebuild.
    Table("enrolled_periods", (*_columns(TEXT, "grain", "period", "first_day", "last_day"),
                               Column("settled", SMALL, check="settled IN (0, 1)")),
          key=("grain", "period"), clustered=True, since=12),
)



# Course categories (a Moodle site's, or those the configuration maps xAPI course IRIs to:
# lms_refresh.store.categories), as the source has them now: each category's name (cleaned by
# lms_refresh.disclosure.names), parent (NULL at the top), path of ids from the top down ("/1/4/7") and depth; each
# course's own category; and every category each course counts in (its own and each one above it), the courses a
# category's cells are counted over.
CATEGORIES_SINCE = 13
_CATEGORY_TABLES = (
    Table("categories", (Column("category_id", BIGINT), Column("name", TEXT, null=True),
                         Column("parent", BIGINT, null=True), Column("path", TEXT), Column("depth", INTEGER)),
          key=("category_id",), since=CATEGORIES_SINCE),
    Table("course_categories", (Column("course_id", BIGINT), Column("category_id", BIGINT)), key=("course_id",),
          since=CATEGORIES_SINCE),
    Table("category_courses", (Column("course_id", BIGINT), Column("category_id", BIGINT)),
          key=("course_id", "category_id"), clustered=True, since=CATEGORIES_SINCE),
    # A category's cells, counted from its courses' learners' presence (each learner once) and their cells' sums.
    Table("category_day_cells", (Column("day", TEXT), Column("category_id", BIGINT), *_CELL),
          key=("day", "category_id"), clustered=True, since=CATEGORIES_SINCE),
    Table("category_period_cells", (*_columns(TEXT, "grain", "period"), Column("category_id", BIGINT), *_CELL),
          key=("grain", "period", "category_id"), clustered=True, since=CATEGORIES_SINCE),
    Table("published_category_days", (Column("category_id", BIGINT), Column("day", TEXT), *_PUBLISHED),
          key=("category_id", "day"), clustered=True, since=CATEGORIES_SINCE),
    Table("published_category_periods", (
        Column("grain", TEXT), Column("category_id", BIGINT), *_columns(TEXT, "period", "period_start", "period_end"),
        *_PUBLISHED, Column("closes_at", TEXT), Column("complete", SMALL, check="complete IN (0, 1)"),
    ), key=("grain", "category_id", "period"), clustered=True, since=CATEGORIES_SINCE),
)
TABLES += _CATEGORY_TABLES


# The whole site, as one more course of the cells and published rows of every grain (each of its learners once,
# all statements; lms_refresh.store.grains): no row in `courses`, so the serving views show it with course NULL.
# An IRI whose 64-bit BLAKE2b id is 0 would share the site's rows: finding one is a search of 2**64 hashes.
SITE = 0


def column_names(table):
    """Return the names of a table's columns, in their order."""
    return tuple(column.name for column in next(t for t in TABLES if t.name == table).columns)


INDEXES = (
    # The publication rebuilds a course's whole span: its rows must be one range away.
    Index("daily_metrics_by_course", "daily_metrics", ("course_id", "day"), since=3),
    # A statement id counts once.
    Index("staged_events_event_id", "staged_events", ("event_id",), unique=True, since=4),
    # A course's weeks (or months) are published together: one range away.
    Index("period_metrics_by_course", "period_metrics", ("grain", "course_id", "period"), since=5),
    # A course's enrolled cells are published with its rows: one range away too.
    Index("enrolled_cells_by_course", "enrolled_cells", ("grain", "course_id", "period"), since=12),
    # A category's rows are published as a course's are: each of its grains one range away.
    Index("category_day_cells_by_category", "category_day_cells", ("category_id", "day"), since=CATEGORIES_SINCE),
    Index("category_period_cells_by_category", "category_period_cells", ("grain", "category_id", "period"),
          since=CATEGORIES_SINCE),
)

SERVING_COLUMNS = (
    "day", "course", "active_learners", "statements", "attempts", "completions",
    "passed", "failed", "avg_scaled_score", "total_duration_seconds", "suppressed", *OUTCOME_COLUMNS,
    *ENROLMENT_COLUMNS,
)

# The weeks' and months' serving views (and the publication's tables of the same names): a period's label
# and its first and last local days (inclusive), then the day's columns, and whether the period is over. The
# learner outcome columns come last in every view, as they were added (PostgreSQL adds a view's columns in place
# only at its end: its grants and the dashboards' own views over it stay).
PERIOD_SERVING_COLUMNS = ("period", "period_start", "period_end", "course",
                          *SERVING_COLUMNS[2:-len(OUTCOME_COLUMNS + ENROLMENT_COLUMNS)], "complete", *OUTCOME_COLUMNS,
                          *ENROLMENT_COLUMNS)
PERIOD_VIEWS = TABLE_OF  # grain -> its view's (and the publication's table's) name


def _outcomes(version):
    """The learner outcome columns of a serving view as it is from schema `version` on (none before 10), and the
    enrolment columns (none before 12)."""
    added = (OUTCOME_COLUMNS if version >= OUTCOMES_SINCE else ()) + (
        ENROLMENT_COLUMNS if version >= ENROLMENTS_SINCE else ())
    return "".join(f", p.{name}" for name in added)


def period_view(dialect, grain, version=None):
    """Return the SELECT of the serving view of `grain`'s periods (PERIOD_SERVING_COLUMNS) as it is from schema
    `version` on (None: this one)."""
    version = SCHEMA_VERSION if version is None else version
    outcomes = _outcomes(version)
    # From SITE_APART_SINCE on, the courses' rows only: the site's are site_view's.
    apart = version >= SITE_APART_SINCE
    joined, courses_only = ("JOIN", f" AND p.course_id <> {SITE}") if apart else ("LEFT JOIN", "")
    return f"""
SELECT p.period, {dialect.date("p.period_start")} AS period_start, {dialect.date("p.period_end")} AS period_end,
  c.iri AS course, p.active_learners, p.statements, p.attempts, p.completions, p.passed, p.failed,
  p.avg_scaled_score, p.total_duration_seconds, p.suppressed, p.complete{outcomes}
FROM {dialect.name("published_periods")} AS p
{joined} {dialect.name("courses")} AS c USING (course_id)
WHERE p.grain = '{grain}'{courses_only}
"""


# The whole site's rows of each grain, apart from the courses' (so that any SUM over a course table is a sum of
# courses): the course tables' columns but `course`. Views of the same name with the prefix `site_`.
SITE_TABLES = {"day": "site_daily_metrics", **{grain: f"site_{table}" for grain, table in TABLE_OF.items()}}
SITE_SERVING_COLUMNS = tuple(column for column in SERVING_COLUMNS if column != "course")
SITE_PERIOD_SERVING_COLUMNS = tuple(column for column in PERIOD_SERVING_COLUMNS if column != "course")


def site_view(dialect, grain, version=None):
    """Return the SELECT of the serving view of the whole site's rows of `grain` ("day" or a period's grain), as it
    is from schema `version` on (None: this one; the enrolment columns from ENROLMENTS_SINCE on)."""
    version = SCHEMA_VERSION if version is None else version
    dropped = () if version >= ENROLMENTS_SINCE else ENROLMENT_COLUMNS
    if grain == "day":
        columns = ", ".join(f"p.{column}" for column in SITE_SERVING_COLUMNS[1:] if column not in dropped)
        return f"""
SELECT {dialect.date("p.day")} AS day, {columns}
FROM {dialect.name("published_metrics")} AS p
WHERE p.course_id = {SITE}
"""
    columns = ", ".join(f"p.{column}" for column in SITE_PERIOD_SERVING_COLUMNS[3:] if column not in dropped)
    return f"""
SELECT p.period, {dialect.date("p.period_start")} AS period_start, {dialect.date("p.period_end")} AS period_end,
  {columns}
FROM {dialect.name("published_periods")} AS p
WHERE p.grain = '{grain}' AND p.course_id = {SITE}
"""


# The freshness of the publication, one row (none before a run stored the privacy settings): the store's freshness
# row (run/freshness_row.py), its schema version and the protection in force.
FRESHNESS_COLUMNS = ("published_at", "data_as_of", "data_as_of_utc", "last_success", "timezone", "schema_version",
                     "min_cell_size", "method", "max_noise")


def freshness_view(dialect):
    """Return the SELECT of the serving view `freshness` (FRESHNESS_COLUMNS)."""
    return f"""
SELECT f.published_at, f.data_as_of, f.data_as_of_utc, f.last_success, f.timezone,
  (SELECT CAST(value AS INTEGER) FROM {dialect.name("meta")} WHERE key = 'schema_version') AS schema_version,
  s.min_cell_size, s.method, s.max_noise
FROM {dialect.name("privacy_settings")} AS s
LEFT JOIN {dialect.name("freshness")} AS f ON f.id = s.id
"""


# Each metrics table with the name a chart shows beside `course`: `courses.course_name`. Views named `<table>_by_name`.
BY_NAME = {table: f"{table}_by_name" for table in ("daily_metrics", *TABLE_OF.values())}


def by_name_view(metrics, courses, table=None, version=None):
    """Return the SELECT of a by-name view: every row of the course table `metrics` (its columns as they are: a
    column added to it appears here too) and `course_name` from the course names' table `courses`. Each is a table's
    name (the publication file's) or a parenthesised SELECT (a store's: its serving views' own, so that no serving
    view depends on another, and one dropped by hand comes back alone). From schema `version` ENROLMENTS_SINCE on
    (None: this one), the enrolment columns of the course table named `table` come after `course_name`, as they were
    added (PostgreSQL replaces a view in place only if it adds columns at its end: its grants stay)."""
    version = SCHEMA_VERSION if version is None else version
    if version < ENROLMENTS_SINCE:
        selected = "m.*, c.course_name"
    else:
        columns = SERVING_COLUMNS if table == "daily_metrics" else PERIOD_SERVING_COLUMNS
        selected = ", ".join([f"m.{name}" for name in columns if name not in ENROLMENT_COLUMNS] + ["c.course_name"]
                             + [f"m.{name}" for name in ENROLMENT_COLUMNS])
    return f"""
SELECT {selected}
FROM {metrics} AS m
JOIN {courses} AS c ON c.course = m.course
"""


def by_name_of(dialect, table, version=None):
    """Return the SELECT of the by-name view of the course table `table` in a store of `dialect`, as of schema
    `version` (None: this one). A migration that changes a course table's columns creates its by-name view again
    (dropped first: PostgreSQL replaces a view in place only if it adds columns at the end)."""
    metrics = serving_view(dialect, version or SCHEMA_VERSION) if table == "daily_metrics" else period_view(
        dialect, next(grain for grain, name in TABLE_OF.items() if name == table), version)
    return by_name_view(f"({metrics})", f"({courses_view(dialect)})", table, version)


def serving_view(dialect, version):
    """Return the SELECT of the serving view (SERVING_COLUMNS) as it is from schema `version` on."""
    if version >= SITE_APART_SINCE:  # the courses' rows only: the site's are site_view's
        return f"""
SELECT {dialect.date("p.day")} AS day, c.iri AS course, p.active_learners, p.statements, p.attempts, p.completions,
  p.passed, p.failed, p.avg_scaled_score, p.total_duration_seconds, p.suppressed{_outcomes(version)}
FROM {dialect.name("published_metrics")} AS p
JOIN {dialect.name("courses")} AS c USING (course_id)
WHERE p.course_id <> {SITE}
"""
    if version >= 3:  # the published rows, nothing computed in SQL; the site's (SITE, no IRI) with course NULL
        return f"""
SELECT {dialect.date("p.day")} AS day, c.iri AS course, p.active_learners, p.statements, p.attempts, p.completions,
  p.passed, p.failed, p.avg_scaled_score, p.total_duration_seconds, p.suppressed{_outcomes(version)}
FROM {dialect.name("published_metrics")} AS p
LEFT JOIN {dialect.name("courses")} AS c USING (course_id)
"""
    # Versions 1 and 2 suppressed in the view, reading the threshold k from meta: a value is
    # withheld when 0 < (distinct learners it derives from) < k, a whole row when the day's active
    # learners are fewer than k.
    def value(learners, expression):
        return f"CASE WHEN m.learners >= k AND (m.{learners} = 0 OR m.{learners} >= k) THEN {expression} END"

    withheld = " OR ".join(f"m.{column} BETWEEN 1 AND k - 1" for column in (
        "attempt_learners", "completion_learners", "passed_learners", "failed_learners", "score_learners",
        "duration_learners"))
    return f"""
SELECT {dialect.date("m.day")} AS day, c.iri AS course,
  CASE WHEN m.learners >= k THEN m.learners END AS active_learners,
  CASE WHEN m.learners >= k THEN m.statements END AS statements,
  {value("attempt_learners", "m.attempts")} AS attempts,
  {value("completion_learners", "m.completions")} AS completions,
  {value("passed_learners", "m.passed")} AS passed,
  {value("failed_learners", "m.failed")} AS failed,
  CASE WHEN m.learners >= k AND m.score_learners >= k THEN {dialect.legacy_average} END AS avg_scaled_score,
  CASE WHEN m.learners >= k AND m.duration_learners >= k THEN {dialect.legacy_duration} END AS total_duration_seconds,
  CASE WHEN m.learners < k OR {withheld} THEN 1 ELSE 0 END AS suppressed
FROM {dialect.name("daily_metrics")} AS m
JOIN {dialect.name("courses")} AS c USING (course_id)
CROSS JOIN (SELECT CAST(value AS INTEGER) AS k FROM {dialect.name("meta")} WHERE key = 'min_cell_size') AS settings
"""


# The versions that changed the serving view (it is replaced by the migration of that version); 7 brought
# the site's rows (course NULL), 10 the learner outcome columns (its period views too, both replaced in place), 11
# moved the site's rows to views of their own (site_view).
OUTCOMES_SINCE = 10
SITE_APART_SINCE = 11
ENROLMENTS_SINCE = 12  # the enrolment columns, at the end of every row view (12 also brought enrolled_cells)
VIEW_CHANGES = (1, 3, 7, OUTCOMES_SINCE, SITE_APART_SINCE, ENROLMENTS_SINCE)

# The serving view of course names: every course that has published rows on some grain (a course whose
# days are all withheld can have a published week), with its name where the source gave one (NULL
# otherwise), so that a dashboard joins any metrics table to it without losing rows.
COURSE_COLUMNS = ("course", "name", "short_name", "category", "start_date", "end_date", "course_name")
COURSES_VIEW_CHANGES = (6, 8, 11)  # 8: the courses published only on a week, month or term; 11: course_name


def courses_view(dialect, version=None):
    """Return the SELECT of the serving view of course names (COURSE_COLUMNS) as it is from schema `version` on (None:
    this one's). `course_name` is never blank: the name, else the course's label (course_labels), else its IRI (a
    course labelled by no run yet)."""
    if version is not None and version < SITE_APART_SINCE:
        return f"""
SELECT c.iri AS course, n.name, n.short_name, n.category, {dialect.date("n.start_date")} AS start_date,
  {dialect.date("n.end_date")} AS end_date
FROM {dialect.name("courses")} AS c
LEFT JOIN {dialect.name("course_names")} AS n ON n.course_id = c.course_id
WHERE c.course_id IN (SELECT course_id FROM {dialect.name("published_metrics")}
  UNION SELECT course_id FROM {dialect.name("published_periods")})
"""
    return f"""
SELECT c.iri AS course, n.name, n.short_name, n.category, {dialect.date("n.start_date")} AS start_date,
  {dialect.date("n.end_date")} AS end_date, COALESCE(n.name, l.label, c.iri) AS course_name
FROM {dialect.name("courses")} AS c
LEFT JOIN {dialect.name("course_names")} AS n ON n.course_id = c.course_id
LEFT JOIN {dialect.name("course_labels")} AS l ON l.course_id = c.course_id
WHERE c.course_id IN (SELECT course_id FROM {dialect.name("published_metrics")}
  UNION SELECT course_id FROM {dialect.name("published_periods")})
"""

# The categories' serving views (and the publication's tables of the same names): `categories`, each category with
# published rows (and every category above one, which has rows whenever it does), and each grain's rows, the course
# tables' columns with the category's id and name for `course`.
CATEGORY_COLUMNS = ("category_id", "name", "parent", "path", "depth")
# A category has no enrolled learners (the source's enrolments are a course's): no enrolment columns.
CATEGORY_SERVING_COLUMNS = ("day", "category_id", "category_name",
                            *SITE_SERVING_COLUMNS[1:-len(ENROLMENT_COLUMNS)])
CATEGORY_PERIOD_SERVING_COLUMNS = (*PERIOD_SERVING_COLUMNS[:3], "category_id", "category_name",
                                   *PERIOD_SERVING_COLUMNS[4:-len(ENROLMENT_COLUMNS)])
CATEGORY_TABLES = {"day": "category_daily_metrics", **{grain: f"category_{table}" for grain, table in TABLE_OF.items()}}
CATEGORY_VIEWS = ("categories", *CATEGORY_TABLES)


def category_view(dialect, item):
    """Return the SELECT of the serving view `item`: "categories", or a grain's ("day" or a period's) category rows."""
    name = "COALESCE(c.name, 'Category ' || CAST(p.category_id AS TEXT)) AS category_name"
    if item == "categories":
        return f"""
SELECT c.category_id, c.name, c.parent, c.path, c.depth
FROM {dialect.name("categories")} AS c
WHERE c.category_id IN (SELECT category_id FROM {dialect.name("published_category_days")}
  UNION SELECT category_id FROM {dialect.name("published_category_periods")})
"""
    if item == "day":
        columns = ", ".join(f"p.{column}" for column in CATEGORY_SERVING_COLUMNS[3:])
        return f"""
SELECT {dialect.date("p.day")} AS day, p.category_id, {name}, {columns}
FROM {dialect.name("published_category_days")} AS p
LEFT JOIN {dialect.name("categories")} AS c USING (category_id)
"""
    columns = ", ".join(f"p.{column}" for column in CATEGORY_PERIOD_SERVING_COLUMNS[5:])
    return f"""
SELECT p.period, {dialect.date("p.period_start")} AS period_start, {dialect.date("p.period_end")} AS period_end,
  p.category_id, {name}, {columns}
FROM {dialect.name("published_category_periods")} AS p
LEFT JOIN {dialect.name("categories")} AS c USING (category_id)
WHERE p.grain = '{item}'
"""


# What a migration does besides creating tables, columns and indexes; `{name}` is a table's (or
# index's) name as the dialect writes it. Run after the new tables and columns, before the new indexes.
DATA_STEPS = {
    1: ["INSERT INTO {meta} (key, value) VALUES ('min_cell_size', '10')"],  # read by the view until version 3
    # Rows staged before version 3 have no record keys: SqlStore.fill_record_keys gives them theirs. A store
    # created at a later version has none such (staging is empty while it is created): no scan for them.
    3: ["INSERT INTO {meta} (key, value) SELECT 'record_keys', 'missing' WHERE EXISTS (SELECT 1 FROM {staged_events})"],
    # Earlier stores could hold one statement id under two (day, course, learner) keys: all but
    # the first copy go, and their days are rebuilt by the next run.
    4: ["CREATE INDEX IF NOT EXISTS staged_events_id_scan ON {staged_events} (event_id)",
        """INSERT INTO {pending_days} SELECT DISTINCT s.day FROM {staged_events} s JOIN {staged_events} t
            ON t.event_id = s.event_id WHERE (t.day, t.course_id, t.actor) <> (s.day, s.course_id, s.actor)
            ON CONFLICT DO NOTHING""",
        """DELETE FROM {staged_events} WHERE (day, course_id, actor, event_id) IN (
            SELECT s.day, s.course_id, s.actor, s.event_id FROM {staged_events} s JOIN {staged_events} t
            ON t.event_id = s.event_id AND (t.day, t.course_id, t.actor) < (s.day, s.course_id, s.actor))""",
        "DROP INDEX {staged_events_id_scan}"],
    # Weeks and months are counted from learner_days, which the next run fills by rebuilding every staged day.
    5: ["INSERT INTO {pending_days} SELECT DISTINCT day FROM {staged_events} WHERE true ON CONFLICT DO NOTHING"],
    # The site's rows, on every grain, come from the days the next run rebuilds: every staged day (a closed day,
    # whose events retention dropped, has none: see docs/explanation/metrics.md, "Site totals").
    7: ["INSERT INTO {pending_days} SELECT DISTINCT day FROM {staged_events} WHERE true ON CONFLICT DO NOTHING"],
    # The noise on the sums of scores and durations is scaled by each cell's largest record: every staged day is
    # counted again with it, and every published row computed again (meta `republish`, SqlStore.set_privacy);
    # a closed day's cell, and a period with one, have no scale and publish neither sum.
    9: ["INSERT INTO {pending_days} SELECT DISTINCT day FROM {staged_events} WHERE true ON CONFLICT DO NOTHING",
        "INSERT INTO {meta} (key, value) VALUES ('republish', '9') ON CONFLICT (key) DO NOTHING"],
    # The learner outcome counts are perturbed on their learners' keys (OUTCOME_LEARNER_KEYS): every staged day
    # is counted again with them (and its periods, from their learners' presence), and every published row
    # computed again; a closed day's cell, and a period counted only from such days, have none: their learner
    # outcome counts are withheld.
    OUTCOMES_SINCE: [
        "INSERT INTO {pending_days} SELECT DISTINCT day FROM {staged_events} WHERE true ON CONFLICT DO NOTHING",
        "INSERT INTO {meta} (key, value) VALUES ('republish', '10') ON CONFLICT (key) DO NOTHING"],
    # The categories' cells of every day and period whose learners' presence the store keeps are counted by the
    # next run, once it has read the categories (store/categories.py, meta `count_categories`); a closed day
    # whose presence retention dropped gets no category cell.
    CATEGORIES_SINCE: [
        "INSERT INTO {meta} (key, value) SELECT 'count_categories', '13' WHERE EXISTS (SELECT 1 FROM {learner_days}) "
        "ON CONFLICT (key) DO NOTHING"],
}

SCHEMA_VERSION = 13  # the version this description is at: a new migration raises it


def migration(version):
    """Return what migration `version` does, in order, as (kind, item) steps for a dialect to render:
    the tables new in `version`, then the columns it added to older tables, its data steps, its
    indexes, and the serving views if they changed."""
    steps = [("table", table) for table in TABLES if table.since == version]
    steps += [("column", (table, column)) for table in TABLES if table.since < version
              for column in table.columns if column.since == version]
    steps += [("sql", statement) for statement in DATA_STEPS.get(version, ())]
    steps += [("index", index) for index in INDEXES if index.since == version]
    if version in VIEW_CHANGES:
        steps.append(("view", version))
    if version in (5, 7, OUTCOMES_SINCE, SITE_APART_SINCE, ENROLMENTS_SINCE):
        steps += [("period view", grain) for grain in PERIOD_VIEWS]
    if version in COURSES_VIEW_CHANGES:
        steps.append(("courses view", version))
    if version == CATEGORIES_SINCE:
        steps += [("category view", name) for name in CATEGORY_VIEWS]
    if version in (SITE_APART_SINCE, ENROLMENTS_SINCE):  # 12: their columns added at their end
        steps += [("site view", grain) for grain in SITE_TABLES]
    if version == SITE_APART_SINCE:
        steps += [("freshness view", None)]
    if version in (SITE_APART_SINCE, ENROLMENTS_SINCE):
        steps += [("by-name view", table) for table in BY_NAME]
    return steps
