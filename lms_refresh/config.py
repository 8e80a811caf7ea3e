"""Load and validate the TOML configuration.

Every key is declared once in `SCHEMA`; unknown keys, wrong types and
impossible values are refused with one sentence naming the file and the key.
"""

import collections
import dataclasses
import math
import os
import re
import tomllib
import zoneinfo

from lms_refresh.errors import ConfigError, NotConfiguredError

DEFAULT_CONFIG_PATH = "/etc/lms-refresh/config.toml"
DEFAULT_STATE_DIRECTORY = "/var/lib/lms-refresh"
SOURCE_TYPES = ("xapi-ndjson", "xapi-lrs", "moodle")
STORE_TYPES = ("sqlite", "postgresql")

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
LONGEST_DURATION = 3660 * 86400  # ten years: longer is a typo, and would overflow date arithmetic


def parse_duration(value):
    """Given an int (seconds) or a string like '90s', '5m', '1h30m', '2d', return seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return _bounded_duration(value)
    if not isinstance(value, str):
        raise ValueError("expected a duration such as \"5m\" or a number of seconds")
    match = _DURATION.match(value.strip())
    if not value.strip() or not match:
        raise ValueError(f"{value!r} is not a duration such as \"90s\", \"5m\", \"1h30m\" or \"2d\"")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return _bounded_duration(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _bounded_duration(seconds):
    if seconds > LONGEST_DURATION:
        raise ValueError(f"must be at most 3660 days ({LONGEST_DURATION} seconds)")
    return seconds


def _timezone(value):
    if not isinstance(value, str):
        raise ValueError("expected a time zone name such as \"Europe/Paris\"")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not a known time zone (see timedatectl list-timezones; is tzdata installed?)")
    return value


def _typed(kind, low=None, high=None):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, kind):
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            else:
                raise ValueError(f"expected {'a number' if kind is float else kind.__name__}")
        if kind is float and not math.isfinite(value):
            raise ValueError(f"must be a finite number, not {value}")
        if low is not None and value < low:
            raise ValueError(f"must be at least {low}")
        if high is not None and value > high:
            raise ValueError(f"must be at most {high}")
        return value

    return check


def _choice(*choices):
    def check(value):
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(repr(c) for c in choices)}")
        return value

    return check


def _regex(value):
    if not isinstance(value, str):
        raise ValueError("expected a regular expression")
    try:
        compiled = re.compile(value)
    except re.error as error:
        raise ValueError(f"is not a valid regular expression ({error})")
    if compiled.groups > 1:
        raise ValueError("may have at most one capturing group")
    return value


_path = _typed(str)


def _bool(value):
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _variance(value):
    value = _typed(float, 0.0, 100.0)(value)
    if value != value:  # NaN passes every comparison
        raise ValueError("must be a number between 0 and 100")
    return value


def _postgres_url(value):
    if not isinstance(value, str) or not re.match(r"^postgres(ql)?://", value):
        raise ValueError("expected a URL such as \"postgresql://user@host:5432/database\"")
    if re.match(r"^postgres(ql)?://[^/@]*:[^/@]*@", value) or "password=" in value:
        raise ValueError("must not contain a password; put it in the file named by store.password_file")
    return value


def _http_url(value):
    if not isinstance(value, str) or not re.match(r"^https?://[^/?#]+", value):
        raise ValueError("expected an http:// or https:// URL such as \"https://lrs.example.edu/xAPI/\"")
    if "@" in value.split("/")[2]:
        raise ValueError("must not contain a user name or password; use source.username and source.password_file")
    return value


def _database_url(value):
    if isinstance(value, str) and re.match(r"^(mysql|mariadb)(\+\w+)?://", value):
        raise ValueError("is a MySQL/MariaDB URL; only PostgreSQL Moodle databases are supported "
                         "(Debian's python3-psycopg is the one database driver lms-refresh depends on)")
    return _postgres_url(value)


def _sql_name(longest, example, what):
    """A validator for a lower-case SQL name (a schema, a table prefix) that is safe to splice into SQL."""
    def check(value):
        if not isinstance(value, str) or not re.fullmatch(rf"[a-z_][a-z0-9_]{{0,{longest - 1}}}", value):
            raise ValueError(f"must be a lower-case {what} such as \"{example}\"")
        return value

    return check


_identifier = _sql_name(41, "lms_refresh", "SQL identifier")
_identifier_prefix = _sql_name(21, "mdl_", "table prefix")

# The [source] keys each source type takes (beyond type), and those it requires.
SOURCE_KEYS = {
    "xapi-ndjson": ({"batch_size", "course_pattern", "path"}, {"path"}),
    "xapi-lrs": ({"batch_size", "course_pattern", "endpoint", "username", "password_file", "ca_bundle", "page_size",
                  "overlap", "timeout", "request_attempts", "request_delay"},
                 {"endpoint", "username", "password_file"}),
    "moodle": ({"batch_size", "url", "password_file", "prefix", "site_url", "id_lookback", "site_course_id",
                "guest_user_id", "timeout"}, {"url", "site_url"}),
}

# section -> key -> Key(check, default, description). Every entry is a `Key`:
# its description is the one place that explains the key (the man page is
# generated from it). A default of `None` means "unset" or "derived" (the
# description says from what); REQUIRED means the key must be given.
REQUIRED = object()


class Key(collections.namedtuple("Key", "check default description")):
    """One configuration key: a validator (value -> value, or ValueError), its default, one line on what it does."""

    __slots__ = ()


SCHEMA = {
    "": {
        "timezone": Key(_timezone, "UTC", "IANA time zone whose local calendar days are the metrics' partitions."),
        "min_cell_size": Key(_typed(int, 1, 1000), 10,
                             "Values derived from fewer distinct learners than this are withheld (NULL)."),
        "max_quarantine_share": Key(_typed(float, 0.0, 1.0), 0.01,
                                    "Fail with exit status 65 when more than this share of the window's records "
                                    "is malformed."),
        "state_directory": Key(_path, None, "Lock, SQLite store and key; $STATE_DIRECTORY (systemd) wins, "
                                            "else /var/lib/lms-refresh."),
    },
    "window": {
        "bootstrap_days": Key(_typed(int, 1, 3660), 7, "How many days back the very first run reads."),
        "safety_lag": Key(parse_duration, 300, "A run reads up to now minus this lag."),
        "lookback": Key(parse_duration, 0, "Re-read this much before the watermark (safe: staging is keyed)."),
    },
    # One table for every source type; SOURCE_KEYS says which keys each type takes.
    "source": {
        "type": Key(_choice(*SOURCE_TYPES), REQUIRED, "The kind of source: " + ", ".join(SOURCE_TYPES) + "."),
        "batch_size": Key(_typed(int, 1, 100_000), 5000, "Records per batch; bounds memory."),
        "course_pattern": Key(_regex, r"^(.+?/course/[^/?#]+)",
                              "xAPI: the course is this pattern's capture group on the object id "
                              "(then parent, grouping ids) when no context activity is a course."),
        "path": Key(_path, None, "xapi-ndjson: a file or a directory of *.ndjson, *.jsonl (and .gz)."),
        "endpoint": Key(_http_url, None, "xapi-lrs: the xAPI base URL before /statements, without credentials."),
        "username": Key(_typed(str), None, "xapi-lrs: the HTTP basic auth user."),
        "password_file": Key(_path, None, "xapi-lrs, moodle: the password's file, a credential name "
                                          "($CREDENTIALS_DIRECTORY) or a path."),
        "ca_bundle": Key(_path, None, "xapi-lrs: CA certificates for a private CA (TLS is always verified)."),
        "page_size": Key(_typed(int, 1, 10_000), 500, "xapi-lrs: statements asked for per page (the LRS may cap it)."),
        # The since/until sent to the LRS are widened by this, so an LRS that filters on
        # timestamp instead of stored (Ralph does) still returns every statement of the window.
        "overlap": Key(parse_duration, 86400,
                       "xapi-lrs: how far a statement's timestamp may lie from its stored time."),
        "timeout": Key(parse_duration, 60, "xapi-lrs: per request; moodle: connect and statement timeout."),
        "request_attempts": Key(_typed(int, 1, 20), 5,
                                "xapi-lrs: attempts per request (timeouts, connection errors, 429, 5xx)."),
        "request_delay": Key(parse_duration, 2, "xapi-lrs: first backoff between attempts, doubled each time."),
        "url": Key(_database_url, None, "moodle: the PostgreSQL URL of Moodle's database, without the password."),
        "prefix": Key(_identifier_prefix, "mdl_", "moodle: the table prefix ($CFG->prefix)."),
        "site_url": Key(_http_url, None, "moodle: $CFG->wwwroot; names the courses in the store."),
        "id_lookback": Key(_typed(int, 0, 10_000_000), 10_000, "moodle: log ids re-read before the watermark."),
        "site_course_id": Key(_typed(int, 0), 1, "moodle: $SITEID; the front page is not a course."),
        "guest_user_id": Key(_typed(int, 0), 1, "moodle: $CFG->siteguest; the guest is not a learner."),
    },
    "store": {
        "type": Key(_choice(*STORE_TYPES), "sqlite", "The kind of store: " + ", ".join(STORE_TYPES) + "."),
        "path": Key(_path, None, "sqlite: the store file; default <state directory>/metrics.sqlite."),
        "url": Key(_postgres_url, None, "postgresql: a URL without the password, "
                                        "e.g. postgresql://lms_refresh@db.example.edu/metrics."),
        "password_file": Key(_path, None, "postgresql: the password's file, a credential name "
                                          "($CREDENTIALS_DIRECTORY) or a path."),
        "schema": Key(_identifier, "lms_refresh", "postgresql: the schema of the tables; the view is in "
                                                  "<schema>_serving."),
    },
    "pseudonymisation": {
        "key_file": Key(_path, None, "The secret HMAC key for learner identifiers; default "
                                     "<state directory>/pseudonymisation.key, created on the first run."),
    },
    "retention": {
        "staging_days": Key(_typed(int, 1, 36600), None,
                            "Staged events of local days older than this many days are dropped; those days stay "
                            "as published and later statements for them are quarantined (unset: keep everything)."),
        "quarantine_days": Key(_typed(int, 1, 3660), 30, "Quarantined records are deleted after this many days."),
    },
    "retry": {
        # Scheduled runs retry a source or store that is unreachable (exit 69).
        "attempts": Key(_typed(int, 1, 20), 3, "Attempts of a scheduled run while the source or store is "
                                               "unreachable (exit 69)."),
        "delay": Key(parse_duration, 600, "Pause between those attempts."),
    },
    "alerts": {
        "mail_to": Key(_typed(str), None, "Mail a failed run's alert to this address."),
        "sendmail": Key(_path, "/usr/sbin/sendmail", "The sendmail program the alert mail goes through."),
        # Files holding URLs with tokens are credentials: a bare name is looked up in
        # $CREDENTIALS_DIRECTORY (LoadCredential=), anything else is a path.
        "webhook_url_file": Key(_path, None, "A file holding the URL a failed run's alert is POSTed to as JSON."),
        "healthchecks_url_file": Key(_path, None, "A file holding the Healthchecks URL scheduled runs ping."),
        "timeout": Key(parse_duration, 10, "Timeout of each delivery and ping."),
    },
    "monitoring": {
        "textfile": Key(_path, None, "Write Prometheus gauges to this node_exporter textfile after each run."),
        "grace": Key(parse_duration, 7200, "status calls the data stale this long after a missed weekday "
                                           "04:15 run."),
    },
    "privacy": {
        "method": Key(_choice("cell-key", "none"), "cell-key",
                      "cell-key: every published count gets a bounded noise fixed by its records (the cell key "
                      "method); none: exact counts, whose withheld values other columns can give back."),
        "max_noise": Key(_typed(int, 0, 20), 3, "D: published counts are within +-D of the true count."),
        "variance": Key(_variance, 2.0, "The noise's variance; at most what max_noise allows (3.33 for 3, 2.0 for 2, "
                                        "1.0 for 1)."),
        "withhold_zeros": Key(_bool, False, "Withhold zero counts like small ones, so that a withheld value no "
                                            "longer says that at least one learner had it."),
    },
    "publication": {
        "path": Key(_path, None, "sqlite: the file dashboards read, replaced after each run; default "
                                 "<state directory>-publication/serving.sqlite."),
        "group": Key(_typed(str), None, "The group that may read the publication (mode 0640); unset: every "
                                        "account may (0644)."),
    },
}


def _check_schema(schema):
    """Refuse, at import, a SCHEMA entry that is not a Key with a description (the man page needs it)."""
    for section, keys in schema.items():
        for name, key in keys.items():
            if not isinstance(key, Key) or not callable(key.check) or not (key.description or "").strip():
                raise TypeError(f"SCHEMA[{section!r}][{name!r}] must be Key(check, default, description), "
                                f"not {key!r}")


_check_schema(SCHEMA)


@dataclasses.dataclass(frozen=True)
class Config:
    """A validated configuration; `origin` names the file it came from."""

    origin: str
    timezone: str
    min_cell_size: int
    max_quarantine_share: float
    state_directory: str
    bootstrap_days: int
    safety_lag: int
    lookback: int
    source: dict
    store_type: str
    store_path: str
    store: dict
    key_file: str
    alerts: dict
    monitoring: dict
    retry: dict
    retention: dict
    privacy: dict = None
    publication: dict = None


def resolve_state_directory(configured, environ):
    """Return the state directory: systemd's $STATE_DIRECTORY, else the configured one, else the default."""
    from_systemd = environ.get("STATE_DIRECTORY", "")
    if from_systemd:
        # StateDirectory= with several names sets a colon-separated list; ours is the first.
        return from_systemd.split(":")[0]
    return configured or DEFAULT_STATE_DIRECTORY


