"""The documentation keeps each fact once and stays true: the generated pages are what the code generates, no lab
notes (commit hashes, issue numbers, benchmark diaries) outside the development page, every link resolves, every page
is reachable from the index, and every shell block marked runnable runs as written (docs/development.md states the
convention)."""

import os
import re
import shlex
import shutil
import subprocess

import pytest

from helpers import docs
from helpers.commands import cli_command
from helpers.paths import REPO
from lms_refresh.cli import cli, reference

DOCS = os.path.join(REPO, "docs")
# Where development history may be named: the development page (and debian/changelog, not documentation).
HISTORY_ALLOWED = {"docs/development.md"}
RUNNABLE = re.compile(r"^<!-- runnable -->\n```sh\n(.*?)^```", re.M | re.S)


def test_every_generated_page_and_region_is_what_the_code_generates(tmp_path):
    assert reference.drifted(cli, DOCS) == []
    # ...and the comparison notices a hand edit of a generated page and of a generated region.
    copy = tmp_path / "docs"
    shutil.copytree(DOCS, copy)
    page = copy / "reference" / "configuration.md"
    page.write_text(page.read_text().replace("| `min_cell_size` | `10` |", "| `min_cell_size` | `5` |"))
    dictionary = copy / "data-dictionary.md"
    dictionary.write_text(dictionary.read_text().replace("| `completions` | INTEGER |", "| `completed` | INTEGER |"))
    assert reference.drifted(cli, str(copy)) == sorted([str(dictionary), str(page)])


def lab_notes(text):
    """The commit hashes, issue numbers and dated benchmark notes in `text`."""
    found = [hash_ for hash_ in re.findall(r"`([0-9a-f]{7,12})`", text) if re.search(r"[a-f]", hash_)
             and re.search(r"[0-9]", hash_)]
    found += re.findall(r"\b[Ii]ssue #?\d+", text)
    found += re.findall(r"\b\d-core VM\b|\bon this VM\b", text)
    return found


@pytest.mark.parametrize("path", sorted(set(docs.pages()) - HISTORY_ALLOWED))
def test_no_lab_notes_in_user_documentation(path):
    assert lab_notes(docs.pages()[path]) == []


@pytest.mark.parametrize("path", sorted(docs.pages()))
def test_no_placeholder_is_left(path):
    assert re.findall(r"\b[A-Z]+_(?:FIGURES|ROW)\b|\bTODO\b|\bXXX\b", docs.pages()[path]) == []


def test_the_lab_notes_check_finds_them():
    assert lab_notes("at `f27add9` (issue 23, 2-core VM)") == ["f27add9", "issue 23", "2-core VM"]
    assert lab_notes("`deadbeefcafe0123deadbeefcafe0123` is a MESSAGE_ID, `2026-W41` a week") == []


def links(path, text):
    """(target path, anchor) of every relative markdown link of the page at `path`."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        found.append((os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path, anchor))
    return found


def anchors(text):
    """The anchors GitHub gives the headings of a page."""
    found = set()
    for heading in re.findall(r"^#+ (.*)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        found.add(slug)
    return found


def test_every_link_resolves_to_a_page_and_a_heading():
    pages = docs.pages()
    broken = []
    for path, text in pages.items():
        for target, anchor in links(path, text):
            if not os.path.exists(os.path.join(REPO, target)):
                broken.append(f"{path}: {target}")
            elif anchor and target.endswith(".md") and anchor not in anchors(docs.page(target)):
                broken.append(f"{path}: {target}#{anchor}")
    assert broken == []


def test_every_page_is_reachable_from_the_index():
    pages = docs.pages()
    reached, queue = set(), ["docs/README.md"]
    while queue:
        path = queue.pop()
        if path in reached or path not in pages:
            continue
        reached.add(path)
        queue += [target for target, _ in links(path, pages[path])]
    assert set(pages) - reached == set()


def runnable_blocks():
    """[(page, script)] of every shell block marked runnable in the README and docs/."""
    return [(path, block) for path, text in docs.pages().items() for block in RUNNABLE.findall(text)]


def test_there_are_runnable_blocks_and_other_shell_blocks_are_illustrative():
    assert [path for path, _ in runnable_blocks()] == ["docs/tutorial.md"]
    development = docs.page("docs/development.md")
    assert "<!-- runnable -->" in development and "illustrative" in development


@pytest.mark.parametrize("path, script", runnable_blocks())
def test_a_runnable_block_runs_as_written(tmp_path, path, script):
    """In a scratch directory, with this source tree's lms-refresh first on PATH, as `bash -e`."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    wrapper = bin_ / "lms-refresh"
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(part) for part in cli_command()) + ' "$@"\n')
    wrapper.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("STATE_DIRECTORY", "JOURNAL_STREAM", "INVOCATION_ID", "NOTIFY_SOCKET")}
    environment["PATH"] = f"{bin_}:{environment.get('PATH', '/usr/bin:/bin')}"
    result = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=environment, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, (path, result.stdout[-2000:], result.stderr[-2000:])


def test_the_readme_is_short_and_names_every_pip_extra_with_what_needs_it():
    import tomllib

    readme = docs.page("README.md")
    assert len(readme.splitlines()) <= 200
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as handle:
        extras = set(tomllib.load(handle)["project"]["optional-dependencies"]) - {"test"}
    named = set(re.findall(r"^\| `(\w+)` \| ", docs.section(readme, "Install with pip"), re.M))
    assert extras - named == set(), "pip extras the README does not name"
