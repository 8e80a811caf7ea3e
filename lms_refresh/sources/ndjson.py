"""xAPI statements from NDJSON export files (`*.ndjson`, `*.jsonl`, optionally `.gz`).

Export files only grow in number, so each file's size, mtime, inode and the
range of `stored` times it holds are remembered (committed with the run).
An unchanged file whose range lies outside the window is not read again,
which keeps a one-day refresh cheap however much history sits beside it.
"""

import gzip
import json
import os
import re

from lms_refresh.errors import BadInputError, ConfigError, UnavailableError
from lms_refresh.sources import Batch
from lms_refresh.sources.xapi import InvalidStatement, stored_cursor

SUFFIXES = (".ndjson", ".jsonl", ".ndjson.gz", ".jsonl.gz")
_STORED = re.compile(rb'"stored"\s*:\s*"([^"]{1,64})"')


class NdjsonSource:
    name = "xapi-ndjson"

    def __init__(self, path, mapper, batch_size):
        self.path = path
        self.mapper = mapper
        self.batch_size = batch_size

    def describe(self):
        return f"xAPI NDJSON files at {self.path}"

    def files(self):
        """Return the export files, sorted, or raise if the path is missing."""
        if os.path.isfile(self.path):
            return [self.path]
        if not os.path.isdir(self.path):
            raise UnavailableError(
                f"The xAPI source path {self.path} does not exist (is the export share mounted?)."
            )
        found = []
        for folder, _, names in os.walk(self.path):
            found.extend(os.path.join(folder, n) for n in names if n.endswith(SUFFIXES))
        return sorted(found)

    def complete_through(self, now):
        return None  # files carry no completeness marker; the safety lag bounds the window

    def check(self):
        files = self.files()
        unreadable = [f for f in files if not os.access(f, os.R_OK)]
        if unreadable:
            raise ConfigError(f"Cannot read {unreadable[0]} (and {len(unreadable) - 1} more): permission denied.")
        return f"{len(files)} export file(s) readable under {self.path}"

    def batches(self, window, index):
        """Yield Batches of the statements whose `stored` lies in the window.

        `index` maps a file path to the [size, mtime_ns, inode, min, max] list
        recorded by an earlier committed run.
        """
        since, until = window.since_cursor, window.until_cursor
        batch = Batch()
        for path in self.files():
            try:
                info = os.stat(path)
            except FileNotFoundError:
                continue  # rotated away between listing and reading
            signature = [info.st_size, info.st_mtime_ns, info.st_ino]
            known = index.get(path)
            if known and known[:3] == signature and (known[3] is None or known[4] < since or known[3] >= until):
                continue
            low = high = None
            for kind, row, cursor in self._read(path, since, until):
                if cursor is not None:
                    if low is None or cursor < low:
                        low = cursor
                    if high is None or cursor > high:
                        high = cursor
                    if kind == "skip" or not since <= cursor < until:
                        continue
                if kind == "event":
                    batch.events.append(row)
                elif kind == "void":
                    batch.voids.append(row)
                else:
                    batch.quarantined.append(row)
                batch.read += 1
                if len(batch) >= self.batch_size:
                    yield batch
                    batch = Batch()
            batch.state[path] = signature + [low, high]
        yield batch

    def _read(self, path, since, until):
        """Yield (kind, row, stored cursor or None) per line; "skip" marks a line outside the window."""
        opener = gzip.open if path.endswith(".gz") else open
        mapper = self.mapper
        try:
            with opener(path, "rb") as handle:
                for number, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    # Cheap pre-filter: lines outside the window are skipped without parsing.
                    # Only trusted when "stored" occurs once, so a nested key of that name
                    # cannot mislead it.
                    if line.count(b'"stored"') == 1:
                        match = _STORED.search(line)
                        if match:
                            try:
                                cursor = stored_cursor(match.group(1).decode("ascii"))
                            except (InvalidStatement, UnicodeDecodeError):
                                cursor = None
                            if cursor is not None and not since <= cursor < until:
                                yield "skip", None, cursor
                                continue
                    try:
                        kind, row = mapper.map(json.loads(line))
                    except (ValueError, InvalidStatement) as error:
                        reason = str(error) if isinstance(error, InvalidStatement) else f"not valid JSON: {error}"
                        yield "quarantine", (f"{path}:{number}", reason, line.decode("utf-8", "replace")), None
                        continue
                    yield kind, row, row[2] if kind == "void" else row[1]
        except PermissionError:
            raise ConfigError(f"Cannot read {path}: permission denied.")
        except (OSError, EOFError) as error:
            raise BadInputError(f"Cannot read {path} to the end ({error}); fix or move the file and run again.")
