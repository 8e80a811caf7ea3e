"""The files a configuration makes the program write, checked against each other before anything is written.

A publication or a textfile that names the store, the key or the lock would
replace it with a run that reports success. `refuse_collisions` compares every
path a run writes (and the files it only reads: the configuration, the export
files, credentials) however each is spelt — symbolic links and `..` resolved,
hard links by inode, letter case folded, a file against a directory it would
have to be — and refuses the first collision with one sentence naming both
keys (exit 78). Configuration loading, `check` and every command that takes
the run lock call it.
"""

import dataclasses
import os
import stat

from lms_refresh.errors import ConfigError
from lms_refresh.regular_files import kind_of
from lms_refresh.state_directory import (
    LAST_INTERRUPTION,
    LOCK_NAME,
    MARKER,
    REPORT_FAILED,
    REPORT_NOTE,
    RUN_IN_PROGRESS,
)

SQLITE_SIDECARS = ("-journal", "-wal", "-shm")  # what SQLite writes beside a database file


@dataclasses.dataclass(frozen=True)
class NamedPath:
    """A path as the configuration names it: `key` says which key (or which file of the state directory)."""

    key: str
    path: str
    written: bool = True  # the program writes (or replaces) this file; False: it only reads it
    directory: bool = False  # a directory the program writes into (the state directory)
    sidecars: tuple = ()  # files written beside it, by suffix
    private: bool = False  # only the service user may read it (the store, the key)
    # A directory of the program's own files (the report's pages and CSVs), which it opens to every reader and
    # prunes: nothing else may be it or lie inside it, and it may not lie among the export files.
    exclusive: bool = False

    def spellings(self):
        """This path and the files written beside it, as NamedPaths."""
        yield self
        for suffix in self.sidecars:
            yield NamedPath(f"the {suffix.lstrip('-')} file of {self.key}", self.path + suffix, self.written,
                            private=self.private)


def _quoted(key):
    return key if key.startswith(("the ", "'")) else f"'{key}'"


def _default_or_set(key, path, default):
    return f"'{key}' (its default, {os.path.basename(default)} in the state directory)" if path == default else key


def report_files_directory(output):
    """The directory of the files (course pages, CSVs) the report writes beside its overview page `output`: its
    name without .html (or .htm), and "-files" (report.html → report-files/)."""
    root, extension = os.path.splitext(output)
    return (root if extension.lower() in (".html", ".htm") else output) + "-files"


def report_paths(key, output):
    """The NamedPaths of a report whose overview `key` names at `output`: the page and its files' directory."""
    return [NamedPath(key, output),
            NamedPath(f"the directory of the report's course pages and CSVs (beside {_quoted(key)}, named after it)",
                      report_files_directory(output), directory=True, exclusive=True)]


def named_paths(config):
    """Return the NamedPaths of `config`: what a run writes, then what it only reads."""
    state = config.state_directory
    sqlite = config.store.type == "sqlite"
    paths = [
        NamedPath("state_directory", state, directory=True),
        NamedPath(f"the run lock ({LOCK_NAME} in 'state_directory')", os.path.join(state, LOCK_NAME)),
        NamedPath(f"the store note ({MARKER} in 'state_directory')", os.path.join(state, MARKER)),
        NamedPath(f"the note of a run in progress ({RUN_IN_PROGRESS} in 'state_directory')",
                  os.path.join(state, RUN_IN_PROGRESS)),
        NamedPath(f"the note of the last interrupted run ({LAST_INTERRUPTION} in 'state_directory')",
                  os.path.join(state, LAST_INTERRUPTION)),
        NamedPath(f"the note of the report page written ({REPORT_NOTE} in 'state_directory')",
                  os.path.join(state, REPORT_NOTE)),
        NamedPath(f"the note of a report the last run could not write ({REPORT_FAILED} in 'state_directory')",
                  os.path.join(state, REPORT_FAILED)),
        NamedPath(_default_or_set("pseudonymisation.key_file", config.key_file,
                                  os.path.join(state, "pseudonymisation.key")), config.key_file, private=True),
    ]
    if sqlite:
        paths.append(NamedPath(_default_or_set("store.path", config.store.path, os.path.join(state, "metrics.sqlite")),
                               config.store.path, sidecars=SQLITE_SIDECARS, private=True))
        # On PostgreSQL the publication is the store's view: publication.path is not written.
        paths.append(NamedPath("publication.path", config.publication.path, sidecars=("-journal",)))
        if config.report.enabled:
            paths.extend(report_paths("report.path", config.report.path))
    if config.monitoring.textfile:
        paths.append(NamedPath("monitoring.textfile", config.monitoring.textfile))
    paths.append(NamedPath("the configuration file", config.origin, written=False))
    read = [("source.path", getattr(config.source, "path", None)),
            ("source.ca_bundle", getattr(config.source, "ca_bundle", None)),
            ("source.password_file", getattr(config.source, "password_file", None)),
            ("store.password_file", config.store.password_file),
            ("alerts.webhook_url_file", config.alerts.webhook_url_file),
            ("alerts.healthchecks_url_file", config.alerts.healthchecks_url_file),
            ("alerts.sendmail", config.alerts.sendmail)]
    for key, path in read:
        if path and (key in ("source.path", "source.ca_bundle", "alerts.sendmail") or "/" in path):
            paths.append(NamedPath(key, path, written=False))  # a bare credential name is not a path here
    return paths


