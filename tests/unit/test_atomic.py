"""lms_refresh/atomic.py, the one atomic-replace helper: every writer's file is the old one or the new
one — never none, never a part — whatever kills the writer and wherever, and no temporary outlives
the next write of the same file."""

import contextlib
import errno
import fcntl
import json
import os
import re
import sqlite3
import stat

import pytest

from helpers.project import Project
from helpers.statements import statement
from lms_refresh import atomic, faults
from lms_refresh.errors import StateError, UnavailableError

FIRST = "2026-11-03T04:15:00+01:00"
SECOND = "2026-11-04T04:15:00+01:00"
STEPS = (atomic.WRITTEN, atomic.SYNCED, atomic.RENAMED)


def temporaries(directory, name=None):
    """The temporaries (and SQLite files beside them) in `directory`, of `name` or of any file."""
    prefix = atomic.temporary_prefix(name) if name else "."
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(prefix) and ".tmp-" in p.name)


@contextlib.contextmanager
def armed(text):
    faults.arm({faults.ENVIRONMENT_VARIABLE: text})
    try:
        yield
    finally:
        faults.arm({})


# -- the helper itself, in this process ---------------------------------------------------------------

def test_replace_bytes_gives_the_file_its_mode_and_leaves_nothing_beside_it(tmp_path):
    target = tmp_path / "file"
    target.write_bytes(b"old")
    target.chmod(0o644)
    atomic.replace_bytes(target, b"new\n", mode=0o600)
    assert target.read_bytes() == b"new\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("failure", [RuntimeError("a bug"), KeyboardInterrupt(), sqlite3.OperationalError("x")])
def test_a_failing_writer_leaves_the_old_file_and_removes_its_temporary_and_sqlites_files(tmp_path, failure):
    target = tmp_path / "serving.sqlite"
    target.write_bytes(b"old")
    with pytest.raises(type(failure)):
        with atomic.replacing(target, mode=0o644) as temporary:
            db = sqlite3.connect(temporary)
            db.execute("CREATE TABLE t (x)")
            db.execute("BEGIN")
            db.execute("INSERT INTO t VALUES (1)")  # a journal beside the temporary now
            assert temporaries(tmp_path, "serving.sqlite") == [os.path.basename(temporary),
                                                               os.path.basename(temporary) + "-journal"]
            try:
                raise failure
            finally:
                db.close()
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["serving.sqlite"]


def test_a_temporary_its_writer_still_holds_is_kept_and_a_dead_writers_is_removed(tmp_path):
    target = tmp_path / "file"
    prefix = atomic.temporary_prefix(target)
    dead = tmp_path / f"{prefix}deadbeef"
    dead.write_bytes(b"half")
    (tmp_path / f"{prefix}deadbeef-journal").write_bytes(b"j")
    (tmp_path / f"{prefix}gone0000-wal").write_bytes(b"w")  # its database already removed
    (tmp_path / ".other.tmp-deadbeef").write_bytes(b"another file's")
    alive = tmp_path / f"{prefix}alive000"
    alive.write_bytes(b"being written")
    holder = os.open(alive, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # as a living writer holds its temporary
    try:
        atomic.replace_bytes(target, b"new", mode=0o640)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".other.tmp-deadbeef", alive.name, "file"])
    finally:
        os.close(holder)
    assert atomic.remove_stale(target) == 1 and sorted(p.name for p in tmp_path.iterdir()) == [
        ".other.tmp-deadbeef", "file"]


def test_a_full_disk_is_the_domain_error_with_the_callers_outcome_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "lms_refresh.prom"
    target.write_bytes(b"old")
    with armed(f"{atomic.SYNCED}/lms_refresh.prom:enospc"):
        atomic.replace_bytes(tmp_path / "other", b"x", mode=0o644)  # another file: not its place
        with pytest.raises(UnavailableError) as raised:
            atomic.replace_bytes(target, b"new", mode=0o644, outcome="the run's own result stands.")
    assert str(raised.value) == (f"Cannot write {target}: the disk is full (No space left on device (injected at "
                                 f"{atomic.SYNCED})); free some space — the run's own result stands.")
    assert raised.value.__cause__.errno == errno.ENOSPC
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["lms_refresh.prom", "other"]


