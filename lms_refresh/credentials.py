"""Secrets (passwords, URLs with tokens) from credential files, never from argv or the environment.

A bare name (no "/") is a credential: the unit's copy in $CREDENTIALS_DIRECTORY when systemd
passed one (LoadCredential=), else the file of that name in the credentials directory,
/etc/lms-refresh/credentials (0750 root:lms-refresh; each file 0640 root:lms-refresh), which the
service user can read — so a manual command, the monitoring plugin and the alert unit find the
same secret as the timer's run. A name with a "/" is a path, read as is.
"""

import os

from lms_refresh.errors import ConfigError
from lms_refresh.regular_files import NotRegularFile, TooLarge, read_bounded

CREDENTIALS_DIRECTORY = "/etc/lms-refresh/credentials"
MAX_SECRET_BYTES = 64 << 10  # a password or a URL; more is no credential
OVERRIDE = "LMS_REFRESH_CREDENTIALS"  # another credentials directory (tests, a second instance)


def credentials_directory(environ):
    """The directory a bare credential name is read from outside a unit that loaded it."""
    return environ.get(OVERRIDE) or CREDENTIALS_DIRECTORY


_READ = set()  # every credential this process has read: lms_refresh.disclosure.redaction removes them from every output


def read_so_far():
    """Return the credential values read by this process so far."""
    return frozenset(_READ)


def read_secret(name, environ):
    """Return the stripped content of a credential: a bare name ($CREDENTIALS_DIRECTORY, then the
    credentials directory), or a path."""
    if not name:
        return None
    path = name
    if "/" not in name:
        loaded = environ.get("CREDENTIALS_DIRECTORY")
        path = os.path.join(credentials_directory(environ), name)
        if loaded and os.path.exists(os.path.join(loaded, name)):
            path = os.path.join(loaded, name)
        elif not _present(path):
            loaded_by = f"the unit's $CREDENTIALS_DIRECTORY ({loaded}) has none" if loaded else "no unit loaded it"
            raise ConfigError(
                f"Credential '{name}' is not at {path} and {loaded_by}; put it there as root "
                f"(install -m 0640 -o root -g lms-refresh /dev/stdin {path}; see "
                "/usr/share/doc/lms-refresh/docs/admin/credentials.md)."
            )
    try:
        secret = read_bounded(path, MAX_SECRET_BYTES).decode("utf-8").strip()
    except NotRegularFile as error:
        raise ConfigError(f"The credential {path} is {error.strerror}, not a regular file; put the secret in a "
                          "file there.") from None
    except TooLarge:
        raise ConfigError(f"The credential {path} is larger than {MAX_SECRET_BYTES >> 10} KiB: no password or "
                          "URL is; put the secret alone in it.") from None
    except PermissionError as error:
        raise ConfigError(f"Cannot read the credential {path}: {error.strerror}; the service user reads it through "
                          "its group: chown root:lms-refresh and chmod 0640 it (and 0750 its directory).") from error
    except OSError as error:
        raise ConfigError(f"Cannot read the credential {path}: {error.strerror}.") from error
    except UnicodeDecodeError:
        raise ConfigError(f"The credential {path} is not UTF-8 text.") from None
    _READ.add(secret)
    return secret


def _present(path):
    """False only if `path` is known not to exist (an unreadable directory leaves that to open())."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError:
        pass
    return True
