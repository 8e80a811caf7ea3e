"""lms-refresh(8), lms-refresh.toml(5) and the documentation agree with the code: commands, options, keys, exit
codes, MESSAGE_IDs."""

import os
import re
import shutil
import subprocess
import sys

import click
import pytest

import lms_refresh
from helpers import docs
from helpers.paths import REPO
from lms_refresh import logs
from lms_refresh.cli import cli
from lms_refresh.cli.manpage import format_default, format_duration, read_units, render, render_configuration
from lms_refresh.config.schema import CATEGORY_KEYS, SCHEMA, TERM_KEYS, Key, _check_schema
from lms_refresh.config.validators import typed
from lms_refresh.errors import MEANINGS

ROOT = REPO  # the repository, or the copy debian/tests/suite runs in
COMMANDS_PAGE = docs.page("docs/admin/commands.md")  # the commands and exit codes, in the operator's words


def groff_warnings(path):
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed (tests/run.sh installs groff-base)")
    result = subprocess.run(["groff", "-man", "-ww", "-z", str(path)], capture_output=True, text=True)
    return result.returncode, result.stderr


@pytest.fixture(scope="module")
def page():
    return render(cli, "2026-11-30", read_units(os.path.join(ROOT, "systemd")))


def leaf_commands(group=cli, prefix=""):
    """{'run': command, 'watermark set': command, ...} for every visible command."""
    found = {}
    for name, command in group.commands.items():
        if command.hidden:
            continue
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, f"{prefix}{name} "))
        else:
            found[prefix + name] = command
    return found


def section(text, title):
    """The text under '## title' up to the next heading of that level or above."""
    return docs.section(text, title)


def test_the_page_renders_without_a_single_groff_warning(page, tmp_path):
    path = tmp_path / "lms-refresh.8"
    path.write_text(page)
    assert groff_warnings(path) == (0, "")
    # ...and the check itself can fail: an unknown macro and a bare backslash escape are reported.
    broken = tmp_path / "broken.8"
    broken.write_text(page + ".XYZZY\nC:\\path\n")
    code, warnings = groff_warnings(broken)
    assert "XYZZY" in warnings


def test_the_page_as_the_package_build_writes_it_reads_cleanly_as_text(page, tmp_path):
    """debian/rules' command writes the page; groff renders it as man(1) would, with nothing of roff left
    in the text: no request, no font or dash escape, and every command, exit status and section heading."""
    import sys

    if shutil.which("groff") is None:
        pytest.skip("groff is not installed (tests/run.sh installs groff-base)")
    # As debian/rules runs it in the source tree: the units found beside the package. The installed package
    # (debian/tests/suite) has no units beside it: they are named there.
    from_source = os.path.dirname(os.path.dirname(os.path.abspath(lms_refresh.__file__))) == os.path.abspath(ROOT)
    units = [] if from_source else [os.path.join(ROOT, "systemd")]
    built = subprocess.run([sys.executable, "-m", "lms_refresh.cli.manpage", "2026-11-30", *units],
                           capture_output=True, text=True, cwd=ROOT)
    assert built.returncode == 0 and built.stderr == "", built.stderr
    assert built.stdout == page
    path = tmp_path / "lms-refresh.8"
    path.write_text(built.stdout)
    shown = subprocess.run(["groff", "-man", "-Tutf8", "-rLL=78n", "-P-cbou", str(path)], capture_output=True,
                           text=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    text = shown.stdout
    assert text.startswith("LMS-REFRESH(8)") and "lms-refresh - keep an LMS metrics store fresh" in text
    leaked = [line for line in text.splitlines()  # a request such as .TP or .B, or an escape such as \fB
              if re.match(r"\s*[.'][A-Za-z]{1,3}(\s|$)", line) or re.search(r"\\[-(fe*]", line)]
    assert leaked == []
    commands = text.split("\nCOMMANDS\n")[1].split("\nEXIT STATUS\n")[0]
    for path_ in leaf_commands():
        assert re.search(rf"^   {re.escape(path_)} \[OPTIONS\]", commands, re.M), path_
    statuses = text.split("\nEXIT STATUS\n")[1]
    for code, meaning in MEANINGS.items():
        assert re.search(rf"^       {code}\s+{re.escape(meaning.split()[0])} ", statuses, re.M), code
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "CONFIGURATION", "ENVIRONMENT", "FILES"):
        assert f"\n{heading}\n" in text, heading


def test_the_page_documents_every_command_and_option(page):
    for path, command in leaf_commands().items():
        assert re.search(rf"^\.SS {re.escape(path.replace('-', chr(92) + '-'))}( |$)", page, re.M), path
        # A child of the group's context, as on the command line: a context without one would make
        # click (8.2) remember a --help without -h for the command, and the page would follow it.
        context = click.Context(command, info_name=path, parent=click.Context(cli, **cli.context_settings))
        for param in command.get_params(context):
            if isinstance(param, click.Option) and not param.hidden and param.name != "help":
                for opt in param.opts:
                    assert f"\\fB{opt.replace('-', chr(92) + '-')}" in page or opt.replace("-", "\\-") in page, opt