@dataclasses.dataclass(frozen=True)
class _Resolved:
    named: NamedPath
    real: str  # symbolic links and '..' resolved
    folded: str  # `real` in one letter case
    inode: tuple | None  # (device, inode) of what exists there


def _resolve(named):
    real = os.path.realpath(os.path.abspath(named.path))
    try:
        info = os.stat(real)
        inode = (info.st_dev, info.st_ino)
    except (OSError, ValueError):
        inode = None
    return _Resolved(named, real, real.casefold(), inode)


def _inside(inner, outer):
    return inner.startswith(outer.rstrip("/") + "/")


def _within(spelling, directory):
    """Whether the resolved `spelling` lies inside the resolved `directory`, in any letter case."""
    return _inside(spelling.real, directory.real) or _inside(spelling.folded, directory.folded)


def inside_state_directory(config, path):
    """Whether `path` lies inside `config`'s state directory, however either is spelt."""
    return _within(_resolve(NamedPath("", path)), _resolve(NamedPath("state_directory", config.state_directory)))


def _same(a, b):
    """How `a` and `b` name one file, in words ("" when spelt alike), or None if they do not."""
    spelt = f"{a.named.path} and {b.named.path}"
    if a.real == b.real:
        return "" if os.path.abspath(a.named.path) == os.path.abspath(b.named.path) else f", spelt {spelt}"
    if a.inode is not None and a.inode == b.inode:
        return f": {spelt} are hard links to one file"
    if a.folded == b.folded:
        return f": {spelt} differ only in letter case, which names one file on a case-insensitive file system"
    return None


def collision(paths):
    """Given NamedPaths, return the sentence (without the file's name) of the first collision, or None."""
    resolved = [[_resolve(spelling) for spelling in named.spellings()] for named in paths]
    for i, group in enumerate(resolved):
        for other in resolved[i + 1:]:
            for a in group:
                for b in other:
                    found = _shared(a, b) or _shared(b, a) or _collision(a, b) or _collision(b, a)
                    if found:
                        return found
    for group in resolved:  # after the collisions, which name the other key too
        found = next(filter(None, map(_not_a_file, group)), None)
        if found:
            return found
    return _publication_in_private_place(resolved)


def _not_a_file(spelling):
    """The sentence if a file the program writes (replacing it whole) is there as something else, else None: a
    directory (a run would commit and then fail to write it, every night: a publication.path naming its directory,
    not the file), or a device, a FIFO or a socket, which the write would replace by a regular file (`report
    --output /dev/null` run as root replaced the system's /dev/null)."""
    if spelling.named.exclusive:
        return _not_a_directory(spelling)
    if not spelling.named.written or spelling.named.directory or spelling.named.key.startswith("the "):
        return None  # the state directory's own files (the lock...) are checked as they are opened, in words of theirs
    try:
        mode = os.stat(spelling.named.path).st_mode  # through links: /dev/stdout is a FIFO, a terminal...
    except (OSError, ValueError):
        return None  # not there yet, or not reachable: written new (a failure to write says why)
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        example = _FILE_NAMES.get(spelling.named.key)
        return (f"{_quoted(spelling.named.key)} ({spelling.named.path}) is a directory, where a run writes a file "
                "whole; name a file" + (f" ({os.path.join(spelling.named.path, example)}, say)" if example else "")
                + ".")
    return (f"{_quoted(spelling.named.key)} ({spelling.named.path}) is {kind_of(mode)}, which writing a file whole "
            "there would replace by a regular file; name a regular file.")


_FILE_NAMES = {"publication.path": "serving.sqlite", "report.path": "report.html"}  # their defaults' names


