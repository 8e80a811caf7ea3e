"""The HTML report: one self-contained static page from the publication (run/report_data.py).

No JavaScript, no network, no external style or font: inline CSS and inline SVG charts, each with
a `<title>` and a table holding the same numbers. Every text that reaches the page goes through
`_text` (html.escape with quote=True), course names and IRIs too: they are attacker-controlled text
(disclosure/names.py has already removed control characters and bidi overrides and bounded them).
`write_report` replaces the file atomically (lms_refresh/atomic.py), writing it piece by piece: a page of many
courses is never held whole in memory.

The page the runs maintain, and the retirement of one they no longer do: once `[report] path` moves, `enabled`
is false or the store is PostgreSQL, no run writes that page again; left where it was, it says "Fresh" with
numbers that age while `status --check` turns CRITICAL, and a web server keeps serving it. So every page
written where the configuration says is noted in the state directory (`remember_page`: its path and a SHA-256
digest of what was written), and the first run that maintains no page there removes it (`retire_page`) — only
if it is still what the tool wrote: a file the tool did not write, or one changed since, is never removed (a
warning says it stays).
"""

import hashlib
import json
import logging
import os

from lms_refresh import atomic
from lms_refresh.disclosure.names import clean_name
from lms_refresh.regular_files import NotRegularFile, open_regular
from lms_refresh.run.report_data import LEARNER_OUTCOMES, WITHHELD, opened, read_publication
from lms_refresh.run.report_files import files_directory, page_name, protection, remove_files, write_courses, write_csv
from lms_refresh.run.report_html import (
    HEAD,
    OUTCOME_KINDS,
    STYLE,
    VIEWPORT,
    bar_chart,
    cell,
    heat_class,
    heat_legend,
    label,
    local_time,
    nice_top,
    outcome_bars,
    text,
)
from lms_refresh.state_directory import REPORT_NOTE

logger = logging.getLogger(__name__)

SMALL_MULTIPLES = 24  # up to this many courses, each has its own chart; past it, the heat map alone
OUTCOME_BARS = 30  # the courses the outcomes chart draws (most learners who completed first); the table: all


def _banner(freshness):
    """STALE (first thing under the title: the numbers below are old) or fresh."""
    stale = freshness.get("stale")
    return (f'<p class="stale" id="stale">STALE: {text(stale)}</p>' if stale
            else '<p class="fresh" id="fresh">Fresh: the last successful refresh is recent enough for the '
                 'schedule (as of when this page was written).</p>')


def _freshness(freshness, timezone):
    """When the data and the page are from, in `timezone`."""
    local = {key: local_time(freshness.get(key), timezone) for key in ("watermark", "last_success", "written")}
    return ("<dl><dt>Last successful refresh</dt><dd id=\"last-success\">"
            f"{text(local['last_success'] or 'never')}</dd><dt>Data up to (watermark)</dt><dd id=\"watermark\">"
            f"{text(local['watermark'] or 'none')}</dd><dt>Page written</dt><dd id=\"written\">"
            f"{text(local['written'])}</dd><dt>Time zone</dt><dd id=\"timezone\">{text(timezone)}</dd></dl>")


def _as_of(freshness, timezone):
    when = local_time(freshness.get("watermark"), timezone)
    return (f'<p class="asof" id="data-as-of">Data as of {text(when)}</p>' if when
            else '<p class="asof" id="data-as-of">No data refreshed yet</p>')


def _headline(headline):
    value = cell(headline.value)
    span = (f"{text(headline.period)}, {text(headline.first)} to {text(headline.last)}"
            + ("" if headline.complete else " (so far)"))
    if headline.previous is None:
        change = "no complete earlier period to compare with"
    elif headline.change is None:
        change = f"previous complete period {text(headline.previous)}: {text(cell(headline.previous_value))}"
    else:
        sign = "+" if headline.change > 0 else ("−" if headline.change < 0 else "±")
        share = (f" ({abs(headline.change) / headline.previous_value:.0%})" if headline.previous_value else "")
        change = (f'<span class="delta">{sign}{abs(headline.change):,}</span>{share} against '
                  f"{text(headline.previous)} ({text(cell(headline.previous_value))})")
    key = text(headline.key)
    return (f'<div class="card" id="headline-{key}"><h3>{text(headline.title)}</h3>'
            f'<p class="figure" id="headline-{key}-value">{text(value)}</p>'
            f'<p class="change" id="headline-{key}-change">{change}</p><p class="period">{span}</p></div>')


