"""Configuration values (issue 12, item 10): non-finite, absurd and misplaced values are refused by
`check` and `run` alike with 78 naming the file and the key; and no document whatever makes the
loader fail otherwise (Hypothesis)."""

import datetime as dt
import string

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lms_refresh.config import Config, load_config, validate
from lms_refresh.config.schema import SCHEMA
from lms_refresh.errors import ConfigError

BAD = [  # (what to write in place of what, the message)
    (("timezone = ", "max_quarantine_share = nan\ntimezone = "),
     "key 'max_quarantine_share' must be a finite number, not nan"),
    (("timezone = ", "max_quarantine_share = inf\ntimezone = "),
     "key 'max_quarantine_share' must be a finite number, not inf"),
    (('safety_lag = "0s"', "safety_lag = 99999999999999999999"), "key 'window.safety_lag'"),
    (('safety_lag = "0s"', 'safety_lag = "999999999999d"'), "key 'window.safety_lag' must be at most 3660 days"),
    (('lookback = "0s"', "lookback = 1e400"), "key 'window.lookback'"),
    (('delay = "1s"', 'delay = "99999999999d"'), "key 'retry.delay' must be at most 3660 days"),
]


@pytest.mark.parametrize("change, message", BAD)
@pytest.mark.parametrize("command", ["check", "run"])
def test_absurd_values_are_refused_by_check_and_run(sqlite_project, change, message, command):
    project = sqlite_project
    text = project.config.read_text()
    assert change[0] in text
    project.config.write_text(text.replace(change[0], change[1], 1))
    result = project.invoke(command, now="2026-11-03T04:15:00Z")
    assert result.returncode == 78, result.stderr
    assert f"{project.config}: {message}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_key_file_that_is_a_directory_is_refused(sqlite_project, tmp_path, command):
    project = sqlite_project
    project.config.write_text(project.config.read_text() + f'[pseudonymisation]\nkey_file = "{tmp_path}"\n')
    result = project.invoke(command, now="2026-11-03T04:15:00Z")
    assert result.returncode == 78
    assert f"{project.config}: key 'pseudonymisation.key_file' names a directory ({tmp_path})" in result.stderr


# -- fuzzing: every document is a Config or a ConfigError (exit 78), never another exception --------

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["5m", "1h30m", "2d", "0s", "999999999999d", "-1s", "", " ", "UTC", "Europe/Paris",
                     "../etc/passwd", "Not/AZone", "^(.+?/course/[^/?#]+)", "(a)(b)", "[", "a{99999999999}",
                     "sqlite", "postgresql", "xapi-ndjson", "xapi-lrs", "moodle", "postgresql://u@h/db",
                     "postgresql://u:pw@h/db", "https://lrs.example.edu/xAPI/", "mysql://h/db", "/tmp"]),
    st.datetimes().map(lambda moment: moment.replace(tzinfo=dt.UTC)), st.dates(),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(string.ascii_lowercase + "_", max_size=8), inner, max_size=3),
                      max_leaves=6)
KEYS = [(section, key) for section, keys in SCHEMA.items() for key in keys]


@st.composite
def documents(draw):
    """A parsed TOML document: mostly known keys with any values, sometimes unknown ones."""
    document = {"source": {"type": draw(st.sampled_from(["xapi-ndjson", "xapi-lrs", "moodle", "x"])),
                           "path": "/srv/x", "endpoint": "https://lrs.example.edu/", "username": "u",
                           "password_file": "p", "url": "postgresql://u@h/db", "site_url": "https://m.example.edu"}}
    if draw(st.booleans()):
        document["source"] = {k: v for k, v in document["source"].items() if draw(st.booleans()) or k == "type"}
    for section, key in draw(st.lists(st.sampled_from(KEYS), max_size=6)):
        target = document if section == "" else document.setdefault(section, {})
        if isinstance(target, dict):
            target[key] = draw(VALUES)
    if draw(st.integers(0, 4)) == 0:
        document[draw(st.text(max_size=8))] = draw(VALUES)
    return document


@settings(max_examples=1000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_any_document_is_a_config_or_a_config_error(document):
    try:
        config = validate(document, "fuzz.toml", {})
    except ConfigError as error:
        assert error.exit_code == 78 and str(error).startswith("fuzz.toml")
    else:
        assert isinstance(config, Config)


@settings(max_examples=500, deadline=None, database=None)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=200))
def test_any_text_is_a_config_or_a_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "config.toml"
    path.write_text(f"[source]\ntype = \"xapi-ndjson\"\npath = \"/srv\"\n{text}", encoding="utf-8")
    try:
        assert isinstance(load_config(str(path), {}), Config)
    except ConfigError as error:
        assert error.exit_code == 78
