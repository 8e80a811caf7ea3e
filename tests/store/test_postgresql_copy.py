"""The staged events' COPY text (lms_refresh/store/pg_copy.py) reads back as the rows it was made of."""

import psycopg
import pytest

from lms_refresh.store.pg_copy import staged_text
from lms_refresh.store.postgres_schema import POSTGRESQL, SCHEMA_VERSION
from lms_refresh.store.tables import TABLES

pytestmark = pytest.mark.postgresql

ROWS = [
    ("2026-06-01", 5, -7, b"\x00\\\n\t\r.ab", "st\\or\ted\nx\ry\\.", "", 3, 1, 0, True, False, None, 12, None,
     2**32 - 1),
    ("2026-06-02", 2**63 - 1, -2**63, bytes(range(256)), "é ü ☃ \\N", "\\.", 0, 0, 1, 0, 1, -5, None, 0, 1),
    ("2026-06-03", 0, 0, b"", "2026-06-03T00:00:00Z", "NULL", 1, 0, 0, 0, 0, 0, 0, None, None),
]


def test_staged_text_reads_back_as_its_rows(postgres_server):
    table = next(t for t in TABLES if t.name == "staged_events")
    create = POSTGRESQL.create_table(table, SCHEMA_VERSION).replace("{s}.", "public.")
    with psycopg.connect(host=postgres_server.sockets, port=postgres_server.port, user="postgres",
                         dbname=postgres_server.new_database()) as db:
        db.execute(create)
        with db.cursor().copy("COPY staged_events FROM STDIN") as copy:
            copy.write(staged_text(ROWS))
        back = db.execute("SELECT * FROM staged_events ORDER BY day").fetchall()
    assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in back] == [
        tuple(int(v) if isinstance(v, bool) else v for v in row) for row in ROWS]
