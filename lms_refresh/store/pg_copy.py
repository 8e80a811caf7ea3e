"""The staged events as COPY's text format, written here rather than by psycopg's `write_row`.

Debian's psycopg (3.1, `python3-psycopg`) has no C extension: its `write_row` looks up a dumper and
escapes every value in Python, about 60 microseconds a staged row on two cores, most of a
PostgreSQL refresh's client CPU. The staging table's columns are known
(tables.py): one line per row is one f-string, a few times cheaper. Text is escaped as COPY wants
(backslash, tab, newline, carriage return); a NUL, which PostgreSQL's text never holds, is refused
by the server as it is when psycopg sends it; bytes are bytea's hex form; NULL is \\N.
"""

from lms_refresh.store.tables import BIGINT, BYTES, INTEGER, SMALL, TABLES, TEXT

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _field(index, column):
    """Return the f-string field (and what it needs) that writes column `index` of a row `r`."""
    value = f"r[{index}]"
    if column.type == TEXT:
        text = f"{value}.translate(E)"
    elif column.type in (BIGINT, INTEGER, SMALL):
        text = f"format({value}, 'd')"  # an int, or a bool (0/1) as a flag may be
    elif column.type == BYTES:
        text = f"B + {value}.hex()"  # bytea's hex input, its backslash escaped for COPY
    else:
        raise ValueError(f"no COPY text for a column of type {column.type}")
    return "{" + (f"N if {value} is None else {text}" if column.null else text) + "}"


def line_writer(table):
    """Return a function of one row of `table` (a tables.Table, its columns in order) that returns its line."""
    fields = "\\t".join(_field(index, column) for index, column in enumerate(table.columns))
    scope = {"E": _ESCAPES, "N": "\\N", "B": "\\\\x"}
    exec(f"def line(r):\n    return f\"{fields}\\n\"\n", scope)  # built from tables.py's own columns
    return scope["line"]


STAGED_LINE = line_writer(next(table for table in TABLES if table.name == "staged_events"))


def staged_text(rows):
    """Return `rows` of staged_events in COPY's text format, as bytes (UTF-8)."""
    return "".join(map(STAGED_LINE, rows)).encode()
