"""What the HTML report shows, read from the publication file alone (read-only): no store, no network.

`read_publication` returns a `ReportData`: the privacy settings the publication was computed with,
the course names, the last weeks of `weekly_metrics` per course and for the whole site (`site_weekly_metrics`: read
by `site_rows`, the one reader of the site's rows), the completions, passed and failed of the current term
(`term_metrics`, when the publication has it: see `current_term`) or else of the last 4 weeks, and how many of the
cells it shows are withheld. A cell is one value, withheld when NULL: a row's `suppressed = 1` says only that some
value of it is, the others being published. Every text it returns is made safe to show by disclosure/names.py;
escaping it is the page's job (run/report_page.py).
"""

import contextlib
import dataclasses
import itertools
import sqlite3
import zoneinfo

from lms_refresh.disclosure.folding import looks_like
from lms_refresh.disclosure.names import clean_name
from lms_refresh.errors import StateError
from lms_refresh.store.sqlite import read_only_uri

WEEKS = 12  # the weeks of active learners the page draws
OUTCOME_WEEKS = 4  # without terms, completions, passed and failed are summed over this many weeks
SITE = None  # the course of the whole site's rows, as `site_rows` returns them
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
    """One course's (or the site's) completions, passed and failed over `ReportData.outcome_span`: each a
    sum of the published cells (None: every cell withheld), `withheld` the number of withheld cells."""

    course: str | None
    label: str
    completions: int | None
    passed: int | None
    failed: int | None
    withheld: int


@dataclasses.dataclass(frozen=True)
class ReportData:
    settings: dict
    weeks: tuple
    series: tuple
    outcome_span: str
    outcomes: tuple
    cells: int
    withheld: int


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


def site_rows(db, table, columns, where="", parameters=()):
    """Return the whole site's rows of the course table `table` (from its site table, `site_<table>`) as that table's
    rows would be: `columns` (which name `course`) with `course` None, for the rows that meet `where` (an SQL condition
    on the site table's columns, with `parameters`). None from a publication written before the site tables: its
    course tables hold the site's rows themselves, with `course` NULL, which their readers already read."""
    site_table = f"site_{table}"
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (site_table,)).fetchone() is None:
        return []
    selected = ", ".join("NULL" if column == "course" else column for column in columns)
    return db.execute(f"SELECT {selected} FROM {site_table}" + (f" WHERE {where}" if where else ""), parameters)


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
    shown = sorted({row[0] for row in itertools.chain(
        db.execute("SELECT DISTINCT period FROM weekly_metrics ORDER BY period DESC LIMIT ?", (weeks,)),
        site_rows(db, "weekly_metrics", ("period",), "true ORDER BY period DESC LIMIT ?", (weeks,)))})[-weeks:] \
        if "weekly_metrics" in tables else []
    # Row by row, never all rows at once: each row carries its course's IRI (up to 200 characters, a copy a row),
    # which for 9,000 courses and 12 weeks made 50 MB of rows.
    within = f"period IN ({', '.join('?' for _ in shown)})"
    rows = itertools.chain(
        site_rows(db, "weekly_metrics", ("course", "period", "active_learners"), within, shown),
        db.execute(f"SELECT course, period, active_learners FROM weekly_metrics WHERE {within}", shown)) \
        if shown else ()
    by_course, cells, withheld, weeks_shown = {}, 0, 0, {week: week for week in shown}
    for course, period, learners in rows:
        # `suppressed = 1` says only that SOME value of the row is withheld: its learners are withheld when NULL.
        by_course.setdefault(course, {})[weeks_shown[period]] = WITHHELD if learners is None else learners
        cells, withheld = cells + 1, withheld + (learners is None)
    span, outcome_rows = _outcome_rows(db, tables, shown, today)
    totals = _totals(outcome_rows)
    labels = {course: label(course, names) for course in by_course.keys() | totals.keys()}  # each cleaned once

    def order(course):
        return course is not SITE, labels[course].casefold(), course

    series = tuple(Series(course, labels[course], tuple(by_course[course].get(week) for week in shown))
                   for course in sorted(by_course, key=order))
    outcomes = tuple(Outcome(course, labels[course], *totals[course][:4]) for course in sorted(totals, key=order))
    # A cell is one value the page shows (a week's learners; a completions, passed or failed), withheld when NULL.
    cells += sum(entry[4] for entry in totals.values())
    withheld += sum(entry[3] for entry in totals.values())
    return ReportData(settings, tuple(shown), series, span, outcomes, cells, withheld)


def _totals(outcome_rows):
    """{course: [completions, passed, failed, withheld cells, cells]}: each the sum of its published values (None
    when all are withheld), summed value by value, since a row with `suppressed = 1` may publish some of them."""
    totals = {}
    for course, *values in outcome_rows:
        entry = totals.setdefault(course, [None, None, None, 0, 0])
        entry[4] += len(values)
        for index, value in enumerate(values):
            if value is None:
                entry[3] += 1
            else:
                entry[index] = (entry[index] or 0) + value
    return totals


def current_term(terms, today):
    """Given the published terms ((name, first day, last day), ISO text) and today's local date, return the current
    one: the term that holds today (of several, the one that started last), else the one that ended most recently;
    None if every term is yet to come."""
    holding = [term for term in terms if term[1] <= today <= term[2]]
    if holding:
        return max(holding, key=lambda term: (term[1], term[2], term[0]))
    ended = [term for term in terms if term[2] < today]
    return max(ended, key=lambda term: (term[2], term[1], term[0])) if ended else None


def _outcome_rows(db, tables, shown, today):
    """(what the outcomes cover, their rows (course, completions, passed, failed), to be read once): the current
    term's (`current_term`) when the publication has one, else the last OUTCOME_WEEKS weeks'."""
    columns = "course, completions, passed, failed"
    if "term_metrics" in tables:
        bounds = ("period", "period_start", "period_end")
        term = current_term({tuple(map(str, row)) for row in itertools.chain(
            db.execute("SELECT DISTINCT period, period_start, period_end FROM term_metrics"),
            site_rows(db, "term_metrics", bounds))}, today)
        if term is not None:
            rows = itertools.chain(site_rows(db, "term_metrics", columns.split(", "), "period = ?", (term[0],)),
                                   db.execute(f"SELECT {columns} FROM term_metrics WHERE period = ?", (term[0],)))
            return f"the term {clean_name(term[0]) or '?'} ({term[1]} to {term[2]})", rows
    last = shown[-OUTCOME_WEEKS:]
    if not last:
        return "the last weeks (none published yet)", []
    within = f"period IN ({', '.join('?' for _ in last)})"
    rows = itertools.chain(site_rows(db, "weekly_metrics", columns.split(", "), within, last),
                           db.execute(f"SELECT {columns} FROM weekly_metrics WHERE {within}", last))
    return f"the last {len(last)} week(s), {last[0]} to {last[-1]}", rows
