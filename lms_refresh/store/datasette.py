"""The data dictionary as Datasette metadata: the publication's tables and columns described for Datasette 0.65.

Everything here is derived from lms_refresh.store.dictionary (its TABLES and QUERIES), so a table or column added
there is described to Datasette with no edit here: a title and description per table, a description per column
(its label, unit, meaning, whether it is perturbed, what NULL means), facets on the columns a dashboard groups by,
the newest day or period first, and the dictionary's queries as canned queries. The package ships the rendering
for the default publication (serving.sqlite, database `serving`) as /usr/share/lms-refresh/datasette.yml, with
the plugin that stops Datasette from turning IRIs into links (PLUGIN); `lms-refresh demo` writes both beside its
publication (lms_refresh.cli.reference regenerates the shipped copies, and a test fails when they drift).
"""

import json
import re

from lms_refresh.store import dictionary

# The columns a dashboard groups or filters by, faceted wherever a table has them (in this order).
FACETS = ("course", "period", "complete", "category")
# The newest first: the first of these a table has is its default descending sort. A term's label is its
# configured name, so periods sort by their first day.
NEWEST_FIRST = ("day", "period_start")

# Labels a column's name does not spell out by itself; every other label is its name in words.
LABELS = {"avg_scaled_score": "Average scaled score", "total_duration_seconds": "Total duration",
          "course": "Course IRI", "period_start": "First day", "period_end": "Last day",
          "min_cell_size": "Threshold (min_cell_size)", "max_noise": "Largest noise (max_noise)"}

# Datasette renders any value that looks like a URL as a link: a course IRI would send a reader to an LMS page
# that may not exist (xAPI course ids need not resolve) or to wherever a source's text points. This plugin shows
# such values as the plain, escaped text they are; a declared foreign key keeps Datasette's link to its row.
PLUGIN = '''\
"""Written by lms-refresh: show IRIs and URLs of the lms-refresh publication as plain text, never as links."""

import markupsafe
from datasette import hookimpl


@hookimpl
def render_cell(value):
    if isinstance(value, str) and value.strip().startswith(("http://", "https://")):
        return markupsafe.escape(value)
    return None
'''
PLUGIN_NAME = "lms_refresh_plain_iris.py"


def label(column):
    """Return a column's label: its name in words, unless LABELS has a better one."""
    return LABELS.get(column.name) or column.name.replace("_", " ").capitalize()


def column_description(column):
    """Return one column's description as Datasette shows it under the table: label, unit, meaning, noise, NULL."""
    unit = f" [{column.unit}]" if column.unit not in ("—", "") else ""
    said = [f"{label(column)}{unit}: {column.meaning}"]
    if dictionary.noise(column) == "yes, ± max_noise":
        said.append("Perturbed: within ± max_noise of the true value (the table publication says which).")
    elif column.perturbed:
        said.append("Perturbed: a sum or mean with a noise of its own, in units of the cell's largest record.")
    if column.null != "never NULL":
        said.append(f"NULL: {column.null}.")
    return " ".join(said)


def table_title(entry):
    """Return a table's title: its name in words, with its grain."""
    return f"{entry.name.replace('_', ' ').capitalize()} (one row per {entry.grain})"


def query_name(query):
    """Return a canned query's name in Datasette's URLs: its title in lower-case words joined by hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", query.title.lower()).strip("-")


def metadata(database="serving", tables=None, queries=None):
    """Return Datasette's metadata for the publication served as `database` (its file name without the suffix):
    every table of `tables` (by default the dictionary's that SQLite publishes) and every query of `queries`."""
    described = {}
    for entry in dictionary.TABLES if tables is None else tables:
        names = [column.name for column in entry.columns if column.sqlite]
        if not names:
            continue  # published by PostgreSQL only: not in the file Datasette serves
        settings = {"title": table_title(entry), "description": f"Key: {entry.key}. {entry.description}",
                    "columns": {column.name: column_description(column) for column in entry.columns
                                if column.sqlite}}
        facets = [name for name in FACETS if name in names and name != entry.key]
        if facets:
            settings["facets"] = facets
        newest = next((name for name in NEWEST_FIRST if name in names), None)
        if newest:
            settings["sort_desc"] = newest
        if "name" in names and "course" in names:
            settings["label_column"] = "name"  # a declared key to courses shows the course's name
        described[entry.name] = settings
    canned = {query_name(query): {"title": query.title, "sql": query.sql,
                                  **({"description": query.note} if query.note else {})}
              for query in (dictionary.QUERIES if queries is None else queries)}
    return {"title": "LMS activity metrics (lms-refresh)",
            "description": "The publication of lms-refresh: learning activity per day, week, month and term, per "
                           "course and for the whole site. Counts are perturbed (within ± max_noise, the table "
                           "publication says which) and NULL where fewer than min_cell_size learners would be "
                           "revealed; a total is read from the row that holds it, never summed from others.",
            "databases": {database: {"tables": described, "queries": canned}}}


# YAML 1.1 reads these plain scalars as booleans or null: as keys they are quoted.
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _escape(character):
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _quoted(text):
    """Return `text` as a YAML double-quoted scalar: JSON's escapes (YAML has them all), and every character Python
    does not call printable escaped too. Among those: the controls YAML refuses in its input, and NEL, LS and PS,
    which it reads as line breaks (folded into a blank)."""
    return "".join(character if character.isprintable() or character == " " else _escape(character)
                   for character in json.dumps(text, ensure_ascii=False))


def _key(text):
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", text) and text.lower() not in _YAML_WORDS:
        return text
    return _quoted(text)


def _literal(text):
    """Whether `text` reads well and safely as a literal block: several lines, every character printable (or a
    tab), not starting with a blank (the block's indentation would swallow it), at most one final line break."""
    return ("\n" in text and not text.startswith((" ", "\n")) and not text.endswith("\n\n")
            and all(character in "\n\t" or character.isprintable() for character in text))


def _yaml(value, indent):
    """Return the YAML lines of `value` (a dict, list or str) at `indent` spaces."""
    pad = " " * indent
    lines = []
    for key, item in value.items():
        if isinstance(item, dict):
            lines.append(f"{pad}{_key(key)}:")
            lines += _yaml(item, indent + 2)
        elif isinstance(item, list):
            lines.append(f"{pad}{_key(key)}: [{', '.join(_quoted(each) for each in item)}]")
        elif _literal(item):
            # SQL as a literal block, as it reads on the data dictionary's page; `|` keeps its final line break,
            # `|-` says there is none.
            lines.append(f"{pad}{_key(key)}: |{'' if item.endswith(chr(10)) else '-'}")
            lines += [f"{pad}  {line}" if line else "" for line in item.rstrip("\n").split("\n")]
        else:
            # A JSON string is a YAML double-quoted scalar: every character survives as it is.
            lines.append(f"{pad}{_key(key)}: {_quoted(item)}")
    return lines


def render(database="serving", tables=None, queries=None):
    """Return metadata() as the text of a YAML file for `datasette serve --metadata`."""
    header = ["# Datasette metadata for the lms-refresh publication, generated from its data dictionary",
              "# (lms_refresh/store/datasette.py). Serve it read-only with:",
              f"#   datasette serve -i {database}.sqlite --metadata datasette.yml --plugins-dir datasette-plugins"]
    return "\n".join(header + _yaml(metadata(database, tables, queries), 0)) + "\n"
