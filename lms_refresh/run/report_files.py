"""The report's files beside its overview: one page per course and a CSV of every table, in one directory.

The directory is the overview's name with "-files" (report.html → report-files/). A course's files are named from a
SHA-256 of its IRI (`page_name`), never from the IRI or the name: anyone's text makes no path. A nightly run rewrites
only the pages whose content changed: each page's digest (of its rows, names, the privacy settings, this module's
RENDER_VERSION and the program's version) is kept in MANIFEST, and a page whose digest and files are unchanged is
left as it is. Files of courses the publication no longer has are removed — only files named as this module names
them. Every file is replaced atomically (lms_refresh/atomic.py).

CSV files hold the publication's values only (withheld: an empty cell), and a text cell that a spreadsheet would
read as a formula (starting with = + - @, a tab or a carriage return) is written after an apostrophe (OWASP's CSV
injection advice): a course's name is anyone's text.
"""

import csv
import hashlib
import io
import json
import os
import re
import stat

from lms_refresh import __version__, atomic
from lms_refresh.config.paths import report_files_directory as files_directory  # where the configuration checks it
from lms_refresh.disclosure.names import clean_name
from lms_refresh.run import report_data
from lms_refresh.run.report_html import (
    HEAD,
    PRIVACY_DOC,
    STYLE,
    VIEWPORT,
    bar_chart,
    cell,
    label,
    nice_top,
    short,
    text,
)

RENDER_VERSION = "dashboard-3"  # change it whenever a page's HTML would: every page is then written again (so does
# a new version of the program)
MANIFEST = "pages.json"
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_NAME = re.compile(r"course-[0-9a-f]{24}(?:\.html|-(?:day|week|month|term)\.csv)\Z")
_OVERVIEW = re.compile(r"overview-(?:headlines|weekly|outcomes|categories)\.csv\Z")  # the overview's own tables
HEADINGS = {"day": "Day", "period": "Period", "period_start": "From", "period_end": "To",
            "active_learners": "Active learners", "statements": "Statements",
            # statements, not learners: a learner who completes three activities counts three
            "completions": "Completion statements", "passed": "Passed statements", "failed": "Failed statements",
            "completed_learners": "Learners who completed",
            "passed_learners": "Learners who passed", "failed_learners": "Learners who failed",
            "complete": "Complete"}


