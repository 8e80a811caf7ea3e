"""xAPI statements from NDJSON export files (`*.ndjson`, `*.jsonl`, optionally `.gz`).

Plain files are cut into chunks at line boundaries and parsed by a small pool
of worker processes (JSON parsing is the costly part and these machines have
several cores); the main process only stages what they return. At most a few
chunks are in flight, so memory does not grow with the window. Compressed
files cannot be cut and are streamed in the main process.

Export files only grow in number, so each file's size, mtime, inode and the
range of `stored` times it holds are remembered (committed with the run).
An unchanged file whose range lies outside the window is not read again,
which keeps a one-day refresh cheap however much history sits beside it.
"""

import collections
import gzip
import json
import marshal
import multiprocessing
import os
import re
import signal

from lms_refresh.errors import BadInputError, ConfigError, UnavailableError
from lms_refresh.sources import Batch, TimeOrderedSource
from lms_refresh.sources.pool import stop_pool
from lms_refresh.sources.xapi import InvalidStatement, stored_cursor

SUFFIXES = (".ndjson", ".jsonl", ".ndjson.gz", ".jsonl.gz")
_STORED = re.compile(rb'"stored"\s*:\s*"([^"]{1,64})"')
_decode = json.JSONDecoder().raw_decode  # str in, no encoding sniffing per line
NICE_WORKERS = 19  # parsing workers run at the lowest priority (see _worker_init)
BYTES_PER_STATEMENT = 1024  # sizes chunks: batch_size statements of about this size
PREFILTER_STREAK = 256  # lines in a row inside the window after which the pre-filter pauses


class ChunkResult:
    """What one chunk of one file held: a Batch plus line count and `stored` range."""

    __slots__ = ("batch", "lines", "low", "high")

    def __init__(self):
        self.batch = Batch()
        self.lines = 0
        self.low = self.high = None


def _stored_of(line):
    """Return a raw line's `stored` cursor without parsing it, or None if that cannot be told cheaply.

    Only trusted when "stored" occurs once, so a nested key of that name cannot mislead it.
    """
    if line.count(b'"stored"') == 1:
        match = _STORED.search(line)
        if match:
            try:
                return stored_cursor(match.group(1).decode("ascii"))
            except (InvalidStatement, UnicodeDecodeError):
                pass
    return None


def parse_lines(mapper, lines, since, until, result):
    """Parse (number, raw line) pairs into `result`; lines outside [since, until) are skipped.

    A cheap pre-filter (`_stored_of`) skips lines outside the window without
    parsing them. It only saves work when there are such lines, so during a long
    run of lines inside the window (a first run, a new file) it pauses; the first
    line found outside turns it on again. A line is quarantined only if it is in
    the window or its `stored` cannot be told, paused or not.
    """
    batch = result.batch
    events, voids, quarantined = batch.events, batch.voids, batch.quarantined
    low, high = result.low, result.high
    prefilter, streak, read, number = True, 0, 0, result.lines
    for number, line in lines:
        if not line or line.isspace():
            continue
        cursor = _stored_of(line) if prefilter else None
        kind = None
        if cursor is None or since <= cursor < until:
            try:
                text = line.decode()
                if text[0] in " \t":
                    text = text.strip()
                parsed, end = _decode(text)
                if end != len(text) and text[end:].strip():
                    raise ValueError(f"extra data after the JSON value at character {end}")
                kind, row = mapper.map(parsed, cursor)
            except (ValueError, InvalidStatement, RecursionError) as error:
                cursor = None if prefilter else _stored_of(line)  # what the paused pre-filter would have seen
                if cursor is None or since <= cursor < until:
                    reason = str(error) if isinstance(error, InvalidStatement) else f"not valid JSON: {error}"
                    if isinstance(error, RecursionError):  # e.g. [[[[... 100,000 levels deep
                        reason = "JSON nested too deeply to parse"
                    quarantined.append((number, reason, line.rstrip(b"\r\n").decode("utf-8", "replace")))
                    read += 1
                    continue
            else:
                if cursor is None:  # the pre-filter could not tell (or paused); the parsed value decides
                    cursor = row[2] if kind == "void" else row[4]
        if low is None or cursor < low:
            low = cursor
        if high is None or cursor > high:
            high = cursor
        if kind is None or not since <= cursor < until:
            prefilter, streak = True, 0
            continue
        streak += 1
        if streak >= PREFILTER_STREAK:
            prefilter = False
        (voids if kind == "void" else events).append(row)
        read += 1
    result.lines, result.low, result.high = number, low, high
    batch.read += read
    batch.names = mapper.take_new_names()
    return result


