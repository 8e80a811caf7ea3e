"""Hostile export files: records of any size, gzip bombs, FIFOs, sockets, devices, links, permissions, growth.

Each case ends with a documented exit code and one sentence naming what to
fix, within the memory bound, and none can block a run.
"""

import datetime as dt
import gzip
import json
import logging
import os
import pathlib
import shutil
import socket
import tempfile
import zlib

import pytest

from helpers.batches import collect_batches
from helpers.commands import cli_command, reachable_cli, run_for_peak_rss
from helpers.project import Project
from helpers.reference import expected_serving
from helpers.statements import statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.errors import BadInputError, UnavailableError
from lms_refresh.sources.ndjson import NdjsonSource
from lms_refresh.sources.xapi import StatementMapper
from lms_refresh.window import Window

UTC = dt.UTC
MEMORY_BOUND_MIB = 200  # README, "Bad input": the peak resident memory of any run
NOW = "2026-11-04T04:15:00Z"
SINCE, UNTIL = dt.datetime(2026, 10, 5, 4, 15, tzinfo=UTC), dt.datetime(2026, 11, 4, 4, 15, tzinfo=UTC)
MIB = 1 << 20
OVERSIZED = "the record is {} bytes long, more than source.max_record_bytes ({}); it was skipped unread"


def measured(project, *args, now=NOW, user=None):
    """Run the CLI; return (exit code, stderr, peak RSS in MiB of it and of its parsing workers)."""
    arguments = ["--config", str(project.config), "--now", now] + list(args)
    if user:  # the clone may be under /root (0700): run a copy of the code that user can reach
        command = ["runuser", "-u", user, "--"] + reachable_cli(project.root.parent) + arguments
    else:
        command = cli_command() + arguments
    return run_for_peak_rss(command, project.environment())


def good_lines(count, first=0):
    """Valid statements (no scores or durations: the reference's rows then compare exactly)."""
    verbs = ("experienced", "attempted", "completed", "passed", "failed")
    return [json.dumps(statement(learner=f"u{(first + i) % 37}", verb=verbs[i % 5], course=("BIO101", "CHEM2")[i % 2],
                                 timestamp=f"2026-11-0{1 + i % 3}T1{i % 10}:{i % 60:02d}:00Z")) for i in range(count)]


def assert_serving_is(project, lines):
    assert project.serving(site=True) == expected_serving(lines, SINCE, UNTIL, "Europe/Paris", 10)
    assert len(project.serving()) == 6  # 3 days x 2 courses, all visible


def assert_quarantined_by_size(project, expected):
    """The quarantine holds these (origin, reason) rows, and of the records themselves nothing (the store
    keeps a note in their place: the source handed it no content at all)."""
    rows = project.query("SELECT origin, reason, raw FROM quarantine ORDER BY origin")
    assert [row[:2] for row in rows] == expected
    assert all(len(raw) < 200 and "x" * 10 not in raw for _, _, raw in rows)


# -- item 7: the size of a record is bounded --------------------------------------

def test_a_line_of_hundreds_of_megabytes_is_read_past_and_quarantined_by_its_size(sqlite_project):
    """A 300 MiB line between 400 good ones (a file big enough for the parallel workers): never held, never a
    crash; it is quarantined by origin and length, and at 1 in 401 the run is within max_quarantine_share."""
    project, lines = sqlite_project, good_lines(400)
    path = project.source / "a.ndjson"
    with open(path, "wb") as handle:
        handle.write("\n".join(lines[:200]).encode() + b'\n{"id": "')
        # A hole, read as 300 MiB of NUL bytes without a newline: the line is as long, and takes no disk (the
        # suite's scratch may be a small tmpfs).
        handle.seek(300 * MIB, os.SEEK_CUR)
        handle.write(b'"}\n' + "\n".join(lines[200:]).encode() + b"\n")
    code, stderr, peak = measured(project, "run")
    assert code == 0, stderr
    assert "read 401 statements, staged 400, voided 0, quarantined 1" in stderr
    assert_quarantined_by_size(project, [(f"{path}:201", OVERSIZED.format(300 * MIB + 10, MIB))])
    assert peak < MEMORY_BOUND_MIB, f"peak RSS {peak:.0f} MiB"
    assert_serving_is(project, lines)