def _not_a_directory(spelling):
    """The sentence if the directory of the program's own files is there as something else, else None: the report
    would fail to write its pages into a file (after a chmod of it), every run."""
    try:
        mode = os.stat(spelling.named.path).st_mode
    except (OSError, ValueError):
        return None  # not there yet: made by the first report
    if stat.S_ISDIR(mode):
        return None
    kind = "a regular file" if stat.S_ISREG(mode) else kind_of(mode)
    return (f"{_quoted(spelling.named.key)} ({spelling.named.path}) is {kind}, where the report writes its files "
            "into a directory; move it away, or name the report another file.")


def _shared(own, other):
    """The sentence if `other` is, or lies inside, the directory of the program's own files `own` (when `own` is
    one), or that directory lies among the export files, else None. The report makes the directory readable by
    every account (0755) and removes from it the files it names as its own: the state directory, the store or the
    key there would be opened to every reader, and anything else named there would be pruned or shown."""
    if not own.named.exclusive:
        return None
    why = "where the report writes its course pages and CSVs; point them at different places."
    same = _same(own, other)
    if same is not None:
        return (f"{_quoted(other.named.key)} and {_quoted(own.named.key)} name the same directory "
                f"({own.named.path}{same}), {why}")
    if _within(other, own):
        return (f"{_quoted(other.named.key)} ({other.named.path}) lies inside {own.named.path}, "
                f"{_quoted(own.named.key)}, {why}")
    if other.named.key == "source.path" and _within(own, other):
        return (f"{_quoted(own.named.key)} ({own.named.path}) lies inside {other.named.path}, the export directory "
                f"{_quoted(other.named.key)} names; a run would write among the files it reads — point it elsewhere.")
    return None


def _collision(a, b):
    """The sentence if written `a` collides with `b`, else None (called both ways round)."""
    if not a.named.written or ((a.named.directory or b.named.directory) and not b.named.written):
        return None  # a file the program only reads may lie anywhere, the state directory included
    same = _same(a, b)
    if same is not None and (a.named.directory or b.named.directory):
        file, directory = (b, a) if a.named.directory else (a, b)
        return (f"{_quoted(file.named.key)} names the directory that {_quoted(directory.named.key)} names "
                f"({directory.named.path}{same}); name a file of its own outside it.")
    if same is not None:
        return (f"{_quoted(a.named.key)} and {_quoted(b.named.key)} name the same file ({a.named.path}{same}); "
                "a run would write one over the other — point them at different files.")
    if not a.named.directory and (_inside(b.real, a.real) or _inside(b.folded, a.folded)):
        return (f"{_quoted(b.named.key)} ({b.named.path}) lies inside {a.named.path}, the file "
                f"{_quoted(a.named.key)} names; a file cannot hold another — point them at different places.")
    if b.named.key == "source.path" and (_inside(a.real, b.real) or _inside(a.folded, b.folded)):
        # The export tree is read, never written: a file written there may replace an export file, or be
        # read back as one.
        return (f"{_quoted(a.named.key)} ({a.named.path}) lies inside {b.named.path}, the export directory "
                f"{_quoted(b.named.key)} names; a run would write among the files it reads — point it elsewhere.")
    return None


def _publication_in_private_place(resolved):
    """Refuse a publication whose directory a run would open to every account (0755) while the state
    directory, the store or the key is in it."""
    state = resolved[0][0]
    for group in resolved:  # the report too: it is the publication's page, which a web server serves
        shown = group[0]
        if shown.named.key in ("publication.path", "report.path") and _within(shown, state):
            return (f"'{shown.named.key}' ({shown.named.path}) lies inside 'state_directory' ({state.named.path}), "
                    "which only the service user may read (0750): dashboards could not read it there, and opening "
                    "that directory to them would expose the store and the key — put it outside it (the default is "
                    "<state directory>-publication/" + ("serving.sqlite)." if shown.named.key == "publication.path"
                                                        else "report.html)."))
    publication = next((group[0] for group in resolved if group[0].named.key == "publication.path"), None)
    if publication is None:
        return None
    directory = os.path.dirname(publication.real)
    for group in resolved[1:]:
        other = group[0]
        if other.named.private and os.path.dirname(other.real) == directory:
            return (f"'publication.path' ({publication.named.path}) shares its directory with "
                    f"{_quoted(other.named.key)} ({other.named.path}); a run makes the publication's directory "
                    "readable by every account for the dashboards — give the publication a directory of its own.")
    return None


def refuse_collisions(config):
    """Raise ConfigError (78), naming both keys, if two paths `config` makes the program use collide."""
    found = collision(named_paths(config))
    if found:
        raise ConfigError(f"{config.origin}: {found}")
