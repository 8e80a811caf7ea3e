"""Export files as hostile input: which ones are read, how they are opened, how their lines are read.

Nothing here may block a run or exhaust its memory, whatever sits in the
export directory:

- only regular files are opened (a FIFO would block until a writer comes, a
  device may have side effects); FIFOs, sockets, devices and links to directories
  are skipped and reported, never opened;
- a name that leads to no file now is not skipped (the watermark would pass what it
  names): a dangling link fails the run (69, its target may be a share not mounted
  yet), a link loop too (78), each in a sentence naming it;
- a permission error names the path and the user (exit 78: an operator must fix it);
- a name is shown escaped when it holds a control character (`shown_path`): a file named
  "a\nERROR ..." must not start a line of its own in the journal or on stderr;
- a line is never held whole beyond the record limit: a longer one is read
  past in blocks and stands for itself only by its length;
- a file is read no further than the size it had when the run planned it;
- a last line without its newline is the caller's to judge (`chunk_lines`): it may be a record still being written.
"""

import errno
import io
import operator
import os
import stat
import sys

from lms_refresh.errors import ConfigError, UnavailableError, from_read_error
from lms_refresh.regular_files import NotRegularFile, kind_of, open_regular
from lms_refresh.state_directory import user_name

SUFFIXES = (".ndjson", ".jsonl", ".ndjson.gz", ".jsonl.gz")
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, accepted at the start of an export file only
SKIP_BLOCK = 1 << 20  # bytes held at a time while reading past an oversized record
_WITHOUT_NEWLINE = operator.itemgetter(slice(None, -1))  # a line read with its newline, without it


def shown_path(path):
    """Return `path` as every message shows it: as it is when each character is printable, else quoted with
    Python's escapes (a newline as \\n, an undecodable byte as \\udcXX), so that no file name can forge a line."""
    return path if path.isprintable() else repr(path)


def denied(path, verb="read"):
    """The sentence for a file or directory the running user may not read."""
    user = user_name(os.geteuid())
    return (f"Cannot {verb} {shown_path(path)}: permission denied for user '{user}'; let '{user}' read it "
            "(e.g. its group and mode) or move it out of source.path.")


def access_error(path):
    """Return None if the running user can read the regular file `path` (or it was removed or replaced since it
    was listed: its reader finds that out), else the OSError opening it gives: a PermissionError, or what the
    machine or its devices say (access(2) answers "no" to an input/output error or a stale share too)."""
    if os.access(path, os.R_OK):
        return None
    try:
        handle, _ = open_regular(path)
    except (FileNotFoundError, NotRegularFile):
        return None
    except OSError as error:
        return error
    handle.close()
    return None


# -- which files ---------------------------------------------------------------

def export_files(top):
    """Yield ("file", path, stat) for each regular export file under `top` (a file, or a directory
    searched recursively), and ("skipped", path, why) for each entry that is not read (FIFOs,
    sockets, devices, links to directories), both in the sorted order of their paths.

    Each file comes once: a second name for the same file (a link) is left out, the first name
    in that order kept. Nothing here grows with the number of files: the walk holds the names of
    one directory per level, and remembers only files that have a second name (hard links and the
    targets of symbolic links), never every file.
    Raises UnavailableError if `top` is missing (69), ConfigError if it cannot be reached or is
    neither a file nor a directory (78); an error of the machine or its devices, met on `top` or
    on any entry under it, is what `errors.from_read_error` says (a stale share is 69, a failed
    device 78), a dangling link is 69 and a link loop 78: never a file left out of the run as if
    skipped.
    """
    try:
        info = os.stat(top)
    except FileNotFoundError as error:
        raise UnavailableError(f"The xAPI source path {shown_path(top)} does not exist (is the export share "
                               "mounted?).") from error
    except PermissionError as error:
        raise ConfigError(denied(top, "reach")) from error
    except OSError as error:
        raise from_read_error(error, f"the xAPI source path {shown_path(top)}", "reach") or ConfigError(
            f"The xAPI source path {shown_path(top)} cannot be opened ({error.strerror}); point source.path at a "
            "directory of export files.") from error
    if stat.S_ISREG(info.st_mode):
        yield "file", top, info
        return
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"The xAPI source path {shown_path(top)} is {kind_of(info.st_mode)}, not an export file or "
                          "a directory of them; point source.path at a directory of export files.")
    names = _Names(top)
    for kind, path in _walk(top):
        if kind == "skipped":
            yield "skipped", path, "a symbolic link to a directory, which is not followed"
            continue
        try:
            info = os.stat(path)
        except FileNotFoundError as error:
            domain = _dangling(path)
            if domain is None:
                continue  # removed between listing and now
            raise domain from error
        except PermissionError as error:
            raise ConfigError(denied(path, "reach")) from error
        except OSError as error:
            # A file the machine cannot reach now (EIO, a stale share) is not skipped: the watermark would pass it;
            # nor is a name that leads nowhere (a link loop, a link through a file), which someone has to fix.
            loop = ": it is a symbolic link loop" if error.errno == errno.ELOOP else ""
            raise from_read_error(error, shown_path(path), "reach") or ConfigError(
                f"Cannot reach {shown_path(path)}{loop} ({error.strerror}); fix the link or move it out of "
                "source.path — nothing was committed.") from error
        if not stat.S_ISREG(info.st_mode):
            yield "skipped", path, kind_of(info.st_mode)
        elif names.first(path, info):
            yield "file", path, info


