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

Hostile or careless input must neither block a run nor exhaust its memory:
only regular files are opened (a FIFO would block, a device may rewind);
a file is read up to the size it had when the run planned it (a file that
grows meanwhile is read to its new end next run); and no line is ever held
whole beyond `max_record_bytes` — a longer one is read past in blocks and
quarantined by its origin and length.
"""

import collections
import dataclasses
import gzip
import itertools
import logging
import multiprocessing
import os
import zlib

from lms_refresh.errors import BadInputError, ConfigError, UnavailableError
from lms_refresh.regular_files import NotRegularFile, open_regular
from lms_refresh.sources import OK, WARNING, BaseSource, Batch, Finding
from lms_refresh.sources.files import UpTo, denied, export_files, numbered_lines, shown_path
from lms_refresh.sources.ndjson_worker import (
    BYTES_PER_STATEMENT,
    LINES_PER_STATEMENT_BUDGET,
    MAX_RECORD_BYTES,
    Chunk,
    ChunkResult,
    Reading,
    Signature,
    _unmarshal,
    _worker_init,
    _worker_read,
    default_workers,
    oversized,
    parse_lines,
    read_chunk,
)
from lms_refresh.sources.pool import result_of, stop_pool, workers_of

logger = logging.getLogger(__name__)

PLAN_BATCH = 1000  # export files looked up in the file index at a time
LOOKAHEAD = 4096  # files planned before deciding whether a pool of workers is worth starting
SKIPPED_SHOWN = 100  # skipped entries `check` lists one by one


def _batched(items, size):
    """Yield lists of at most `size` of `items`."""
    iterator = iter(items)
    while group := list(itertools.islice(iterator, size)):
        yield group


def _no_index(paths):
    return {}


def _unchanged_outside(known, signature, *, since, until):
    """Whether the index entry `known` is `signature`'s, with no `stored` time in [since, until)."""
    if not known or tuple(known[:3]) != signature:
        return False
    low, high = known[3:5]
    return low is None or high < since or low >= until


class _FileTracker:
    """Line numbers and the `stored` range of one file, across its chunks."""

    def __init__(self, path):
        self.path = path
        self.lines = 0
        self.low = self.high = None
        self.changed = False

    def add(self, result):
        batch = result.batch
        batch.quarantined = [(f"{self.path}:{self.lines + n}", reason, raw) for n, reason, raw in batch.quarantined]
        self.lines += result.lines
        self.changed = self.changed or result.changed
        if result.low is not None and (self.low is None or result.low < self.low):
            self.low = result.low
        if result.high is not None and (self.high is None or result.high > self.high):
            self.high = result.high
        return batch

    def state(self, signature, future):
        """The Batch that records the file's index entry, once its last chunk was added, with `future`: the
        earliest future limit this content was read with (the lines after it were quarantined, see Intake's
        `settled`; an unchanged file keeps the one it was first read with)."""
        if self.changed:
            # Committing what was read would move the watermark past the lines never read, and the next run,
            # whose window starts there, would skip them in the file now at this path: fail (69, retried by a
            # scheduled run) with nothing committed, so that the next attempt reads this window again.
            raise UnavailableError(f"{shown_path(self.path)} was removed, replaced or truncated while the run read it; "
                                   "nothing was committed, and the next run reads the window again.")
        return Batch(state={self.path: list(signature) + [self.low, self.high, future]})