def read_toml(path):
    """Given a path, return the parsed TOML document or raise ConfigError saying what is wrong."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise NotConfiguredError(
            f"No configuration file at {path}; create it (see README, 'Configuration') "
            "or pass --config / set LMS_REFRESH_CONFIG."
        )
    except PermissionError:
        raise ConfigError(f"Cannot read the configuration file {path}: permission denied.")
    except IsADirectoryError:
        raise ConfigError(f"The configuration path {path} is a directory, not a TOML file.")
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}.")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not valid UTF-8 text.")


def _section_values(document, section, origin):
    """Validate one table of `document` against SCHEMA[section]; return {dotted name: value}."""
    keys = SCHEMA[section]
    values = {}
    table = {k: v for k, v in document.items() if k in keys} if section == "" else document.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: '{section}' must be a table ([{section}]).")
    for key in table:
        if key not in keys:
            raise ConfigError(
                f"{origin}: unknown key '{_dotted(section, key)}' "
                f"(known in [{section}]: {', '.join(sorted(keys))})."
            )
    for key, spec in keys.items():
        name = _dotted(section, key)
        if key in table:
            try:
                values[name] = spec.check(table[key])
            except ValueError as error:
                raise ConfigError(f"{origin}: key '{name}' {_phrase(error)}.")
        elif spec.default is REQUIRED and section == "source" and "source" not in document:
            raise NotConfiguredError(
                f"No source is configured yet: {origin} has no [source] table; uncomment and fill in one of "
                "the commented [source] examples in it (xapi-ndjson, xapi-lrs or moodle; see README, "
                "'Sources'), then run 'lms-refresh check'."
            )
        elif spec.default is REQUIRED:
            raise ConfigError(f"{origin}: key '{name}' is required.")
        else:
            values[name] = spec.default
    if "timezone" in keys and "timezone" not in table:
        try:  # the default zone needs the time zone database too
            _timezone(values["timezone"])
        except ValueError as error:
            raise ConfigError(f"{origin}: key 'timezone' {_phrase(error)}.")
    return values


def load_alerts(path):
    """Return the validated [alerts] table of the file at `path`, ignoring every other table.

    The alert must go out exactly when the rest of the configuration is broken
    (a misspelt key makes the run exit 78), so it depends on nothing else.
    """
    document = read_toml(path)
    values = _section_values(document, "alerts", path)
    return {key: values[f"alerts.{key}"] for key in SCHEMA["alerts"]}


def validate(document, origin, environ):
    """Given a parsed TOML document, return a Config or raise ConfigError naming the key."""
    values = {}
    for key, value in document.items():
        if key in SCHEMA and key != "":
            if not isinstance(value, dict):
                raise ConfigError(f"{origin}: '{key}' must be a table ([{key}]).")
        elif key not in SCHEMA[""]:
            raise ConfigError(f"{origin}: unknown key '{key}' (known: {', '.join(_known_keys())}).")
    for section in SCHEMA:
        values.update(_section_values(document, section, origin))

    _check_source_keys(document.get("source", {}), values, origin)
    staging_days = values["retention.staging_days"]
    if staging_days is not None and staging_days < values["window.bootstrap_days"]:
        raise ConfigError(f"{origin}: key 'retention.staging_days' ({staging_days}) must be at least "
                          f"window.bootstrap_days ({values['window.bootstrap_days']}), or a first run would "
                          "quarantine the days it reads.")
    if values["store.type"] == "postgresql" and not values["store.url"]:
        raise ConfigError(f"{origin}: key 'store.url' is required when store.type is \"postgresql\".")
    state_directory = resolve_state_directory(values["state_directory"], environ)
    key_file = values["pseudonymisation.key_file"] or os.path.join(state_directory, "pseudonymisation.key")
    if os.path.isdir(key_file):
        raise ConfigError(f"{origin}: key 'pseudonymisation.key_file' names a directory ({key_file}); "
                          "name the key file itself.")
    source = {key: values[f"source.{key}"] for key in ("type",) + tuple(sorted(SOURCE_KEYS[values["source.type"]][0]))}
    return Config(
        origin=origin,
        timezone=values["timezone"],
        min_cell_size=values["min_cell_size"],
        max_quarantine_share=values["max_quarantine_share"],
        state_directory=state_directory,
        bootstrap_days=values["window.bootstrap_days"],
        safety_lag=values["window.safety_lag"],
        lookback=values["window.lookback"],
        source=source,
        store_type=values["store.type"],
        store_path=(values["store.url"] if values["store.type"] == "postgresql"
                    else values["store.path"] or os.path.join(state_directory, "metrics.sqlite")),
        store={key: values[f"store.{key}"] for key in SCHEMA["store"]},
        key_file=key_file,
        alerts={key: values[f"alerts.{key}"] for key in SCHEMA["alerts"]},
        monitoring={key: values[f"monitoring.{key}"] for key in SCHEMA["monitoring"]},
        retry={key: values[f"retry.{key}"] for key in SCHEMA["retry"]},
        retention={key: values[f"retention.{key}"] for key in SCHEMA["retention"]},
        privacy=_privacy(values, origin),
        publication={"path": values["publication.path"] or os.path.join(
            state_directory.rstrip("/") + "-publication", "serving.sqlite"), "group": values["publication.group"]},
    )


def _privacy(values, origin):
    """Return the [privacy] table, refusing a variance that its max_noise cannot carry."""
    from lms_refresh.privacy import noise_bounds

    settings = {key: values[f"privacy.{key}"] for key in SCHEMA["privacy"]}
    if settings["method"] == "cell-key" and settings["variance"] > noise_bounds(settings["max_noise"]):
        raise ConfigError(
            f"{origin}: key 'privacy.variance' is {settings['variance']}, more than privacy.max_noise = "
            f"{settings['max_noise']} allows ({float(noise_bounds(settings['max_noise'])):.2f}); "
            "lower the variance or raise max_noise.")
    return settings


def _check_source_keys(table, values, origin):
    """Refuse [source] keys that do not apply to the chosen type, and require the ones it needs."""
    kind = values["source.type"]
    allowed, required = SOURCE_KEYS[kind]
    for key in table:
        if key != "type" and key not in allowed:
            users = [name for name, (keys, _) in SOURCE_KEYS.items() if key in keys]
            raise ConfigError(
                f"{origin}: key 'source.{key}' does not apply to source type \"{kind}\""
                + (f" (it is for {', '.join(users)})." if users else ".")
            )
    for key in sorted(required):
        if values[f"source.{key}"] is None:
            raise ConfigError(f"{origin}: key 'source.{key}' is required when source.type is \"{kind}\".")


def has_source(path):
    """Return False only if `path` is missing or valid TOML without a [source] table.

    Any other error counts as configured, so the run itself fails loudly (78).
    """
    try:
        document = read_toml(path)
    except NotConfiguredError:
        return False
    except ConfigError:
        return True
    return "source" in document


def load_config(path, environ):
    """Given a config path and the process environment, return a validated Config."""
    return validate(read_toml(path), path, environ)


def _dotted(section, key):
    return f"{section}.{key}" if section else key


def _known_keys():
    return sorted(set(SCHEMA[""]) | {name for name in SCHEMA if name})


def _phrase(error):
    text = str(error)
    if text.startswith(("expected", "must", "may", "is ")):
        return text
    return f"is invalid: {text}"