def test_a_read_only_directory_is_named(tmp_path):
    directory = tmp_path / "ro"
    directory.mkdir()
    subprocess_mount = os.system(f"mount -t tmpfs -o size=64k,ro tmpfs {directory} 2>/dev/null")
    if subprocess_mount != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        with pytest.raises(StateError, match="it is on a read-only file system; remount it read-write"):
            atomic.replace_bytes(directory / "key", b"k", mode=0o600, what="the key")
    finally:
        os.system(f"umount -l {directory}")


def test_the_fault_seam_picks_a_file_by_name():
    assert faults.parse("replace-renamed/serving.sqlite:kill") == ("replace-renamed", 1, "kill", "serving.sqlite")
    assert faults.parse("replace-written@2:term") == ("replace-written", 2, "term", None)
    with pytest.raises(ValueError):
        faults.parse("replace-nowhere/x:kill")


def test_os_replace_and_os_rename_are_called_only_by_the_helper():
    import lms_refresh

    root = os.path.dirname(lms_refresh.__file__)
    callers = sorted(os.path.relpath(os.path.join(folder, name), root)
                     for folder, _, names in os.walk(root) for name in names if name.endswith(".py")
                     if re.search(r"\bos\.(replace|rename)\(", open(os.path.join(folder, name)).read()))
    assert callers == ["atomic.py"]


# -- every writer, killed at every step (real processes) ----------------------------------------------

# The file each writer replaces, relative to the project root, and whether the first run writes it
# (else the second one rewrites it).
WRITERS = {
    "pseudonymisation.key": ("state/pseudonymisation.key", True),
    "metrics.sqlite": ("state/metrics.sqlite", True),
    "store-identity": ("state/store-identity", True),
    "serving.sqlite": ("state-publication/serving.sqlite", False),
    "lms_refresh.prom": ("metrics/lms_refresh.prom", False),
}
SQLITE_ONLY = ("metrics.sqlite", "serving.sqlite")


def whole(name, path):
    """Whether `path` is a complete file of its kind."""
    data = path.read_bytes()
    if name == "pseudonymisation.key":
        return re.fullmatch(rb"[0-9a-f]{64}\n", data) is not None
    if name == "store-identity":
        return "key_fingerprint" in json.loads(data)
    if name == "lms_refresh.prom":
        return data.endswith(b"\n") and data.count(b"\nlms_refresh_") >= 8
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        table = "publication" if name == "serving.sqlite" else "meta"
        return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok" and \
            db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] > 0


@pytest.fixture(params=[(name, "sqlite") for name in sorted(WRITERS)]
                + [pytest.param((name, "postgresql"), marks=pytest.mark.postgresql)
                   for name in sorted(WRITERS) if name not in SQLITE_ONLY], ids="-".join)
def writer(request, tmp_path):
    """(the file's name, a project on a store it is written with)."""
    name, store = request.param
    server = request.getfixturevalue("postgres_server") if store == "postgresql" else None
    return name, Project(tmp_path / "p", server)


