"""Configuration: every mistake is refused with one sentence naming the file and the key."""

import dataclasses
import gc
import os
import re

import pytest

from helpers.paths import REPO
from lms_refresh.config import load_config
from lms_refresh.config.validators import parse_duration
from lms_refresh.errors import ConfigError

MINIMAL = '[source]\ntype = "xapi-ndjson"\npath = "/srv/xapi"\n'


def load(tmp_path, text, environ=None):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(str(path), environ or {})


def test_defaults(tmp_path):
    config = load(tmp_path, MINIMAL)
    window = config.window
    assert (config.timezone, config.min_cell_size, window.bootstrap_days, window.safety_lag) == ("UTC", 10, 7, 300)
    assert config.store.path == "/var/lib/lms-refresh/metrics.sqlite"
    assert config.key_file == "/var/lib/lms-refresh/pseudonymisation.key"


def test_state_directory_from_systemd_wins(tmp_path):
    config = load(tmp_path, 'state_directory = "/srv/state"\n' + MINIMAL, {"STATE_DIRECTORY": "/var/lib/lms-refresh"})
    assert config.store.path == "/var/lib/lms-refresh/metrics.sqlite"
    assert load(tmp_path, 'state_directory = "/srv/state"\n' + MINIMAL).state_directory == "/srv/state"


@pytest.mark.parametrize("text, message", [
    ("colour = 1\n" + MINIMAL, "unknown key 'colour'"),
    (MINIMAL + "batchsize = 10\n", "unknown key 'source.batchsize'"),
    ("min_cell_size = 0\n" + MINIMAL, "key 'min_cell_size' must be at least 1"),
    ('min_cell_size = "10"\n' + MINIMAL, "key 'min_cell_size' expected int"),
    ('timezone = "Mars/Olympus"\n' + MINIMAL, "key 'timezone' is invalid: 'Mars/Olympus' is not a known time zone"),
    ("[window]\nsafety_lag = \"5 minutes\"\n" + MINIMAL, "key 'window.safety_lag'"),
    ("max_quarantine_share = 1.5\n" + MINIMAL, "key 'max_quarantine_share' must be at most 1.0"),
    ('[source]\ntype = "csv"\npath = "x"\n', "key 'source.type' must be one of 'xapi-ndjson'"),
    ('[source]\ntype = "xapi-ndjson"\n', "key 'source.path' is required"),
    ('[source]\n', "key 'source.type' is required"),
    ("", "No source is configured yet"),
    ('source = "x"\n', "'source' must be a table"),
    (MINIMAL + 'course_pattern = "(a)(b)"\n', "may have at most one capturing group"),
    (MINIMAL + 'course_pattern = "a{99999999999}"\n',
     "key 'source.course_pattern' is not a valid regular expression (the repetition number is too large)"),
    pytest.param(MINIMAL + f'course_pattern = "{"(" * 5000}{")" * 5000}"\n',
                 "key 'source.course_pattern' is not a valid regular expression (nested too deeply)",
                 id="a-pattern-nested-5000-deep"),
    ("this is = not toml", "is not valid TOML"),
    # 0 made every delivery fail at once (a non-blocking connect, a sendmail killed at its start)
    (MINIMAL + "[alerts]\ntimeout = 0\n", "key 'alerts.timeout' must be at least 1 second"),
    # PostgreSQL creates neither: check said "will be created on the first run", and every run failed (78).
    (MINIMAL + '[store]\ntype = "postgresql"\nurl = "postgresql://u@db/m"\nschema = "pg_metrics"\n',
     "key 'store.schema' must not be \"pg_metrics\": PostgreSQL keeps names beginning with pg_, and "
     "information_schema, for itself"),
    (MINIMAL + '[store]\ntype = "postgresql"\nurl = "postgresql://u@db/m"\nschema = "information_schema"\n',
     "key 'store.schema' must not be \"information_schema\""),
])
def test_mistakes_name_the_file_and_key(tmp_path, text, message):
    # The deep pattern recurses to Python's limit: garbage of earlier tests in this worker (a psycopg result,
    # whose __del__ calls) collected there would fail in __del__ and be reported as an unraisable warning.
    gc.collect()
    with pytest.raises(ConfigError) as error:
        load(tmp_path, text)
    assert message in str(error.value)
    assert str(tmp_path / "config.toml") in str(error.value)


