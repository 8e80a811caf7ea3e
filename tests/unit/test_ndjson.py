"""The NDJSON source (lms_refresh.sources.ndjson): chunking, worker processes, gzip, the file index, line numbers."""

import gzip
import json
import os

import pytest

from helpers.batches import collect_batches
from helpers.readers import MAPPER, WINDOW
from helpers.statements import statement
from lms_refresh.errors import BadInputError
from lms_refresh.sources.ndjson import NdjsonSource

# Every test here runs with each JSON parser (lms_refresh/sources/json_decoding.py).
pytestmark = pytest.mark.usefixtures("json_parser")


def lines(count):
    out = []
    for i in range(count):
        stored = f"2026-11-0{1 + i % 4}T10:{i % 60:02d}:00Z"  # half of them outside the window
        out.append(json.dumps(statement(learner=f"u{i}", timestamp=stored)))
        if i % 97 == 0:
            out.append('{"broken": ')
    return out


def collect(source, index=None):
    return collect_batches(source, WINDOW, index)


@pytest.mark.parametrize("workers", [1, 2])
def test_chunks_and_workers_give_what_one_pass_gives(tmp_path, workers):
    text = lines(3000)
    (tmp_path / "a.ndjson").write_text("\n".join(text) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(text[:500]))  # no final newline
    one_pass = collect(NdjsonSource(str(tmp_path), MAPPER, batch_size=100_000, workers=1))
    chunked = collect(NdjsonSource(str(tmp_path), MAPPER, batch_size=50, workers=workers, parallel_min_bytes=0))
    expected = [line for line in text + text[:500]
                if not line.startswith('{"broken') and json.loads(line)["stored"] < "2026-11-03"]
    assert len(one_pass[0]) == len(expected) > 1700
    assert chunked[0] == one_pass[0]
    assert chunked[1] == one_pass[1]
    broken = [n for n, line in enumerate(text, 1) if line.startswith('{"broken')]
    assert [origin for origin, _, _ in one_pass[1]] == (
        [f"{tmp_path}/a.ndjson:{n}" for n in broken] + [f"{tmp_path}/b.jsonl:{n}" for n in broken if n <= 500])
    assert chunked[2] == one_pass[2]


def test_gzip_files_are_streamed_in_batches(tmp_path):
    text = lines(1000)
    with gzip.open(tmp_path / "a.ndjson.gz", "wt") as handle:
        handle.write("\n".join(text) + "\n")
    batches = list(NdjsonSource(str(tmp_path), MAPPER, batch_size=100, workers=2).batches(WINDOW))
    assert sum(len(b.events) for b in batches) == 500
    assert max(len(b.events) + len(b.quarantined) for b in batches) <= 100
    assert batches[-1].state[str(tmp_path / "a.ndjson.gz")][3:5] == ["2026-11-01T10:00:00.000000Z",
                                                                     "2026-11-04T10:59:00.000000Z"]


def test_truncated_gzip_is_a_clear_bad_input_error(tmp_path):
    data = gzip.compress(("\n".join(lines(200)) + "\n").encode())
    (tmp_path / "a.ndjson.gz").write_bytes(data[: len(data) // 2])
    # Last written to more than a day (file_index.UNFINISHED_GRACE) before the window's end: truncated for good,
    # not still being written.
    os.utime(tmp_path / "a.ndjson.gz", (WINDOW.since.timestamp(), WINDOW.since.timestamp()))
    with pytest.raises(BadInputError, match="a.ndjson.gz ends early .* it is truncated for good"):
        collect(NdjsonSource(str(tmp_path), MAPPER, batch_size=100))


def test_unchanged_files_outside_the_window_are_not_read_again(tmp_path):
    (tmp_path / "old.ndjson").write_text(json.dumps(statement(timestamp="2026-10-01T10:00:00Z")) + "\n")
    (tmp_path / "new.ndjson").write_text(json.dumps(statement(timestamp="2026-11-02T10:00:00Z")) + "\n")
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=100)
    _, _, index = collect(source)
    (tmp_path / "old.ndjson").chmod(0)  # reading it again would now fail for a non-root user; count reads instead
    reads = []
    original = source._plan

    def plan(window, *, compressed):
        for item in original(window, compressed=compressed):
            reads.append(item[0])
            yield item

    source._plan = plan
    events, _, _ = collect(source, index)
    assert reads == [str(tmp_path / "new.ndjson")] and len(events) == 1
    (tmp_path / "old.ndjson").chmod(0o644)
    with open(tmp_path / "old.ndjson", "a") as handle:  # a changed file is read again
        handle.write(json.dumps(statement(timestamp="2026-11-02T11:00:00Z")) + "\n")
    reads.clear()
    events, _, _ = collect(source, index)
    assert sorted(reads) == sorted([str(tmp_path / "new.ndjson"), str(tmp_path / "old.ndjson")]) and len(events) == 2