def read_chunk(mapper, path, start, end, since, until):
    """Return the ChunkResult of the lines of `path` that start in [start, end) (end None: to EOF)."""
    try:
        with open(path, "rb") as handle:
            if end is None:  # the whole file, which may be a pipe that cannot seek
                return parse_lines(mapper, enumerate(handle, 1), since, until, ChunkResult())
            if start:
                handle.seek(start - 1)
                handle.readline()  # finish the line that straddles `start`; it is the previous chunk's
            position = handle.tell()
            data = handle.read(max(end - position, 0)) if position < end else b""
            lines = data.split(b"\n")
            del data
            if lines[-1] == b"":
                lines.pop()
            else:  # the last line starts in this chunk, so it is ours (appended, not a copy of the chunk)
                lines[-1] += handle.readline().rstrip(b"\n")
            result = parse_lines(mapper, enumerate(lines, 1), since, until, ChunkResult())
            result.lines = len(lines)
            return result
    except PermissionError:
        raise ConfigError(f"Cannot read {path}: permission denied.")
    except OSError as error:
        raise BadInputError(f"Cannot read {path} ({error}); fix or move the file and run again.")


_worker_mapper = None


def _worker_init(mapper):
    global _worker_mapper
    _worker_mapper = mapper
    # The parent owns the run: it turns SIGTERM into a rollback and ends the pool.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Staging in the parent is the serial step: workers yield the CPU to it, so that
    # more processes than cores do not slow it down (measured on 2 cores: about +8%).
    try:
        os.nice(NICE_WORKERS)
    except OSError:
        pass  # a seccomp filter may refuse it; parsing is only slower, never wrong


def _worker_read(path, start, end, since, until):
    result = read_chunk(_worker_mapper, path, start, end, since, until)
    # The events are flat tuples of str, int, bytes and None: marshal passes them to the
    # parent at a fraction of pickle's cost (the rest of the result is small).
    result.batch.events = marshal.dumps(result.batch.events)
    return result


