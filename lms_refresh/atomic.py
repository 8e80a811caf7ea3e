"""Replace a file atomically: the one way lms-refresh writes a file that must be whole or absent.

Every file the program writes for keeps (the pseudonymisation key, a new
store, the store note, the publication, the metrics textfile) goes through
here. A new version is written to a temporary file in the target's own
directory, `.NAME.tmp-XXXXXXXX` (created with O_EXCL by `tempfile.mkstemp`),
given its final mode, fsynced, renamed over NAME, and then the directory is
fsynced so that the rename itself survives a power cut. A reader sees the
previous file or the new one, never a part of either.

No writer changes a file's owner or group: the service's unit forbids chown
and fchown (SystemCallFilter=~@privileged) and maps no group but its own
(PrivateUsers=yes), so a call that works at a terminal fails under the unit.
A new file takes its group from its directory when that directory is setgid
(the kernel does that, under any filter), else the writer's own group; a
caller that needs a group states it and the replacement is refused, before
anything is renamed, when the new file did not get it (`new_file_group`
predicts it for `check`).

The temporary is removed on every failure, KeyboardInterrupt and SIGTERM's
`Terminated` included. One left by a process that was killed outright
(SIGKILL, a power cut) is removed by the next write of the same file: a living
writer holds an flock on its temporary, so a temporary that can be locked has
no writer any more. SQLite's own files beside a database written under the
temporary name (`-journal`, `-wal`, `-shm`) go with it, and so do the
temporaries earlier versions named otherwise (`NAME.tmp-PID`,
`NAME.creating-PID`, `NAME.PID.tmp`), which every writer of those names
wrote under the run's lock.

A full disk, an exhausted quota or a read-only file system become the domain's
error through `errors.from_os_error`, whose sentence ends with `outcome` (what
the failure means for the command: by default "nothing was committed"); any
other OSError is raised as it is, for the caller to name what to fix.
"""

import contextlib
import ctypes
import fcntl
import grp
import os
import re
import stat
import tempfile

from lms_refresh import faults
from lms_refresh.errors import ConfigError, from_os_error

SIDECARS = ("-journal", "-wal", "-shm")  # SQLite's files beside a database of that name
# How versions before this helper named their temporaries (the publication, a new store, the key and the note).
_LEGACY = (r"{name}\.tmp-\d+", r"{name}\.creating-\d+", r"{name}\.\d+\.tmp")

# The fault seam's points inside a replacement, in order (the subject is the file's name).
WRITTEN, SYNCED, RENAMED = "replace-written", "replace-synced", "replace-renamed"


def temporary_prefix(path):
    """Return the name every temporary of `path` starts with: `.NAME.tmp-`."""
    return f".{os.path.basename(path)}.tmp-"


@contextlib.contextmanager
def replacing(path, *, mode, group=None, what=None, outcome=None, many=False):
    """Yield the path of a new, empty temporary file beside `path` for the block to write (by any means:
    a SQLite connection, open()); when the block returns, make it `path` with `mode`, durably. `group`, if
    given, is the group id (as this process sees it: `seen_gid`) the new file must have, which only its
    directory gives (see the module's docstring): a GroupError (78) otherwise, raised before the block runs.
    If the block or the replacement fails, the temporary is removed and `path` is left as it was. `what`
    names the file in an error's sentence (default: its path). `many`: one of many files replaced in one directory
    (the report's course pages), which the caller has swept once (`remove_stale_in`) and makes durable at once when
    all are renamed (`sync_many`): each rename is atomic still, and a scan and two fsyncs per file made 2,500 files
    cost 45 s on a disk."""
    try:
        if not many:
            remove_stale(path)
        temporary = _Temporary(path)
    except OSError as error:
        _raise_domain(error, what or path, outcome)
    if group is not None and os.fstat(temporary.fd).st_gid != group:
        temporary.discard()
        temporary.close()
        raise GroupError(what or path, _directory(path), group, outcome)
    try:
        yield temporary.path
        temporary.commit(mode, durable=not many)
    except OSError as error:
        temporary.discard()
        _raise_domain(error, what or path, outcome)
    except BaseException:
        temporary.discard()
        raise
    finally:
        temporary.close()


def replace_bytes(path, data, *, mode, group=None, what=None, outcome=None, many=False):
    """Replace `path` by a file holding `data` (bytes), atomically and durably (see `replacing`)."""
    with replacing(path, mode=mode, group=group, what=what, outcome=outcome, many=many) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(data)


def remove_stale(path):
    """Remove the temporaries of `path` that no living writer holds (a killed writer's), with SQLite's
    files beside them; return how many temporaries were removed."""
    directory, prefix = _directory(path), temporary_prefix(path)
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    ours = [name for name in names if name.startswith(prefix)]
    removed = 0
    for name in ours:
        if not name.endswith(SIDECARS) and _remove_if_unheld(os.path.join(directory, name)):
            removed += 1
    for name in ours:  # a sidecar whose temporary is gone (killed between the two unlinks)
        base = next((name[:-len(suffix)] for suffix in SIDECARS if name.endswith(suffix)), None)
        if base is not None and not os.path.lexists(os.path.join(directory, base)):
            _unlink(os.path.join(directory, name))
    legacy = re.compile("(?:" + "|".join(pattern.format(name=re.escape(os.path.basename(path)))
                                         for pattern in _LEGACY) + ")(?:-journal|-wal|-shm)?")
    for name in names:
        if legacy.fullmatch(name) and not os.path.isdir(os.path.join(directory, name)):
            _unlink(os.path.join(directory, name))
            removed += 1
    return removed