def _headlines(data, files):
    share = data.withheld / data.cells if data.cells else 0.0
    cards = "".join(_headline(headline) for headline in data.headlines)
    return (f'<section id="headlines"><h2>The whole site at a glance</h2><div class="cards">{cards}'
            f'<div class="card" id="headline-withheld"><h3>Share of figures withheld</h3>'
            f'<p class="figure" id="withheld-share">{share:.1%}</p><p class="change">'
            f'<span id="withheld">{data.withheld}</span> of <span id="cells">{data.cells}</span> figures on this '
            f'page</p></div></div><p class="csv"><a href="{text(_csv_link(files, "headlines"))}" download>CSV of '
            "these figures</a></p></section>")


def _privacy(data):
    return (f'<section id="privacy"><h2>How learners are protected</h2><p>{protection(data.settings)} Each figure '
            "is protected on its own, so columns and rows need not add up: a week is not the sum of its days, the "
            "whole site not the sum of its courses.</p></section>")


def _csv_link(files, table):
    return f"{files}/overview-{table}.csv"


def _course_link(files, course, shown):
    if course is None:
        return shown
    return f'<a href="{text(files)}/{page_name(course)}.html">{shown}</a>'


def _top(data):
    return max([value for series in data.series if series.course is not None for value in series.values
                if isinstance(value, int)] or [1])


def _weekly(data, files):
    """The weekly section, piece by piece: the site's chart, each course's (when few), the heat map and its table."""
    dates = data.week_starts  # the x axis: each week's Monday (the table's heading names the ISO week)
    site = next((series for series in data.series if series.course is None), None)
    yield '<section id="weekly"><h2>Weekly active learners</h2>'
    if site is not None:
        site_top = nice_top(max([value for value in site.values if isinstance(value, int)] or [1]))
        yield (f'<figure id="site-chart"><figcaption title="{label(site.label)}">{label(site.label)}, scale 0 to '
               f"{site_top:,} learners</figcaption>"
               + bar_chart(dates, site.values, top=site_top, ident="chart-site",
                           caption="Active learners a week; w: withheld")
               + "</figure>")
    courses = [series for series in data.series if series.course is not None]
    top = nice_top(_top(data))
    if courses and len(courses) <= SMALL_MULTIPLES:
        yield (f'<p id="shared-scale">Every course chart below shares one scale: 0 to {top:,} active learners '
               "a week (x: the week's first day; w: withheld).</p><div class=\"grid\">")
        for series in courses:
            shown = label(series.label)
            yield (f'<figure><figcaption title="{shown}">{_course_link(files, series.course, shown)}</figcaption>'
                   + bar_chart(dates, series.values, top=top, caption=f"scale 0 to {top:,}", ticks=2) + "</figure>")
        yield "</div>"
    yield (f"<h3>Every course, week by week</h3><p>The shade of a cell is its number of learners, on one scale of "
           f"0 to {top:,} for every course.</p>{heat_legend(top)}")
    head = "".join(f'<th scope="col">{text(week)}</th>' for week in data.weeks)
    yield (f'<div class="scroll"><table id="weekly-table"><thead><tr><th scope="col">Course</th>{head}</tr></thead>'
           "<tbody>")
    for series in data.series:
        shown = label(series.label)
        cells = "".join(f'<td class="{heat_class(value, top) if series.course is not None else ""}">'
                        f"{text(cell(value))}</td>" for value in series.values)
        yield (f'<tr data-course="{label(_iri(series.course))}"><th scope="row" title="{shown}">'
               f"{_course_link(files, series.course, shown)}</th>{cells}</tr>")
    yield (f'</tbody></table></div><p class="csv"><a href="{text(_csv_link(files, "weekly"))}" download>CSV of '
           "this table</a></p></section>")


def _iri(course):
    """A course's IRI as an attribute may carry it: cleaned as names are (no bidi override, no address, at most
    200 characters), like every text of the page; "" for the whole site."""
    return (clean_name(course) or "") if isinstance(course, str) else ""


