"""What one parsing worker does with one chunk of an NDJSON export file: read its lines (never one
longer than `max_record_bytes` whole), keep those stored inside the window, map them, and hand the
parent a `ChunkResult`. The same code runs in the parent for small files and resumed chunks.
"""

import ctypes
import dataclasses
import logging
import marshal
import os
import re
import signal
import typing

from lms_refresh import faults
from lms_refresh.errors import BadInputError, ConfigError, from_read_error
from lms_refresh.regular_files import NotRegularFile, open_regular
from lms_refresh.sources import RAW_KEPT, Batch, json_decoding
from lms_refresh.sources.files import chunk_lines, denied, shown_path
from lms_refresh.sources.records import NOTHING, Intake
from lms_refresh.sources.xapi_fields import InvalidStatement, stored_cursor

logger = logging.getLogger(__name__)

_STORED = re.compile(rb'"stored"\s*:\s*"([^"]{1,64})"')
NICE_WORKERS = 19  # parsing workers run at the lowest priority (see _worker_init)
BYTES_PER_STATEMENT = 1024  # sizes chunks: batch_size statements of about this size
MAX_RECORD_BYTES = 1 << 20  # the default of source.max_record_bytes (statements are about 1 KiB)
LINES_PER_STATEMENT_BUDGET = 4  # a chunk's result holds at most 4 x batch_size lines (statements >= 256 bytes)
FROM_ANY_TIME = ""  # a `since` before every `stored` cursor


