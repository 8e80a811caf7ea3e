"""Opening a file that a stranger may have put there: only a regular file, never blocking, never read whole
beyond a bound.

Export files, the configuration file and credential files all come through here. O_NONBLOCK makes
opening a FIFO return at once instead of waiting for a writer that never comes; fstat on the open
descriptor then refuses it, and anything else that is not a regular file (a device may have side
effects on open, a directory is not a document), even if it replaced the file since it was listed.
A small document (a configuration, a secret) is read up to its bound and one byte more, so that an
oversized one is refused without being held.
"""

import errno
import os
import stat

KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}


class NotRegularFile(OSError):
    """A path that is not a regular file; its strerror says what it is ('a FIFO', 'a directory', ...)."""


class TooLarge(OSError):
    """A file larger than the bound its reader set."""


def kind_of(mode):
    """Return what a file mode describes, as words for a warning ('a FIFO', 'a socket', ...)."""
    return KINDS.get(stat.S_IFMT(mode), "a file of another kind")  # (none on Linux: S_IFLNK is followed)


def open_regular(path):
    """Open `path` for binary reading if it is a regular file; return (file object, its stat)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, kind_of(info.st_mode), path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path, limit):
    """Return the bytes of the regular file `path`; raise NotRegularFile, or TooLarge past `limit` bytes."""
    handle, _ = open_regular(path)
    with handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(errno.EFBIG, f"larger than {limit} bytes", path)
    return data