def _dangling(path):
    """The domain error of `path`, listed by the walk, that stat() found no file behind: a dangling symbolic link is
    not skipped, since its target may be an export file out of reach for now (a share not mounted yet, a file being
    moved) and the watermark would pass its statements (69, as a missing source.path); None if `path` itself was
    removed (or made again, no link now) since it was listed, like a file that was never there."""
    try:
        target = os.readlink(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno == errno.EINVAL:  # no symbolic link: made again since stat() looked
            return None
        if isinstance(error, PermissionError):
            return ConfigError(denied(path, "read the symbolic link"))
        return from_read_error(error, shown_path(path), "read the symbolic link") or ConfigError(
            f"Cannot read the symbolic link {shown_path(path)} ({error.strerror}); fix it or move it out of "
            "source.path — nothing was committed.")
    shown = shown_path(target if len(target) <= 300 else target[:300] + "…")
    return UnavailableError(f"{shown_path(path)} is a symbolic link to {shown}, which does not exist (a share not "
                            "mounted? a file moved or removed?); nothing was committed, and a later run reads the "
                            "window again — remove the link if its target is gone for good.")


class _Names:
    """Which name of a file the walk keeps: the first in path order. Only files that may have a
    second name are remembered (a hard link's inode, a symbolic link's target)."""

    def __init__(self, top):
        self.top = top
        self.real_top = os.path.realpath(top)
        self.seen = set()  # (st_dev, st_ino) of files reached under a name that may not be their only one

    def first(self, path, info):
        identity = (info.st_dev, info.st_ino)
        if identity in self.seen:
            return False
        if os.path.islink(path):
            target = os.path.realpath(path)
            inside = os.path.relpath(target, self.real_top)
            walked = os.path.join(self.top, inside)
            if (not inside.startswith(os.pardir) and target.endswith(SUFFIXES)
                    and walked < path):  # the walk yields paths in their string order
                return False  # the walk yielded the file under its own name already
            self.seen.add(identity)
        elif info.st_nlink > 1:
            self.seen.add(identity)
        return True


def _walk(top):
    """Yield ("file", path) for the names with an export suffix under the directory `top`, and
    ("skipped", path) for symbolic links to directories, in the sorted order of their paths.

    Symbolic links to files are followed; links to directories are not (no loops, no file read
    twice), and are reported so that nothing is left out silently. Siblings are visited by their
    name with a "/" after a directory's, which makes the depth-first order the sorted order of
    the whole paths (a directory's paths all begin with its name and "/").
    """
    stack = [(top, iter(_listing(top)))]
    while stack:
        folder, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        name, kind = entry
        path = os.path.join(folder, name.rstrip("/"))
        if kind == "directory":
            stack.append((path, iter(_listing(path))))
        elif kind == "directory link":
            yield "skipped", path
        else:
            yield "file", path


def _listing(folder):
    """The entries of `folder` worth walking, sorted as `_walk` says: [(name, kind)]."""
    try:
        with os.scandir(folder) as listing:
            entries = []
            for entry in listing:
                kind = "file"
                try:
                    if entry.is_dir(follow_symlinks=False):
                        kind = "directory"
                    elif entry.is_symlink() and entry.is_dir():
                        kind = "directory link"
                except OSError:
                    pass  # a broken entry: judged by its name, like any file, then by export_files
                if kind == "directory":
                    entries.append((entry.name + "/", kind))
                elif kind == "directory link" or entry.name.endswith(SUFFIXES):
                    entries.append((entry.name, kind))
    except PermissionError as error:
        raise ConfigError(denied(folder, "list the directory")) from error
    except (FileNotFoundError, NotADirectoryError):
        return []  # removed or replaced since its parent was listed
    except OSError as error:
        shown = shown_path(folder if len(folder) <= 300 else folder[:300] + "…")
        # The machine's or its devices' (EIO, a stale share), else the tree's: e.g. one nested past PATH_MAX
        # (ENAMETOOLONG), which an operator must move.
        raise from_read_error(error, f"the directory {shown}", "list") or ConfigError(
            f"Cannot list the directory {shown} ({error.strerror}); move it out of source.path.") from None
    entries.sort()
    return entries


# -- lines, never held whole beyond the limit ------------------------------------

def _skip_line(handle, budget):
    """Read past the rest of the current line, at most `budget` bytes, holding at most SKIP_BLOCK.

    Return (bytes read, whether the line's newline was among them).
    """
    read = 0
    while read < budget:
        piece = handle.readline(min(SKIP_BLOCK, budget - read))
        if not piece:
            break
        read += len(piece)
        if piece[-1] == 10:  # b"\n"
            return read, True
    return read, False


def _read_line(handle, limit, budget):
    """Read the rest of the current line, at most `budget` bytes; return (line, ended).

    `line` is the line without its newline, or — when it is longer than `limit`
    bytes — its length (an int): it was read past, never held. `ended` says
    whether its newline was read (else the end of the file or of the budget ended it).
    """
    piece = handle.readline(min(limit + 1, budget))
    if piece[-1:] == b"\n":
        return piece[:-1], True
    if len(piece) <= limit:
        return piece, False
    rest, ended = _skip_line(handle, budget - len(piece))
    return len(piece) + rest - ended, ended


def numbered_lines(handle, limit):
    """Yield (number, line) for each line of a binary stream; a line longer than `limit` is its length.

    A byte order mark opening the stream is no part of its first line (see `without_bom`)."""
    number = 0
    while True:
        line, ended = _read_line(handle, limit, sys.maxsize)
        if not ended and line == b"":
            return
        number += 1
        yield number, without_bom(line) if number == 1 else line


def without_bom(line):
    """Return the first line of an export file without the UTF-8 byte order mark an editor or a Windows exporter
    may open the file with (an LRS's page with one is accepted too); anywhere else a BOM stays what it is."""
    return line[3:] if type(line) is bytes and line.startswith(BOM) else line


def chunk_lines(handle, start, end, *, size, limit, max_lines=None):
    """Return (lines, resume, tail): the lines of a file that start in [start, end), reading nothing at or past
    `size`.

    Each line is bytes without its newline, or the length (an int) of a line
    longer than `limit`. The last line is read on past `end` to its newline.
    One that has none before `size` is the file's last line, and may be a
    record still being written: unless it is already longer than `limit`
    (quarantined whatever follows), it is not among `lines` but is `tail`,
    (its offset in the file, its bytes), for the caller to judge; else `tail`
    is None. At most `max_lines` lines are returned: `resume` is then the
    offset of the next one (read [resume, end) next), else None — so that a
    chunk of tiny lines never turns into millions of objects at once.
    """
    position = start
    handle.seek(max(start - 1, 0))
    if start:
        # Finish the line that straddles `start` (it is the previous chunk's), but only within this chunk:
        # a long line running through several chunks is read past once, not once per chunk.
        skipped, ended = _skip_line(handle, end - start + 1)
        if not ended:
            return [], None, None
        position = start - 1 + skipped
    if position >= end:
        return [], None, None
    # Each line with its newline, found by memchr: data.split(b"\n") tests the bytes one by one, for three
    # times the instructions of this and of the copies without newlines below (callgrind: 5,200 a line of
    # 900 bytes, against 1,750). The chunk and its lines are held at once, as split's were.
    data = handle.read(end - position)
    lines = io.BytesIO(data).readlines()
    resume = None
    if max_lines is not None and len(lines) > max_lines:
        del lines[max_lines:]
        resume = position + sum(map(len, lines))
    tail = lines.pop() if lines and lines[-1][-1] != 10 else None  # 10: b"\n"
    tail_at = position + len(data) - len(tail) if tail is not None else None
    lines = list(map(_WITHOUT_NEWLINE, lines))
    if position == 0:
        if lines:
            lines[0] = without_bom(lines[0])
        elif tail is not None:
            tail = without_bom(tail)
    # A line longer than `limit` is rare: measuring them all costs a tenth of building a new list.
    if end - position > limit and max(map(len, lines), default=0) > limit:
        lines = [line if len(line) <= limit else len(line) for line in lines]
    if tail is None:
        return lines, resume, None
    # The last line starts in this chunk, so it is ours (appended, not a copy of the chunk).
    if len(tail) > limit:
        rest, ended = _skip_line(handle, size - end)
        tail = len(tail) + rest - ended
    else:
        rest, ended = _read_line(handle, limit - len(tail), size - end)
        tail = tail + rest if type(rest) is bytes else len(tail) + rest
    if ended or type(tail) is int:
        lines.append(tail)
        return lines, resume, None
    return lines, resume, (tail_at, tail)


class UpTo:
    """A binary file read no further than `size` bytes: what it held when the run planned it."""

    def __init__(self, handle, size):
        self.handle, self.left = handle, size

    def read(self, size=-1):
        if size is None or size < 0 or size > self.left:
            size = self.left
        data = self.handle.read(size)
        self.left -= len(data)
        return data
