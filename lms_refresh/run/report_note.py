"""The note of the HTML report page the tool maintains, and the retirement of one it no longer does.

A run writes `[report] path` beside the publication. Once `path` moves, `enabled` is false or the store is
PostgreSQL, no run writes that page again: left where it was, it says "Fresh" with numbers that age while
`status --check` turns CRITICAL, and a web server keeps serving it. So every page written where the
configuration says is noted in the state directory (its path and a SHA-256 digest of what was written), and
the first run that maintains no page there removes it — only if it is still what the tool wrote: a file the
tool did not write, or one changed since, is never removed (a warning says it stays).
"""

import hashlib
import json
import logging
import os

from lms_refresh import atomic
from lms_refresh.regular_files import NotRegularFile, open_regular
from lms_refresh.state_directory import REPORT_NOTE

logger = logging.getLogger(__name__)

_BLOCK = 1 << 20


def note_path(config):
    return os.path.join(config.state_directory, REPORT_NOTE)


def maintained(config):
    """The page runs of `config` write (`[report] path`), or None if they write none."""
    return config.report.path if config.store.type == "sqlite" and config.report.enabled else None


def digest(path):
    """The SHA-256 of the regular file `path` (hex), or None if it is not one (gone, replaced by another kind)."""
    try:
        handle, _ = open_regular(path)
    except (FileNotFoundError, NotRegularFile):
        return None
    sha = hashlib.sha256()
    with handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            sha.update(block)
    return sha.hexdigest()


def remember(config, page):
    """Note that the tool has just written `page` (the maintained one); best effort (a warning)."""
    path = note_path(config)
    try:
        text = json.dumps({"path": page, "sha256": digest(page)}, sort_keys=True) + "\n"
        atomic.replace_bytes(path, text.encode(), mode=0o640, what=f"the report note {path}",
                             outcome="the report stands.")
    except Exception as error:  # the page stands; without the note, a later move leaves it behind
        logger.warning("Could not note the report page in %s (%s: %s).", path, type(error).__name__, error)


def _noted(config):
    try:
        with open(note_path(config), encoding="utf-8") as handle:
            note = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        logger.warning("Could not read the report note %s (%s); a page it names is left in place.",
                       note_path(config), error)
        return None
    if not isinstance(note, dict) or not isinstance(note.get("path"), str) or not os.path.isabs(note["path"]):
        return None
    return note


def retire(config):
    """Remove the page the tool last wrote if `config`'s runs no longer maintain it (and it is as written);
    return its path if it was removed. Never raises: the run stands whatever happens here."""
    try:
        note = _noted(config)
        if note is None or note["path"] == maintained(config):
            return None
        old = note["path"]
        found = digest(old)
        if found is not None and found == note.get("sha256"):
            os.unlink(old)
            logger.info("Removed the HTML report %s: the configuration no longer has the runs write it there "
                        "([report] path or enabled changed), and it would go on showing old numbers.", old)
            removed = old
        else:
            removed = None
            if found is not None:
                logger.warning("The HTML report %s is no longer written by the runs, but it changed since "
                               "lms-refresh wrote it, so it is left in place: remove it if nothing else keeps it.",
                               old)
        os.unlink(note_path(config))
        return removed
    except Exception as error:
        logger.warning("Could not remove the HTML report the runs no longer write (%s: %s).", type(error).__name__,
                       error)
        return None
