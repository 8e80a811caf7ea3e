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
import logging
import multiprocessing
import os
import zlib

from lms_refresh.errors import BadInputError, ConfigError
from lms_refresh.sources import Batch, BaseSource, Finding, OK, WARNING
from lms_refresh.sources.files import NotRegularFile, UpTo, denied, export_files, numbered_lines, open_regular
from lms_refresh.sources.pool import result_of, stop_pool, workers_of
from lms_refresh.sources.ndjson_worker import (
    BYTES_PER_STATEMENT, LINES_PER_STATEMENT_BUDGET, MAX_RECORD_BYTES, Chunk, ChunkResult, Reading, Signature,
    _unmarshal, _worker_init, _worker_read, default_workers, oversized, parse_lines, read_chunk,
)

logger = logging.getLogger(__name__)


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

    def state(self, signature):
        """The Batch that records the file's index entry, once its last chunk was added."""
        if self.changed:
            # No entry: the next run reads whatever is at this path then, from its start.
            logger.warning("%s was removed or replaced while the run read it; what was read is kept, and the "
                           "file now at that path is read by the next run.", self.path)
            return Batch()
        return Batch(state={self.path: list(signature) + [self.low, self.high]})


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
        self.index = {}

    def describe(self):
        return f"xAPI NDJSON files at {self.path}"

    def files(self):
        """Return (files, skipped): see `lms_refresh.sources.files.export_files`."""
        return export_files(self.path)

    def preflight(self):
        files, skipped = self.files()
        unreadable = [path for path, _ in files if not os.access(path, os.R_OK)]
        if unreadable:
            more = f" ({len(unreadable) - 1} more unreadable)" if len(unreadable) > 1 else ""
            raise ConfigError(denied(unreadable[0]) + more)
        return [Finding(OK, f"{len(files)} export file(s) readable under {self.path}")] + [
            Finding(WARNING, f"{path} is skipped: it is {why}; only regular files are read") for path, why in skipped]

    def restore(self, state):
        """Take up the file index an earlier committed run recorded: path -> [size, mtime_ns, inode, min, max]
        (the Signature, then the range of `stored` cursors read from the file; None, None if none)."""
        self.index = state

    def _plan(self, window):
        """Return [(path, signature, chunks)] for the files that must be read."""
        since, until = window.since_cursor, window.until_cursor
        plan = []
        files, skipped = self.files()
        for path, why in skipped:
            logger.warning("Skipped %s: it is %s; only regular files are read.", path, why)
        for path, info in files:
            signature = Signature(info.st_size, info.st_mtime_ns, info.st_ino)
            if self._unchanged_outside(path, signature, since, until=until):
                continue
            if not os.access(path, os.R_OK):
                raise ConfigError(denied(path))  # before anything is read: an operator must fix it (78)
            if path.endswith(".gz"):
                chunks = [(0, None)]  # streamed, not cut
            else:
                starts = range(0, max(info.st_size, 1), self.chunk_bytes)
                chunks = [(s, min(s + self.chunk_bytes, info.st_size)) for s in starts]
            plan.append((path, signature, chunks))
        return plan

    def _unchanged_outside(self, path, signature, since, *, until):
        """Whether the index knows `path` as `signature`, with no `stored` time in [since, until)."""
        known = self.index.get(path)
        if not known or tuple(known[:3]) != signature:
            return False
        low, high = known[3:5]
        return low is None or high < since or low >= until

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
        plan = self._plan(window)
        tasks = [Chunk(path, start, end, signature) for path, signature, chunks in plan if not path.endswith(".gz")
                 for start, end in chunks]
        total = sum(signature.size for _, signature, _ in plan)
        pool = None
        if self.workers > 1 and len(tasks) > 1 and total >= self.parallel_min_bytes:
            pool = multiprocessing.get_context("fork").Pool(self.workers, _worker_init, (self.mapper,))
        try:
            results = self._results(pool, tasks, reading)
            for path, signature, chunks in plan:
                if path.endswith(".gz"):
                    continue
                tracker = _FileTracker(path)
                for _ in chunks:
                    for result in next(results):
                        yield tracker.add(result)
                yield tracker.state(signature)
            for path, signature, _ in plan:
                if path.endswith(".gz"):
                    tracker = _FileTracker(path)
                    for result in self._stream_gzip(path, signature, since, until=until):
                        yield tracker.add(result)
                    yield tracker.state(signature)
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

    def _stream_gzip(self, path, signature, since, *, until):
        """Yield ChunkResults of a compressed file, streamed in batches of at most batch_size lines
        and about chunk_bytes of text, up to the compressed size the run planned."""
        try:
            handle, info = open_regular(path)
        except (FileNotFoundError, NotRegularFile):
            changed = ChunkResult()
            changed.changed = True
            yield changed
            return
        except PermissionError:
            raise ConfigError(denied(path))
        except OSError as error:
            raise BadInputError(f"Cannot read {path} ({error.strerror or error}); fix or move the file and run again.")
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
                                                       self.limit), since, until=until, result=result)
                    result.lines = len(lines)
                    del lines
                    yield result
            except (OSError, EOFError, zlib.error) as error:
                if os.fstat(handle.fileno()).st_size > signature.size:
                    logger.warning("%s was still being written when the run began; what was complete is read "
                                   "now, the rest by the next run.", path)
                    return
                raise BadInputError(f"Cannot read {path} to the end ({error}); fix or move the file and run again.")

