"""What the HTML report shows, read from the publication file alone (read-only): no store, no network.

`read_publication` returns a `ReportData`: the privacy settings the publication was computed with,
the course names, the last weeks of `weekly_metrics` per course and for the whole site (`course`
NULL, when the publication has such rows), the learners who completed, passed and failed in the current term
(`term_metrics`, when the publication has it: see `current_term`) or else in the current month, each read from the
period's one row (distinct learners are never summed over periods: a learner of two weeks would count twice), and
how many of the cells it shows are withheld. A cell is one value, withheld when NULL: a row's `suppressed = 1`
says only that some value of it is, the others being published. Every text it returns is made safe to show by
disclosure/names.py; escaping it is the page's job (run/report_page.py).
"""

import contextlib
import dataclasses
import datetime as dt
import itertools
import sqlite3
import zoneinfo

from lms_refresh.disclosure.folding import looks_like
from lms_refresh.disclosure.names import clean_name
from lms_refresh.errors import StateError
from lms_refresh.store.sqlite import read_only_uri

WEEKS = 12  # the weeks of active learners the page draws
SITE = None  # the whole site's rows: `course` IS NULL, the convention of GROUP BY ROLLUP
SITE_LABEL = "Whole site"
COURSE_MARK = " (course)"  # after a course's label that reads as SITE_LABEL: only the site is shown as the site
_SITE_LOOKS = looks_like(SITE_LABEL)
WITHHELD = "withheld"  # a week's published cell whose value is withheld (None: no row that week)


