"""The HTML report's tests' tools: a publication written by the real writer (run/publication.py) with the
courses, names and weekly rows a test chooses, and the page read back with html.parser (as a browser's DOM
would hold it: tables by id, text of elements by id, every element's tag and attributes)."""

import datetime as dt
import html.parser

from lms_refresh.disclosure.policy import PrivacySettings
from lms_refresh.run.publication import write_publication
from lms_refresh.store.tables import PERIOD_SERVING_COLUMNS

# The columns of a period row after (period, period_start, period_end, course): the day's, then `complete`.
_EMPTY = (None,) * 7


def week_label(index):
    """(label, first day, last day) of ISO week `index` counted from 2026-W01."""
    monday = dt.date(2025, 12, 29) + dt.timedelta(weeks=index)
    year, week, _ = monday.isocalendar()
    return f"{year}-W{week:02d}", monday.isoformat(), (monday + dt.timedelta(days=6)).isoformat()


def period_row(week, course, learners, *, completions=None, passed=None, failed=None, suppressed=0):
    label, first, last = week_label(week)
    if suppressed:
        return (label, first, last, course, *(None,) * 8, 1, 1)
    return (label, first, last, course, learners, learners * 3, learners, completions, passed, failed, 0.5, 60.0,
            0, 1)


def build(path, courses, weekly, *, site=None, settings=None, terms=None):
    """Write a publication at `path`: `courses` {iri: name or None}, `weekly` the rows of weekly_metrics
    (period_row), `site` the site's rows (course None) or None for a publication without them."""
    settings = settings or PrivacySettings(min_cell_size=10, method="cell-key", max_noise=3, variance=2.0)
    tables = {"weekly_metrics": list(weekly) + list(site or ()), "monthly_metrics": []}
    if terms is not None:
        tables["term_metrics"] = terms
    # The report reads no learner outcome column: rows without them have them NULL.
    tables = {name: [tuple(row) + (None,) * (len(PERIOD_SERVING_COLUMNS) - len(row)) for row in rows]
              for name, rows in tables.items()}
    names = [(iri, name, None, None, None, None) for iri, name in courses.items()]
    write_publication(str(path), None, ([], tables), settings=settings, wanted="test", euid=-1, courses=names)
    return path


class Page(html.parser.HTMLParser):
    """A parsed page: `tables` {id: [[cell text, ...] per row]}, `texts` {id: text}, `elements` [(tag, attrs)]."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tables, self.texts, self.elements, self.titles = {}, {}, [], []
        self._table, self._row, self._open = None, None, []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
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

    def handle_data(self, data):
        if self._row is not None and self._row and any(tag in ("td", "th") for tag, _ in self._open):
            self._row[-1] += data
        for _, ident in self._open:
            if ident:
                self.texts[ident] = self.texts.get(ident, "") + data
        if self._open and self._open[-1][0] == "title":
            self.titles.append(data)

    def rows(self, table):
        """{first cell: the other cells} of table `table`'s body rows."""
        return {row[0]: row[1:] for row in self.tables[table][1:]}