def _outcomes(data, files):
    """The outcomes section, piece by piece: the learners who completed, passed and failed, as bars for the courses
    with most learners who completed, and a table row per course."""
    chosen = sorted((o for o in data.outcomes if o.course is not None),
                    key=lambda o: (-(o.completed if isinstance(o.completed, int) else -1), o.label.casefold()))
    chosen = chosen[:OUTCOME_BARS]
    yield (f'<section id="outcomes"><h2>Learners who completed, passed and failed</h2><p id="outcomes-about">In '
           f"{text(data.outcome_span)}: distinct learners, each counted once per course however many of its "
           "activities they completed, passed or failed (a learner who passed one activity and failed another is "
           "counted in both). A withheld figure is shown as withheld, never as 0. The chart shows the "
           f"{len(chosen)} courses with the most learners who completed; the table every course. Each course's "
           "page has its counts of statements too.</p>")
    if not data.learners_published:
        yield ('<p class="note" id="outcomes-missing">This publication has no learner counts yet: the next run '
               "writes them.</p>")
    if chosen:
        yield outcome_bars([(o.label, o.completed, o.passed, o.failed) for o in chosen])
    head = "".join(f'<th scope="col">{text(name)}</th>' for _, name, _, _ in OUTCOME_KINDS)
    yield (f'<div class="scroll"><table id="outcomes-table"><thead><tr><th scope="col">Course</th>{head}</tr>'
           "</thead><tbody>")
    for outcome in data.outcomes:
        shown = label(outcome.label)
        yield (f'<tr data-course="{label(_iri(outcome.course))}"><th scope="row" title="{shown}">'
               f"{_course_link(files, outcome.course, shown)}</th>"
               f"<td>{text(cell(outcome.completed))}</td><td>{text(cell(outcome.passed))}</td>"
               f"<td>{text(cell(outcome.failed))}</td></tr>")
    yield (f'</tbody></table></div><p class="csv"><a href="{text(_csv_link(files, "outcomes"))}" download>CSV of this '
           "table</a></p></section>")


def _categories(data, files):
    """The course categories section: a row per category, indented under the one it is in, with its active learners
    in the last two weeks the page shows (none without category rows)."""
    if not data.categories:
        return
    previous, latest = ([None] + list(data.weeks))[-2:]
    yield ('<section id="categories"><h2>Course categories</h2><p>Distinct learners a week over each category\'s '
           "courses and those of the categories in it: a learner in several of its courses counts once, so a "
           "category's figure is not the sum of its courses'.</p><div class=\"scroll\"><table id=\"categories-table\">"
           f'<thead><tr><th scope="col">Category</th><th scope="col">{text(previous or "–")}</th>'
           f'<th scope="col">{text(latest)}</th></tr></thead><tbody>')
    for category in data.categories:
        shown = label(category.label)
        yield (f'<tr data-category="{category.category}"><th scope="row" title="{shown}" '
               f'style="padding-left:{min(category.depth, 10) - 1}em">{shown}</th>'
               f"<td>{text(cell(category.previous))}</td><td>{text(cell(category.latest))}</td></tr>")
    yield (f'</tbody></table></div><p class="csv"><a href="{text(_csv_link(files, "categories"))}" download>CSV of '
           "this table</a></p></section>")


def render(data, freshness, files="report-files"):
    """Given a ReportData and the freshness ({"last_success", "watermark", "stale", "written"} as stored instants,
    and "timezone", the configured zone: UTC if absent), return the overview page as text; `files` is the name of
    the directory of course pages and CSVs beside it."""
    return "".join(_pieces(data, freshness, files))


def _pieces(data, freshness, files="report-files"):
    """The page (see `render`) in pieces, in order: none holds more than one course's row or figure, so that
    `write_report` holds no more of the page than a piece and its file's buffer, however many courses there are."""
    timezone = freshness.get("timezone") or "UTC"
    yield (f"{HEAD}{VIEWPORT}<style>{STYLE}</style></head><body><h1>LMS activity report</h1>"
           f"{_as_of(freshness, timezone)}{_banner(freshness)}{_headlines(data, files)}{_privacy(data)}")
    yield from _weekly(data, files)
    yield from _categories(data, files)
    yield from _outcomes(data, files)
    yield f'<footer><section id="freshness"><h2>Freshness</h2>{_freshness(freshness, timezone)}</section></footer>'
    yield "</body></html>\n"


def retire(path):
    """Remove the report at `path` once its store has moved to PostgreSQL: no run writes it any more, and a web
    server would go on serving its old numbers and freshness. Return "removed", "absent", or "kept" for a file
    there that this program did not write (or that could not be removed: said in the journal, never raised)."""
    try:
        handle, _ = open_regular(path)
    except FileNotFoundError:
        return "absent"
    except OSError:  # not a regular file (a FIFO, a directory) or unreadable: not a page of ours to remove
        return "kept"
    head = HEAD.encode()
    with handle:
        if handle.read(len(head)) != head:
            return "kept"
    try:
        os.unlink(path)
        remove_files(path)  # its course pages and CSVs, which would go on showing old numbers too
    except OSError as error:
        logger.warning("The HTML report %s is no longer written since the store is PostgreSQL, and could not be "
                       "removed (%s); remove it.", path, error)
        return "kept"
    logger.warning("Removed the HTML report %s: the store is PostgreSQL now. No run writes it any more, and a web "
                   "server would go on serving its old numbers.", path)
    return "removed"


