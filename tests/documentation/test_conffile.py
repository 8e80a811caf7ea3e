"""The packaged conffile, debian/config.toml, is a rendering of config.SCHEMA (lms_refresh.cli.reference): the
committed file is what the schema renders, the rendering notices a hand edit, and the file works as an
administrator uses it — as shipped it is valid TOML and an unconfigured install; a [source] appended (the README's
install) gives every key its default; uncommenting any of its lines keeps the configuration valid, and
uncommenting the lines that show a default changes nothing."""

import dataclasses
import os
import re
import shutil
import tomllib

from helpers.paths import REPO
from lms_refresh.cli import cli, reference
from lms_refresh.config import is_configured, load_config
from lms_refresh.config.schema import REQUIRED, SCHEMA, STORE_KEYS, TERM_KEYS

CONFFILE = os.path.join(REPO, "debian", "config.toml")
SOURCE = '[source]\ntype = "xapi-ndjson"\npath = "/srv/xapi"\n'


def shipped():
    with open(CONFFILE, encoding="utf-8") as handle:
        return handle.read()


def uncommented(text, only_defaults):
    """`text` with its commented-out settings uncommented where an administrator would: in each uncommented table
    (not the [source] examples, not [[terms]], not the other store type's keys); with `only_defaults`, only the
    lines of keys that have a default. Return (the text, the number of lines uncommented)."""
    lines, section, count, skipping = [], "", 0, False
    for line in text.split("\n"):
        header = re.match(r"^\[(\w+)\]$", line)
        if header:
            section, skipping = header.group(1), False
        elif line in ("# [source]", "# [[terms]]") or line.startswith("# --- "):
            skipping = True  # a [source] example, the terms, or the other store type's block
        setting = re.match(r"^# (\w+) = .*$", line)
        if setting and not skipping:
            default = SCHEMA[section][setting.group(1)].default
            if not only_defaults or (default is not None and default is not REQUIRED):
                line, count = line[2:], count + 1
        lines.append(line)
    return "\n".join(lines), count


def uncommentable():
    """The keys shown commented out in the uncommented tables: all but [source]'s and the other store type's."""
    return [key for section, keys in SCHEMA.items() if section != "source" for name, key in keys.items()
            if section != "store" or name in STORE_KEYS["sqlite"][0]]


def load(tmp_path, text, name="config.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_config(str(path), {})


def test_the_conffile_is_what_the_schema_renders():
    assert shipped() == reference.conffile(), "run: python3 -m lms_refresh.cli.reference docs"


def test_a_hand_edit_of_the_conffile_is_noticed(tmp_path, capsys):
    shutil.copytree(os.path.join(REPO, "docs"), tmp_path / "docs")
    shutil.copytree(os.path.join(REPO, "debian", "datasette"), tmp_path / "debian" / "datasette")
    conffile = tmp_path / "debian" / "config.toml"
    conffile.write_text(shipped().replace("# min_cell_size = 10", "# min_cell_size = 5"))
    docs = str(tmp_path / "docs")
    assert reference.drifted(cli, docs, reference.generated(cli, docs)) == [str(conffile)]
    assert reference.main(["--check", docs]) == 1
    assert f"{conffile} differs from what the code generates" in capsys.readouterr().out
    assert reference.main([docs]) == 0
    assert conffile.read_text() == shipped()


def test_every_key_is_shown_with_its_whole_description():
    comments = " ".join(line[2:] for line in shipped().split("\n") if line.startswith("# "))
    for section, keys in [*SCHEMA.items(), ("terms", TERM_KEYS)]:
        for name, key in keys.items():
            assert key.description in comments, (section, name)


def test_as_shipped_it_is_valid_toml_and_an_unconfigured_install(tmp_path):
    document = tomllib.loads(shipped())
    assert "source" not in document and document["store"] == {"type": "sqlite"}
    path = tmp_path / "config.toml"
    path.write_text(shipped())
    assert is_configured(str(path), {}) is False


def test_a_source_appended_gives_every_key_its_default(tmp_path):
    # The README's install appends a [source] to the conffile as installed.
    assert load(tmp_path, shipped() + SOURCE) == load(tmp_path, SOURCE)


def test_uncommenting_the_defaults_changes_nothing(tmp_path):
    text, count = uncommented(shipped(), only_defaults=True)
    with_defaults = [key for key in uncommentable() if key.default is not None and key.default is not REQUIRED]
    assert count == len(with_defaults)  # every one of them, each in its own table
    config = load(tmp_path, text + "\n" + SOURCE)
    assert config == dataclasses.replace(load(tmp_path, SOURCE, "other.toml"), origin=config.origin)


def test_uncommenting_every_line_gives_a_valid_configuration(tmp_path):
    text, count = uncommented(shipped(), only_defaults=False)
    config = load(tmp_path, text + "\n" + SOURCE)
    assert count == len(uncommentable())
    assert config.alerts.mail_to and config.retention.staging_days and config.publication.group
    assert config.store.path == "/var/lib/lms-refresh/metrics.sqlite"  # the example is the default it derives