@dataclasses.dataclass(frozen=True)
class Series:
    """One course's (or the site's) weekly active learners: `label` (safe text), `values` per week (an int,
    WITHHELD, or None: no row that week)."""

    course: str | None
    label: str
    values: tuple


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One course's (or the site's) learners who completed, passed and failed in `ReportData.outcome_span`: the
    published values of its row (`completed_learners`, `passed_learners`, `failed_learners`), each an int or
    WITHHELD."""

    course: str | None
    label: str
    completed: object
    passed: object
    failed: object

    @property
    def withheld(self):
        """How many of its three values are withheld."""
        return sum(value == WITHHELD for value in (self.completed, self.passed, self.failed))


@dataclasses.dataclass(frozen=True)
class CategoryWeeks:
    """One course category's active learners in the last two weeks the page shows (`ReportData.weeks`): `label`
    (safe text), `depth` (1 at the top), `previous` and `latest` (an int, WITHHELD, or None: no row that week)."""

    category: int
    label: str
    depth: int
    previous: object
    latest: object


@dataclasses.dataclass(frozen=True)
class ReportData:
    settings: dict
    weeks: tuple
    series: tuple
    outcome_span: str
    outcomes: tuple
    cells: int
    withheld: int
    headlines: tuple = ()
    week_starts: tuple = ()  # the first day of each of `weeks` (ISO date): the charts' x axis
    learners_published: bool = True  # False: the publication predates the learner outcome columns
    categories: tuple = ()  # CategoryWeeks, in the categories' tree order (none without category rows)


def label(course, names):
    """The text that names `course`: its published name, else its IRI (both cleaned), "Whole site" for NULL;
    a course named like the site as a reader sees it (folding.looks_like: letter case, white space, full-width forms
    and look-alike letters aside) is marked COURSE_MARK."""
    if course is SITE:
        return SITE_LABEL
    text = clean_name(names.get(course) or "") or clean_name(course) or "(unnamed course)"
    # A course's name is anyone's text: named "Whole site", its row and chart would pass for the site's total.
    return text + COURSE_MARK if looks_like(text) == _SITE_LOOKS else text


def _tables(db):
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def local_today(now, timezone):
    """The local date (ISO text) of the instant `now` in `timezone`: the day whose term is the current one."""
    return now.astimezone(zoneinfo.ZoneInfo(timezone)).date().isoformat()


def read_publication(path, *, today, weeks=WEEKS):
    """Given the path of a SQLite publication and today's local date (ISO text), return its ReportData;
    StateError if it cannot be read."""
    try:
        with contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True)) as db:
            return _read(db, weeks, today)
    except sqlite3.Error as error:
        raise StateError(f"Cannot read the publication {path} ({error}); a run (re)writes it — on a SQLite "
                         "store, run `lms-refresh run` first.") from error


def _read(db, weeks, today):
    tables = _tables(db)
    about = db.execute("SELECT min_cell_size, method, max_noise, variance, withhold_zeros FROM publication").fetchone()
    settings = dict(zip(("min_cell_size", "method", "max_noise", "variance", "withhold_zeros"), about, strict=True))
    names = dict(db.execute("SELECT course, name FROM courses")) if "courses" in tables else {}
    starts = {}
    if "weekly_metrics" in tables:  # the courses' weeks and the site's (a week may have no course)
        for period, start in itertools.chain(
                db.execute("SELECT period, min(period_start) FROM weekly_metrics GROUP BY period "
                           "ORDER BY period DESC LIMIT ?", (weeks,)),
                site_rows(db, tables, "weekly_metrics", "period, period_start", "1 ORDER BY period DESC LIMIT ?",
                          (weeks,))):
            starts[period] = min(start, starts.get(period, start))
    shown = sorted(starts)[-weeks:]
    starts = {period: starts[period] for period in shown}
    # Row by row, never all rows at once: each row carries its course's IRI (up to 200 characters, a copy a row),
    # which for 9,000 courses and 12 weeks made 50 MB of rows.
    within = f"period IN ({', '.join('?' for _ in shown)})"
    rows = itertools.chain(
        db.execute(f"SELECT course, period, active_learners FROM weekly_metrics WHERE course IS NOT NULL AND {within}",
                   shown),
        ((SITE, *row) for row in site_rows(db, tables, "weekly_metrics", "period, active_learners", within, shown)),
    ) if shown else ()
    by_course, cells, withheld, weeks_shown = {}, 0, 0, {week: week for week in shown}
    for course, period, learners in rows:
        # `suppressed = 1` says only that SOME value of the row is withheld: its learners are withheld when NULL.
        by_course.setdefault(course, {})[weeks_shown[period]] = WITHHELD if learners is None else learners
        cells, withheld = cells + 1, withheld + (learners is None)
    span, outcome_rows, learners_published = _outcome_rows(db, tables, today)
    # One row per course (and the site's) in the period: its values as they are, a withheld one WITHHELD.
    totals = {course: tuple(map(_value, values)) for course, *values in outcome_rows}
    labels = {course: label(course, names) for course in by_course.keys() | totals.keys()}  # each cleaned once

    def order(course):
        return course is not SITE, labels[course].casefold(), course

    series = tuple(Series(course, labels[course], tuple(by_course[course].get(week) for week in shown))
                   for course in sorted(by_course, key=order))
    outcomes = tuple(Outcome(course, labels[course], *totals[course]) for course in sorted(totals, key=order))
    # A cell is one value the page shows (a week's learners; a count of learners who completed, passed or failed),
    # withheld when NULL.
    cells += 3 * len(outcomes)
    withheld += sum(outcome.withheld for outcome in outcomes)
    return ReportData(settings, tuple(shown), series, span, outcomes, cells, withheld, headlines(db, tables, today),
                      tuple(str(starts[week]) for week in shown), learners_published,
                      categories=category_weeks(db, tables, shown[-2:]))


def category_weeks(db, tables, weeks):
    """The CategoryWeeks of every category with a row in `weeks` (the last two shown, the earlier first) of the
    publication's category_weekly_metrics (none when it has no such table): the categories in tree order, each after
    the one it is in, siblings by name."""
    if "category_weekly_metrics" not in tables or not weeks:
        return ()
    weeks = list(weeks) if len(weeks) == 2 else [None, *weeks]
    found = {}
    for category, name, period, learners in db.execute(
            f"SELECT category_id, category_name, period, active_learners FROM category_weekly_metrics "
            f"WHERE period IN ({', '.join('?' for week in weeks if week)})", [week for week in weeks if week]):
        entry = found.setdefault(category, [clean_name(name) or f"Category {category}", None, None])
        entry[1 + weeks.index(period)] = WITHHELD if learners is None else learners
    paths = {}
    if "categories" in tables:
        paths = {category: path for category, path in db.execute("SELECT category_id, path FROM categories")}

    def ancestry(category):
        ids = [int(part) for part in (paths.get(category) or f"/{category}").split("/")[1:] if part.isdigit()]
        return ids or [category]

    def order(category):  # each category after the one above it, siblings by name
        return [((found[above][0].casefold() if above in found else ""), above) for above in ancestry(category)]

    return tuple(CategoryWeeks(category, found[category][0], len(ancestry(category)), found[category][1],
                               found[category][2]) for category in sorted(found, key=order))


def current_term(terms, today):
    """Given the published terms ((name, first day, last day), ISO text) and today's local date, return the current
    one: the term that holds today (of several, the one that started last), else the one that ended most recently;
    None if every term is yet to come."""
    holding = [term for term in terms if term[1] <= today <= term[2]]
    if holding:
        return max(holding, key=lambda term: (term[1], term[2], term[0]))
    ended = [term for term in terms if term[2] < today]
    return max(ended, key=lambda term: (term[2], term[1], term[0])) if ended else None


def _outcome_rows(db, tables, today):
    """(what the outcomes cover, their rows (course, completed, passed, failed learners) to be read once, whether the
    publication has those columns): the current term's rows (`current_term`) when the publication has one, else
    the current month's (the latest begun by `today`). One period's rows: a learner is counted once in it."""
    columns = ", ".join(LEARNER_OUTCOMES)
    for table, kind in (("term_metrics", "term"), ("monthly_metrics", "month")):
        if table not in tables:
            continue
        bounds = "period, period_start, period_end"  # the courses' periods and the site's (one may have no course)
        periods = {tuple(map(str, row)) for row in itertools.chain(
            db.execute(f"SELECT DISTINCT {bounds} FROM {table}"), site_rows(db, tables, table, bounds))}
        if kind == "term":
            period = current_term(periods, today)
        else:
            begun = [row for row in periods if row[1] <= today]
            period = max(begun, key=lambda row: (row[1], row[0])) if begun else None
        if period is None:
            continue
        span = (f"the {kind} {clean_name(period[0]) or '?'} ({period[1]} to {period[2]}"
                + (", so far)" if period[2] >= today else ")"))
        if not set(LEARNER_OUTCOMES) <= set(columns_of(db, table)):
            return span, [], False
        return span, _with_site(db, tables, table, columns, "period = ?", (period[0],)), True
    return "the current term or month (none published yet)", [], True


def _with_site(db, tables, table, columns, condition, parameters):
    """The rows (course, *columns) of `table` that meet `condition`: the courses', then the site's (course None)."""
    return itertools.chain(
        db.execute(f"SELECT course, {columns} FROM {table} WHERE course IS NOT NULL AND {condition}", parameters),
        ((SITE, *row) for row in site_rows(db, tables, table, columns, condition, parameters)))


def site_rows(db, tables, table, columns, condition="1", parameters=()):
    """The whole site's rows of the publication's `table` (weekly_metrics...) that meet `condition`, as tuples of
    `columns` (SQL text, never `course`): from `site_<table>` when the publication has one, else the rows of `table`
    whose course is NULL (the convention of GROUP BY ROLLUP). The one place that knows where the site's rows are."""
    if f"site_{table}" in tables:
        return db.execute(f"SELECT {columns} FROM site_{table} WHERE {condition}", parameters)
    if table not in tables:
        return iter(())
    return db.execute(f"SELECT {columns} FROM {table} WHERE course IS NULL AND {condition}", parameters)