def test_missing_file_says_how_to_fix(tmp_path):
    with pytest.raises(ConfigError, match="No configuration file at .*; create it"):
        load_config(str(tmp_path / "absent.toml"), {})


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("5m", 300), ("1h30m", 5400), ("2d", 172800), (15, 15)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_cli_reports_config_errors_with_exit_78(project):
    project.config.write_text("min_cell_size = -3\n")
    result = project.invoke("check")
    assert result.returncode == 78
    assert f"{project.config}: key 'min_cell_size' must be at least 1." in result.stderr
    assert "Traceback" not in result.stderr


def test_each_source_block_of_the_packaged_config_is_valid_when_uncommented(tmp_path):
    """debian/config.toml documents every source kind; uncommenting one must give a valid configuration."""
    import os
    import re

    from lms_refresh.config.schema import SOURCE_KEYS

    root = REPO
    text = open(os.path.join(root, "debian", "config.toml")).read()
    head, rest = text.split("# [source]\n", 1)
    blocks, tail = rest.split("\n[store]\n", 1)
    kinds = []
    for block in blocks.split("# [source]\n"):
        settings = "\n".join(line[2:] for line in block.splitlines() if re.match(r"# \w+ = ", line))
        path = tmp_path / "config.toml"
        path.write_text(f"{head}[source]\n{settings}\n\n[store]\n{tail}")
        config = load_config(str(path), {})
        kinds.append(config.source.type)
        names = {field.name for field in dataclasses.fields(config.source)}
        assert names - {"type"} == SOURCE_KEYS[config.source.type][0]
    assert kinds == ["xapi-ndjson", "xapi-lrs", "moodle"]


def test_source_keys_belong_to_their_kind(tmp_path):
    with pytest.raises(ConfigError, match=r"key 'source.endpoint' does not apply to source type \"xapi-ndjson\" "
                                          r"\(it is for xapi-lrs\)"):
        load(tmp_path, MINIMAL + 'endpoint = "https://lrs.example.edu/xAPI/"\n')
    with pytest.raises(ConfigError, match=r"key 'source.site_url' is required when source.type is \"moodle\""):
        load(tmp_path, '[source]\ntype = "moodle"\nurl = "postgresql://reader@db/moodle"\n')
    moodle = '[source]\ntype = "moodle"\nsite_url = "https://m.example"\nurl = '
    for url in ("mysql://reader@db/moodle", "mariadb://reader@[2001:db8::1]:3307/moodle",
                "mysql://reader@localhost/moodle?unix_socket=/run/mysqld/mysqld.sock"):
        assert load(tmp_path, moodle + f'"{url}"\n').source.url == url
    for url, problem in (("mysql://reader:secret@db/moodle", "must not contain a password"),
                         ("mariadb://db/moodle", "with a user, a host and the database"),
                         ("mariadb://reader@db/", "with a user, a host and the database"),
                         ("mysql://reader@db:99999/moodle", "has a port that is not a number"),
                         ("mysql://reader@db/moodle?ssl=1", "takes only unix_socket=... after '?'"),
                         ("mysql://reader@db/moodle?unix_socket=run/s", "unix_socket that is not an absolute path"),
                         ("oracle://reader@db/moodle", "expected a URL such as")):
        with pytest.raises(ConfigError, match=re.escape(problem)) as raised:
            load(tmp_path, moodle + f'"{url}"\n')
        assert "secret" not in str(raised.value)
    with pytest.raises(ConfigError, match="must not contain a user name or password"):
        load(tmp_path, '[source]\ntype = "xapi-lrs"\nendpoint = "https://u:p@lrs.example.edu/"\nusername = "u"\n'
                       'password_file = "p"\n')