def page_name(course):
    """The file name (no extension) of `course`'s page: a digest of its IRI, whatever characters that holds."""
    return "course-" + hashlib.sha256(course.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def neutral(value):
    """A CSV cell: None as empty, a text starting as a formula does after an apostrophe, numbers as they are."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return value


def csv_bytes(header, rows):
    """The CSV (RFC 4180, CRLF) of `header` and `rows`, every cell `neutral`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow([neutral(name) for name in header])
    writer.writerows([neutral(value) for value in row] for row in rows)
    return buffer.getvalue().encode("utf-8")


def write_csv(path, header, rows, *, mode, group, many=False):
    """Replace the CSV at `path` by `header` and `rows` (any iterable: written row by row, never held whole)."""
    with atomic.replacing(path, mode=mode, group=group, what=f"the report's CSV {path}",
                          outcome="the publication stands.", many=many) as temporary:
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\r\n")
            writer.writerow([neutral(name) for name in header])
            writer.writerows([neutral(value) for value in row] for row in rows)


def protection(settings):
    """The protection in force, in one plain sentence (HTML), with a link to the privacy page."""
    noise = ("" if settings["method"] == "none"
             else f', and every other figure is moved a little at random (by at most <span id="noise">'
                  f'{text(settings["max_noise"])}</span>), so figures need not add up exactly')
    return (f'To protect individual learners, a figure about fewer than <b id="threshold">'
            f'{text(settings["min_cell_size"])}</b> learners is withheld{noise} '
            f'(<a href="file://{text(PRIVACY_DOC)}">how learners are protected</a>).')


def _complete(value):
    return "yes" if value else "so far"


def _shown(name, value):
    """A table cell's HTML: a number needs no escaping (digits and commas), any text does."""
    if value is None:
        return "withheld"
    if name == "complete":
        return _complete(value)
    if isinstance(value, int):
        return f"{value:,}"
    return text(cell(value))


def table_html(ident, columns, rows, csv_name):
    """A table of `rows` under `columns`' headings, and the link to its CSV."""
    head = "".join(f'<th scope="col">{HEADINGS.get(name, text(name))}</th>' for name in columns)
    rest = columns[1:]
    body = "".join(f'<tr><th scope="row">{_shown(columns[0], row[0])}</th>'
                   + "".join(f"<td>{_shown(name, value)}</td>" for name, value in zip(rest, row[1:], strict=True))
                   + "</tr>" for row in rows)
    return (f'<div class="scroll"><table id="{ident}"><thead><tr>{head}</tr></thead><tbody>{body}'
            f'</tbody></table></div><p class="csv"><a href="{text(csv_name)}" download>CSV of this table</a></p>')


def course_page(course, settings, overview):
    """The HTML of `course`'s page (report_data.Course): a chart and a table (and its CSV's link) per grain."""
    name = page_name(course.course)
    days = [row[0] for grain, _, _, rows in course.grains if grain == "day" for row in rows]
    parts = [f"{HEAD}{VIEWPORT}<style>{STYLE}</style></head><body>",
             f'<p><a href="../{text(overview)}" id="overview">← All courses</a></p>',
             f'<h1 id="course-name">{label(course.label)}</h1>',
             f'<p>Course <span id="course-iri">{label(clean_name(course.course) or "")}</span></p>']
    if course.category:
        parts.append(f'<p>Moodle category: <span id="category">{label(course.category)}</span></p>')
    if days:
        parts.append(f'<p>Latest day in these figures: <span id="latest-day">{text(max(days))}</span> '
                     "(the overview says when the data were last refreshed).</p>")
    parts.append(f'<p class="note" id="privacy">{protection(settings)}</p>')
    for grain, title, columns, rows in course.grains:
        if not rows:
            continue
        learners = [row[columns.index("active_learners")] for row in rows]
        shown = [report_data.WITHHELD if value is None else value for value in learners]
        top = nice_top(max([value for value in learners if isinstance(value, int)] or [1]))
        heading = f"{title} (the last {report_data.DAYS} days)" if grain == "day" else title
        dates = [row[1] if grain == "week" else row[0] for row in rows]  # a week by its first day
        chart = bar_chart(dates, shown, top=top,
                          caption=f"{title} active learners; scale 0 to {top:,}; w: withheld", ident=f"chart-{grain}")
        parts.append(f'<section id="grain-{grain}"><h2>{text(heading)}</h2>{chart}'
                     + table_html(f"table-{grain}", columns, rows, f"{name}-{grain}.csv") + "</section>")
    parts.append(f'<footer>{short(course.label, 80)}: a page of the LMS activity report.</footer></body></html>\n')
    return "".join(parts)


def _digest(course, settings):
    material = [RENDER_VERSION, __version__, course.course, course.label, course.category, settings,
                [[grain, list(columns), [list(row) for row in rows]] for grain, _, columns, rows in course.grains]]
    return hashlib.sha256(json.dumps(material, default=str, sort_keys=True).encode()).hexdigest()


def _files(course):
    name = page_name(course.course)
    return [f"{name}.html", *(f"{name}-{grain}.csv" for grain, _, _, rows in course.grains if rows)]


def _manifest(directory):
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def directory_mode(mode):
    return 0o755 if mode & stat.S_IROTH else 0o750


def write_courses(db, directory, overview, settings, *, mode, group):
    """Write the page and CSVs of every course of the open publication `db` into `directory` (made if missing, in
    an existing directory),
    but those whose digest and files are unchanged; remove this module's files of courses no longer there; return
    (pages written, pages left as they were, files removed)."""
    _make_directory(directory, mode, group)
    atomic.remove_stale_in(directory)  # once: every file below is one of many (atomic.replacing)
    before, digests, expected = _manifest(directory), {}, set()
    present = set(os.listdir(directory))
    written = unchanged = 0
    for course in report_data.courses(db):
        name, files = page_name(course.course), _files(course)
        digests[name] = _digest(course, settings)
        expected.update(files)
        if before.get(name) == digests[name] and present.issuperset(files):
            unchanged += 1
            continue
        for grain, _, columns, rows in course.grains:
            if rows:
                write_csv(os.path.join(directory, f"{name}-{grain}.csv"), columns, rows, mode=mode, group=group,
                          many=True)
        atomic.replace_bytes(os.path.join(directory, f"{name}.html"),
                             course_page(course, settings, overview).encode("utf-8"), mode=mode, group=group,
                             what=f"the report's course page {name}.html", outcome="the publication stands.",
                             many=True)
        written += 1
    removed = 0
    for stale in sorted(present - expected):
        if _NAME.match(stale):
            os.unlink(os.path.join(directory, stale))
            removed += 1
    atomic.sync_many(directory)  # every file and rename above, at once, before the list says they are written
    atomic.replace_bytes(os.path.join(directory, MANIFEST), json.dumps(digests, sort_keys=True).encode(),
                         mode=mode, group=group, what=f"the report's page list {MANIFEST}",
                         outcome="the publication stands.")
    return written, unchanged, removed


def _make_directory(directory, mode, group):
    """Make `directory` (in an existing one: the overview's) if it is missing, readable as the pages are (`mode`).
    A directory gets its group and setgid bit from its parent when it is made, and lms-refresh changes no file's
    group (its unit forbids it): one made before publication.group was set would give the pages another group, so
    it is made again, its files being this module's, every one written again by the caller; if something else is in
    it, it is left, and a page that cannot get its group is refused by atomic.replacing with a sentence (GroupError).
    Its mode is set only where no group is wanted: a chmod by a process outside the directory's group (the unit's,
    which maps no other group) drops its setgid bit, and the unit's UMask=0027 already gives 0750."""
    wanted = directory_mode(mode)
    try:
        os.mkdir(directory, mode=wanted)
    except FileExistsError:
        if group is not None and atomic.new_file_group(directory) != group:
            atomic.remove_stale_in(directory)
            _remove_ours(directory)
            try:
                os.mkdir(directory, mode=wanted)
            except FileExistsError:
                return
    if group is None and stat.S_IMODE(os.stat(directory).st_mode) != wanted:
        os.chmod(directory, wanted)  # a web server's user reads the pages of a 0644 publication through it


def remove_files(output):
    """Remove the files beside the overview `output` that this module writes (course pages, CSVs, the page list),
    then their directory if nothing else is left in it; return how many files were removed. Never raises: a file
    that cannot be removed is left, and so is the directory."""
    return _remove_ours(files_directory(output))


def _remove_ours(directory):
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if _NAME.match(name) or _OVERVIEW.match(name) or name == MANIFEST:
            try:
                os.unlink(os.path.join(directory, name))
                removed += 1
            except OSError:
                pass
    try:
        os.rmdir(directory)
    except OSError:
        pass
    return removed