def columns_of(db, table):
    """The names of `table`'s columns, in order (none if there is no such table)."""
    return [row[0] for row in db.execute("SELECT name FROM pragma_table_info(?)", (table,))]


# -- the headline figures: the whole site's current period of each grain against its previous complete one --

# The learners who completed or passed, as columns of term_metrics: shown among the headlines when the publication
# has them (a publication written before they were published has not). Empty this to leave them out.
TERM_OUTCOME_HEADLINES = (("completed_learners", "Learners who completed this term"),
                          ("passed_learners", "Learners who passed this term"))
HEADLINE_GRAINS = (("week", "weekly_metrics", "Active learners this week"),
                   ("month", "monthly_metrics", "Active learners this month"),
                   ("term", "term_metrics", "Active learners this term"))


@dataclasses.dataclass(frozen=True)
class Headline:
    """One headline figure of the whole site: `value` in the current `period` (first to last day, `complete` if it
    is over), `previous_value` in the latest complete period before it (`previous`, None if there is none). A value
    is an int, WITHHELD, or None (no row)."""

    key: str
    title: str
    period: str
    first: str
    last: str
    complete: bool
    value: object
    previous: str | None
    previous_value: object

    @property
    def change(self):
        """The value minus the previous one, or None when either is not a number."""
        if isinstance(self.value, int) and isinstance(self.previous_value, int):
            return self.value - self.previous_value
        return None


def headlines(db, tables, today):
    """The site's headline figures (Headline, in the order HEADLINE_GRAINS then TERM_OUTCOME_HEADLINES) as of
    `today` (local ISO date): a grain without a current period is left out."""
    found = []
    for grain, table, title in HEADLINE_GRAINS:
        present = set(columns_of(db, f"site_{table}" if f"site_{table}" in tables else table))
        if "active_learners" not in present:
            continue
        extra = [(column, text) for column, text in TERM_OUTCOME_HEADLINES if grain == "term" and column in present]
        names = ["period", "period_start", "period_end", "complete", "active_learners", *(c for c, _ in extra)]
        rows = [tuple(str(value) if index < 3 else value for index, value in enumerate(row))
                for row in site_rows(db, tables, table, ", ".join(names))]
        current = _current(rows, today, grain)
        if current is None:
            continue
        earlier = [row for row in rows if row[3] and row[2] < current[1]]
        previous = max(earlier, key=lambda row: (row[2], row[1], row[0])) if earlier else None
        for offset, (key, text) in enumerate([(grain, title), *extra]):
            column = 4 + offset
            found.append(Headline(key, text, clean_name(current[0]) or "?", current[1], current[2], bool(current[3]),
                                  _value(current[column]), previous and (clean_name(previous[0]) or "?"),
                                  previous and _value(previous[column])))
    return tuple(found)


