"""Paths that collide: no configured path may name a file (or a directory) that another one names.

Property-based over spellings of one file (symbolic links, `..`, `.`, doubled
slashes, hard links, letter case, a file inside a file), then real runs that
must exit 78 with one sentence naming both keys and leave the store, the key
and the state directory's mode as they were.
"""

import contextlib
import hashlib
import os
import pathlib
import sqlite3
import stat
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.statements import statement
from lms_refresh.config import validate
from lms_refresh.errors import ConfigError

NOW = "2026-11-03T04:15:00+01:00"

# What a run writes in the state directory, by the name the sentence gives it.
TARGETS = {
    "metrics.sqlite": "'store.path'",
    "pseudonymisation.key": "'pseudonymisation.key_file'",
    "refresh.lock": "the run lock (refresh.lock in 'state_directory')",
    "store-identity": "the store note (store-identity in 'state_directory')",
    "metrics.sqlite-wal": "the wal file of 'store.path'",
}
# The keys whose value names a file a run writes there.
WRITERS = {"publication.path": ("publication", "path"), "monitoring.textfile": ("monitoring", "textfile")}


def layout(root):
    """A state directory holding a store and a key, a symbolic link to it and a hard link to each file."""
    state = root / "state"
    state.mkdir(mode=0o750)
    for name in TARGETS:
        (state / name).write_text(name)
        os.link(state / name, root / f"hard-{name}")
    os.symlink(state, root / "link")
    (root / "other").mkdir()
    return state


def document(root, section, key, value):
    return {"state_directory": str(root / "state"), "source": {"type": "xapi-ndjson", "path": str(root / "inbox")},
            section: {key: value}}


@st.composite
def spelling(draw, root):
    """Return (a path that names one of TARGETS' files, that file's name) spelt some other way."""
    name = draw(st.sampled_from(sorted(TARGETS)))
    form = draw(st.sampled_from(["plain", "dots", "parent", "slashes", "symlink", "hard", "case", "mixed"]))
    if form == "hard":
        return str(root / f"hard-{name}"), name
    parts = {"plain": ["state"], "dots": ["state", "."], "parent": ["other", "..", "state"],
             "slashes": ["", "state", ""], "symlink": ["link"], "case": ["STATE"],
             "mixed": ["other", "..", "link", "."]}[form]
    leaf = name.upper() if form == "case" and draw(st.booleans()) else name
    return str(root) + "/" + "/".join(parts) + "/" + leaf, name


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(sorted(WRITERS)))
def test_any_spelling_of_a_state_file_is_refused_naming_both_keys(data, writer):
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch)
        layout(root)
        path, name = data.draw(spelling(root))
        with pytest.raises(ConfigError) as refused:
            validate(document(root, *WRITERS[writer], path), str(root / "config.toml"), {})
        sentence = str(refused.value)
        assert f"'{writer}'" in sentence and TARGETS[name] in sentence, sentence
        assert sentence.count(". ") == 0 and sentence.endswith(".")  # one sentence


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(TARGETS)), st.sampled_from(["", "/x", "/x/y"]), st.sampled_from(sorted(WRITERS)))
def test_a_path_inside_a_file_a_run_writes_is_refused(name, below, writer):
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch)
        layout(root)
        with pytest.raises(ConfigError, match=rf"'{writer}' \(.*\) lies inside .*{name}, the file "):
            validate(document(root, *WRITERS[writer], str(root / "link" / name) + below + "/f"),
                     str(root / "config.toml"), {})


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_.", min_size=1, max_size=12)
       .filter(lambda name: name not in (".", "..") and not name.startswith(".lms_refresh")))
def test_distinct_files_outside_the_state_directory_are_accepted(name):
    """The check refuses collisions only: any other file name in a directory of its own is fine."""
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch)
        layout(root)
        config = validate({**document(root, "monitoring", "textfile", str(root / "other" / f"{name}.prom")),
                           "publication": {"path": str(root / "published" / name)}}, str(root / "config.toml"), {})
        assert config.publication.path == str(root / "published" / name)