def test_the_packaged_config_shows_every_key_in_its_table_with_its_declared_default():
    """debian/config.toml is tested against config.SCHEMA, the one declaration of the keys: every key is
    shown in its own table, no other key is, and each shown value is the default (an example, for a key
    without one) that the key's validator accepts."""
    import os
    import re
    import tomllib

    from lms_refresh.config.schema import CATEGORY_KEYS, REQUIRED, SCHEMA, TERM_KEYS

    tables = {**SCHEMA, "terms": TERM_KEYS, "categories": CATEGORY_KEYS}  # [[terms]], [[categories]]: arrays of tables
    root = REPO
    shown = {}
    section = ""
    for line in open(os.path.join(root, "debian", "config.toml")):
        header = re.match(r"^#? ?\[\[?(\w+)\]\]?", line)
        if header:
            section = header.group(1)
            continue
        assignment = re.match(r"^#? ?(\w+) = (.*)$", line)
        if assignment:
            key, text = assignment.groups()
            assert key in tables.get(section, {}), f"debian/config.toml shows [{section}] {key}, which is no such key"
            value = tables[section][key].check(tomllib.loads(f"v = {text}")["v"])
            default = tables[section][key].default
            if default is not None and default is not REQUIRED and (section, key) != ("store", "type"):
                assert value == default, f"debian/config.toml shows [{section}] {key} = {text}, not its default"
            shown.setdefault((section, key), value)
    declared = {(section, key) for section, keys in tables.items() for key in keys}
    assert declared - set(shown) == set(), "keys the packaged configuration does not show"


def test_the_typed_sections_hold_exactly_the_keys_schema_declares_with_their_types():
    """config/sections.py spells the classes out for readers and tools; SCHEMA stays the one
    declaration, so every field must be a declared key of its table, with the validator's type
    (`| None` exactly when the key has no default), and every declared key a field."""
    from lms_refresh.config import sections
    from lms_refresh.config.schema import SCHEMA, SOURCE_KEYS

    def expected(section, keys):
        def annotation(key):
            spec = SCHEMA[section][key]
            return spec.check.type | None if spec.default is None else spec.check.type
        return {key: annotation(key) for key in keys}

    tables = {"window": sections.Window, "store": sections.Store, "retention": sections.Retention,
              "retry": sections.Retry, "alerts": sections.Alerts, "monitoring": sections.Monitoring,
              "privacy": sections.Privacy, "publication": sections.Publication, "report": sections.Report}
    # the top level and [pseudonymisation] (key_file, resolved) are Config's own fields
    assert set(tables) == set(SCHEMA) - {"", "source", "pseudonymisation"}
    for section, cls in tables.items():
        assert {f.name: f.type for f in dataclasses.fields(cls)} == expected(section, SCHEMA[section]), section
    assert set(sections.SOURCE_SETTINGS) == set(SOURCE_KEYS)
    for kind, cls in sections.SOURCE_SETTINGS.items():
        keys = ("type",) + tuple(sorted(SOURCE_KEYS[kind][0]))
        assert {f.name: f.type for f in dataclasses.fields(cls)} == expected("source", keys), kind


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_configuration_path_that_is_no_small_regular_file_is_refused_at_once(tmp_path, kind):
    """A FIFO made every command (is-configured, the unit's ExecCondition, too) wait forever for a writer;
    /dev/zero or a sparse file of gigabytes was read whole into memory (MemoryError, exit 1)."""
    path = tmp_path / "config.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with open(path, "wb") as handle:
            handle.truncate(1 << 31)
    else:
        path = "/dev/zero"
    with pytest.raises(ConfigError, match="not a regular file|larger than 1 MiB"):
        load_config(str(path), {})


# -- review b: values that named nothing stable ------------------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "run"])
def test_an_empty_source_path_is_a_configuration_error_naming_the_key(sqlite_project, command):
    project = sqlite_project
    """`path = ""` was read as the export share not mounted (69, retried three times by the timer)."""
    project.config.write_text(project.config.read_text().replace(f'path = "{project.source}"', 'path = ""'))
    result = project.invoke(command)
    assert result.returncode == 78, result.stderr
    assert f"{project.config}: key 'source.path' must not be empty; give an absolute path." in result.stderr


LRS = '[source]\ntype = "xapi-lrs"\nendpoint = "https://lrs.example.edu/xAPI/"\nusername = "u"\n'
POSTGRES = '[store]\ntype = "postgresql"\nurl = "postgresql://lms@db.example.edu/metrics"\n'


