"""An export file replaced, renamed or truncated while a run reads it: no statement of the window may be lost.

The run reads a file in chunks, each opening the path again. A file replaced (an exporter's atomic rename of
a new version), removed or truncated after the run planned it gives the later chunks nothing; if the run
still commits, its watermark passes the statements it never read, and the next run — whose window starts at
that watermark — skips them in the new file as lines outside its window. They are never counted.
"""

import os

import pytest

from helpers.statements import statement
from lms_refresh import faults

FIRST = "2026-11-03T00:00:00Z"
SECOND = "2026-11-04T00:00:00Z"


def lines(count, day, first=0):
    return [statement(learner=f"u{(first + i) % 50}", timestamp=f"{day}T{i % 24:02d}:{i % 60:02d}:00Z")
            for i in range(count)]


@pytest.mark.parametrize("change", ["replaced", "truncated"])
def test_a_file_changed_while_read_loses_no_statement_of_the_window(sqlite_project, monkeypatch, change):
    project = sqlite_project
    old = lines(3000, "2026-11-02")  # about 1 MB: several chunks of batch_size (500) x 1 KiB
    path = project.write("a.ndjson", old)
    new = old + lines(10, "2026-11-03", first=3000)  # the exporter's next version: the same lines, and more
    point = faults.point

    def change_the_file(phase, subject=None):
        if phase == "batch-staged" and not os.path.exists(str(path) + ".done"):
            open(str(path) + ".done", "w").close()
            if change == "replaced":
                project.write("a.ndjson.tmp", new)
                os.replace(project.source / "a.ndjson.tmp", path)
            else:  # rewritten in place: truncated, then written again from its start
                os.truncate(path, 0)
        return point(phase, subject)

    monkeypatch.setattr(faults, "point", change_the_file)
    first = project.invoke("run", now=FIRST)
    monkeypatch.setattr(faults, "point", point)
    if change == "truncated":
        project.write("a.ndjson", new)  # the exporter finishes writing it
    os.remove(str(path) + ".done")
    second = project.invoke("run", now=SECOND)
    assert second.returncode == 0, second.stderr
    staged = project.query("SELECT COUNT(*) FROM staged_events")[0][0]
    assert staged == len(new), (first.returncode, first.stderr, staged)