def gzip_bomb(path, before, after):
    """Write a 1 MB .gz whose one middle line expands to 1 GiB (gzip members may be concatenated)."""
    member = gzip.compress(b"x" * MIB, compresslevel=9)  # about 1 KiB
    with open(path, "wb") as handle:
        handle.write(gzip.compress(("\n".join(before) + '\n{"id": "').encode()))
        for _ in range(1024):
            handle.write(member)
        handle.write(gzip.compress(('"}\n' + "\n".join(after) + "\n").encode()))
    assert os.path.getsize(path) < 1_200_000
    return 1024 * MIB + 10


def test_the_number_of_export_files_does_not_grow_check_or_a_run(tmp_path):
    """Neither the walk nor the file index is held whole: 30,000 export files cost `check` and a
    nightly run no more memory than 300 (before, about 1 KiB a file: 30 MiB more here)."""
    def peaks(count):
        project = Project(tmp_path / str(count))
        project.write("one.ndjson", [statement(timestamp="2026-11-02T10:00:00Z")])
        for folder in range(count // 1000 or 1):
            (project.source / f"d{folder:03d}").mkdir()
            for number in range(min(count, 1000)):
                (project.source / f"d{folder:03d}" / f"export-{number:04d}.ndjson").write_text("\n")
        code, stderr, check = measured(project, "check")
        assert code == 0, stderr
        assert f"{count + 1} export file(s) readable" in project.invoke("check", check=0).stdout
        code, stderr, _ = measured(project, "run")
        assert code == 0, stderr
        code, stderr, again = measured(project, "run")  # the index of every file is in the store now
        assert code == 0, stderr
        return check, again

    few, many = peaks(300), peaks(30000)
    # The store's own page cache may hold more of a bigger index (bounded by its cache_size): allow 8 MiB.
    assert many[0] - few[0] < 4, f"check: {few[0]:.1f} MiB with 300 files, {many[0]:.1f} MiB with 30,000"
    assert many[1] - few[1] < 8, f"run: {few[1]:.1f} MiB with 300 files, {many[1]:.1f} MiB with 30,000"


def test_a_gzip_bomb_is_read_past_while_streaming_and_the_run_follows_max_quarantine_share(sqlite_project):
    project, lines = sqlite_project, good_lines(50)
    path = project.source / "bomb.ndjson.gz"
    size = gzip_bomb(path, lines[:25], lines[25:])
    code, stderr, peak = measured(project, "run")
    assert code == 65, stderr
    assert ("1 of 51 records in the window were malformed (2.0%, more than max_quarantine_share = 1.0%); "
            "nothing was committed.") in stderr  # 51: the lines after the bomb were read too
    assert peak < MEMORY_BOUND_MIB, f"peak RSS {peak:.0f} MiB"
    assert_quarantined_by_size(project, [(f"{path}:26", OVERSIZED.format(size, MIB))])
    assert project.serving() == [] and "watermark" not in project.meta()


WINDOW = Window(dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 11, 4, tzinfo=UTC))
MAPPER = StatementMapper("Europe/Paris", Pseudonymiser(b"k" * 32), r"^(.+?/course/[^/?#]+)")


def collect(source, index=None):
    return collect_batches(source, WINDOW, index)


