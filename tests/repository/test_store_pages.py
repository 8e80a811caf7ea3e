"""bench/store_pages.py: the pages of a SQLite file that a change rewrote, named by their table or index, counted
from the file itself (what refresh_bench.py's nightly runs print), new pages included and untouched ones not."""

import collections
import importlib.util
import os
import sqlite3

from helpers.paths import REPO

_spec = importlib.util.spec_from_file_location("store_pages", os.path.join(REPO, "bench", "store_pages.py"))
store_pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(store_pages)


def _write(path, statements):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    for statement in statements:
        db.execute(statement)
    db.close()  # the last connection folds the WAL into the file


def test_pages_rewritten_are_named_by_table_and_index_and_untouched_tables_are_not(tmp_path):
    path = str(tmp_path / "store.sqlite")
    rows = ", ".join(f"({n}, '{'x' * 200}')" for n in range(2000))
    _write(path, ["CREATE TABLE kept (id INTEGER PRIMARY KEY, text TEXT)", f"INSERT INTO kept VALUES {rows}",
                  "CREATE TABLE grown (id INTEGER PRIMARY KEY, text TEXT)",
                  "CREATE INDEX grown_by_text ON grown (text)"])
    before = store_pages.page_digests(path)
    assert store_pages.page_size(path) == 4096 and len(before) == os.path.getsize(path) // 4096

    _write(path, [f"INSERT INTO grown VALUES {rows}"])
    counts = store_pages.rewritten(path, before)

    assert counts["grown"] >= 100 and counts["grown_by_text"] >= 100, counts  # 2,000 rows of 200 bytes
    assert "kept" not in counts, counts  # its 100-odd pages are as they were
    line = store_pages.describe(counts, 2000, top=2)
    assert line.startswith(f"pages rewritten {sum(counts.values()):,} (") and "grown" in line, line


def test_nothing_written_rewrites_no_page(tmp_path):
    path = str(tmp_path / "store.sqlite")
    _write(path, ["CREATE TABLE t (id INTEGER PRIMARY KEY)", "INSERT INTO t VALUES (1)"])
    before = store_pages.page_digests(path)
    _write(path, ["SELECT * FROM t"])
    assert store_pages.rewritten(path, before) == {}
    assert store_pages.describe(collections.Counter(), 10) == "pages rewritten 0 (0.00 a statement)"