def remove_stale_in(directory):
    """Remove every temporary in `directory` that no living writer holds (as `remove_stale` does for one file's),
    with its SQLite files; return how many were removed. Once before many files of it are replaced (`many`)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    removed = 0
    for name in names:
        if name.startswith(".") and ".tmp-" in name and not name.endswith(SIDECARS):
            if _remove_if_unheld(os.path.join(directory, name)):
                removed += 1
    for name in names:
        base = next((name[:-len(suffix)] for suffix in SIDECARS if name.endswith(suffix)), None)
        if base is not None and ".tmp-" in base and not os.path.lexists(os.path.join(directory, base)):
            _unlink(os.path.join(directory, name))
    return removed


class GroupError(ConfigError):
    """A file that must belong to a group would not: its directory does not give it that group."""

    def __init__(self, what, directory, gid, outcome=None):
        super().__init__(f"Cannot write {what}: a new file in {directory} would not get the group it needs "
                         f"({_group_name(gid)}), which only a setgid directory of that group gives (lms-refresh "
                         "changes no file's group); make the directory so (a systemd-tmpfiles line, as "
                         "/usr/share/doc/lms-refresh/docs/publication.md says for publication.group)"
                         + (f" — {outcome}" if outcome else "."))


def new_file_group(directory):
    """Return the group id (as this process sees it) a file this process creates in `directory` gets: the
    directory's own if it is setgid, else this process's group."""
    info = os.stat(directory)
    return info.st_gid if info.st_mode & stat.S_ISGID else os.getegid()


def seen_gid(gid, gid_map="/proc/self/gid_map"):
    """Return how group id `gid` of the group database shows in this process's user namespace: itself outside
    one; under the unit's PrivateUsers=, which maps only the service's own group, any other group's files show
    the kernel's overflow group (65534): a file of that group cannot be told from another unmapped group's
    there, so the check that tells them apart is `check`'s, run outside the unit."""
    try:
        with open(gid_map, encoding="ascii") as handle:
            ranges = [tuple(map(int, line.split())) for line in handle if line.strip()]
    except (OSError, ValueError):
        return gid
    for inside, outside, count in ranges:
        if outside <= gid < outside + count:
            return inside + gid - outside
    return OVERFLOW_GID


OVERFLOW_GID = 65534  # the kernel's default overflowgid (/proc/sys is hidden from the unit by ProcSubset=pid)


def _group_name(gid):
    try:
        return f"group {grp.getgrgid(gid).gr_name!r}"
    except KeyError:
        return f"group id {gid}"


def sync_many(directory):
    """Make durable the files replaced in `directory` with `many`: one syncfs(2) of its file system (a sync(2) where
    there is none), then the directory's entries."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _syncfs is None or _syncfs(fd) != 0:
            os.sync()
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc_syncfs():
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


_syncfs = _libc_syncfs()


def fsync_directory(directory):
    """Flush `directory`'s entries (a rename, a new file) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Temporary:
    """A temporary beside the target, flock-held by this process until it is renamed or removed."""

    def __init__(self, target):
        self.target = target
        self.directory = _directory(target)
        self.renamed = False
        while True:
            fd, name = tempfile.mkstemp(prefix=temporary_prefix(target), dir=self.directory)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink:  # else another writer's cleanup took it before the flock: make another
                break
            os.close(fd)
        self.fd, self.path = fd, name

    def commit(self, mode, durable=True):
        subject = os.path.basename(self.target)
        os.fchmod(self.fd, mode)
        faults.point(WRITTEN, subject)
        if durable:
            os.fsync(self.fd)
        faults.point(SYNCED, subject)
        os.replace(self.path, self.target)
        self.renamed = True
        faults.point(RENAMED, subject)  # renamed, the directory not yet synced
        if durable:
            fsync_directory(self.directory)

    def discard(self):
        if not self.renamed:
            for leftover in (self.path, *(self.path + suffix for suffix in SIDECARS)):
                _unlink(leftover)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _directory(path):
    return os.path.dirname(os.path.abspath(path))


def _remove_if_unheld(candidate):
    try:
        info = os.lstat(candidate)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode):
        _unlink(candidate)  # never ours; unlinking a link touches only the link
        return True
    if not stat.S_ISREG(info.st_mode):
        return False
    try:
        fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a living writer's
        for leftover in (candidate, *(candidate + suffix for suffix in SIDECARS)):
            _unlink(leftover)
        return True
    finally:
        os.close(fd)


def _unlink(path):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _raise_domain(error, what, outcome):
    domain = from_os_error(error, what, outcome)
    if domain is None:
        raise error
    raise domain from error
