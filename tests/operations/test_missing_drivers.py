"""A source or store whose Python package is missing (a pip install without its extra): every command refuses it with
78 and one sentence naming the Debian package and the pip extra, not a traceback. The package is hidden from a real
subprocess of the CLI by a directory first on its path whose package of that name cannot be imported."""

import json
import os
import subprocess

import pytest

from helpers.commands import cli_command

CASES = {
    "moodle": ({"source": {"type": "moodle", "url": "postgresql://reader@db.example.edu/moodle",
                           "site_url": "https://moodle.example.edu"}},
               'source type "moodle" needs the Python package psycopg', "python3-psycopg",
               "lms-refresh[postgresql]", "psycopg"),
    "postgresql store": ({"store": {"type": "postgresql", "url": "postgresql://lms_refresh@db.example.edu/metrics"}},
                         'store type "postgresql" needs the Python package psycopg', "python3-psycopg",
                         "lms-refresh[postgresql]", "psycopg"),
    "lrs": ({"source": {"type": "xapi-lrs", "endpoint": "https://lrs.example.edu/xAPI/", "username": "u",
                        "password_file": "/etc/lms-refresh/lrs-password"}},
            'source type "xapi-lrs" needs the Python package requests', "python3-requests", "lms-refresh[lrs]",
            "requests"),
}


def blocker(tmp_path, module):
    """A directory that, first on sys.path, makes `import module` fail as a missing package does."""
    folder = tmp_path / "blocked"
    (folder / module).mkdir(parents=True)
    (folder / module / "__init__.py").write_text(f"raise ImportError('No module named ' + {module!r})\n")
    return folder


def configured(tmp_path, tables):
    """A configuration of `tables` beside the default xAPI files source and SQLite store it replaces."""
    tables = {"source": {"type": "xapi-ndjson", "path": str(tmp_path)}, **tables}
    text = f'timezone = "Europe/Paris"\nstate_directory = "{tmp_path / "state"}"\n'
    for section, values in tables.items():
        text += f"\n[{section}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())
    config = tmp_path / "config.toml"
    config.write_text(text)
    return config


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", [["check"], ["run"], ["status"], ["backfill", "--since", "2026-11-01",
                                                                      "--until", "2026-11-02"]])
def test_a_missing_driver_is_one_sentence_naming_what_to_install(tmp_path, case, command):
    tables, sentence, package, extra, module = CASES[case]
    config = configured(tmp_path, tables)
    environment = {key: value for key, value in os.environ.items() if key not in ("STATE_DIRECTORY", "JOURNAL_STREAM",
                   "INVOCATION_ID", "NOTIFY_SOCKET")} | {"PYTHONPATH": str(blocker(tmp_path, module))}
    result = subprocess.run(cli_command() + ["--config", str(config), *command], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 78, (result.returncode, result.stderr)
    assert sentence in result.stderr and package in result.stderr and extra in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