def overview_tables(data):
    """The overview's tables as CSV: {name: (header, rows)}, the publication's values only (withheld: empty)."""

    def value(entry):
        return None if entry == WITHHELD else entry

    previous, latest = ([None, None] + list(data.weeks))[-2:]  # the categories' two weeks, headed by their labels
    # Generators: each row is made as it is written, never all of them at once.
    return {
        "headlines": (["figure", "period", "from", "to", "complete", "value", "previous_period", "previous_value"],
                      ([h.title, h.period, h.first, h.last, int(h.complete), value(h.value), h.previous,
                        value(h.previous_value)] for h in data.headlines)),
        "weekly": (["course", "name", *data.weeks],
                   ([series.course or "", series.label, *map(value, series.values)] for series in data.series)),
        "outcomes": (["course", "name", *LEARNER_OUTCOMES],
                     ([o.course or "", o.label, value(o.completed), value(o.passed), value(o.failed)]
                      for o in data.outcomes)),
        "categories": (["category_id", "name", "depth", previous or "previous_week", latest or "latest_week"],
                       ([c.category, c.label, c.depth, value(c.previous), value(c.latest)] for c in data.categories)),
    }


def write_report(publication_path, output, freshness, *, today, mode=0o644, group=None):
    """Render the report of the publication at `publication_path` as of `today` (the local date, ISO text): its
    course pages and CSVs into the directory beside `output` (report_files: only the changed pages are written),
    then the overview, replacing `output` atomically, with `mode` and `group` (the publication's); return `output`.
    The overview is written to its temporary piece by piece (`_pieces`), never held whole."""
    data = read_publication(publication_path, today=today)
    directory = files_directory(output)
    with opened(publication_path) as db:
        counts = write_courses(db, directory, os.path.basename(output), data.settings, mode=mode, group=group)
    logger.debug("Course pages: %d written, %d unchanged, %d files removed.", *counts)
    for name, (header, rows) in overview_tables(data).items():
        write_csv(os.path.join(directory, f"overview-{name}.csv"), header, rows, mode=mode, group=group)
    with atomic.replacing(output, mode=mode, group=group, what=f"the report {output}",
                          outcome="the publication stands.") as temporary:
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            handle.writelines(_pieces(data, freshness, os.path.basename(directory)))
    return output


# -- the page the runs maintain --

_BLOCK = 1 << 20


def note_path(config):
    return os.path.join(config.state_directory, REPORT_NOTE)


def maintained_page(config):
    """The page runs of `config` write (`[report] path`), or None if they write none."""
    return config.report.path if config.store.type == "sqlite" and config.report.enabled else None


def digest(path):
    """The SHA-256 of the regular file `path` (hex), or None if it is not one (gone, replaced by another kind)."""
    try:
        handle, _ = open_regular(path)
    except (FileNotFoundError, NotRegularFile):
        return None
    sha = hashlib.sha256()
    with handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            sha.update(block)
    return sha.hexdigest()


def remember_page(config, page):
    """Note that the tool has just written `page` (the maintained one); best effort (a warning)."""
    path = note_path(config)
    try:
        text = json.dumps({"path": page, "sha256": digest(page)}, sort_keys=True) + "\n"
        atomic.replace_bytes(path, text.encode(), mode=0o640, what=f"the report note {path}",
                             outcome="the report stands.")
    except Exception as error:  # the page stands; without the note, a later move leaves it behind
        logger.warning("Could not note the report page in %s (%s: %s).", path, type(error).__name__, error)


def _noted(config):
    try:
        with open(note_path(config), encoding="utf-8") as handle:
            note = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        logger.warning("Could not read the report note %s (%s); a page it names is left in place.",
                       note_path(config), error)
        return None
    if not isinstance(note, dict) or not isinstance(note.get("path"), str) or not os.path.isabs(note["path"]):
        return None
    return note


def retire_page(config):
    """Remove the page the tool last wrote if `config`'s runs no longer maintain it (and it is as written);
    return its path if it was removed. Never raises: the run stands whatever happens here."""
    try:
        note = _noted(config)
        if note is None or note["path"] == maintained_page(config):
            return None
        old = note["path"]
        found = digest(old)
        if found is not None and found == note.get("sha256"):
            os.unlink(old)
            remove_files(old)
            logger.info("Removed the HTML report %s: the configuration no longer has the runs write it there "
                        "([report] path or enabled changed), and it would go on showing old numbers.", old)
            removed = old
        else:
            removed = None
            if found is not None:
                logger.warning("The HTML report %s is no longer written by the runs, but it changed since "
                               "lms-refresh wrote it, so it is left in place: remove it if nothing else keeps it.",
                               old)
        os.unlink(note_path(config))
        return removed
    except Exception as error:
        logger.warning("Could not remove the HTML report the runs no longer write (%s: %s).", type(error).__name__,
                       error)
        return None
