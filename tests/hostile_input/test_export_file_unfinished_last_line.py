"""An export file's last line without its newline: a record still being written, or one that is complete.

An exporter with block-buffered writes flushes part of a line now and the rest later. The run that finds
the part must not quarantine it (the statement, once ended, would be lost: its `stored` lies behind the
watermark by the next run, whose window skips it), and a small file must not fail over it (65). A last line
that is a complete record without a newline counts, once, whatever is appended later. A part that is never
ended is quarantined once nobody has written to its file for a day, and only once. A byte order mark at the
start of a file is no part of its first record.
"""

import datetime as dt
import gzip
import json
import os

import pytest

from helpers.batches import collect_batches
from helpers.readers import MAPPER
from helpers.statements import statement
from lms_refresh.sources.ndjson import NdjsonSource
from lms_refresh.window import Window

UTC = dt.UTC
FIRST, SECOND, THIRD = "2026-11-04T00:00:00Z", "2026-11-06T00:00:00Z", "2026-11-07T00:00:00Z"
EARLY = Window(dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 11, 4, tzinfo=UTC))
LATE = Window(dt.datetime(2026, 11, 4, tzinfo=UTC), dt.datetime(2026, 11, 6, tzinfo=UTC))  # the watermark moved on
UNFINISHED = "the last line has no newline and is not a complete record, and the file has not changed since the " \
             "run that left it unread: not valid JSON: Unterminated string"


def lines(count, first=0, day="2026-11-03"):
    return [json.dumps(statement(learner=f"u{(first + i) % 40}", timestamp=f"{day}T{i % 24:02d}:{i % 60:02d}:00Z"))
            for i in range(count)]


def committed(result, read, staged, quarantined=0):
    assert result.returncode == 0, result.stderr
    noun = "statement" if read == 1 else "statements"
    assert f"Refresh committed: read {read} {noun}, staged {staged}, voided 0, quarantined {quarantined};" \
        in result.stderr


@pytest.mark.parametrize("count", [300, 12])
def test_a_line_caught_mid_write_is_left_for_the_next_run_which_reads_it_whatever_its_stored(sqlite_project, count):
    """With 12 lines, quarantining the part would also have failed the run (65) past max_quarantine_share."""
    project = sqlite_project
    good = lines(count + 1)
    last, cut = good.pop(), 40
    path = project.source / "a.ndjson"
    path.write_text("\n".join(good) + "\n" + last[:cut])  # the exporter has flushed part of its last line
    committed(project.invoke("run", now=FIRST), read=count, staged=count)
    with open(path, "a") as handle:
        handle.write(last[cut:] + "\n")  # and ends it after the run: its `stored` is before the watermark
    committed(project.invoke("run", now=SECOND), read=1, staged=1)
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(count + 1,)]
    assert project.query("SELECT origin FROM quarantine") == []


def test_a_backfill_of_another_window_in_between_does_not_lose_the_ended_line(sqlite_project):
    """A backfill reads the ended line from any time on, but only up to its own `until`: it recorded the file as
    read, and the next run, whose window starts at the watermark, skipped it (review: 12 staged of 13). Lines read
    from any time on are read up to where a scheduled run would read (Window.reach)."""
    project = sqlite_project
    good = lines(13)
    last, cut = good.pop(), 40
    path = project.source / "a.ndjson"
    path.write_text("\n".join(good) + "\n" + last[:cut])
    committed(project.invoke("run", now=FIRST), read=12, staged=12)
    with open(path, "a") as handle:
        handle.write(last[cut:] + "\n")
    backfill = project.invoke("backfill", "--since", "2026-10-01", "--until", "2026-10-15", now=SECOND)
    assert backfill.returncode == 0, backfill.stderr
    assert project.invoke("run", now=THIRD).returncode == 0
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(13,)]
    assert project.query("SELECT origin FROM quarantine") == []


@pytest.mark.parametrize("workers", [1, 2])
def test_the_line_ended_after_the_run_is_read_in_the_parallel_and_the_serial_path(tmp_path, workers):
    path = tmp_path / "a.ndjson"
    good = lines(400)
    last = good.pop()
    path.write_text("\n".join(good) + "\n" + last[:25])
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=workers, parallel_min_bytes=0)
    events, quarantined, index = collect_batches(source, EARLY, {})
    assert len(events) == 399 and quarantined == []
    assert index[str(path)][6] == [len("\n".join(good)) + 1, False]  # where the unread line begins
    with open(path, "a") as handle:
        handle.write(last[25:] + "\n" + "\n".join(lines(30, first=400, day="2026-11-04")) + "\n")
    events, quarantined, index = collect_batches(source, LATE, index)
    assert len(events) == 31 and quarantined == []  # the ended line (stored before LATE) and the 30 new ones
    assert index[str(path)][6] is None