class Signature(typing.NamedTuple):
    """An export file as a run planned it: nothing at or past `size` is read, and a file that is no
    longer `inode` was removed or replaced. The file index records it (with the `stored` range)."""

    size: int
    mtime_ns: int
    inode: int


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Lines of `path` that start in [start, end) (end None: to the end), of the file `signature`
    describes (None: as it is now)."""

    path: str
    start: int
    end: int | None
    signature: Signature | None = None
    # Unchanged since a committed run read it whole at this future limit: what it held after that limit
    # was quarantined then (see Intake's `settled`).
    settled: str | None = None
    # The cursor the lines are read from instead of the window's start (None: the window's): FROM_ANY_TIME from
    # the unfinished last line a committed run left unread on, whose window the watermark has passed since.
    since: str | None = None
    # That run's note of the unfinished last line it left in this same content, [offset, quarantined] (see
    # `unfinished_tail`), or None.
    left: list | None = None


@dataclasses.dataclass(frozen=True)
class Reading:
    """What every chunk of one run is read with: its window of `stored` cursors [since, until),
    the longest line read whole (`limit` bytes) and the most lines one result holds."""

    since: str
    until: str
    limit: int = MAX_RECORD_BYTES
    max_lines: int | None = None
    reach: str | None = None  # the `until` of the lines read from any time on (Window.reach; None: `until`)


class ChunkResult:
    """What one chunk of one file held: a Batch plus line count and `stored` range.

    `changed`: the file was removed or replaced after the run planned it; nothing was read.
    `resume`: the chunk held more lines than one result may; the rest starts at this offset.
    `tail`: [where, quarantined] of the file's unfinished last line, which was not read as a record (where: its
    offset, or in a compressed file its number), or None: the file index records it (see `unfinished_tail`).
    """

    __slots__ = ("batch", "lines", "low", "high", "changed", "resume", "tail")

    def __init__(self):
        self.batch = Batch()
        self.lines = 0
        self.low = self.high = None
        self.changed = False
        self.resume = None
        self.tail = None


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


class _LineMapper:
    """A statement mapper over raw lines: each line is decoded as JSON (`json_decoding`), then mapped.

    A line that is not JSON is an invalid record like any other, with the decoder's reason.
    """

    __slots__ = ("_map", "take_new_names", "_decode")

    def __init__(self, mapper):
        self._map, self.take_new_names = mapper.map, mapper.take_new_names
        self._decode = json_decoding.line_decoder()  # the parser in use when the chunk is read

    def map(self, line, cursor):
        if not line or line.isspace():
            return NOTHING  # a blank line: no record at all
        try:
            return self._map(self._decode(line), cursor)
        except InvalidStatement:
            raise
        except _UNDECODABLE as error:
            raise InvalidStatement(_undecodable(error)) from None


# json_decoding.NotJSON (a ValueError, with the standard library's reason), or nesting too deep to parse
# (e.g. [[[[... 100,000 levels deep).
_UNDECODABLE = (json_decoding.TooDeep, RecursionError, ValueError)


def _undecodable(error):
    """The quarantine reason of a line that could not be decoded (`error`, one of _UNDECODABLE)."""
    if isinstance(error, (json_decoding.TooDeep, RecursionError)):
        return "JSON nested too deeply to parse"
    return f"not valid JSON: {error}"


def _as_quarantined(number, line):
    """A quarantined line: its number in the chunk and its text.

    Evidence, not a copy: a long malformed record keeps its beginning (the origin says where the rest is).
    """
    return number, line.rstrip(b"\r\n").decode("utf-8", "replace")[:RAW_KEPT]


def parse_lines(mapper, lines, since, *, until, result, settled=None):
    """Parse (number, raw line) pairs into `result`; blank lines are passed over, lines outside
    [since, until) are skipped (see `Intake`: `_stored_of` is its cheap look at a line's cursor), lines
    stored after the run's future limit are quarantined unless `settled` (a cursor) says they were."""
    intake = Intake(_LineMapper(mapper), _as_quarantined, since, until=until, peek=_stored_of, batch=result.batch,
                    future=mapper.latest, settled=None if settled is None else (settled, None))
    intake.map_all(lines)
    result.low, result.high = intake.low, intake.high
    return result


def oversized(numbered, batch, limit):
    """Pass (number, line) pairs on, quarantining each line given as its length (an oversized record).

    Only its length is known and kept: its content was never held, so its `stored`
    time cannot be told and it is quarantined whatever the window.
    """
    for number, line in numbered:
        if type(line) is int:
            batch.quarantined.append((number, f"the record is {line} bytes long, more than source.max_record_bytes "
                                              f"({limit}); it was skipped unread", ""))
            batch.read += 1
        else:
            yield number, line


def read_chunk(mapper, chunk, reading):
    """Return the ChunkResult of a `Chunk` read as `reading` says.

    A file that is no longer the chunk's signature's inode (removed, replaced)
    gives an empty result marked `changed`. A line longer than `reading.limit`
    bytes is read past and quarantined by its length. At most
    `reading.max_lines` lines are read; `resume` then says where the rest begins.
    """
    path, signature, limit = chunk.path, chunk.signature, reading.limit
    result = ChunkResult()
    try:
        handle, info = open_regular(path)
    except (FileNotFoundError, NotRegularFile):
        result.changed = True
        return result
    except PermissionError as error:
        raise ConfigError(denied(path)) from error
    except OSError as error:
        raise unreadable(path, error) from error
    try:
        with handle:
            # Replaced, or truncated (rewritten in place): what the run planned to read is no longer there.
            if signature is not None and (info.st_ino != signature.inode or info.st_size < signature.size):
                result.changed = True
                return result
            size = info.st_size if signature is None else signature.size
            end = size if chunk.end is None else min(chunk.end, size)
            faults.point("chunk-read")
            lines, result.resume, tail = chunk_lines(handle, chunk.start, end, size=size, limit=limit,
                                                     max_lines=reading.max_lines)
            if signature is not None and os.fstat(handle.fileno()).st_size < signature.size:
                result.changed = True  # truncated while this chunk was read
                return result
    except OSError as error:
        raise unreadable(path, error) from error
    why = None if tail is None else incomplete(tail[1])
    if why is None and tail is not None:
        lines.append(tail[1])  # a complete record, though no newline ends it (yet)
    numbered = enumerate(lines, 1)
    if int in map(type, lines):  # a line given as its length is rare: `oversized`, a generator, costs per line
        numbered = oversized(numbered, result.batch, limit)
    since, until = reading.since, reading.until
    if chunk.since is not None:  # from an unfinished line on: from any time, up to where a scheduled run reads
        since, until = chunk.since, reading.reach or reading.until
    parse_lines(mapper, numbered, since, until=until, result=result, settled=chunk.settled)
    result.lines = len(lines)
    if why is not None:
        result.tail = unfinished_tail(tail, why, chunk.left, len(lines) + 1, result.batch)
    return result


def unreadable(path, error):
    """The domain error of an export file that could not be opened or read (`error`, an OSError): what the machine
    or its devices lack (from_read_error), else the file's own fault (bad input). In a worker too: the parent
    re-raises it as it is."""
    return from_read_error(error, shown_path(path)) or BadInputError(
        f"Cannot read {shown_path(path)} ({error.strerror or error}); fix or move the file and run again.")


def incomplete(line):
    """Why `line`, the last line of a file, without a newline, is no complete record yet: the decoder's reason,
    "" if it is blank (an exporter may write a record after the spaces, or after a byte order mark); None if it
    is a complete JSON value, which is a record whether or not a newline ever follows (some exporters end their
    files without one)."""
    if not line.strip():
        return ""
    try:
        json_decoding.line_decoder()(line)
    except _UNDECODABLE as error:
        return _undecodable(error)
    return None


def unfinished_tail(tail, why, left, number, batch):
    """Return the file index's note, [offset, quarantined], of a file's unfinished last line `tail` (offset,
    bytes), which is `incomplete` for the reason `why`: it is the `number`th line of the chunk read into `batch`.

    Such a line is most likely a record an exporter is still writing (a block-buffered write flushes part of
    a line): quarantined, it would be lost once ended, as its `stored` lies behind the watermark by then. So it
    is left unread, and the next run reads the lines from its offset on whatever their `stored` (`Chunk.since`).
    A line still unfinished in a file that has not changed since a committed run left it, nor been written to for
    file_index.UNFINISHED_GRACE (`left`), is quarantined then (if not blank), so that it is not hidden for ever;
    and only once. Should the file change after all, the
    lines from that offset are read as any unfinished line's would be: the ended record is not lost.
    """
    offset, line = tail
    if left is None or left[0] != offset:
        return [offset, False]
    if not left[1] and why:
        number, raw = _as_quarantined(number, line)
        batch.quarantined.append((number, f"the last line has no newline and is not a complete record, and the file "
                                          f"has not changed since the run that left it unread: {why}", raw))
        batch.read += 1
    return [offset, True]


_worker_mapper = None


def _worker_init(mapper, parent):
    global _worker_mapper
    _worker_mapper = mapper
    _end_with(parent)
    # The parent owns the run: it turns SIGTERM into a rollback and ends the pool.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Staging in the parent is the serial step: workers yield the CPU to it, so that
    # more processes than cores do not slow it down (measured on 2 cores: about +8%).
    try:
        os.nice(NICE_WORKERS)
    except OSError:
        pass  # a seccomp filter may refuse it; parsing is only slower, never wrong


_PR_SET_PDEATHSIG = 1  # prctl(2)


def _end_with(parent):
    """Have the kernel kill this worker when the run (`parent`, its PID) ends. A run killed alone (`kill -9`
    of its PID, the out-of-memory killer choosing it) would otherwise leave its workers reading export files
    for nobody, each printing a traceback on the unit's stderr once it found the run's pipe closed. The
    signal follows the thread that forked the worker: the main thread, or the pool's own thread that
    replaces a dead worker, which ends only with the pool (whose end kills its workers anyway)."""
    try:
        refused = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no C library to ask (not Linux): the worker ends at its next write
        return
    if not refused and os.getppid() != parent:
        os._exit(0)  # the run ended before the request was made: nobody is left to kill this worker


def _worker_read(chunk, reading):
    result = read_chunk(_worker_mapper, chunk, reading)
    faults.point("chunk-parsed")
    # The events are flat tuples of str, int, bytes and None: marshal passes them to the
    # parent at a fraction of pickle's cost (the rest of the result is small). It takes
    # plain tuples only, so they go as such, and stay so in the parent: sqlite3 binds a
    # plain tuple's values for two thirds of the instructions an Event's take (it reads a
    # subclass of tuple as any sequence), and naming them again would cost as much once more.
    result.batch.events = marshal.dumps(list(map(tuple, result.batch.events)))
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


