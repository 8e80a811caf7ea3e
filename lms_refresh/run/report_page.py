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
import html
import json
import logging
import os

from lms_refresh import atomic
from lms_refresh.disclosure.names import clean_name
from lms_refresh.regular_files import NotRegularFile, open_regular
from lms_refresh.run.report_data import WITHHELD, read_publication
from lms_refresh.state_directory import REPORT_NOTE

logger = logging.getLogger(__name__)

_STYLE = """body{font:14px/1.4 sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}
.stale{background:#b00020;color:#fff;padding:.6em 1em;font-weight:bold;font-size:1.2em}
.fresh{background:#e6f4ea;padding:.6em 1em}.note{color:#555}.grid{display:flex;flex-wrap:wrap;gap:.5em}
figure{margin:0;width:190px;border:1px solid #ddd;padding:4px}figcaption{font-size:12px;overflow:hidden;
text-overflow:ellipsis;white-space:nowrap}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ccc;padding:2px 5px;text-align:right}th[scope=row]{text-align:left;max-width:28em;
overflow:hidden;text-overflow:ellipsis;white-space:nowrap}details{margin:.5em 0}"""
_WIDTH, _HEIGHT = 180, 40


def _text(value):
    """Any value as HTML text, escaped (quotes too: the same text may land in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


# The most HTML one label (or a course's IRI) may take: anyone's name is bounded in characters (disclosure/names.py),
# but escaped a character may take six ('"' is &quot;), and the page writes a label five times and an IRI twice
# per course: 9,000 names of 200 '"' made a 68.8 MiB page. Past it, the label is cut and ends with "…".
_LABEL_HTML = 240


def _label(text):
    """`text` escaped as `_text` does, cut to at most _LABEL_HTML characters of HTML (then "…")."""
    escaped = _text(text)
    if len(escaped) <= _LABEL_HTML:
        return escaped
    kept, size = [], 0
    for char in text:
        piece = html.escape(char, quote=True)
        if size + len(piece) >= _LABEL_HTML:
            break
        kept.append(piece)
        size += len(piece)
    return "".join(kept) + "…"


def _cell(value):
    if value is None:
        return "–"
    return "withheld" if value == WITHHELD else f"{value:,}"


def _chart(series, weeks, top):
    """An inline SVG of one series' weekly active learners (withheld weeks and weeks without a row are gaps)."""
    shown = [(index, value) for index, value in enumerate(series.values) if isinstance(value, int)]
    step = _WIDTH / max(len(weeks) - 1, 1)
    points = " ".join(f"{index * step:.0f},{_HEIGHT - 2 - (value / top) * (_HEIGHT - 4):.0f}"
                      for index, value in shown)
    latest = next((value for value in reversed(series.values) if value is not None), None)
    title = (f": weekly active learners, {weeks[0]} to {weeks[-1]}; latest {_cell(latest)}"
             if weeks else ": no weeks")
    return (f'<svg role="img" width="{_WIDTH}" height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}">'
            f"<title>{_label(series.label)}{_text(title)}</title>"
            f'<polyline fill="none" stroke="#1a73e8" stroke-width="2" points="{points}"/></svg>')


def _freshness(freshness):
    stale = freshness.get("stale")
    banner = (f'<p class="stale" id="stale">STALE: {_text(stale)}</p>' if stale
              else '<p class="fresh" id="fresh">Fresh: the last successful refresh is recent enough for the '
                   'schedule (as of when this page was written).</p>')
    # A neutral note (never the stale banner's class or id): why the page is newer than the last refresh.
    note = f'<p class="note" id="note">{_text(freshness["note"])}</p>' if freshness.get("note") else ""
    return (f"{banner}{note}<dl><dt>Last successful refresh</dt><dd id=\"last-success\">"
            f"{_text(freshness.get('last_success') or 'never')}</dd><dt>Watermark</dt><dd id=\"watermark\">"
            f"{_text(freshness.get('watermark') or 'none')}</dd><dt>Page written</dt><dd id=\"written\">"
            f"{_text(freshness.get('written'))}</dd></dl>")


def _privacy(data):
    settings = data.settings
    share = data.withheld / data.cells if data.cells else 0.0
    noise = ("counts are exact (no noise)" if settings["method"] == "none"
             else f"counts are perturbed, each within ± {settings['max_noise']} of the truth (cell key method)")
    return (f'<section id="privacy"><h2>Protection in force</h2><p>Cells with fewer than '
            f'<b id="threshold">{_text(settings["min_cell_size"])}</b> distinct learners are withheld; '
            f'{_text(noise)}<span id="noise" hidden>{_text(settings["max_noise"])}</span>. '
            f'<b id="withheld-share">{share:.1%}</b> of the cells shown here are withheld '
            f'(<span id="withheld">{data.withheld}</span> of <span id="cells">{data.cells}</span>). '
            "Each cell is protected on its own counts, so columns and rows need not add up: a week is not the "
            "sum of its days, the whole site not the sum of its courses.</p></section>")