@pytest.mark.parametrize("workers", [1, 2])
def test_records_around_the_limit_are_cut_exactly_at_any_chunk_boundary(tmp_path, workers):
    """Lines just under, at and over the limit, and far longer than a chunk, wherever chunks start (plain files
    cut into 2 KiB chunks, and the same lines gzipped): each good line is read once, each long one quarantined
    with its exact length and line number, and the rest of the file is read on."""
    limit, lines = 1024, []
    good = good_lines(60)
    junk = {}  # line number -> length
    for i, line in enumerate(good):
        lines.append(line)
        length = (limit - 1, limit, limit + 1, 3000, 10_000, 2 * limit + 7)[i % 6]
        lines.append("x" * length)
        junk[len(lines)] = length
    text = "\n".join(lines) + "\n" + "y" * 5000  # the last line has no newline, and is too long
    junk[len(lines) + 1] = 5000
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.ndjson").write_text(text)
    (tmp_path / "gz").mkdir()
    with gzip.open(tmp_path / "gz" / "a.ndjson.gz", "wt") as handle:
        handle.write(text)
    expected = [(number, OVERSIZED.format(length, limit) if length > limit else "not valid JSON")
                for number, length in sorted(junk.items())]
    for kind in ("plain", "gz"):
        source = NdjsonSource(str(tmp_path / kind), MAPPER, batch_size=2, workers=workers, parallel_min_bytes=0,
                              max_record_bytes=limit)
        events, quarantined, state = collect(source)
        assert len(events) == len(good), kind
        name = str(tmp_path / kind / ("a.ndjson" if kind == "plain" else "a.ndjson.gz"))
        assert [(origin, reason.split(":")[0]) for origin, reason, _ in quarantined] == [
            (f"{name}:{n}", reason) for n, reason in expected], kind
        assert all(raw == "" for _, reason, raw in quarantined if reason.startswith("the record is")), kind
        assert list(state) == [name]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_flood_of_tiny_records_never_makes_a_result_larger_than_four_batches(tmp_path, workers):
    """Chunks are sized for statements of about 1 KiB; a chunk of 3-byte lines would otherwise hand back
    hundreds of thousands of quarantined records at once. No result holds more than 4 x batch_size lines,
    and every line is still counted once, with its own line number."""
    good = good_lines(50)
    text = "\n".join(line for pair in zip(good, ["{}"] * 50, strict=True) for line in pair) + "\n" + "{}\n" * 5000
    (tmp_path / "a.ndjson").write_text(text)
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=10, workers=workers, parallel_min_bytes=0)
    sizes, events, quarantined = [], 0, []
    for batch in source.batches(WINDOW):
        sizes.append(len(batch))
        events += len(batch.events)
        quarantined += [origin for origin, _, _ in batch.quarantined]
    assert max(sizes) <= 40 and events == 50
    assert quarantined == [f"{tmp_path / 'a.ndjson'}:{n}" for n in range(2, 101, 2)] + [
        f"{tmp_path / 'a.ndjson'}:{n}" for n in range(101, 5101)]


# -- item 8: only regular files; nothing blocks; unreadable files are named -------

def test_fifos_sockets_devices_and_directory_links_are_skipped_with_a_warning_and_never_opened(sqlite_project,
                                                                                                tmp_path):
    """Opening the FIFO would block the run until a writer came (none will): the run must finish anyway."""
    project, lines = sqlite_project, good_lines(60)
    project.write("good.ndjson", lines)
    inbox = project.source
    os.mkfifo(inbox / "fifo.ndjson")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(inbox / "socket.jsonl"))
    os.symlink("/dev/null", inbox / "device.ndjson")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "more.ndjson").write_text(good_lines(1)[0] + "\n")
    os.symlink(tmp_path / "elsewhere", inbox / "linked-directory")
    os.symlink(inbox / "good.ndjson", inbox / "same-file.ndjson")  # a second name: read once
    try:
        result = project.cli("run", now=NOW)
        checked = project.cli("check", now=NOW)
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    skipped = {"fifo.ndjson": "a FIFO", "socket.jsonl": "a socket", "device.ndjson": "a character device",
               "linked-directory": "a symbolic link to a directory, which is not followed"}
    for name, why in skipped.items():
        assert f"Skipped {inbox / name}: it is {why}; only regular files are read." in result.stderr
        assert f"note  source: warning: {inbox / name} is skipped: it is {why}; only regular files are read" \
            in checked.stdout
    assert checked.returncode == 0 and "ok  source: 1 export file(s) readable" in checked.stdout
    assert "read 60 statements, staged 60" in result.stderr
    assert_serving_is(project, lines)