@pytest.mark.parametrize("step", STEPS)
def test_a_writer_killed_at_any_step_leaves_the_old_or_the_new_file_and_the_next_run_no_temporary(writer, step):
    name, project = writer
    location, first_run = WRITERS[name]
    path = project.root / location
    (project.root / "metrics").mkdir()
    project.config.write_text(project.config.read_text()
                              + f'[monitoring]\ntextfile = "{project.root / "metrics" / "lms_refresh.prom"}"\n')
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    now = FIRST
    if not first_run:
        project.invoke("run", now=FIRST, check=0)
        project.write("b.ndjson", [statement(learner=f"v{i}", timestamp="2026-11-03T10:00:00Z") for i in range(11)])
        now = SECOND
    old = path.read_bytes() if path.exists() else None
    assert (old is None) == first_run

    killed = project.cli("run", now=now, env={faults.ENVIRONMENT_VARIABLE: f"{step}/{name}:kill"})
    assert killed.returncode == -9, killed.stderr
    left = temporaries(path.parent, name)
    if step == atomic.RENAMED:  # the new file, whole; its temporary is its name now
        assert path.read_bytes() != old and whole(name, path) and left == []
    else:  # the old file (or none before there was one), and the killed writer's temporary
        assert (path.read_bytes() if path.exists() else None) == old and len(left) == 1
        assert whole(name, path.parent / left[0])  # it had written it whole: only the rename was missing

    project.invoke("run", now=now, check=0)
    assert whole(name, path)
    for directory in {path.parent, project.state, project.root / "metrics"}:
        assert temporaries(directory) == []
    publication = project.root / "state-publication" / "serving.sqlite"
    if project.postgres is None:
        with contextlib.closing(sqlite3.connect(f"file:{publication}?mode=ro", uri=True)) as db:
            assert db.execute("SELECT * FROM daily_metrics ORDER BY day, course").fetchall() == project.serving()
            assert [(row[0], None, *row[1:]) for row in db.execute("SELECT * FROM site_daily_metrics ORDER BY day")] \
                == [row for row in project.serving(site=True) if row[1] is None]
    assert [row[2] for row in project.serving()] == ([12] if first_run else [12, 11])


def test_the_temporaries_earlier_versions_left_are_removed_by_the_next_write(tmp_path):
    """Before this helper, a killed run left serving.sqlite.tmp-PID (one more per run), a store's
    NAME.creating-PID, and the key's and note's NAME.PID.tmp."""
    left = ["serving.sqlite.tmp-4711", "serving.sqlite.tmp-4711-journal", "serving.sqlite.creating-12",
            "serving.sqlite.4711.tmp"]
    kept = ["serving.sqlite.tmp-notapid", "metrics.sqlite.tmp-4711", "serving.sqlite.old"]
    for name in left + kept:
        (tmp_path / name).write_bytes(b"x")
    atomic.replace_bytes(tmp_path / "serving.sqlite", b"new", mode=0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept + ["serving.sqlite"])


def test_a_group_is_taken_from_a_setgid_directory_and_never_given_by_chown(tmp_path):
    """No writer changes a group (the unit forbids chown): a file that needs one gets it from its directory, and
    is refused (78) before anything is written when the directory does not give it; the target is untouched."""
    from lms_refresh.errors import ConfigError

    target = tmp_path / "file"
    target.write_bytes(b"old")
    other = os.getegid() + 1
    with pytest.raises(ConfigError, match=f"a new file in {tmp_path} would not get the group it needs"):
        atomic.replace_bytes(str(target), b"new", mode=0o640, group=other)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    assert atomic.new_file_group(str(tmp_path)) == os.getegid()
    atomic.replace_bytes(str(target), b"new", mode=0o640, group=os.getegid())
    assert target.read_bytes() == b"new"


def test_a_group_shows_as_the_user_namespace_maps_it(tmp_path):
    gid_map = tmp_path / "gid_map"
    gid_map.write_text("         0          0 4294967295\n")  # no namespace: every group is itself
    assert atomic.seen_gid(996, str(gid_map)) == 996
    gid_map.write_text("         0          0          1\n       997        997          1\n")  # PrivateUsers=yes
    assert atomic.seen_gid(997, str(gid_map)) == 997 and atomic.seen_gid(996, str(gid_map)) == atomic.OVERFLOW_GID
    assert atomic.seen_gid(996, str(tmp_path / "absent")) == 996
