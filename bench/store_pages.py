"""Which pages of a SQLite store a run rewrote, by table and index: the store file compared page by page
before and after the run (the run's last connection folds its WAL into the file as it closes). A page a run
rewrites is written twice, to the WAL at the commit and into the file at the checkpoint, and what a run writes
is I/O that the cost model's instruction counts cannot show (issue 23: a one-day run on 365 days of history)."""

import collections
import hashlib
import sqlite3


def page_size(path):
    with open(path, "rb") as handle:
        handle.seek(16)
        size = int.from_bytes(handle.read(2), "big")
    return 65536 if size == 1 else size  # the file format's header: 1 stands for 65,536


def page_digests(path):
    """A short digest of each page of the store file at `path`, in page order."""
    size, digests = page_size(path), []
    with open(path, "rb") as handle:
        while page := handle.read(size):
            digests.append(hashlib.blake2b(page, digest_size=8).digest())
    return digests


def rewritten(path, before):
    """Return a Counter {table or index name: pages} of the pages of `path` that differ from `before`
    (page_digests of the same file earlier), new pages included."""
    after = page_digests(path)
    changed = [number for number, digest in enumerate(after, 1)
               if number > len(before) or before[number - 1] != digest]
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        owner = dict(db.execute("SELECT pageno, name FROM dbstat"))  # Debian's SQLite has the dbstat table
    finally:
        db.close()
    return collections.Counter(owner.get(number, "(free)") for number in changed)


def describe(counts, statements, top=4):
    """One line: the pages rewritten in all and per statement, and the tables and indexes with most of them."""
    total = sum(counts.values())
    parts = ", ".join(f"{name} {pages:,}" for name, pages in counts.most_common(top))
    return f"pages rewritten {total:,} ({total / statements:.2f} a statement){': ' * bool(parts)}{parts}"
