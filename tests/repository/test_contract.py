"""The behavioural contract lives in the repository and states the exit statuses the code defines."""

import pathlib
import re

from helpers.paths import REPO
from lms_refresh import errors

ROOT = pathlib.Path(REPO)
CONTRACT = ROOT / "docs" / "contract.md"


def exit_table(text):
    """Return {code: meaning} from the first markdown table whose header starts with `code`."""
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", text.split("| code |", 1)[1], re.M)
    return {int(code): meaning.strip() for code, meaning in rows}


def test_the_readme_points_at_the_contract_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/contract.md)" in readme
    assert "../shared" not in readme
    assert CONTRACT.is_file()


def test_the_contract_lists_exactly_the_exit_statuses_the_code_defines():
    assert sorted(exit_table(CONTRACT.read_text())) == sorted(errors.MEANINGS)


def test_the_contract_and_the_operators_guide_give_the_same_exit_statuses():
    guide = (ROOT / "docs" / "admin" / "commands.md").read_text().split("## Exit codes", 1)[1]
    assert sorted(exit_table(guide)) == sorted(exit_table(CONTRACT.read_text()))