@pytest.mark.parametrize("text, message", [
    (MINIMAL + '[store]\nurl = "postgresql://lms@db.example.edu/metrics"\n',
     "key 'store.url' does not apply to store type \"sqlite\" (it is for postgresql)."),
    (MINIMAL + '[store]\ntype = "sqlite"\npassword_file = "store-password"\n',
     "key 'store.password_file' does not apply to store type \"sqlite\" (it is for postgresql)."),
    (MINIMAL + '[store]\nschema = "metrics"\n',
     "key 'store.schema' does not apply to store type \"sqlite\" (it is for postgresql)."),
    (MINIMAL + POSTGRES + 'path = "/srv/metrics.sqlite"\n',
     "key 'store.path' does not apply to store type \"postgresql\" (it is for sqlite)."),
    (MINIMAL + '[store]\ntype = "postgresql"\n', "key 'store.url' is required when store.type is \"postgresql\"."),
])
def test_store_keys_belong_to_their_kind(tmp_path, text, message):
    """As [source] keys do: a key of the other backend was ignored without a word."""
    with pytest.raises(ConfigError) as error:
        load(tmp_path, text)
    assert str(error.value) == f"{tmp_path / 'config.toml'}: {message}"


def test_a_store_key_of_the_other_backend_fails_check_and_run_with_78(project, store_kind):
    if store_kind == "sqlite":
        foreign, other = '[store]\nschema = "metrics"\n', "store.schema' does not apply to store type \"sqlite\""
    else:  # the project's [store] table comes last
        foreign, other = 'path = "/srv/metrics.sqlite"\n', "store.path' does not apply to store type \"postgresql\""
    project.config.write_text(project.config.read_text() + foreign)
    for command in ("check", "run"):
        result = project.invoke(command)
        assert result.returncode == 78, result.stderr
        assert f"{project.config}: key '{other}" in result.stderr


def test_the_sqlite_publication_keys_are_named_as_unused_under_postgresql(tmp_path):
    text = (MINIMAL + '[publication]\npath = "/srv/serving.sqlite"\ngroup = "dash"\nlanguage = "fr"\n'
                      '[report]\nenabled = false\npath = "/srv/report.html"\n')
    assert load(tmp_path, text).unused == ()  # SQLite uses them all
    config = load(tmp_path, text + POSTGRES)
    # Not the course names' language, nor publication.path: a PostgreSQL store's runs (and copy-store) remove the
    # SQLite publication left there.
    assert config.unused == ("publication.group", "report.enabled", "report.path")
    assert config.unused_keys_sentence() == (
        f"{tmp_path / 'config.toml'}: keys 'publication.group', 'report.enabled' and 'report.path' only apply to a "
        'SQLite store; with store type "postgresql" no publication file or report is written (dashboards read the '
        "serving views), so they do nothing: remove them.")
    assert load(tmp_path, MINIMAL + POSTGRES).unused_keys_sentence() is None


def test_check_and_every_run_warn_of_publication_keys_a_postgresql_store_does_not_use(project, store_kind):
    """They were accepted without a word: an operator who set report.path waited for a report no run writes."""
    text, added = project.config.read_text(), f'[report]\npath = "{project.config.parent / "report.html"}"\n'
    if store_kind == "postgresql":  # the project's [store] table comes last
        store = text.index("[store]")
        project.config.write_text(text[:store] + added + text[store:])
    else:
        project.config.write_text(text + added)
    warning = (f"{project.config}: key 'report.path' only applies to a SQLite store; with store type \"postgresql\" "
               "no publication file or report is written (dashboards read the serving views), so it does nothing: "
               "remove it.")
    check, run = project.invoke("check"), project.invoke("run")
    assert run.returncode == 0, run.stderr
    if store_kind == "postgresql":
        assert check.returncode == 0 and warning in check.stdout + check.stderr, (check.stdout, check.stderr)
        assert run.stderr.count(warning) == 1, run.stderr
        # Once a job, not once an attempt: a run retried (the export directory gone, 69).
        project.config.write_text(project.config.read_text().replace("attempts = 1", "attempts = 2"))
        project.source.rename(project.root / "gone")
        retried = project.invoke("run")  # at a terminal, as from a timer, an unreachable source is retried
        assert retried.returncode == 69 and "Retrying in 1 s (attempt 2 of 2)" in retried.stderr, retried.stderr
        assert retried.stderr.count(warning) == 1, retried.stderr
    else:
        assert "to a SQLite store" not in check.stdout + check.stderr + run.stderr