def _value(value):
    return WITHHELD if value is None else value


def _current(rows, today, grain):
    """The row (period, first, last, ...) of the period that holds `today`; for terms `current_term`'s; else the
    latest begun."""
    if grain == "term":
        term = current_term([row[:3] for row in rows], today)
        return next((row for row in rows if row[:3] == term), None) if term else None
    begun = [row for row in rows if row[1] <= today]
    return max(begun, key=lambda row: (row[1], row[0])) if begun else None


# -- a course's own page: its rows of every grain --

DAYS = 35  # the days a course's page shows: the publication's last five weeks
GRAIN_TABLES = (("day", "daily_metrics", "Daily"), ("week", "weekly_metrics", "Weekly"),
                ("month", "monthly_metrics", "Monthly"), ("term", "term_metrics", "Terms"))
_DAY_COLUMNS = ("day", "active_learners", "statements", "completions", "passed", "failed")
_PERIOD_COLUMNS = ("period", "period_start", "period_end", "active_learners", "statements", "completions",
                   "passed", "failed")
# The learner outcome columns (when the publication has them): a course's page shows them, the overview's outcomes
# are them, in this order.
LEARNER_OUTCOMES = ("completed_learners", "passed_learners", "failed_learners")


@dataclasses.dataclass(frozen=True)
class Course:
    """One course's page: its IRI, label (safe text), Moodle category (safe text or None), and per grain
    ((grain, title, columns, rows), ...), each row the publication's values (None: withheld)."""

    course: str
    label: str
    category: str | None
    grains: tuple


@contextlib.contextmanager
def opened(path):
    """The publication at `path`, open read-only (StateError if it cannot be)."""
    try:
        db = sqlite3.connect(read_only_uri(path), uri=True)
    except sqlite3.Error as error:
        raise StateError(f"Cannot read the publication {path} ({error}).") from error
    with contextlib.closing(db):
        yield db


def courses(db):
    """Every course of the publication with rows (Course), in the order of their IRIs, one at a time: no more than
    one course's rows is held."""
    tables = _tables(db)
    streams = []
    for grain, table, title in GRAIN_TABLES:
        if table not in tables:
            continue
        present = columns_of(db, table)
        if grain == "day":
            wanted, order, since = _DAY_COLUMNS, "day", _first_day(db)
            condition, parameters = "day >= ?", (since,)
        else:
            wanted = (*_PERIOD_COLUMNS, *(c for c in LEARNER_OUTCOMES if c in present), "complete")
            order, condition, parameters = "period_start, period", "1", ()
        cursor = db.execute(f"SELECT course, {', '.join(wanted)} FROM {table} WHERE course IS NOT NULL AND "
                            f"{condition} ORDER BY course, {order}", parameters)
        streams.append((grain, title, wanted, itertools.groupby(cursor, key=lambda row: row[0])))
    heads = {grain: next(groups, None) for grain, _, _, groups in streams}
    while True:
        pending = [head[0] for head in heads.values() if head is not None]
        if not pending:
            return
        course = min(pending)
        grains = []
        for grain, title, wanted, groups in streams:
            head = heads[grain]
            rows = ()
            if head is not None and head[0] == course:
                rows = tuple(row[1:] for row in head[1])
                heads[grain] = next(groups, None)
            grains.append((grain, title, wanted, rows))
        # One course's name at a time (by its key): the names of 9,000 courses held at once would outweigh a page.
        name, category = (db.execute("SELECT name, category FROM courses WHERE course = ?", (course,)).fetchone()
                          if "courses" in tables else None) or (None, None)
        yield Course(course, label(course, {course: name}), clean_name(category or ""), tuple(grains))


def _first_day(db):
    last = max((row[0] for row in itertools.chain(db.execute("SELECT max(day) FROM daily_metrics"),
                                                   site_rows(db, _tables(db), "daily_metrics", "max(day)"))
                if row[0]), default=None)
    if not last:
        return ""
    try:
        return (dt.date.fromisoformat(str(last)) - dt.timedelta(days=DAYS - 1)).isoformat()
    except ValueError:
        return ""
