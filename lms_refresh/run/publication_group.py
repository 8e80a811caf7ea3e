"""The group publication.group names, and the directory that gives it: lms-refresh changes no file's group.

The service's unit forbids chown and fchown and maps no group but its own, so the
publication (and the report beside it) gets the group from its directory: a setgid
directory of that group, which docs/publication.md has a tmpfiles.d line make. A run checks
that before it starts, and `check` says the same (see lms_refresh/atomic.py).
"""

import grp
import os

from lms_refresh import atomic
from lms_refresh.errors import ConfigError

NOTHING_DONE = "nothing was done."


def group_id(name, outcome):  # `outcome`: what a missing group means for the command asking
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(f"The group {name!r} named by publication.group does not exist; create it or fix the "
                          f"key — {outcome}") from None


def require_group(config, owner, outcome=NOTHING_DONE):
    """Return the group id publication.group names (None for none), once the publication's directory is known
    to give a new file that group: a setgid directory of the group. The run changes no file's group (see
    lms_refresh/atomic.py), so without such a directory it refuses (78) before it starts, and so does `check`.
    `owner` is the service user's name, for the sentence's tmpfiles.d line."""
    name = config.publication.group
    if config.store.type != "sqlite" or not name:
        return None
    gid = group_id(name, outcome)
    directory = os.path.dirname(os.path.abspath(config.publication.path))
    existing = directory
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)  # a missing directory is made there, and inherits what it gives
    try:
        given = atomic.new_file_group(existing)
    except OSError:
        given = None
    if given != atomic.seen_gid(gid):
        raise ConfigError(
            f"publication.group = {name!r} needs {directory} to be a setgid directory of group {name!r}, which "
            "gives the publication that group (lms-refresh changes no file's group, and its unit forbids it); "
            f"give it the line 'd {directory} 2750 {owner} {name} -' in a copy of /usr/lib/tmpfiles.d/"
            "lms-refresh.conf in /etc/tmpfiles.d/ and run 'systemd-tmpfiles --create lms-refresh.conf' "
            f"(/usr/share/doc/lms-refresh/docs/publication.md shows it) — {outcome}")
    return gid