@pytest.mark.parametrize("where", ["state", "state/sub", "link", "link/sub"])
def test_a_publication_inside_the_state_directory_is_refused(tmp_path, where):
    layout(tmp_path)
    with pytest.raises(ConfigError, match="'publication.path' .* lies inside 'state_directory' .* only the service "
                                          "user may read"):
        validate(document(tmp_path, "publication", "path", str(tmp_path / where / "serving.sqlite")),
                 str(tmp_path / "config.toml"), {})


def test_a_publication_beside_a_store_outside_the_state_directory_is_refused(tmp_path):
    layout(tmp_path)
    doc = document(tmp_path, "publication", "path", str(tmp_path / "shared" / "serving.sqlite"))
    doc["store"] = {"path": str(tmp_path / "shared" / "metrics.sqlite")}
    with pytest.raises(ConfigError, match="'publication.path' .* shares its directory with 'store.path'"):
        validate(doc, str(tmp_path / "config.toml"), {})


@pytest.mark.parametrize("key, value", [
    ("textfile", "{root}/config.toml"),  # the configuration itself
    ("textfile", "{root}/inbox"),  # the export directory
])
def test_a_written_file_may_not_be_one_the_run_reads(tmp_path, key, value):
    layout(tmp_path)
    (tmp_path / "inbox").mkdir()
    with pytest.raises(ConfigError, match="'monitoring.textfile' and .* name the same file"):
        validate(document(tmp_path, "monitoring", key, value.format(root=tmp_path)), str(tmp_path / "config.toml"), {})


def test_a_path_with_a_nul_character_is_refused_with_a_sentence(tmp_path):
    with pytest.raises(ConfigError, match="key 'publication.path' must not contain a NUL character"):
        validate(document(tmp_path, "publication", "path", "/srv/a\0b"), str(tmp_path / "config.toml"), {})


def fingerprint(path):
    info = os.stat(path)
    return hashlib.sha256(path.read_bytes()).hexdigest(), info.st_ino, info.st_mtime_ns


COLLISIONS = {
    # how the publication or the textfile names a state file -> the key the sentence must name
    "publication is the store": ("publication", "path", "{state}/metrics.sqlite", "'store.path'"),
    "publication is the key, through ..": ("publication", "path", "{state}/../state/pseudonymisation.key",
                                          "'pseudonymisation.key_file'"),
    "publication is the lock, through a link": ("publication", "path", "{root}/link/refresh.lock", "the run lock"),
    "textfile is the key, by a hard link": ("monitoring", "textfile", "{root}/hard-key", "'pseudonymisation.key_file'"),
    "textfile is the store in upper case": ("monitoring", "textfile", "{root}/STATE/metrics.sqlite", "'store.path'"),
    "publication inside the state directory": ("publication", "path", "{state}/serving.sqlite", "'state_directory'"),
    # {root}/pages-files is a link to the state directory: the report would write its pages there, and open it (0755)
    "the report's files directory is the state directory": ("report", "path", "{root}/pages.html",
                                                           "'state_directory'"),
}


