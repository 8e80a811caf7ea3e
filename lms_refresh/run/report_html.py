"""The HTML pieces the report's pages share: escaping, local times, the style sheet, and the inline SVG charts.

Every text reaching a page goes through `text` (html.escape with quote=True) or `label` (the same, bounded):
course names, IRIs and categories are anyone's text, already cleaned and bounded in characters by
disclosure/names.py (`clean_name`, through run/report_data.py); escaping is the page's part of that one rule.
Charts print their numbers (a `<title>` is read only on hovering, never in print): every bar has its value
written beside it, every axis its ticks and its caption.
"""

import datetime as dt
import html
import zoneinfo

from lms_refresh import instants
from lms_refresh.run.report_data import WITHHELD

PRIVACY_DOC = "/usr/share/doc/lms-refresh/docs/privacy.md"  # no public URL: the installed page, as messages say

STYLE = """*{box-sizing:border-box}body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;padding:1em;max-width:1400px;
color:#1b1b1b;background:#fff}h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .4em;
border-bottom:1px solid #ccc}a{color:#0b57a4}.asof{font-size:1.15em;font-weight:600}
.stale{background:#b00020;color:#fff;padding:.6em 1em;font-weight:bold;font-size:1.2em}
.fresh{background:#e6f4ea;padding:.4em 1em}.note{color:#555}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(11em,1fr));gap:.6em}
.card{border:1px solid #bbb;border-radius:6px;padding:.5em .8em}.card h3{font-size:.9em;margin:0;color:#444}
.figure{font-size:1.8em;font-weight:700;margin:.1em 0}.change,.period{font-size:.85em;margin:0;color:#333}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:.6em}
figure{margin:0;border:1px solid #ddd;padding:4px;min-width:0}figcaption{font-size:.85em;overflow:hidden;
text-overflow:ellipsis;white-space:nowrap}svg{display:block;width:100%;height:auto}
svg text{font:10px sans-serif;fill:#1b1b1b}svg .v{font-size:9px}svg .axis{stroke:#444;stroke-width:1}
svg .bar{fill:#3b6ea8}svg .grid{stroke:#ccc;stroke-width:.5}
svg.outcomes text{font-size:11px}svg.outcomes .w{font-style:italic}#outcomes-table thead th{white-space:normal}
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:2px 5px;text-align:right;white-space:nowrap}
th[scope=row]{text-align:left;max-width:22em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}.legend{display:flex;flex-wrap:wrap;gap:.8em;
font-size:.85em;margin:.3em 0;padding:0;list-style:none}.legend span{display:inline-block;width:1.4em;height:1em;
vertical-align:middle;border:1px solid #555;margin-right:.3em}
.h0{background:#f7fbff}.h1{background:#c6dbef}.h2{background:#6baed6}.h3{background:#2171b5;color:#fff}
.h4{background:#08306b;color:#fff}.hw{background:repeating-linear-gradient(45deg,#fff 0 3px,#999 3px 5px)}
td,.legend span,.card{-webkit-print-color-adjust:exact;print-color-adjust:exact}
.csv{font-size:.85em}footer{margin-top:2em;font-size:.85em;color:#444}
@media (max-width:600px){body{padding:.5em;font-size:14px}.figure{font-size:1.5em}th[scope=row]{max-width:10em}}
@media print{body{max-width:none;padding:0;font-size:11pt}a{color:#000;text-decoration:none}.csv{display:none}
section,figure,.card{break-inside:avoid}.grid{grid-template-columns:repeat(3,1fr)}.scroll{overflow:visible}
.stale{border:3px solid #000}}"""

# How every page begins: what tells a report this program wrote from any other file (report_page.retire).
HEAD = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">'
        "<title>LMS activity report</title>")
VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'