RELATIVE = [
    ('state_directory = "state"\n' + MINIMAL, "state_directory"),
    ('[source]\ntype = "xapi-ndjson"\npath = "exports"\n', "source.path"),
    ('[source]\ntype = "xapi-ndjson"\npath = "./exports"\n', "source.path"),
    (LRS + 'password_file = "lrs/password"\nca_bundle = "/etc/ssl/ca.pem"\n', "source.password_file"),
    (LRS + 'password_file = "lrs-password"\nca_bundle = "ca.pem"\n', "source.ca_bundle"),
    (MINIMAL + '[store]\npath = "metrics.sqlite"\n', "store.path"),
    (MINIMAL + POSTGRES + 'password_file = "secrets/store-password"\n', "store.password_file"),
    (MINIMAL + '[pseudonymisation]\nkey_file = "../keys/pseudonymisation.key"\n', "pseudonymisation.key_file"),
    (MINIMAL + '[alerts]\nsendmail = "sendmail"\n', "alerts.sendmail"),
    (MINIMAL + '[alerts]\nwebhook_url_file = "etc/webhook"\n', "alerts.webhook_url_file"),
    (MINIMAL + '[alerts]\nhealthchecks_url_file = "./hc-url"\n', "alerts.healthchecks_url_file"),
    (MINIMAL + '[monitoring]\ntextfile = "lms_refresh.prom"\n', "monitoring.textfile"),
    (MINIMAL + '[publication]\npath = "serving.sqlite"\n', "publication.path"),
    (MINIMAL + '[report]\npath = "report.html"\n', "report.path"),
]


@pytest.mark.parametrize("text, key", RELATIVE, ids=[f"{key}-{n}" for n, (_, key) in enumerate(RELATIVE)])
def test_a_relative_path_is_refused_naming_the_key(tmp_path, text, key):
    """A relative path was read from the working directory: / under systemd, elsewhere for an operator's
    `check`, so the two looked at different files."""
    with pytest.raises(ConfigError) as error:
        load(tmp_path, text)
    assert f"{tmp_path / 'config.toml'}: key '{key}' must be an absolute path (starting with /), not " \
        in str(error.value)
    assert "which is / under systemd." in str(error.value)


def test_a_relative_alert_path_is_refused_by_the_alert_too(tmp_path):
    from lms_refresh.config import load_alerts

    path = tmp_path / "config.toml"
    path.write_text('[alerts]\nmail_to = "ops@example.edu"\nsendmail = "bin/sendmail"\n')
    with pytest.raises(ConfigError, match="key 'alerts.sendmail' must be an absolute path"):
        load_alerts(str(path))


def test_credential_names_and_absolute_paths_are_accepted(tmp_path):
    config = load(tmp_path, MINIMAL + POSTGRES + 'password_file = "store-password"\n'
                  '[alerts]\nwebhook_url_file = "/etc/lms-refresh/webhook"\nhealthchecks_url_file = "hc-url"\n')
    assert config.store.password_file == "store-password"
    assert (config.alerts.webhook_url_file, config.alerts.healthchecks_url_file) == ("/etc/lms-refresh/webhook",
                                                                                     "hc-url")


@pytest.mark.parametrize("text, key", [
    (MINIMAL + '[publication]\npath = ""\n', "publication.path"),
    ('state_directory = ""\n' + MINIMAL, "state_directory"),
    (MINIMAL + '[alerts]\nwebhook_url_file = ""\n', "alerts.webhook_url_file"),
])
def test_an_empty_path_is_refused_not_taken_for_the_default(tmp_path, text, key):
    with pytest.raises(ConfigError, match=f"key '{key}' must not be empty; give an absolute path"):
        load(tmp_path, text)


def test_a_path_with_a_control_character_is_refused(tmp_path):
    """Every message that names the path would carry the newline: a forged line in the journal."""
    with pytest.raises(ConfigError, match=r"key 'source.path' must not contain control or format characters: "
                                          r"'/srv/x\\nERROR forged'"):
        load(tmp_path, '[source]\ntype = "xapi-ndjson"\npath = "/srv/x\\nERROR forged"\n')


def test_a_relative_path_fails_check_and_run_with_78(sqlite_project):
    project = sqlite_project
    project.config.write_text(project.config.read_text().replace(f'path = "{project.source}"', 'path = "inbox"'))
    for command in ("check", "run"):
        result = project.invoke(command)
        assert result.returncode == 78, result.stderr
        assert f"{project.config}: key 'source.path' must be an absolute path (starting with /), not 'inbox'" \
            in result.stderr