@pytest.mark.parametrize("workers", [1, 2])
def test_a_complete_last_line_without_a_newline_counts_once_though_the_file_grows_while_read(tmp_path, workers):
    """Some exporters never end their files with a newline: such a line is a record. Before, it was left for
    the next run if the file grew while the run read it, and that run's window skipped it."""
    path = tmp_path / "a.ndjson"
    good = lines(300)
    path.write_text("\n".join(good))
    planned = os.stat(path).st_size
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=workers, parallel_min_bytes=0)
    source.restore(lambda paths: {})
    batches, events, index = source.batches(EARLY), [], {}
    for batch in batches:
        events += batch.events
        index.update(batch.state)
        if len(events) and not index and os.stat(path).st_size == planned:
            with open(path, "a") as handle:  # the exporter writes on while the run reads
                handle.write("\n" + "\n".join(lines(10, first=300, day="2026-11-04")) + "\n")
    assert len(events) == 300 and index[str(path)][6] is None
    later, quarantined, index = collect_batches(source, LATE, index)
    assert len(later) == 10 and quarantined == []
    again, quarantined, _ = collect_batches(source, EARLY, index)  # a lookback reads it again, with its newline:
    assert again == events and quarantined == []  # the same events, which staging keeps once (no conflict)


def test_a_line_never_ended_is_quarantined_once_when_its_file_has_been_quiet_for_a_day(sqlite_project):
    project = sqlite_project
    path = project.source / "a.ndjson"
    good = lines(301)
    last = good.pop()
    path.write_text("\n".join(good) + "\n" + last[:40])
    committed(project.invoke("run", now=FIRST), read=300, staged=300)
    quiet = dt.datetime(2026, 11, 4, 12, tzinfo=UTC).timestamp()
    os.utime(path, (quiet, quiet))  # last written to more than a day before SECOND, and not since the first run
    recent = project.invoke("run", now="2026-11-05T00:00:00Z")  # within the day: still left unread
    committed(recent, read=0, staged=0)
    refused = project.invoke("run", now=SECOND)  # the line, alone in the window: past max_quarantine_share
    assert refused.returncode == 65, refused.stderr
    assert "1 of 1 records in the window were malformed" in refused.stderr
    committed(project.invoke("run", "--accept-bad-input", now=SECOND), read=1, staged=0, quarantined=1)
    assert [(origin, reason[:len(UNFINISHED)]) for origin, reason in project.query(
        "SELECT origin, reason FROM quarantine")] == [(f"{path}:301", UNFINISHED)]
    committed(project.invoke("run", now=THIRD), read=0, staged=0)  # once: not again
    with open(path, "a") as handle:  # the exporter ends it after all: the statement is not lost
        handle.write(last[40:] + "\n")
    committed(project.invoke("run", now="2026-11-08T00:00:00Z"), read=1, staged=1)
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(301,)]
    assert len(project.query("SELECT origin FROM quarantine")) == 1


def test_a_gzip_file_still_being_written_is_read_on_from_where_the_run_stopped_whatever_the_stored(tmp_path):
    """The next run reads the lines the first could not reach though the watermark has passed their window."""
    data = gzip.compress(("\n".join(lines(400)) + "\n").encode())
    gz = tmp_path / "b.ndjson.gz"
    gz.write_bytes(data[:len(data) // 2])  # modified now, after EARLY's end: an exporter is writing it
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=1)
    events, _, first = collect_batches(source, EARLY, {})
    assert 0 < len(events) < 400
    gz.write_bytes(data)
    later, quarantined, index = collect_batches(source, LATE, first)
    assert len(events) + len(later) == 400 and quarantined == []
    assert first[str(gz)][6] == [len(events) + 1, False] and index[str(gz)][6] is None  # the first line not read


@pytest.mark.usefixtures("json_parser")
def test_a_byte_order_mark_opening_an_export_file_is_no_part_of_its_first_record(sqlite_project):
    """Only there: a mark at the start of another line is part of that line, which is then no JSON."""
    project = sqlite_project
    (project.source / "a.ndjson").write_text("\ufeff" + "".join(line + "\r\n" for line in lines(12)),
                                              encoding="utf-8")
    with gzip.open(project.source / "b.ndjson.gz", "wt", encoding="utf-8") as handle:
        handle.write("\ufeff" + "\n".join(lines(12, first=12)) + "\n")
    other = lines(200, first=24)
    other[1] = "\ufeff" + other[1]
    (project.source / "c.ndjson").write_text("\n".join(other) + "\n", encoding="utf-8")
    committed(project.invoke("run", now=FIRST), read=224, staged=223, quarantined=1)
    assert project.query("SELECT origin, reason FROM quarantine") == [
        (f"{project.source / 'c.ndjson'}:2", "not valid JSON: Expecting value: line 1 column 1 (char 0)")]