def test_a_source_path_that_is_a_fifo_is_a_configuration_error(tmp_path):
    project = Project(tmp_path / "p")
    fifo = tmp_path / "exports.ndjson"
    os.mkfifo(fifo)
    project.source = fifo
    project.configure()
    result = project.cli("run", now=NOW)
    assert result.returncode == 78, result.stderr
    assert (f"The xAPI source path {fifo} is a FIFO, not an export file or a directory of them; point source.path "
            "at a directory of export files.") in result.stderr


@pytest.fixture
def shared_project():
    """A project the unprivileged user 'nobody' can run (pytest's own tmp_path is private to root)."""
    root = tempfile.mkdtemp(prefix="lmsr-hostile-")
    os.chmod(root, 0o755)
    project = Project(pathlib.Path(root) / "p")
    os.chmod(project.root, 0o755)
    project.state.mkdir()
    os.chown(project.state, 65534, 65534)
    yield project
    shutil.rmtree(root)


def test_an_unreadable_export_file_exits_78_naming_the_file_and_the_user(shared_project):
    project = shared_project
    project.write("good.ndjson", good_lines(20))
    secret = project.write("private.ndjson", good_lines(5))
    secret.chmod(0o600)  # root's
    for command in ("run", "check"):
        code, stderr, _ = measured(project, command, user="nobody")
        assert code == 78, stderr
        assert (f"Cannot read {secret}: permission denied for user 'nobody'; let 'nobody' read it "
                "(e.g. its group and mode) or move it out of source.path.") in stderr
    assert project.serving() == []


def test_an_unreadable_export_directory_exits_78_naming_it_and_the_user(shared_project):
    project = shared_project
    project.write("good.ndjson", good_lines(20))
    hidden = project.source / "2026-11"
    hidden.mkdir(mode=0o700)  # root's
    code, stderr, _ = measured(project, "run", user="nobody")
    assert code == 78, stderr
    assert f"Cannot list the directory {hidden}: permission denied for user 'nobody'" in stderr


def test_a_file_that_grows_while_read_is_read_to_the_size_it_had_and_the_rest_next_run(tmp_path):
    """The run reads what the file held when it planned; the file index records that size, so the next run
    sees the grown file as changed and reads the rest — including the line that was half written."""
    lines = good_lines(300)
    path = tmp_path / "a.ndjson"
    half = len(lines[299]) // 2
    path.write_text("\n".join(lines[:299]) + "\n" + lines[299][:half])  # a writer in the middle of a line
    planned = os.stat(path)
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=1)
    batches = source.batches(WINDOW)
    events = list(next(batches).events)
    with open(path, "a") as handle:  # the writer goes on while the run reads
        handle.write(lines[299][half:] + "\n" + "\n".join(good_lines(50, first=300)) + "\n")
    index, quarantined = {}, []
    for batch in batches:
        events += batch.events
        quarantined += batch.quarantined
        index.update(batch.state)
    assert len(events) == 299 and quarantined == []
    assert index[str(path)][:3] == [planned.st_size, planned.st_mtime_ns, planned.st_ino]
    events, quarantined, _ = collect(source, index)  # the next run
    assert len(events) == 350 and quarantined == []


def test_a_file_replaced_while_read_fails_the_run_so_that_the_next_one_reads_the_window_again(tmp_path):
    """Committing what was read would move the watermark past what was not, and the next run's window would
    skip those lines in the new file (tests/hostile_input/test_export_file_changed_during_a_run.py)."""
    path = tmp_path / "a.ndjson"
    path.write_text("\n".join(good_lines(100)) + "\n")
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=1)
    batches = source.batches(WINDOW)
    first = len(next(batches).events)  # the first chunk of 20 KiB
    (tmp_path / "new").write_text("\n".join(good_lines(40, first=100)) + "\n")
    os.replace(tmp_path / "new", path)  # rotated under the run
    with pytest.raises(UnavailableError, match=f"{path} was removed, replaced or truncated while the run read it"):
        list(batches)
    assert 0 < first < 100
    events, _, index = collect(source, {})  # the next run, on the same window
    assert len(events) == 40 and list(index) == [str(path)]