def text(value):
    """Any value as HTML text, escaped (quotes too: the same text may land in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


# The most HTML one label (or a course's IRI) may take: anyone's name is bounded in characters (disclosure/names.py),
# but escaped a character may take six ('"' is &quot;), and a page writes a label several times per course: 9,000
# names of 200 '"' made a 68.8 MiB page. Past it, the label is cut and ends with "…".
LABEL_HTML = 240


def label(value, limit=LABEL_HTML):
    """`value` escaped as `text` does, cut to at most `limit` characters of HTML (then "…")."""
    escaped = text(value)
    if len(escaped) <= limit:
        return escaped
    kept, size = [], 0
    for char in str(value):
        piece = html.escape(char, quote=True)
        if size + len(piece) >= limit:
            break
        kept.append(piece)
        size += len(piece)
    return "".join(kept) + "…"


def short(value, characters):
    """`value` as `label` escapes it, at most `characters` characters of text shown (a chart's room), then "…"."""
    value = "" if value is None else str(value)
    return label(value if len(value) <= characters else value[:characters - 1] + "…")


def cell(value):
    """A published value as a page shows it: "–" for no row, "withheld", or the number with thousands separators."""
    if value is None:
        return "–"
    if value == WITHHELD:
        return "withheld"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def local_time(value, timezone):
    """A stored instant (cursor or ISO text, or an aware datetime) as a reader of `timezone` reads it: "Tue 8 Dec
    2026, 04:15 CET", to the minute; text that is no instant is returned as it is (the caller escapes it), None as
    None."""
    if value is None:
        return None
    moment = value if isinstance(value, dt.datetime) else instants.cursor_moment(value)
    if moment is None:
        try:
            moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
    local = moment.astimezone(zoneinfo.ZoneInfo(timezone))
    return f"{local:%a} {local.day} {local:%b %Y, %H:%M} {local.tzname()}"


def local_times(timezone):
    """`local_time` for `timezone`, as a function of the instant alone (freshness.staleness's `shown`): the STALE
    banner's times written as the page's others are."""
    return lambda value: local_time(value, timezone)


def nice_top(top):
    """The smallest 1, 2 or 5 times a power of ten at or above `top` (at least 1): a scale's round end."""
    top = max(int(top), 1)
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= top:
                return step * factor
        step *= 10


def bar_chart(labels, values, *, top, caption, unit="learners", ident=None, ticks=6):
    """An inline SVG bar chart of `values` (int, WITHHELD, or None: no row) over `labels` (the x axis: dates or
    periods), on a y scale of 0 to `top` stated on its axis; each bar's number is printed above it ("w" for a
    withheld value). At most `ticks` labels on the x axis (the latest period's always)."""
    count = max(len(values), 1)
    # Few periods get wide bars: their dates (ten characters) must not run into each other.
    step = max(30, min(70, 420 // count)) if count <= 16 else max(600 // count, 8)
    left, right, upper, lower = 46, 30, 16, 40
    width, height = left + step * count + right, 190
    plot = height - upper - lower
    top = max(top, 1)
    # At most 1.3 times its own size: a wide screen would draw its numbers as headings.
    out = [f'<svg role="img" viewBox="0 0 {width} {height}" class="chart" style="max-width:{width * 1.3:.0f}px"'
           + (f' id="{text(ident)}"' if ident else "") + f"><title>{label(caption)}</title>"]
    out.append(f'<g class="y-axis"><line class="axis" x1="{left}" y1="{upper}" x2="{left}" y2="{upper + plot}"/>')
    for tick in (0, top // 2, top):
        y = upper + plot - tick / top * plot
        out.append(f'<line class="axis" x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}"/>'
                   f'<text x="{left - 6}" y="{y + 3:.1f}" text-anchor="end">{tick:,}</text>')
    out.append(f'<text class="y-caption" transform="translate(10 {upper + plot / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{text(unit)}</text></g>')
    out.append(f'<g class="x-axis"><line class="axis" x1="{left}" y1="{upper + plot}" x2="{width - right}" '
               f'y2="{upper + plot}"/>')
    every = max(1, -(-(count - 1) // max(ticks - 1, 1)))
    for index, name in enumerate(labels):
        if (count - 1 - index) % every == 0:  # counted from the last: the latest period always has its label
            x = left + step * index + step / 2
            out.append(f'<text x="{x:.1f}" y="{upper + plot + 14}" text-anchor="middle">{short(name, 12)}</text>')
    out.append("</g><g class=\"bars\">")
    vertical = step < 22
    for index, value in enumerate(values):
        x = left + step * index
        if isinstance(value, int):
            bar = min(value, top) / top * plot
            out.append(f'<rect class="bar" x="{x + 2}" y="{upper + plot - bar:.1f}" width="{step - 4}" '
                       f'height="{bar:.1f}"/>')
            shown, y = f"{value:,}", upper + plot - bar - 3
        elif value == WITHHELD:
            shown, y = "w", upper + plot - 3
        else:
            continue
        centre = x + step / 2
        place = (f'transform="translate({centre + 3:.1f} {y:.1f}) rotate(-90)"' if vertical
                 else f'x="{centre:.1f}" y="{y:.1f}" text-anchor="middle"')
        out.append(f'<text class="v" {place}>{shown}</text>')
    out.append(f'</g><text x="4" y="{height - 4}">{text(caption)}</text></svg>')
    return "".join(out)


# Outcomes: the Okabe–Ito colours (told apart with the common colour-vision deficiencies), of distinct lightness,
# each with its own pattern too, so that a greyscale print still tells the three apart; and every bar's number is
# followed by its word ("12 completed"), so that no reader needs the colours at all.
OUTCOME_KINDS = (("completed", "Learners who completed", "#0072B2", None),
                 ("passed", "Learners who passed", "#E69F00", "stripes"),
                 ("failed", "Learners who failed", "#D55E00", "dots"))
_PATTERNS = ('<defs><pattern id="stripes" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="6" height="6" fill="#E69F00"/>'
             '<rect width="2" height="6" fill="#000" fill-opacity=".55"/></pattern>'
             '<pattern id="dots" width="5" height="5" patternUnits="userSpaceOnUse"><rect width="5" height="5" '
             'fill="#D55E00"/><circle cx="2.5" cy="2.5" r="1.2" fill="#fff"/></pattern></defs>')

# The outcome chart is drawn at about the width of a phone (360 units: 1 unit a CSS pixel at 375 px wide, no more
# than 1.6 at any width), so that its text is at least 11 px wherever it is read; each course's name has a line of
# its own above its bars, the whole width, rather than a column beside them.
_OUTCOME_WIDTH, _OUTCOME_ROOM, _OUTCOME_BAR, _OUTCOME_NAME = 360, 230, 14, 16


def _fill(colour, pattern):
    return f"url(#{pattern})" if pattern else colour


def outcome_bars(rows, unit="learners"):
    """An inline SVG of horizontal bars, its legend and its scale at the top: per row (label, completed, passed,
    failed: int, WITHHELD or None for no value), the course's name on a line, then three bars on one scale, each
    followed by its number and its word ("12 completed"; "withheld (passed)", never a bar of 0). The name is
    shortened for room: the table under the chart has it whole."""
    top = nice_top(max([value for row in rows for value in row[1:] if isinstance(value, int)] or [1]))
    width, room, bar, name_height = _OUTCOME_WIDTH, _OUTCOME_ROOM, _OUTCOME_BAR, _OUTCOME_NAME
    left = 4
    legend_height = len(OUTCOME_KINDS) * 16 + 4
    axis_y = legend_height + 30  # the scale's line, under its numbers and its caption
    group = name_height + 3 * bar + 8
    height = axis_y + 4 + len(rows) * group
    out = [f'<svg role="img" viewBox="0 0 {width} {height}" class="chart outcomes" id="outcomes-chart" '
           f'style="max-width:{width * 1.6:.0f}px"><title>{text(_outcome_title(unit))}</title>{_PATTERNS}']
    out.append('<g class="legend" id="outcomes-legend">')
    for index, (_, name, colour, pattern) in enumerate(OUTCOME_KINDS):
        y = 2 + index * 16
        out.append(f'<rect x="{left}" y="{y}" width="24" height="12" fill="{_fill(colour, pattern)}" stroke="#000"/>'
                   f'<text class="legend-entry" x="{left + 30}" y="{y + 10}">{text(name)}</text>')
    out.append("</g>")
    # The scale: its numbers above its line, gridlines down the chart so that every bar can be read against it.
    out.append(f'<g class="x-axis"><text class="x-caption" x="{left}" y="{axis_y - 22}">'
               f"{text(unit)} (scale 0 to {top:,})</text>"
               f'<line class="axis" x1="{left}" y1="{axis_y}" x2="{left + room}" y2="{axis_y}"/>')
    for tick in (0, top // 2, top):
        x = left + tick / top * room
        anchor = "start" if tick == 0 else ("end" if tick == top else "middle")
        out.append(f'<line class="axis" x1="{x:.1f}" y1="{axis_y - 4}" x2="{x:.1f}" y2="{axis_y}"/>'
                   f'<line class="grid" x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{height}"/>'
                   f'<text x="{x:.1f}" y="{axis_y - 6}" text-anchor="{anchor}">{tick:,}</text>')
    out.append('</g><g class="y-axis">')  # the courses, each named above its bars
    for index, (name, *values) in enumerate(rows):
        y = axis_y + 4 + index * group
        out.append(f'<g class="course"><text class="course-name" x="{left}" y="{y + name_height - 4}">'
                   f"{short(name, 52)}</text>")
        for offset, ((word, kind, colour, pattern), value) in enumerate(zip(OUTCOME_KINDS, values, strict=True)):
            length = min(value, top) / top * room if isinstance(value, int) else 0
            top_y = y + name_height + offset * bar
            shown = (f"{value:,} {word}" if isinstance(value, int) else
                     f"{'withheld' if value == WITHHELD else 'no value'} ({word})")
            out.append(f'<rect x="{left}" y="{top_y + 1}" width="{length:.1f}" height="{bar - 2}" '
                       f'fill="{_fill(colour, pattern)}"><title>{text(kind)}</title></rect>'
                       f'<text class="v{"" if isinstance(value, int) else " w"}" x="{left + length + 4:.1f}" '
                       f'y="{top_y + bar - 3}">{text(shown)}</text>')
        out.append("</g>")
    return "".join(out) + "</g></svg>"


def _outcome_title(unit):
    return f"Learners who completed, passed and failed per course ({unit})"


HEAT_BINS = 5  # the heat map's shades, h0 (lightest) to h4: lightness alone orders them, in print too


def heat_class(value, top):
    """The heat map's class of a weekly value on a scale of 0 to `top`: h0..h4, hw for withheld, "" for no row."""
    if value == WITHHELD:
        return "hw"
    if not isinstance(value, int):
        return ""
    return f"h{min(HEAT_BINS - 1, value * HEAT_BINS // max(top, 1))}"


def heat_legend(top):
    """The heat map's legend: each shade and the range of learners it stands for."""
    parts = ['<ul class="legend" id="heat-legend">']
    for index in range(HEAT_BINS):
        low = -(-index * top // HEAT_BINS)
        high = -(-(index + 1) * top // HEAT_BINS) - 1 if index < HEAT_BINS - 1 else top
        parts.append(f'<li><span class="h{index}"></span>{low:,}–{high:,} learners</li>')
    parts.append('<li><span class="hw"></span>withheld</li><li>– no row that week</li></ul>')
    return "".join(parts)
