"""The state directory: created if missing, refused if using it would corrupt ownership."""

import os
import pwd
import stat

from lms_refresh.errors import StateError

# The files a run keeps in the state directory besides the store and the key (lms_refresh.config.paths
# checks that no configured path names one of them).
LOCK_NAME = "refresh.lock"  # the run's flock (lms_refresh.run.lock)
MARKER = "store-identity"  # which store the key built (lms_refresh.run.identity)
RUN_IN_PROGRESS = "run-in-progress"  # a run started, not ended (lms_refresh.ops.interruption; the catch-up timer)
LAST_INTERRUPTION = "last-interruption"  # the last run found so (lms_refresh.ops.interruption)
REPORT_NOTE = "report-written"  # which HTML report page the tool last wrote (lms_refresh.run.report_page)
REPORT_FAILED = "report-failed"  # why the last run wrote no HTML report (lms_refresh.run.after_commit)


def user_name(uid):
    """Return the login name for `uid`, or the number when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def run_as_hint(owner):
    return f"run it as root (it becomes that user) or as that user, e.g. 'runuser -u {owner} -- lms-refresh ...'"


def become_owner(path, euid):
    """As root, switch this process to the user that owns the state directory `path` (its groups
    too, as runuser does) and return that user's name; else (not root, no directory yet, or one
    root owns) return None and change nothing.

    Root then shares the service's lock and state and leaves no root-owned file behind, and reads
    credentials as the service user does (through the group of /etc/lms-refresh/credentials)."""
    if euid != 0:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_uid == 0 or not stat.S_ISDIR(info.st_mode):
        return None
    try:
        entry = pwd.getpwuid(info.st_uid)
    except KeyError:
        raise StateError(f"The state directory {path} belongs to uid {info.st_uid}, which has no account; "
                         "chown it to the service user.") from None
    os.initgroups(entry.pw_name, entry.pw_gid)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    return entry.pw_name


def refuse_unreadable(path, euid):
    """Refuse (78) a state directory that this user may not read, naming its owner: every command reads its
    key, lock or store there, and would otherwise end on a PermissionError (exit 1, a traceback) after it
    had begun (a run's shutdown marker, status's lock). A directory not there yet is the first run's to make."""
    try:
        info = os.stat(path)
    except PermissionError:  # a directory above it may not be searched
        raise StateError(f"The state directory {path} cannot be reached by '{user_name(euid)}' (a directory above "
                         "it may not be searched by that user); let it search them (x) or move the state "
                         "directory.") from None
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        _refuse_foreign(f"The state directory {path}", info, euid, access=os.R_OK | os.X_OK, path=path)


def refuse_a_file(path):
    """Refuse a state directory that is a file, or lies below one: a mistake in the configuration
    that no command can work around (nor may it touch the file)."""
    try:
        is_directory = stat.S_ISDIR(os.stat(path).st_mode)
    except NotADirectoryError:
        is_directory = False
    except FileNotFoundError:
        return  # created by the first run
    if not is_directory:
        raise StateError(f"The state directory {path} is not a directory; point state_directory at one.")


def prepare_state_directory(path, euid):
    """Given the state directory and our effective uid, make sure it exists and is safely ours.

    Root running against a directory owned by the service user would leave
    root-owned files (store, key, lock) behind that the next timer run cannot
    open, so that is refused rather than silently breaking the service.
    """
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
        info = os.stat(path)
    except PermissionError as error:
        raise StateError(
            f"Cannot create or open the state directory {path}: permission denied; "
            "create it for the service user or run as that user."
        ) from error
    except (NotADirectoryError, FileExistsError):  # it, or a directory above it, is a file
        refuse_a_file(path)
        raise
    _refuse_foreign(f"The state directory {path}", info, euid, access=os.W_OK | os.X_OK, path=path)


def check_writable_file(path, euid):
    """Refuse a state file (lock, store, key) that exists but we may not write, naming its owner."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    _refuse_foreign(path, info, euid, access=os.R_OK | os.W_OK, path=path)


def _read_only(path):
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _refuse_foreign(what, info, euid, *, access, path):
    """Refuse to use `path` as root when another user owns it, or when we lack `access` to it."""
    owner = user_name(info.st_uid)
    if euid == 0 and info.st_uid != 0:
        raise StateError(
            f"{what} belongs to user '{owner}'; running as root would leave root-owned files "
            f"that break the next timer run: {run_as_hint(owner)}."
        )
    if access & os.W_OK and not os.access(path, access) and _read_only(path):
        raise StateError(f"{what} is on a read-only file system; remount it read-write (the service needs to "
                         "write its lock, store and key there).")
    if not os.access(path, access):
        denied = "is not writable by" if access & os.W_OK else "cannot be read by"
        raise StateError(f"{what} belongs to user '{owner}' and {denied} '{user_name(euid)}': {run_as_hint(owner)}.")
