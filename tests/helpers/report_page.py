"""The HTML report's tests' tools: a publication written by the real writer (run/publication.py) with the
courses, names and rows a test chooses (every column of them: no learner column left NULL for want of a value), and
the page read back with html.parser (as a browser's DOM would hold it: tables by id, text of elements by id, every
element's tag and attributes, the texts of each chart)."""

import datetime as dt
import html.parser

from lms_refresh.disclosure.policy import PrivacySettings
from lms_refresh.run.publication import write_publication
from lms_refresh.store.tables import PERIOD_SERVING_COLUMNS


def week_label(index):
    """(label, first day, last day) of ISO week `index` counted from 2026-W01."""
    monday = dt.date(2025, 12, 29) + dt.timedelta(weeks=index)
    year, week, _ = monday.isocalendar()
    return f"{year}-W{week:02d}", monday.isoformat(), (monday + dt.timedelta(days=6)).isoformat()


def month_label(index):
    """(label, first day, last day) of month `index` counted from 2026-01."""
    first = dt.date(2026 + index // 12, 1 + index % 12, 1)
    last = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)
    return first.strftime("%Y-%m"), first.isoformat(), last.isoformat()


def learner_columns(learners, counts):
    """The learner outcome columns of a row of `learners` active learners and `counts` (completed, passed, failed
    learners; None: withheld), then the shares the publication computes from them."""
    completed, passed, failed = counts
    share = None if completed is None or not learners else completed / learners
    rate = None if passed is None or failed is None or passed + failed == 0 else passed / (passed + failed)
    return (completed, passed, failed, share, rate)


def period_row(week, course, learners, *, completions=None, passed=None, failed=None, suppressed=0,
               outcome_learners=None, period=week_label):
    """A row of weekly_metrics (`period=month_label`: monthly_metrics) of every published column: its statement
    counts, and its learners who completed, passed and failed (`outcome_learners`, by default one a statement, at
    most `learners`; a statement count withheld withholds them)."""
    label, first, last = period(week)
    if suppressed:
        return (label, first, last, course, *(None,) * 8, 1, 1, *(None,) * 5)
    counts = (completions, passed, failed)
    if outcome_learners is None:
        outcome_learners = tuple(None if count is None else min(count, learners) for count in counts)
    return (label, first, last, course, learners, learners * 3, learners, *counts, 0.5, 60.0, 0, 1,
            *learner_columns(learners, outcome_learners))


def build(path, courses, weekly, *, site=None, settings=None, terms=None, monthly=()):
    """Write a publication at `path`: `courses` {iri: name or None}, `weekly` the rows of weekly_metrics
    (period_row), `site` the site's weekly rows (course None) or None for a publication without them, `monthly`
    and `terms` those tables' rows (courses' and site's), every row whole (PERIOD_SERVING_COLUMNS)."""
    settings = settings or PrivacySettings(min_cell_size=10, method="cell-key", max_noise=3, variance=2.0)
    tables = {"weekly_metrics": list(weekly) + list(site or ()), "monthly_metrics": list(monthly)}
    if terms is not None:
        tables["term_metrics"] = terms
    for rows in tables.values():
        assert all(len(row) == len(PERIOD_SERVING_COLUMNS) for row in rows), "a row without every column"
    names = [(iri, name, None, None, None, None) for iri, name in courses.items()]
    write_publication(str(path), None, ([], tables), settings=settings, wanted="test", euid=-1, courses=names)
    return path


class Page(html.parser.HTMLParser):
    """A parsed page: `tables` {id: [[cell text, ...] per row]}, `texts` {id: text}, `elements` [(tag, attrs)],
    `svg_texts` {svg id: [(class, text) of each of its <text> elements]}."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tables, self.texts, self.elements, self.titles, self.svg_texts = {}, {}, [], [], {}
        self._svg = None
        self._table, self._row, self._open = None, None, []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag == "svg":
            self._svg = self.svg_texts.setdefault(attrs.get("id"), [])
        elif tag == "text" and self._svg is not None:
            self._svg.append([attrs.get("class") or "", ""])
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id"), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._row.append("")
        self._open.append((tag, attrs.get("id")))

    def handle_endtag(self, tag):
        while self._open:
            opened, _ = self._open.pop()
            if opened == tag:
                break
        if tag == "table":
            self._table = None
        elif tag == "svg":
            self._svg = None

    def handle_data(self, data):
        if self._row is not None and self._row and any(tag in ("td", "th") for tag, _ in self._open):
            self._row[-1] += data
        for _, ident in self._open:
            if ident:
                self.texts[ident] = self.texts.get(ident, "") + data
        if self._open and self._open[-1][0] == "title":
            self.titles.append(data)
        elif self._svg and any(tag == "text" for tag, _ in self._open):
            self._svg[-1][1] += data

    def rows(self, table):
        """{first cell: the other cells} of table `table`'s body rows."""
        return {row[0]: row[1:] for row in self.tables[table][1:]}