@pytest.mark.parametrize("zone, meaning", [
    ("localtime", "this machine's zone (/etc/localtime), which changes when the machine's does"),
    ("posixrules", "the time zone database's rules for POSIX TZ strings"),
    ("Factory", "the time zone database's placeholder for a zone nobody set"),
])
def test_a_time_zone_that_names_no_place_is_refused(tmp_path, zone, meaning):
    """zoneinfo accepts 'localtime' (/usr/share/zoneinfo/localtime -> /etc/localtime): the published calendar
    then moved whenever the machine's zone did."""
    with pytest.raises(ConfigError) as error:
        load(tmp_path, f'timezone = "{zone}"\n' + MINIMAL)
    assert str(error.value) == (f"{tmp_path / 'config.toml'}: key 'timezone' is invalid: '{zone}' is not a time zone "
                                f"name but {meaning}; name the zone explicitly, such as \"Europe/Paris\" (see "
                                "timedatectl list-timezones).")


@pytest.mark.parametrize("zone", ["posix/Europe/Paris", "right/UTC"])
def test_a_copy_of_a_zone_under_another_name_is_refused(tmp_path, zone):
    """zoneinfo opens any file of the database; these are copies (right/: with leap seconds), no IANA names.
    Where tzdata does not install them (Debian 13 moved right/ to tzdata-legacy), they are unknown names."""
    with pytest.raises(ConfigError, match=f"key 'timezone' is invalid: '{zone}' is not an IANA time zone name; "
                                          "name the zone explicitly|is not a known time zone"):
        load(tmp_path, f'timezone = "{zone}"\n' + MINIMAL)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/Argentina/Buenos_Aires", "Etc/GMT+5"])
def test_iana_zone_names_are_accepted(tmp_path, zone):
    assert load(tmp_path, f'timezone = "{zone}"\n' + MINIMAL).timezone == zone


def test_localtime_fails_check_with_78(sqlite_project):
    project = sqlite_project
    project.config.write_text(project.config.read_text().replace('timezone = "Europe/Paris"', 'timezone = "localtime"'))
    result = project.invoke("check")
    assert result.returncode == 78
    assert "key 'timezone' is invalid: 'localtime' is not a time zone name" in result.stderr
    assert "name the zone explicitly" in result.stderr


_SCIENCE = '[[categories]]\nname = "Science"\ncourses = ["https://lms.example.edu/course/BIO*"]\n'


def test_categories_are_read_in_order_with_their_parents(tmp_path):
    config = load(tmp_path, MINIMAL + _SCIENCE + '[[categories]]\nname = "Genetics"\nparent = "Science"\n'
                                              'courses = ["*/course/GEN?", "*/course/[XY]*"]\n')
    assert [(c.name, c.courses, c.parent) for c in config.categories] == [
        ("Science", ("https://lms.example.edu/course/BIO*",), None),
        ("Genetics", ("*/course/GEN?", "*/course/[XY]*"), "Science")]
    assert load(tmp_path, MINIMAL).categories == ()


@pytest.mark.parametrize("text, message", [
    ('[[categories]]\nname = "A"\nparent = "B"\n', "category 1 ('A'): key 'categories.parent' ('B') names no "
                                                    "[[categories]] table."),
    ('[[categories]]\nname = "A"\nparent = "B"\n[[categories]]\nname = "B"\nparent = "A"\n',
     "category 1 ('A') is inside itself through its parents"),
    (_SCIENCE + '[[categories]]\nname = "SCIENCE"\n', "key 'categories.name' is the name of category 1 too"),
    ('[[categories]]\ncourses = ["x"]\n', "category 1: key 'categories.name' is required."),
    ('[[categories]]\nname = "A"\ncourses = "x*"\n', "key 'categories.courses' must be a list of patterns"),
    ('[[categories]]\nname = "A"\ncourses = ["a\\u0007"]\n', "without control or format characters"),
    ('[[categories]]\nname = "A"\ncolour = 1\n', "unknown key 'categories.colour'"),
    ('categories = 3\n', "'categories' must be an array of tables"),
])
def test_a_wrong_category_is_refused_naming_it(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, MINIMAL + text if not text.startswith("categories") else text + MINIMAL)
    assert message in str(caught.value)


def test_a_moodle_source_takes_its_own_categories_not_the_configurations(tmp_path):
    moodle = ('[source]\ntype = "moodle"\nurl = "postgresql://u@db/moodle"\nsite_url = "https://m.example.edu"\n'
              'password_file = "/p"\n')
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, moodle + _SCIENCE)
    assert "[[categories]] applies to xAPI sources only" in str(caught.value)
