"""The documentation as the tests read it: README.md and the pages of docs/, whole or by section."""

import os
import re

from helpers.paths import REPO


def page(relative):
    """Return the text of README.md or of a page under docs/ (`relative` to the repository)."""
    with open(os.path.join(REPO, relative), encoding="utf-8") as handle:
        return handle.read()


def pages():
    """Return {path relative to the repository: text} of README.md and every markdown page under docs/."""
    found = {"README.md": page("README.md")}
    for folder, _, files in os.walk(os.path.join(REPO, "docs")):
        for name in sorted(files):
            if name.endswith(".md"):
                path = os.path.relpath(os.path.join(folder, name), REPO)
                found[path] = page(path)
    return found


def everything():
    """Return README.md and every page of docs/ as one text."""
    return "\n".join(pages().values())


def section(text, title, level=2):
    """Return the text under the heading `title` (of `level` #s) up to the next heading of that level or above."""
    hashes = "#" * level
    match = re.search(rf"^{hashes} {re.escape(title)}\b.*?$(.*?)(?=^#{{1,{level}}} |\Z)", text, re.M | re.S)
    assert match, f"no section '{hashes} {title}'"
    return match.group(1)


def sql_after(text, title):
    """Return the first ```sql block after `title` in `text`, exactly as written."""
    return text.split(title, 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
