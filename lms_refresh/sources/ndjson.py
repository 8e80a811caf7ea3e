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
grows meanwhile is read to its new end next run; a last line that is no
complete record yet is left unread, and the next run reads it whatever its
`stored`: see file_index); and no line is ever held
whole beyond `max_record_bytes` — a longer one is read past in blocks and
quarantined by its origin and length.
"""

import collections
import dataclasses
import datetime as dt
import gzip
import itertools
import logging
import os
import zlib

from lms_refresh.errors import BadInputError, ConfigError
from lms_refresh.regular_files import NotRegularFile, open_regular
from lms_refresh.sources import OK, WARNING, BaseSource, Finding
from lms_refresh.sources.file_index import UNFINISHED_GRACE, FileTracker, reading_of, unchanged_outside
from lms_refresh.sources.files import UpTo, access_error, denied, export_files, numbered_lines, shown_path
from lms_refresh.sources.ndjson_worker import (
    BYTES_PER_STATEMENT,
    FROM_ANY_TIME,
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
    unreadable,
)
from lms_refresh.sources.pool import result_of, start_pool, stop_pool, workers_of

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


def _unreadable_gzip(path, error, info, grew):
    """The sentence of a compressed file that cannot be read to its end and is no file still being written."""
    if isinstance(error, EOFError) and not grew:
        written = dt.datetime.fromtimestamp(info.st_mtime, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        return (f"{shown_path(path)} ends early ({error}) and nobody has written to it since {written}, more than "
                f"{UNFINISHED_GRACE // 3600} hours before the window's end: it is truncated for good; fix or move "
                "the file and run again.")
    return f"Cannot read {shown_path(path)} to the end ({error}); fix or move the file and run again."


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
        files = refused = 0
        first_refused, skipped = None, []
        for kind, path, detail in export_files(self.path):
            if kind == "skipped":
                skipped.append(Finding(WARNING, f"{shown_path(path)} is skipped: it is {detail}; "
                                                 "only regular files are read"))
                del skipped[SKIPPED_SHOWN:]  # the first ones: a count says the rest
                continue
            files += 1
            error = access_error(path)
            if isinstance(error, PermissionError):
                refused += 1
                first_refused = first_refused or path
            elif error is not None:
                raise unreadable(path, error) from error
        if refused:
            more = f" ({refused - 1} more unreadable)" if refused > 1 else ""
            raise ConfigError(denied(first_refused) + more)
        return [Finding(OK, f"{files} export file(s) readable under {shown_path(self.path)}")] + skipped

    def restore(self, lookup):
        """Take up the file index an earlier committed run recorded, through `lookup(paths)`, which
        returns {path: entry} (see file_index) for those of `paths` it holds. The index is asked in batches
        as the walk goes, never read whole: it grows with the export files."""
        self.lookup = lookup

    def _plan(self, window, *, compressed):
        """Yield (path, signature, chunks, settled, left) for the plain (or the compressed) files that must be
        read, in path order; skipped entries are warned of with the plain files. A chunk is (start, end, since):
        `since` is FROM_ANY_TIME from where a committed run left an unfinished last line unread (in a compressed
        file, the line's number, its only chunk's `since`), else None; `left` is that run's note of the line in
        this same content (else None)."""
        since, until = window.since_cursor, window.until_cursor
        quiet_since = int(window.until.timestamp() - UNFINISHED_GRACE) * 1_000_000_000
        for group in _batched(self._files(compressed), PLAN_BATCH):
            known = self.lookup([path for path, _ in group])
            for path, info in group:
                signature = Signature(info.st_size, info.st_mtime_ns, info.st_ino)
                entry = known.get(path)
                if unchanged_outside(entry, signature, since=since, until=until):
                    continue
                settled, after, left = reading_of(entry, signature, quiet_since_ns=quiet_since)
                error = access_error(path)
                if isinstance(error, PermissionError):
                    raise ConfigError(denied(path)) from error  # an operator must fix it (78); the run rolls back
                if error is not None:
                    raise unreadable(path, error) from error
                if compressed:
                    chunks = [(0, None, after)]  # streamed, not cut
                else:
                    # Cut where the unfinished line began too: the lines from there on are read from any time on.
                    cuts = sorted({*range(0, max(info.st_size, 1), self.chunk_bytes), *([after] if after else [])})
                    chunks = [(start, end, FROM_ANY_TIME if after is not None and start >= after else None)
                              for start, end in zip(cuts, cuts[1:] + [info.st_size], strict=True)]
                yield path, signature, chunks, settled, left

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
        reading = Reading(since, until, self.limit, self.max_lines, window.reach_cursor)
        plain = self._plan(window, compressed=False)
        ahead, parallel = self._use_pool(plain)
        # The plan is walked once, by two readers: the chunks it gives the workers (a bounded
        # pipeline ahead) and the files whose results are collected here; tee holds the gap.
        for_tasks, for_files = itertools.tee(itertools.chain(ahead, plain))
        tasks = (Chunk(path, start, end, signature, settled, since, left)
                 for path, signature, chunks, settled, left in for_tasks for start, end, since in chunks)
        pool = None
        if parallel:
            pool = start_pool(self.workers, _worker_init, (self.mapper, os.getpid()))
        try:
            results = self._results(pool, tasks, reading)
            future = self.mapper.latest
            for path, signature, chunks, settled, _ in for_files:
                tracker = FileTracker(path)
                for _ in chunks:
                    for result in next(results):
                        yield tracker.add(result)
                yield tracker.state(signature, settled or future)
            for path, signature, chunks, settled, _ in self._plan(window, compressed=True):
                tracker = FileTracker(path)
                quiet_since = window.until.timestamp() - UNFINISHED_GRACE
                for result in self._stream_gzip(path, signature, since, until=until, reach=window.reach_cursor,
                                                settled=settled, quiet_since=quiet_since, after=chunks[0][2]):
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

    def _stream_gzip(self, path, signature, since, *, until, quiet_since, settled=None, after=None, reach=None):
        """Yield ChunkResults of a compressed file, streamed in batches of at most batch_size lines
        and about chunk_bytes of text, up to the compressed size the run planned. A file that ends
        early (no end-of-stream marker: a gzip writer adds it when it closes the file) and grew since it was
        planned, or was written to after `quiet_since` (a timestamp: UNFINISHED_GRACE before the window's end,
        the time an exporter may hold an unfinished line of a plain file), is still being written: every complete
        line is read, the rest by the next run, from the first line not read on (the last result's `tail`: its
        number) whatever their `stored` — as from line `after` now, if a committed run left this file so. One
        that ends early and nobody has written to for longer is truncated for good, and corrupt data is corrupt
        whenever it was written: bad input."""
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
            raise unreadable(path, error) from error
        with handle:
            if info.st_ino != signature.inode:
                changed = ChunkResult()
                changed.changed = True
                yield changed
                return
            numbered = numbered_lines(gzip.GzipFile(fileobj=UpTo(handle, signature.size), mode="rb"), self.limit)
            read, lines = 0, []  # lines read (and yielded) so far; those of the batch being read
            try:
                while True:
                    lines, held = [], 0
                    for item in numbered:
                        lines.append(item)
                        held += len(item[1]) if type(item[1]) is bytes else 0
                        # A batch ends before `after` too: the lines from there on are read from any time on.
                        if len(lines) >= self.batch_size or held >= self.chunk_bytes or item[0] + 1 == after:
                            break
                    if not lines:
                        return
                    read += len(lines)
                    yield self._gzip_batch(lines, since, until=until, reach=reach, settled=settled, after=after)
                    lines = []
            except (OSError, EOFError, zlib.error) as error:
                if isinstance(error, OSError) and not isinstance(error, gzip.BadGzipFile):
                    raise unreadable(path, error) from error  # reading the file failed, not its data
                # The decompressor gives every byte it can before it finds the data ended early: each line of
                # `lines` ended with its newline, and only the line it was reading is unfinished.
                try:
                    grew = os.fstat(handle.fileno()).st_size > signature.size
                except OSError as failure:
                    raise unreadable(path, failure) from failure
                if not (grew or isinstance(error, EOFError) and info.st_mtime > quiet_since):
                    raise BadInputError(_unreadable_gzip(path, error, info, grew)) from error
                logger.warning("%s was still being written when the run read it (it ends early, and was written to "
                               "less than %d hours before the window's end); its complete lines are read now, the "
                               "rest by the next run.", shown_path(path), UNFINISHED_GRACE // 3600)
                if lines:
                    read += len(lines)
                    yield self._gzip_batch(lines, since, until=until, reach=reach, settled=settled, after=after)
                rest = ChunkResult()  # the next run reads from the first line not read on, whatever its `stored`
                rest.tail = [read + 1, False]
                yield rest

    def _gzip_batch(self, lines, since, *, until, reach, settled, after):
        """The ChunkResult of (number, line) pairs of a compressed file (see _stream_gzip)."""
        result = ChunkResult()
        offset = lines[0][0] - 1
        anytime = after and lines[0][0] >= after
        parse_lines(self.mapper, oversized(((n - offset, line) for n, line in lines), result.batch, self.limit),
                    FROM_ANY_TIME if anytime else since, until=(reach or until) if anytime else until, result=result,
                    settled=settled)
        result.lines = len(lines)
        return result