def test_the_page_documents_every_key_with_its_default_and_description(page):
    configuration = page.split("\n.SH CONFIGURATION\n")[1].split("\n.SH ")[0]
    for name, keys in [*SCHEMA.items(), ("[terms]", TERM_KEYS), ("[categories]", CATEGORY_KEYS)]:
        heading = f".SS [{name}]\n" if name else ".SS Top level\n"
        table = configuration.split(heading)[1].split("\n.SS ")[0]
        for key, spec in keys.items():
            term = f"\\fB{key} = {format_default(spec)}\\fR".replace("-", "\\-")
            at = table.index(term)  # the key, its default...
            description = table[at:].split("\n")[1]
            assert description.startswith(spec.description.replace("-", "\\-")[:30]), (key, description)


def test_defaults_are_written_as_the_configuration_would(page):
    assert format_duration(300) == "5m" and format_duration(5400) == "1h30m" and format_duration(0) == "0s"
    assert "\\fBsafety_lag = \"5m\"\\fR" in page and "\\fBgrace = \"2h\"\\fR" in page
    assert "\\fBtype = required\\fR" in page and "\\fBmin_cell_size = 10\\fR" in page


def test_the_page_has_exit_statuses_files_units_environment_and_message_ids(page):
    for code, meaning in MEANINGS.items():
        assert f".TP\n\\fB{code}\\fR\n{meaning.replace('-', chr(92) + '-')}" in page
    for heading in ("EXIT STATUS", "ENVIRONMENT", "FILES", "SYSTEMD UNITS", "JOURNAL", "CONFIGURATION"):
        assert f"\n.SH {heading}\n" in page
    assert "/etc/lms\\-refresh/config.toml" in page and "/var/lib/lms\\-refresh/pseudonymisation.key" in page
    assert "OnCalendar=Mon..Fri *\\-*\\-* 04:15:00" in page  # read from the timer itself
    assert "\\fBLMS_REFRESH_CONFIG\\fR" in page and "\\fBMONITOR_EXIT_STATUS\\fR" in page
    for message_id in logs.MESSAGE_IDS.values():
        assert f"\\fB{message_id.hex}\\fR" in page


def test_a_schema_entry_in_the_old_form_is_refused():
    with pytest.raises(TypeError,
                       match=r"SCHEMA\['window'\]\['x'\] must be Key\(check, default, description\) with a validator"):
        _check_schema({"window": {"x": (typed(int), 1)}})
    with pytest.raises(TypeError):
        _check_schema({"window": {"x": Key(typed(int), 1, "  ")}})  # a description is required
    with pytest.raises(TypeError):
        _check_schema({"window": {"x": Key(lambda value: value, 1, "A key.")}})  # and a documented validator


def test_the_package_builds_and_installs_both_pages_the_readme_and_the_docs():
    rules = open(os.path.join(ROOT, "debian", "rules")).read()
    assert "python3 -m lms_refresh.cli.manpage" in rules and "> debian/lms-refresh.8" in rules
    assert "python3 -m lms_refresh.cli.manpage --section 5" in rules and "> debian/lms-refresh.toml.5" in rules
    assert open(os.path.join(ROOT, "debian", "lms-refresh.manpages")).read().split() == [
        "debian/lms-refresh.8", "debian/lms-refresh.toml.5"]
    assert open(os.path.join(ROOT, "debian", "lms-refresh.docs")).read().split() == ["README.md", "docs"]
    assert "dh_compress -X.md" in rules  # the pages' links and the messages name them by their .md names


def test_the_configuration_page_renders_cleanly_and_names_every_key(tmp_path):
    page = render_configuration("2026-11-30")
    path = tmp_path / "lms-refresh.toml.5"
    path.write_text(page)
    assert groff_warnings(path) == (0, "")
    assert page.startswith('.TH LMS\\-REFRESH.TOML 5 "2026-11-30"') and "\n.SH SEE ALSO\nlms\\-refresh(8)" in page
    for name, keys in [*SCHEMA.items(), ("[terms]", TERM_KEYS), ("[categories]", CATEGORY_KEYS)]:
        for key, spec in keys.items():
            assert f"\\fB{key} = {format_default(spec)}\\fR".replace("-", "\\-") in page, (name, key)