@pytest.mark.parametrize("case", sorted(COLLISIONS))
def test_a_run_with_colliding_paths_exits_78_and_leaves_store_key_and_mode_alone(sqlite_project, case):
    project = sqlite_project
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    state = project.state
    os.link(state / "pseudonymisation.key", project.root / "hard-key")
    os.symlink(state, project.root / "link")
    os.symlink(state, project.root / "pages-files")
    section, key, value, other = COLLISIONS[case]
    before = {name: fingerprint(state / name) for name in ("metrics.sqlite", "pseudonymisation.key")}
    mode, listing = stat.S_IMODE(os.stat(state).st_mode), sorted(p.name for p in state.iterdir())
    text = project.config.read_text() + f'\n[{section}]\n{key} = "{value.format(state=state, root=project.root)}"\n'
    project.config.write_text(text)
    project.write("b.ndjson", [statement(learner=f"v{i}", timestamp="2026-11-02T12:00:00Z") for i in range(12)])
    for command in (["run"], ["check"], ["backfill", "--since", "2026-11-01", "--until", "2026-11-03"],
                    ["watermark", "set", "2026-11-02T04:00"], ["forget", "--mbox", "a@example.edu"]):
        result = project.invoke(*command, now=NOW)
        assert result.returncode == 78, (command, result.stdout, result.stderr)
        assert f"'{section}.{key}'" in result.stderr and other in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert {name: fingerprint(state / name) for name in before} == before
    assert stat.S_IMODE(os.stat(state).st_mode) == mode == 0o750
    assert sorted(p.name for p in state.iterdir()) == listing
    with contextlib.closing(sqlite3.connect(f"file:{state / 'metrics.sqlite'}?mode=ro", uri=True)) as db:
        assert db.execute("SELECT kind, outcome FROM runs").fetchall() == [("run", "success")]  # nothing began


def test_check_lists_the_written_paths_as_distinct(sqlite_project):
    """The lock, the store note, the notes of a run in progress, of an interruption, of the report page written and
    of a report that could not be written, the key, the store, the publication and the HTML report."""
    result = sqlite_project.invoke("check", now=NOW, check=0)
    assert "ok  paths: the 10 files a run writes are distinct from each other and from the files it reads" \
        in result.stdout


def test_the_run_lock_checks_again_what_appeared_after_loading(sqlite_project):
    """A hard link made after the configuration was read (a retry waits 10 minutes) is still refused."""
    from lms_refresh.config import load_config
    from lms_refresh.run.lock import run_lock

    project = sqlite_project
    published = project.root / "published" / "serving.sqlite"
    project.config.write_text(project.config.read_text() + f'\n[publication]\npath = "{published}"\n')
    config = load_config(str(project.config), {})
    project.state.mkdir()
    (project.state / "pseudonymisation.key").write_text("k")
    published.parent.mkdir()
    os.link(project.state / "pseudonymisation.key", published)
    with pytest.raises(ConfigError, match="'pseudonymisation.key_file' .* and 'publication.path' name the same file"):
        run_lock(config, os.geteuid())
    assert not (project.state / "refresh.lock").exists()


@pytest.mark.parametrize("section, key", [("report", "path"), ("publication", "path"), ("monitoring", "textfile")])
@pytest.mark.parametrize("name", ["a.ndjson", "sub/out.file"])
def test_a_written_file_inside_the_export_directory_is_refused(tmp_path, section, key, name):
    """A file a run writes may not lie in the export tree it reads: named after an export file, a run would
    replace that export file's statements with its own bytes (and every later run would quarantine them)."""
    inbox = tmp_path / "inbox"
    (inbox / "sub").mkdir(parents=True)
    (inbox / "a.ndjson").write_text("{}\n")
    document_ = document(tmp_path, section, key, str(inbox / name))
    with pytest.raises(ConfigError, match=rf"'{section}.{key}' \(.*\) lies inside .*'source.path'"):
        validate(document_, str(tmp_path / "config.toml"), {})


@pytest.mark.parametrize("section, key, suggested", [
    ("publication", "path", " ({path}/serving.sqlite, say)"), ("monitoring", "textfile", ""),
    ("report", "path", " ({path}/report.html, say)"),
])
def test_a_written_file_that_is_a_directory_is_refused(tmp_path, section, key, suggested):
    """A publication.path naming its directory passed `check`; each run then committed and failed to publish, and
    said to make a writable directory writable."""
    layout(tmp_path)
    directory = tmp_path / "published"
    directory.mkdir()
    (tmp_path / "link-to-published").symlink_to(directory)
    for path in (directory, tmp_path / "link-to-published"):
        with pytest.raises(ConfigError) as refused:
            validate(document(tmp_path, section, key, str(path)), str(tmp_path / "config.toml"), {})
        assert str(refused.value) == (f"{tmp_path / 'config.toml'}: '{section}.{key}' ({path}) is a directory, where "
                                      f"a run writes a file whole; name a file{suggested.format(path=path)}.")