def _weekly(data):
    """The weekly section, piece by piece: a figure and a table row per series."""
    courses = [series for series in data.series if series.course is not None]
    top = max([value for series in courses for value in series.values if isinstance(value, int)] or [1]) or 1
    yield ('<section id="weekly"><h2>Weekly active learners</h2><p>Distinct learners per ISO week, the last '
           f"{len(data.weeks)} week(s); the courses share one scale, the whole site has its own.</p>"
           '<div class="grid">')
    for series in data.series:
        scale = max([value for value in series.values if isinstance(value, int)] or [1]) or 1 \
            if series.course is None else top
        shown = _label(series.label)
        yield (f'<figure><figcaption title="{shown}">{shown}</figcaption>'
               f"{_chart(series, data.weeks, scale)}</figure>")
    head = "".join(f'<th scope="col">{_text(week)}</th>' for week in data.weeks)
    yield ('</div><details><summary>The same numbers as a table</summary>'
           f'<table id="weekly-table"><thead><tr><th scope="col">Course</th>{head}</tr></thead><tbody>')
    for series in data.series:
        yield (f'<tr data-course="{_label(_iri(series.course))}"><th scope="row">{_label(series.label)}</th>'
               + "".join(f"<td>{_text(_cell(value))}</td>" for value in series.values) + "</tr>")
    yield "</tbody></table></details></section>"


def _iri(course):
    """A course's IRI as an attribute may carry it: cleaned as names are (no bidi override, no address, at most
    200 characters), like every text of the page; "" for the whole site."""
    return (clean_name(course) or "") if isinstance(course, str) else ""


def _outcomes(data):
    """The outcomes section, piece by piece: a table row per course."""
    yield (f'<section id="outcomes"><h2>Completions, passed and failed</h2><p>Over {_text(data.outcome_span)}: '
           "the sums of the published cells (withheld cells count for nothing).</p>"
           f'{_outcome_chart(data.outcomes)}<table id="outcomes-table"><thead><tr><th scope="col">Course</th>'
           '<th scope="col">Completions</th><th scope="col">Passed</th><th scope="col">Failed</th>'
           '<th scope="col">Withheld cells</th></tr></thead><tbody>')
    for outcome in data.outcomes:
        yield (f'<tr data-course="{_label(_iri(outcome.course))}"><th scope="row">{_label(outcome.label)}</th>'
               f"<td>{_text(_cell(outcome.completions))}</td><td>{_text(_cell(outcome.passed))}</td>"
               f"<td>{_text(_cell(outcome.failed))}</td><td>{outcome.withheld}</td></tr>")
    yield "</tbody></table></section>"


def _outcome_chart(outcomes):
    """One SVG of stacked bars (passed, failed) per course, largest completions first, at most 30 bars."""
    shown = sorted((o for o in outcomes if o.course is not None), key=lambda o: -(o.completions or 0))[:30]
    top = max([(o.passed or 0) + (o.failed or 0) for o in shown] or [1]) or 1
    bars = []
    for index, outcome in enumerate(shown):
        passed = (outcome.passed or 0) / top * 100
        failed = (outcome.failed or 0) / top * 100
        bars.append(f'<rect x="{index * 12}" y="{100 - passed:.0f}" width="10" height="{passed:.0f}" fill="#188038"/>'
                    f'<rect x="{index * 12}" y="{100 - passed - failed:.0f}" width="10" height="{failed:.0f}" '
                    'fill="#d93025"/>')
    width = max(len(shown) * 12, 12)
    return (f'<svg role="img" width="{width}" height="100" viewBox="0 0 {width} 100"><title>Passed (green) and '
            f"failed (red) of the {len(shown)} courses with the most completions; the table below holds every "
            f"course</title>{''.join(bars)}</svg>")


def render(data, freshness):
    """Given a ReportData and the freshness ({"last_success", "watermark", "stale", "written"}, and optionally
    "note": a neutral sentence shown under the banner), return the page as text."""
    return "".join(_pieces(data, freshness))


def _pieces(data, freshness):
    """The page (see `render`) in pieces, in order: none holds more than one course's row or figure, so that
    `write_report` holds no more of the page than a piece and its file's buffer, however many courses there are."""
    yield (f"{_HEAD}<style>{_STYLE}</style></head><body><h1>LMS activity report</h1>"
           f'<section id="freshness">{_freshness(freshness)}</section>{_privacy(data)}')
    yield from _weekly(data)
    yield from _outcomes(data)
    yield "</body></html>\n"


# How every page begins: what tells a report this program wrote from any other file (retire).
_HEAD = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
         '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">'
         "<title>LMS activity report</title>")


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
    head = _HEAD.encode()
    with handle:
        if handle.read(len(head)) != head:
            return "kept"
    try:
        os.unlink(path)
    except OSError as error:
        logger.warning("The HTML report %s is no longer written since the store is PostgreSQL, and could not be "
                       "removed (%s); remove it.", path, error)
        return "kept"
    logger.warning("Removed the HTML report %s: the store is PostgreSQL now. No run writes it any more, and a web "
                   "server would go on serving its old numbers.", path)
    return "removed"


def write_report(publication_path, output, freshness, *, today, mode=0o644, group=None):
    """Render the report of the publication at `publication_path` as of `today` (the local date, ISO text) and
    replace `output` by it atomically, with `mode` and `group` (the publication's); return `output`. The page is
    written to its temporary piece by piece (`_pieces`), never held whole."""
    data = read_publication(publication_path, today=today)
    with atomic.replacing(output, mode=mode, group=group, what=f"the report {output}",
                          outcome="the publication stands.") as temporary:
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            handle.writelines(_pieces(data, freshness))
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
