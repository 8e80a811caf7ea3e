"""The walk of the export tree (lms_refresh.sources.files)."""

import os

import pytest

from lms_refresh.errors import ConfigError
from lms_refresh.sources.files import export_files


def test_the_walk_yields_each_export_file_once_by_its_first_name_in_path_order(tmp_path):
    """export_files streams: its order is the sorted order of the paths (siblings like "a", "a-b"
    and the directory "a/" included), and a file with several names (symbolic links in and out of
    the tree, hard links) comes once, under the first of them in that order."""
    top, outside = tmp_path / "top", tmp_path / "outside"
    for folder in ("a", "a/b", "a-b", "z"):
        (top / folder).mkdir(parents=True)
    outside.mkdir()
    names = ["a.ndjson", "a/x.ndjson", "a/b/y.jsonl", "a-b/x.ndjson", "a0.ndjson", "z/late.ndjson", "z/m.ndjson.gz"]
    for name in names:
        (top / name).write_text("\n")
    (outside / "far.ndjson").write_text("\n")
    os.symlink(top / "z/late.ndjson", top / "a/early-link.ndjson")  # the link comes first: it is kept
    os.symlink(top / "a.ndjson", top / "z/later-link.ndjson")  # the file comes first: the link is left out
    os.symlink(outside / "far.ndjson", top / "a/far-1.ndjson")  # two names of a file outside: the first
    os.symlink(outside / "far.ndjson", top / "z/far-2.ndjson")
    os.link(top / "a0.ndjson", top / "a-b/hard.ndjson")  # a hard link sorts before its other name
    (top / "notes.txt").write_text("not an export")

    found = [(kind, os.path.relpath(path, top)) for kind, path, _ in export_files(str(top))]
    assert [name for _, name in found] == sorted(name for _, name in found)  # the paths' own order
    assert found == [("file", name) for name in [
        "a-b/hard.ndjson", "a-b/x.ndjson", "a.ndjson", "a/b/y.jsonl", "a/early-link.ndjson", "a/far-1.ndjson",
        "a/x.ndjson", "z/m.ndjson.gz"]]


def test_a_tree_nested_past_path_max_is_a_sentence_not_a_traceback(tmp_path):
    """scandir of a folder whose path passes PATH_MAX (ENAMETOOLONG) ended a run with exit 1 and a traceback."""
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        for _ in range(2100):  # "a/" 2,100 times: past Linux's 4,096
            os.mkdir("a")
            os.chdir("a")
    finally:
        os.chdir(here)
    try:
        with pytest.raises(ConfigError, match=r"Cannot list the directory .*move it out of source.path"):
            list(export_files(str(tmp_path)))
    finally:  # removed here, bottom up: pytest's own clean-up of tmp_path recurses past Python's limit
        os.chdir(tmp_path)
        depth = 0
        while os.path.isdir("a"):
            os.chdir("a")
            depth += 1
        for _ in range(depth):
            os.chdir("..")
            os.rmdir("a")
        os.chdir(here)