def test_a_gzip_file_still_being_written_is_read_as_far_as_it_is_complete(tmp_path, caplog):
    (tmp_path / "a.ndjson").write_text("\n".join(good_lines(30)) + "\n")
    data = gzip.compress(("\n".join(good_lines(50, first=30)) + "\n").encode())
    gz = tmp_path / "b.ndjson.gz"
    gz.write_bytes(data[:len(data) // 2])  # modified now, after the window's end: an exporter is writing it
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=1)
    with caplog.at_level(logging.WARNING):
        events, _, index = collect(source, {})
    assert f"{gz} was still being written when the run read it" in caplog.text
    assert 30 <= len(events) < 80
    gz.write_bytes(data)
    events, _, _ = collect(source, index)  # the next run sees it changed and reads it whole (a.ndjson's
    assert len(events) == 80  # statements lie in the window: read again, they count once)


def test_a_gzip_file_that_grows_while_the_run_reads_it_is_read_as_far_as_it_is_complete(tmp_path, caplog):
    """Truncated and older than the window's end would be corrupt for good; growing since the run
    reached it, it is still being written."""
    data = gzip.compress(("\n".join(good_lines(400)) + "\n").encode())
    gz = tmp_path / "b.ndjson.gz"
    gz.write_bytes(data[:len(data) // 2])
    os.utime(gz, (WINDOW.since.timestamp(), WINDOW.since.timestamp()))
    source = NdjsonSource(str(tmp_path), MAPPER, batch_size=20, workers=1)
    batches = source.batches(WINDOW)
    first = next(batches)  # the file is planned and its first batch read
    with open(gz, "ab") as handle:
        handle.write(data[len(data) // 2:])
    os.utime(gz, (WINDOW.since.timestamp(), WINDOW.since.timestamp()))
    with caplog.at_level(logging.WARNING):
        rest = list(batches)
    assert f"{gz} was still being written when the run read it" in caplog.text
    assert 0 < sum(len(batch.events) for batch in [first] + rest) < 400


def complete_lines(truncated):
    """The lines a truncated gzip stream holds whole (each with its newline), decompressed independently."""
    text = zlib.decompressobj(wbits=31).decompress(truncated)
    return text[:text.rindex(b"\n")].decode().split("\n")


def truncated_gz(project, lines, written):
    """An export .gz cut in the middle of its data (no end-of-stream marker yet), last written at `written`."""
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    gz = project.source / "a.ndjson.gz"
    gz.write_bytes(data[:len(data) * 2 // 3])
    os.utime(gz, (written.timestamp(),) * 2)
    return gz, data


def test_a_gzip_file_an_exporter_is_still_writing_is_read_to_its_last_complete_line(sqlite_project):
    """Written to two hours before the run (an exporter flushes its compressed blocks now and then): every line
    that is complete is counted now, not only those of the batches before the end, and the rest next run."""
    project, lines = sqlite_project, good_lines(300)  # fewer than one batch (500): all in the batch cut short
    now = dt.datetime.fromisoformat(NOW)
    gz, data = truncated_gz(project, lines, now - dt.timedelta(hours=2))
    whole = complete_lines(gz.read_bytes())
    assert 100 < len(whole) < 300
    result = project.invoke("run", now=NOW)
    assert result.returncode == 0, result.stderr
    assert (f"{gz} was still being written when the run read it (it ends early, and was written to less than 24 "
            "hours before the window's end); its complete lines are read now, the rest by the next run."
            ) in result.stderr
    assert project.query("SELECT statements_read, quarantined FROM runs") == [(len(whole), 0)]
    assert project.serving(site=True) == expected_serving(whole, SINCE, UNTIL, "Europe/Paris", 10)
    gz.write_bytes(data)  # the exporter closes it
    later = now + dt.timedelta(hours=1)
    os.utime(gz, (later.timestamp(),) * 2)
    project.invoke("run", now=(later + dt.timedelta(hours=1)).isoformat(), check=0)
    assert project.serving(site=True) == expected_serving(lines, SINCE, UNTIL, "Europe/Paris", 10)


def test_a_gzip_file_nobody_has_written_to_for_a_day_that_ends_early_is_truncated_for_good(sqlite_project):
    project = sqlite_project
    now = dt.datetime.fromisoformat(NOW)
    gz, _ = truncated_gz(project, good_lines(300), now - dt.timedelta(hours=25))
    result = project.invoke("run", now=NOW)
    assert result.returncode == 65, result.stderr
    assert (f"{gz} ends early (Compressed file ended before the end-of-stream marker was reached) and nobody has "
            "written to it since 2026-11-03 03:15 UTC, more than 24 hours before the window's end: it is truncated "
            "for good; fix or move the file and run again.") in result.stderr
    assert project.serving() == [] and "watermark" not in project.meta()


def test_corrupt_compressed_data_is_bad_input_not_a_crash(tmp_path):
    data = bytearray(gzip.compress(("\n".join(good_lines(200)) + "\n").encode()))
    for i in range(40, 60):
        data[i] ^= 0xFF
    (tmp_path / "a.ndjson.gz").write_bytes(bytes(data))
    with pytest.raises(BadInputError, match="a.ndjson.gz to the end"):
        collect(NdjsonSource(str(tmp_path), MAPPER, batch_size=100))


def test_a_file_name_with_a_newline_cannot_forge_a_log_line(sqlite_project):
    """A FIFO named "a\\nERROR forged line.ndjson" made the "Skipped" warning two lines, the second one an ERROR
    record of its own on stderr (and a line of its own in `check`'s output and in the journal's text)."""
    project = sqlite_project
    project.write("good.ndjson", good_lines(20))
    inbox = project.source
    name = "a\nERROR forged line.ndjson"
    os.mkfifo(inbox / name)
    result = project.invoke("run", now=NOW)
    checked = project.invoke("check", now=NOW)
    assert result.returncode == 0 and checked.returncode == 0, (result.stderr, checked.stderr)
    shown = repr(f"{inbox}/{name}")
    assert f"Skipped {shown}: it is a FIFO; only regular files are read." in result.stderr
    assert f"note  source: warning: {shown} is skipped: it is a FIFO; only regular files are read" in checked.stdout
    for output in (result.stderr, checked.stdout):
        assert not [line for line in output.splitlines() if line.startswith("ERROR forged")]
    assert "read 20 statements, staged 20" in result.stderr
    # A dangling link, named and pointing with control characters, fails the run in one line of its own.
    os.symlink(f"{inbox}/gone\n\x1b[2Jcleared.ndjson", inbox / "b\rok  forged.ndjson")
    result = project.invoke("run", now="2026-11-05T04:15:00Z")
    checked = project.invoke("check", now="2026-11-05T04:15:00Z")
    assert result.returncode == 69 and checked.returncode == 69, (result.stderr, checked.stderr)
    target = repr(f"{inbox}/gone\n\x1b[2Jcleared.ndjson")
    for output in (result.stderr, checked.stdout + checked.stderr):
        assert f"{repr(f'{inbox}/b' + chr(13) + 'ok  forged.ndjson')} is a symbolic link to {target}, which does " \
               "not exist" in output
        assert "\x1b" not in output and "\r" not in output
        assert not [line for line in output.splitlines() if line.startswith(("ERROR forged", "ok  forged"))]


def test_messages_naming_an_export_file_show_its_control_characters_escaped(tmp_path):
    from lms_refresh.sources.files import denied, shown_path

    assert shown_path("/srv/exports/2026-11.ndjson") == "/srv/exports/2026-11.ndjson"
    assert shown_path("/srv/a\nERROR forged line.ndjson") == "'/srv/a\\nERROR forged line.ndjson'"
    assert shown_path("/srv/\udcff.ndjson") == "'/srv/\\udcff.ndjson'"  # an undecodable byte of the name
    message = denied("/srv/a\nERROR forged line.ndjson")
    assert message.startswith("Cannot read '/srv/a\\nERROR forged line.ndjson': permission denied for user ")
    assert "\n" not in message
