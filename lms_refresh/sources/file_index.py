"""The export files' index: what a committed run recorded of each file, and what the next run makes of it.

An entry is [size, mtime_ns, inode, low, high, future, tail]: the file's `Signature` as the run planned it
(nothing past `size` was read); the range of `stored` cursors read from it (None, None if none); the future
limit its content was first read with (Intake's `settled`); and `tail`, the note of an unfinished last line
the run left unread (ndjson_worker.unfinished_tail): [where, quarantined] — where: its offset, or in a
compressed file the number of the first line not read — or None. Entries of earlier versions are shorter.
"""

from lms_refresh.errors import UnavailableError
from lms_refresh.sources import Batch
from lms_refresh.sources.files import shown_path

# An unfinished last line is quarantined only in a file nobody has written to for this long (and that has not
# changed since a committed run left the line unread): a block-buffered exporter that writes a statement now
# and then may hold the end of a line for hours, and a statement it finishes later must not have been
# quarantined meanwhile as bad input (past max_quarantine_share, a failed run and an alert for nothing).
UNFINISHED_GRACE = 86_400  # seconds


def unchanged_outside(known, signature, *, since, until):
    """Whether the index entry `known` is `signature`'s, with no `stored` time in [since, until), and no unfinished
    last line left unread that a run must judge again."""
    if not known or tuple(known[:3]) != signature or _tail(known) and not known[6][1]:
        return False
    low, high = known[3:5]
    return low is None or high < since or low >= until


def _tail(known):
    return known[6] if known and len(known) > 6 else None


def reading_of(known, signature, *, quiet_since_ns):
    """Return (settled, after, left): how the file `signature` is read, given its index entry `known` (or None).

    `settled`: the future limit the same content was read with (Intake's `settled`), else None. `after`: where
    the lines to read whatever their `stored` begin (an offset, or a line's number in a compressed file), if the
    file was written to since a run left its unfinished last line unread, else None: the watermark has passed
    that line's window since, and it holds a record the exporter has ended by now. `left`: that run's note of the
    line, when the content is the same and nobody has written to it since `quiet_since_ns` (an mtime): it is
    quarantined now, once (or was: the note says so); else None.
    """
    tail = _tail(known)
    if not known or tuple(known[:3]) != signature:
        # Not truncated below what was read: the line may have been ended since. Another inode too (a copy made
        # anew, as rsync does): at worst, lines of another file are read whatever their `stored`, and staging
        # keeps each statement once; at best, the ended line is not lost.
        grown = tail and known[0] <= signature.size
        return None, tail[0] if grown else None, None
    settled = known[5] if len(known) > 5 else None
    if tail and not tail[1] and signature.mtime_ns > quiet_since_ns:
        tail = None  # written to lately: an exporter may still end the line
    return settled, None, tail


class FileTracker:
    """Line numbers, the `stored` range and the unfinished last line of one file, across its chunks."""

    def __init__(self, path):
        self.path = path
        self.lines = 0
        self.low = self.high = None
        self.changed = False
        self.tail = None

    def add(self, result):
        batch = result.batch
        batch.quarantined = [(f"{self.path}:{self.lines + n}", reason, raw) for n, reason, raw in batch.quarantined]
        self.lines += result.lines
        self.changed = self.changed or result.changed
        self.tail = result.tail or self.tail  # only the last line of a file may be one
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
        return Batch(state={self.path: list(signature) + [self.low, self.high, future, self.tail]})