class NdjsonSource(BaseSource):
    name = "xapi-ndjson"

    def __init__(self, path, mapper, batch_size, *, workers=None, parallel_min_bytes=16 << 20,
                 max_record_bytes=MAX_RECORD_BYTES):
        self.path = path
        self.mapper = mapper
        self.batch_size = batch_size
        self.chunk_bytes = batch_size * BYTES_PER_STATEMENT
        self.workers = workers or default_workers()
        self.parallel_min_bytes = parallel_min_bytes
        self.limit = max_record_bytes
        self.max_lines = batch_size * LINES_PER_STATEMENT_BUDGET
        self.lookup = _no_index  # until restored: every file is read

    def describe(self):
        return f"xAPI NDJSON files at {shown_path(self.path)}"

    def preflight(self):
        files = unreadable = 0
        first_unreadable, skipped = None, []
        for kind, path, detail in export_files(self.path):
            if kind == "skipped":
                skipped.append(Finding(WARNING, f"{shown_path(path)} is skipped: it is {detail}; "
                                                 "only regular files are read"))
                del skipped[SKIPPED_SHOWN:]  # the first ones: a count says the rest
                continue
            files += 1
            if not os.access(path, os.R_OK):
                unreadable += 1
                first_unreadable = first_unreadable or path
        if unreadable:
            more = f" ({unreadable - 1} more unreadable)" if unreadable > 1 else ""
            raise ConfigError(denied(first_unreadable) + more)
        return [Finding(OK, f"{files} export file(s) readable under {shown_path(self.path)}")] + skipped

    def restore(self, lookup):
        """Take up the file index an earlier committed run recorded, through `lookup(paths)`, which
        returns {path: [size, mtime_ns, inode, min, max]} (the Signature, then the range of `stored`
        cursors read from the file; None, None if none) for those of `paths` it holds. The index is
        asked in batches as the walk goes, never read whole: it grows with the export files."""
        self.lookup = lookup

    def _plan(self, window, *, compressed):
        """Yield (path, signature, chunks) for the plain (or the compressed) files that must be read,
        in path order; skipped entries are warned of with the plain files."""
        since, until = window.since_cursor, window.until_cursor
        for group in _batched(self._files(compressed), PLAN_BATCH):
            known = self.lookup([path for path, _ in group])
            for path, info in group:
                signature = Signature(info.st_size, info.st_mtime_ns, info.st_ino)
                entry = known.get(path)
                if _unchanged_outside(entry, signature, since=since, until=until):
                    continue
                settled = entry[5] if entry and len(entry) > 5 and tuple(entry[:3]) == signature else None
                if not os.access(path, os.R_OK):
                    raise ConfigError(denied(path))  # an operator must fix it (78); the run rolls back
                if compressed:
                    chunks = [(0, None)]  # streamed, not cut
                else:
                    starts = range(0, max(info.st_size, 1), self.chunk_bytes)
                    chunks = [(s, min(s + self.chunk_bytes, info.st_size)) for s in starts]
                yield path, signature, chunks, settled

    def _files(self, compressed):
        for kind, path, detail in export_files(self.path):
            if kind == "skipped":
                if not compressed:
                    logger.warning("Skipped %s: it is %s; only regular files are read.", shown_path(path), detail)
            elif path.endswith(".gz") == compressed:
                yield path, detail

    def _use_pool(self, plan):
        """Look ahead in `plan` (at most LOOKAHEAD files); return (the files looked at, whether
        they are worth a pool of workers: more than one chunk and parallel_min_bytes of them)."""
        ahead, total, chunks = [], 0, 0
        for item in plan:
            ahead.append(item)
            total += item[1].size
            chunks += len(item[2])
            if total >= self.parallel_min_bytes or len(ahead) >= LOOKAHEAD:
                break
        return ahead, self.workers > 1 and chunks > 1 and total >= self.parallel_min_bytes

    def batches(self, window):
        """Yield Batches of the statements whose `stored` lies in the window.

        An unchanged file of the restored index whose range lies outside the
        window is not read; each file's new entry travels in the `state` of a
        batch yielded after the file's last chunk. A file is read up to the size
        it had when planned: the entry records that size, so a file that grew
        meanwhile differs from it and is read again next run.
        """
        since, until = window.since_cursor, window.until_cursor
        reading = Reading(since, until, self.limit, self.max_lines)
        plain = self._plan(window, compressed=False)
        ahead, parallel = self._use_pool(plain)
        # The plan is walked once, by two readers: the chunks it gives the workers (a bounded
        # pipeline ahead) and the files whose results are collected here; tee holds the gap.
        for_tasks, for_files = itertools.tee(itertools.chain(ahead, plain))
        tasks = (Chunk(path, start, end, signature, settled) for path, signature, chunks, settled in for_tasks
                 for start, end in chunks)
        pool = None
        if parallel:
            pool = multiprocessing.get_context("fork").Pool(self.workers, _worker_init, (self.mapper, os.getpid()))
        try:
            results = self._results(pool, tasks, reading)
            future = self.mapper.latest
            for path, signature, chunks, settled in for_files:
                tracker = _FileTracker(path)
                for _ in chunks:
                    for result in next(results):
                        yield tracker.add(result)
                yield tracker.state(signature, settled or future)
            for path, signature, _, settled in self._plan(window, compressed=True):
                tracker = _FileTracker(path)
                for result in self._stream_gzip(path, signature, since, until=until, settled=settled,
                                                changed_after=window.until.timestamp()):
                    yield tracker.add(result)
                yield tracker.state(signature, settled or future)
        finally:
            if pool is not None:
                stop_pool(pool)  # bounded even if a stop killed a worker holding a queue lock

    def _results(self, pool, tasks, reading):
        """Yield, for each Chunk in order, an iterator of its ChunkResults."""
        if pool is None:
            for task in tasks:
                yield self._rest(read_chunk(self.mapper, task, reading), task, reading)
            return
        # A bounded pipeline across files: a few chunks in flight (enough that neither the
        # workers nor the staging process wait on the other's bursts), results taken in order.
        pending = collections.deque()
        workers = workers_of(pool)
        for task in tasks:
            pending.append((task, pool.apply_async(_worker_read, (task, reading))))
            if len(pending) >= 4 * self.workers:
                task, result = pending.popleft()
                yield self._rest(_unmarshal(result_of(result, workers)), task, reading)
        while pending:
            task, result = pending.popleft()
            yield self._rest(_unmarshal(result_of(result, workers)), task, reading)

    def _rest(self, result, task, reading):
        """Yield a chunk's first result, then (rarely: a chunk of very short lines) the rest, read here."""
        yield result
        while result.resume is not None:
            result = read_chunk(self.mapper, dataclasses.replace(task, start=result.resume), reading)
            yield result

    def _stream_gzip(self, path, signature, since, *, until, changed_after, settled=None):
        """Yield ChunkResults of a compressed file, streamed in batches of at most batch_size lines
        and about chunk_bytes of text, up to the compressed size the run planned. A file that ends
        early and was modified after `changed_after` (the window's end, as a timestamp) is still
        being written: what is complete is read, the rest by the next run."""
        try:
            handle, info = open_regular(path)
        except (FileNotFoundError, NotRegularFile):
            changed = ChunkResult()
            changed.changed = True
            yield changed
            return
        except PermissionError as error:
            raise ConfigError(denied(path)) from error
        except OSError as error:
            raise BadInputError(f"Cannot read {shown_path(path)} ({error.strerror or error}); fix or move the file "
                                "and run again.") from error
        with handle:
            if info.st_ino != signature.inode:
                changed = ChunkResult()
                changed.changed = True
                yield changed
                return
            numbered = numbered_lines(gzip.GzipFile(fileobj=UpTo(handle, signature.size), mode="rb"), self.limit)
            try:
                while True:
                    lines, held = [], 0
                    for item in numbered:
                        lines.append(item)
                        held += len(item[1]) if type(item[1]) is bytes else 0
                        if len(lines) >= self.batch_size or held >= self.chunk_bytes:
                            break
                    if not lines:
                        return
                    result = ChunkResult()
                    offset = lines[0][0] - 1
                    parse_lines(self.mapper, oversized(((n - offset, line) for n, line in lines), result.batch,
                                                       self.limit), since, until=until, result=result, settled=settled)
                    result.lines = len(lines)
                    del lines
                    yield result
            except (OSError, EOFError, zlib.error) as error:
                # Growing since it was planned, or ending early and changed after the window's end: an
                # exporter is still writing it (files are planned as the walk reaches them, so growth
                # alone is rarely seen). Corrupt data is corrupt whenever it was written.
                grew = os.fstat(handle.fileno()).st_size > signature.size
                if grew or (isinstance(error, EOFError) and info.st_mtime > changed_after):
                    logger.warning("%s was still being written when the run read it; what was complete is read "
                                   "now, the rest by the next run.", shown_path(path))
                    return
                raise BadInputError(f"Cannot read {shown_path(path)} to the end ({error}); fix or move the file "
                                    "and run again.") from error