@pytest.mark.parametrize("name, sentence", [
    ("run-in-progress", "the note of a run in progress (run-in-progress in 'state_directory') and 'report.path' name "
                        "the same file"),
    ("report.html", "'report.path' ({path}) lies inside 'state_directory' ({state}), which only the service user may "
                    "read (0750)"),
])
def test_a_report_in_the_state_directory_is_refused(tmp_path, name, sentence):
    """report.path at the note of a run in progress passed `check`: every run wrote its page there after removing
    the note, and every next run found a run interrupted (the catch-up timer fired at each boot)."""
    state = layout(tmp_path)
    path = state / name
    with pytest.raises(ConfigError) as refused:
        validate(document(tmp_path, "report", "path", str(path)), str(tmp_path / "config.toml"), {})
    assert sentence.format(path=path, state=state) in str(refused.value)


FILES = "the directory of the report's course pages and CSVs (beside 'report.path', named after it)"
WHY = "where the report writes its course pages and CSVs; point them at different places."


@pytest.mark.parametrize("settings, sentence", [
    ({"state_directory": "{root}/pages-files"},
     f"'state_directory' and {FILES} name the same directory ({{root}}/pages-files), {WHY}"),
    ({"store": {"path": "{root}/pages-files/metrics.sqlite"}},
     f"'store.path' ({{root}}/pages-files/metrics.sqlite) lies inside {{root}}/pages-files, {FILES}, {WHY}"),
    ({"publication": {"path": "{root}/pages-files/serving.sqlite"}},
     f"'publication.path' ({{root}}/pages-files/serving.sqlite) lies inside {{root}}/pages-files, {FILES}, {WHY}"),
    ({"source": {"type": "xapi-ndjson", "path": "{root}/pages-files"}},
     f"'source.path' and {FILES} name the same directory ({{root}}/pages-files), {WHY}"),
    ({"monitoring": {"textfile": "{root}/PAGES-files"}},
     f"'monitoring.textfile' and {FILES} name the same directory ({{root}}/pages-files: {{root}}/pages-files and "
     "{root}/PAGES-files differ only in letter case"),
])
def test_the_directory_of_the_reports_files_may_not_be_nor_hold_another_configured_path(tmp_path, settings,
                                                                                       sentence):
    """The report writes its course pages and CSVs in report.path's name with -files (report.html → report-files/),
    makes that directory readable by every account and removes from it the files it names as its own: the state
    directory there (or the store, the publication, the export files) would be opened and written into."""
    document_ = {"state_directory": str(tmp_path / "state"), "source": {"type": "xapi-ndjson",
                                                                        "path": str(tmp_path / "inbox")},
                 "report": {"path": str(tmp_path / "pages.html")}}
    for section, value in settings.items():
        document_[section] = value.format(root=tmp_path) if isinstance(value, str) else {
            key: item.format(root=tmp_path) for key, item in value.items()}
    with pytest.raises(ConfigError) as refused:
        validate(document_, str(tmp_path / "config.toml"), {})
    assert sentence.format(root=tmp_path) in str(refused.value)
    document_["report"] = {"path": str(tmp_path / "elsewhere" / "pages.html")}  # its files elsewhere: accepted
    validate(document_, str(tmp_path / "config.toml"), {})


def test_the_directory_of_the_reports_files_there_as_a_file_is_refused(tmp_path):
    (tmp_path / "report-files").write_text("not a directory")
    document_ = document(tmp_path, "report", "path", str(tmp_path / "report.html"))
    with pytest.raises(ConfigError) as refused:
        validate(document_, str(tmp_path / "config.toml"), {})
    assert str(refused.value) == (f"{tmp_path / 'config.toml'}: {FILES} ({tmp_path / 'report-files'}) is a regular "
                                  "file, where the report writes its files into a directory; move it away, or name "
                                  "the report another file.")