def default_workers():
    """One parsing worker per usable core, plus one: the staging process idles while it
    waits for parsed chunks, and a lowest-priority extra worker uses those gaps
    (on 2 cores: 3 workers measured ~8% faster than 2). At most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return min(cores + 1, 8)


def _unmarshal(result):
    result.batch.events = marshal.loads(result.batch.events)
    return result


class _FileTracker:
    """Line numbers and the `stored` range of one file, across its chunks."""

    def __init__(self, path):
        self.path = path
        self.lines = 0
        self.low = self.high = None

    def add(self, result):
        batch = result.batch
        batch.quarantined = [(f"{self.path}:{self.lines + n}", reason, raw) for n, reason, raw in batch.quarantined]
        self.lines += result.lines
        if result.low is not None and (self.low is None or result.low < self.low):
            self.low = result.low
        if result.high is not None and (self.high is None or result.high > self.high):
            self.high = result.high
        return batch


class NdjsonSource(TimeOrderedSource):
    name = "xapi-ndjson"

    def __init__(self, path, mapper, batch_size, workers=None, parallel_min_bytes=16 << 20):
        self.path = path
        self.mapper = mapper
        self.batch_size = batch_size
        self.chunk_bytes = batch_size * BYTES_PER_STATEMENT
        self.workers = workers or default_workers()
        self.parallel_min_bytes = parallel_min_bytes

    def describe(self):
        return f"xAPI NDJSON files at {self.path}"

    def files(self):
        """Return the export files, sorted, or raise if the path is missing."""
        if os.path.isfile(self.path):
            return [self.path]
        if not os.path.isdir(self.path):
            raise UnavailableError(
                f"The xAPI source path {self.path} does not exist (is the export share mounted?)."
            )
        found = []
        for folder, _, names in os.walk(self.path):
            found.extend(os.path.join(folder, n) for n in names if n.endswith(SUFFIXES))
        return sorted(found)

    def check(self):
        files = self.files()
        unreadable = [f for f in files if not os.access(f, os.R_OK)]
        if unreadable:
            raise ConfigError(f"Cannot read {unreadable[0]} (and {len(unreadable) - 1} more): permission denied.")
        return [f"{len(files)} export file(s) readable under {self.path}"]

    def _plan(self, window, index):
        """Return [(path, signature, chunks)] for the files that must be read."""
        since, until = window.since_cursor, window.until_cursor
        plan = []
        for path in self.files():
            try:
                info = os.stat(path)
            except FileNotFoundError:
                continue  # rotated away between listing and reading
            signature = [info.st_size, info.st_mtime_ns, info.st_ino]
            known = index.get(path)
            if known and known[:3] == signature and (known[3] is None or known[4] < since or known[3] >= until):
                continue
            if path.endswith(".gz") or not os.path.isfile(path):
                chunks = [(0, None)]  # streamed, not cut (compressed, or a pipe)
            else:
                starts = range(0, max(info.st_size, 1), self.chunk_bytes)
                chunks = [(s, min(s + self.chunk_bytes, info.st_size)) for s in starts]
            plan.append((path, signature, chunks))
        return plan

    def batches(self, window, index):
        """Yield Batches of the statements whose `stored` lies in the window.

        `index` maps a file path to the [size, mtime_ns, inode, min, max] list
        recorded by an earlier committed run; each file's new entry travels in
        the `state` of a batch yielded after the file's last chunk.
        """
        since, until = window.since_cursor, window.until_cursor
        plan = self._plan(window, index)
        tasks = [(path, start, end) for path, _, chunks in plan if not path.endswith(".gz") for start, end in chunks]
        total = sum(signature[0] for _, signature, _ in plan)
        pool = None
        if self.workers > 1 and len(tasks) > 1 and total >= self.parallel_min_bytes:
            pool = multiprocessing.get_context("fork").Pool(self.workers, _worker_init, (self.mapper,))
        try:
            results = self._results(pool, tasks, since, until)
            for path, signature, chunks in plan:
                if path.endswith(".gz"):
                    continue
                tracker = _FileTracker(path)
                for _ in chunks:
                    yield tracker.add(next(results))
                yield Batch(state={path: signature + [tracker.low, tracker.high]})
            for path, signature, _ in plan:
                if path.endswith(".gz"):
                    tracker = _FileTracker(path)
                    for result in self._stream_gzip(path, since, until):
                        yield tracker.add(result)
                    yield Batch(state={path: signature + [tracker.low, tracker.high]})
        finally:
            if pool is not None:
                stop_pool(pool)  # bounded even if a stop killed a worker holding a queue lock

    def _results(self, pool, tasks, since, until):
        """Yield the ChunkResult of each task, in order."""
        if pool is None:
            for path, start, end in tasks:
                yield read_chunk(self.mapper, path, start, end, since, until)
            return
        # A bounded pipeline across files: a few chunks in flight (enough that neither the
        # workers nor the staging process wait on the other's bursts), results taken in order.
        pending = collections.deque()
        for path, start, end in tasks:
            pending.append(pool.apply_async(_worker_read, (path, start, end, since, until)))
            if len(pending) >= 4 * self.workers:
                yield _unmarshal(pending.popleft().get())
        while pending:
            yield _unmarshal(pending.popleft().get())

    def _stream_gzip(self, path, since, until):
        try:
            with gzip.open(path, "rb") as handle:
                numbered = enumerate(handle, 1)
                while True:
                    result = ChunkResult()
                    lines = [item for _, item in zip(range(self.batch_size), numbered)]
                    if not lines:
                        return
                    offset = lines[0][0] - 1
                    parse_lines(self.mapper, ((n - offset, line) for n, line in lines), since, until, result)
                    result.lines = len(lines)
                    yield result
        except PermissionError:
            raise ConfigError(f"Cannot read {path}: permission denied.")
        except (OSError, EOFError) as error:
            raise BadInputError(f"Cannot read {path} to the end ({error}); fix or move the file and run again.")