def test_help_points_at_the_manual_pages_and_the_documentation():
    result = subprocess.run([sys.executable, "-m", "lms_refresh", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "man lms-refresh" in text and "man 5 lms-refresh.toml" in text and "/usr/share/doc/lms-refresh/" in text


def command_table_problems(readme):
    """What is wrong with a page's command table against the click tree: a list of sentences."""
    commands = leaf_commands()
    rows = re.findall(r"^\| `([^`]+)` \|", section(readme, "Commands"), re.M)
    problems, documented = [], set()
    for row in rows:
        words = row.split()
        name = " ".join(words[:2]) if " ".join(words[:2]) in commands else words[0]
        if name not in commands:
            problems.append(f"the command table documents '{row}', which is no command")
            continue
        documented.add(name)
        options = {opt for param in commands[name].params for opt in getattr(param, "opts", [])}
        for option in re.findall(r"--[a-z][a-z0-9-]*", row):
            if option not in options:
                problems.append(f"the command table: '{row}' names {option}, which {name} does not take")
    if documented != set(commands):
        problems.append(f"missing from the command table: {sorted(set(commands) - documented)}")
    return problems


def test_the_command_table_lists_every_command_and_only_real_options():
    assert command_table_problems(COMMANDS_PAGE) == []
    assert re.search(r"^\| `grant-reader ROLE` \| .*PostgreSQL", section(COMMANDS_PAGE, "Commands"), re.M)


def test_the_command_table_check_catches_a_missing_command_and_a_false_option():
    without = re.sub(r"^\| `grant-reader ROLE` \|.*\n", "", COMMANDS_PAGE, flags=re.M)
    assert without != COMMANDS_PAGE
    assert command_table_problems(without) == ["missing from the command table: ['grant-reader']"]
    invented = COMMANDS_PAGE.replace("| `check` |", "| `check --fast` |", 1)
    assert command_table_problems(invented) == [
        "the command table: 'check --fast' names --fast, which check does not take"]
    foreign = COMMANDS_PAGE.replace("| `check` |", "| `verify` |", 1)
    assert command_table_problems(foreign)[0] == "the command table documents 'verify', which is no command"


def exit_codes_in(readme):
    return {int(code) for code in re.findall(r"^\| (\d+) \|", section(readme, "Exit codes"), re.M)}


def test_the_exit_code_table_is_the_code_table():
    assert exit_codes_in(COMMANDS_PAGE) == set(MEANINGS)
    # ...and the comparison notices a row missing or a code the program never uses.
    assert exit_codes_in(re.sub(r"^\| 69 \|.*\n", "", COMMANDS_PAGE, flags=re.M)) == set(MEANINGS) - {69}
    assert (exit_codes_in(COMMANDS_PAGE.replace("| 2 | usage error", "| 3 | usage error", 1))
            == set(MEANINGS) - {2} | {3})


def readme_toml_keys():
    """{(section, key)} of every key written in the TOML blocks of the README and docs/ (commented or not)."""
    keys = set()
    for block in re.findall(r"```toml\n(.*?)```", docs.everything(), re.S):
        current = ""
        for line in block.splitlines():
            header = re.match(r"^#?\s*\[\[?(\w+)\]\]?\s*(?:#.*)?$", line)  # [table] or [[array of tables]]
            if header:
                current = header.group(1)
                continue
            listed = re.findall(r"\[(\w+)\] \(([^)]*)\)", line)  # "# [alerts] (mail_to, sendmail, ...)"
            for name, members in listed:
                keys.update((name, member.strip()) for member in members.split(","))
            assignment = re.match(r"^#?\s*([a-z_]+)\s*=", line)
            if assignment and not listed:
                keys.add((current, assignment.group(1)))
    return keys


def test_the_documentation_shows_only_real_keys_and_the_reference_has_every_key():
    written = readme_toml_keys()
    known = {(name, key) for name, keys in [*SCHEMA.items(), ("terms", TERM_KEYS), ("categories", CATEGORY_KEYS)]
             for key in keys}
    assert written - known == set(), "the documentation shows keys the program refuses"
    reference = docs.page("docs/reference/configuration.md")
    listed = set()
    for heading, table in re.findall(r"^## (.*?)\n(.*?)(?=^## |\Z)", reference, re.M | re.S):
        name = "" if heading == "Top level" else heading.strip("[]")
        listed.update((name, key) for key in re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    assert listed == known, "the configuration reference differs from the schema"


def test_readme_lists_every_message_id_with_its_outcome():
    logging = docs.page("docs/admin/logging.md")
    rows = re.findall(r"^\| `([0-9a-f]{32})` \| ([a-z-]+): .*? \| (.*?) \|$", logging, re.M)
    documented = {message_id: (name, outcome.strip("`")) for message_id, name, outcome in rows}
    assert documented == {message_id.hex: (name, logs.OUTCOMES.get(name, "—"))
                          for name, message_id in logs.MESSAGE_IDS.items()}


def test_the_code_map_names_every_module_and_only_modules_that_exist():
    """The development page's "Code map" is where a newcomer finds their room: a module it does not name (by its
    path in the package), or one it names that is gone, makes it wrong. The modules are those of the
    package under test: the source tree's (an editable install) or the installed package's
    (debian/tests/suite), which are the same files."""
    package = os.path.dirname(lms_refresh.__file__)
    modules = {os.path.relpath(os.path.join(folder, name), package) for folder, _, files in os.walk(package)
               for name in files if name.endswith(".py") and name != "__main__.py"}
    modules -= {"__init__.py", "ops/__init__.py", "run/__init__.py", "disclosure/__init__.py"}  # docstrings only
    named = set(re.findall(r"`((?:\w+/)*\w+\.py)`", section(docs.page("docs/development.md"), "Code map")))
    assert modules - named == set(), "modules the code map does not name"
    assert named - modules == set(), "the code map names modules that do not exist"
