"""Load and validate the TOML configuration.

Every key is declared once in `SCHEMA`; unknown keys, wrong types and
impossible values are refused with one sentence naming the file and the key.
"""

import collections
import dataclasses
import os
import tomllib

from lms_refresh import validators as v
from lms_refresh.errors import ConfigError, NotConfiguredError
from lms_refresh.paths import refuse_collisions
from lms_refresh.validators import parse_duration  # noqa: F401  (part of this module's interface)

DEFAULT_CONFIG_PATH = "/etc/lms-refresh/config.toml"
DEFAULT_STATE_DIRECTORY = "/var/lib/lms-refresh"
SOURCE_TYPES = ("xapi-ndjson", "xapi-lrs", "moodle")
STORE_TYPES = ("sqlite", "postgresql")

# The [source] keys each source type takes (beyond type), and those it requires.
SOURCE_KEYS = {
    "xapi-ndjson": ({"batch_size", "course_pattern", "path", "max_record_bytes"}, {"path"}),
    "xapi-lrs": ({"batch_size", "course_pattern", "endpoint", "username", "password_file", "ca_bundle", "page_size",
                  "overlap", "timeout", "request_attempts", "request_delay", "response_deadline",
                  "max_response_bytes", "read_deadline", "max_pages"},
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
        "timezone": Key(v.timezone, "UTC", "IANA time zone whose local calendar days are the metrics' partitions."),
        "min_cell_size": Key(v.typed(int, 1, 1000), 10,
                             "Values derived from fewer distinct learners than this are withheld (NULL)."),
        "max_quarantine_share": Key(v.typed(float, 0.0, 1.0), 0.01,
                                    "Fail with exit status 65 when more than this share of the window's records "
                                    "is malformed."),
        "state_directory": Key(v.path, None, "Lock, SQLite store and key; $STATE_DIRECTORY (systemd) wins, "
                                            "else /var/lib/lms-refresh."),
    },
    "window": {
        "bootstrap_days": Key(v.typed(int, 1, 3660), 7, "How many days back the very first run reads."),
        "safety_lag": Key(v.parse_duration, 300, "A run reads up to now minus this lag."),
        "lookback": Key(v.parse_duration, 0, "Re-read this much before the watermark (safe: staging is keyed)."),
    },
    # One table for every source type; SOURCE_KEYS says which keys each type takes.
    "source": {
        "type": Key(v.choice(*SOURCE_TYPES), REQUIRED, "The kind of source: " + ", ".join(SOURCE_TYPES) + "."),
        "batch_size": Key(v.typed(int, 1, 100_000), 5000, "Records per batch; bounds memory."),
        "course_pattern": Key(v.regex, r"^(.+?/course/[^/?#]+)",
                              "xAPI: the course is this pattern's capture group on the object id "
                              "(then parent, grouping ids) when no context activity is a course."),
        "path": Key(v.path, None, "xapi-ndjson: a file or a directory of *.ndjson, *.jsonl (and .gz)."),
        "max_record_bytes": Key(v.typed(int, 1024, 16 << 20), 1 << 20,
                                "xapi-ndjson: a longer line is skipped unread and quarantined by origin and length."),
        "endpoint": Key(v.http_url, None, "xapi-lrs: the xAPI base URL before /statements, without credentials."),
        "username": Key(v.typed(str), None, "xapi-lrs: the HTTP basic auth user."),
        "password_file": Key(v.path, None, "xapi-lrs, moodle: the password's file, a credential name "
                                          "($CREDENTIALS_DIRECTORY) or a path."),
        "ca_bundle": Key(v.path, None, "xapi-lrs: CA certificates for a private CA (TLS is always verified)."),
        "page_size": Key(v.typed(int, 1, 10_000), 500, "xapi-lrs: statements asked for per page (the LRS may cap it)."),
        # The since/until sent to the LRS are widened by this, so an LRS that filters on
        # timestamp instead of stored (Ralph does) still returns every statement of the window.
        "overlap": Key(v.parse_duration, 86400,
                       "xapi-lrs: how far a statement's timestamp may lie from its stored time."),
        "timeout": Key(v.parse_duration, 60, "xapi-lrs: per request; moodle: connect and statement timeout."),
        "request_attempts": Key(v.typed(int, 1, 20), 5,
                                "xapi-lrs: attempts per request (timeouts, connection errors, 429, 5xx)."),
        "request_delay": Key(v.parse_duration, 2, "xapi-lrs: first backoff between attempts, doubled each time."),
        "response_deadline": Key(v.at_least_a_second, 120,
                                 "xapi-lrs: one whole response, request to last byte (timeout is per read)."),
        "max_response_bytes": Key(v.typed(int, 64 << 10, 256 << 20), 4 << 20,
                                  "xapi-lrs: a larger response is abandoned while it streams in (exit 69)."),
        # 3 attempts x 30m + 2 pauses x 10m of [retry] fit the unit's TimeoutStartSec=2h.
        "read_deadline": Key(v.at_least_a_second, 1800,
                             "xapi-lrs: all requests of one run, retries and pauses included (exit 69)."),
        "max_pages": Key(v.typed(int, 1, 10_000_000), 100_000,
                         "xapi-lrs: pages one run follows through 'more' (exit 69 beyond)."),
        "url": Key(v.database_url, None, "moodle: the PostgreSQL URL of Moodle's database, without the password."),
        "prefix": Key(v.identifier_prefix, "mdl_", "moodle: the table prefix ($CFG->prefix)."),
        "site_url": Key(v.http_url, None, "moodle: $CFG->wwwroot; names the courses in the store."),
        "id_lookback": Key(v.typed(int, 0, 10_000_000), 10_000, "moodle: log ids re-read before the watermark."),
        "site_course_id": Key(v.typed(int, 0), 1, "moodle: $SITEID; the front page is not a course."),
        "guest_user_id": Key(v.typed(int, 0), 1, "moodle: $CFG->siteguest; the guest is not a learner."),
    },
    "store": {
        "type": Key(v.choice(*STORE_TYPES), "sqlite", "The kind of store: " + ", ".join(STORE_TYPES) + "."),
        "path": Key(v.path, None, "sqlite: the store file; default <state directory>/metrics.sqlite."),
        "url": Key(v.postgres_url, None, "postgresql: a URL without the password, "
                                        "e.g. postgresql://lms_refresh@db.example.edu/metrics."),
        "password_file": Key(v.path, None, "postgresql: the password's file, a credential name "
                                          "($CREDENTIALS_DIRECTORY) or a path."),
        "schema": Key(v.identifier, "lms_refresh", "postgresql: the schema of the tables; the view is in "
                                                  "<schema>_serving."),
    },
    "pseudonymisation": {
        "key_file": Key(v.path, None, "The secret HMAC key for learner identifiers; default "
                                     "<state directory>/pseudonymisation.key, created on the first run."),
    },
    "retention": {
        "staging_days": Key(v.typed(int, 1, 36600), None,
                            "Staged events of local days older than this many days are dropped; those days stay "
                            "as published and later statements for them are quarantined (unset: keep everything)."),
        "quarantine_days": Key(v.typed(int, 1, 3660), 30, "Quarantined records are deleted after this many days."),
    },
    "retry": {
        # Scheduled runs retry a source or store that is unreachable (exit 69).
        "attempts": Key(v.typed(int, 1, 20), 3, "Attempts of a scheduled run while the source or store is "
                                               "unreachable (exit 69)."),
        "delay": Key(v.parse_duration, 600, "Pause between those attempts."),
    },
    "alerts": {
        "mail_to": Key(v.typed(str), None, "Mail a failed run's alert to this address."),
        "sendmail": Key(v.path, "/usr/sbin/sendmail", "The sendmail program the alert mail goes through."),
        # Files holding URLs with tokens are credentials: a bare name is looked up in
        # $CREDENTIALS_DIRECTORY (LoadCredential=), anything else is a path.
        "webhook_url_file": Key(v.path, None, "A file holding the URL a failed run's alert is POSTed to as JSON."),
        "healthchecks_url_file": Key(v.path, None, "A file holding the Healthchecks URL scheduled runs ping."),
        "timeout": Key(v.parse_duration, 10, "Timeout of each delivery and ping."),
    },
    "monitoring": {
        "textfile": Key(v.path, None, "Write Prometheus gauges to this node_exporter textfile after each run."),
        "grace": Key(v.parse_duration, 7200, "status calls the data stale this long after a missed weekday "
                                           "04:15 run."),
    },
    "privacy": {
        "method": Key(v.choice("cell-key", "none"), "cell-key",
                      "cell-key: every published count gets a bounded noise fixed by its records (the cell key "
                      "method); none: exact counts, whose withheld values other columns can give back."),
        "max_noise": Key(v.typed(int, 0, 20), 3, "D: published counts are within +-D of the true count."),
        "variance": Key(v.variance, 2.0, "The noise's variance; at most what max_noise allows (3.33 for 3, 2.0 for 2, "
                                        "1.0 for 1)."),
        "withhold_zeros": Key(v.boolean, False, "Withhold zero counts like small ones, so that a withheld value no "
                                            "longer says that at least one learner had it."),
    },
    "publication": {
        "path": Key(v.path, None, "sqlite: the file dashboards read, replaced after each run; default "
                                 "<state directory>-publication/serving.sqlite."),
        "group": Key(v.typed(str), None, "The group that may read the publication (mode 0640); unset: every "
                                        "account may (0644)."),
    },
}


def _check_schema(schema):
    """Refuse, at import, a SCHEMA entry that is not a Key with a documented validator and a description
    (the man page and the typed sections are built from them)."""
    for section, keys in schema.items():
        for name, key in keys.items():
            if (not isinstance(key, Key) or not callable(key.check) or not (key.description or "").strip()
                    or not getattr(key.check, "accepts", None)):
                raise TypeError(f"SCHEMA[{section!r}][{name!r}] must be Key(check, default, description) with a "
                                f"validator from lms_refresh.validators, not {key!r}")


_check_schema(SCHEMA)


def _settings_class(name, doc, section, keys):
    """A frozen dataclass with one typed field per key of SCHEMA[section] in `keys`: the keys are
    declared once, in SCHEMA, and the classes follow from it."""
    def annotation(key):  # a key without a default may be unset
        spec = SCHEMA[section][key]
        return spec.check.type | None if spec.default is None else spec.check.type

    fields = [(key, annotation(key)) for key in keys]
    cls = dataclasses.make_dataclass(name, fields, frozen=True)
    cls.__doc__, cls.__module__ = doc, __name__
    return cls


# One class per table of the file (the top level's keys are Config's own fields).
Window = _settings_class("Window", "[window]: which records a run reads.", "window", SCHEMA["window"])
Store = _settings_class("Store", "[store]: where the metrics live; `path` is resolved (sqlite), `url` "
                        "is set for postgresql.", "store", SCHEMA["store"])
Retention = _settings_class("Retention", "[retention]: how long staged and quarantined records stay.",
                            "retention", SCHEMA["retention"])
Retry = _settings_class("Retry", "[retry]: a scheduled run's attempts while unreachable.", "retry", SCHEMA["retry"])
Alerts = _settings_class("Alerts", "[alerts]: who hears of a failed run.", "alerts", SCHEMA["alerts"])
Monitoring = _settings_class("Monitoring", "[monitoring]: the textfile and staleness.", "monitoring",
                             SCHEMA["monitoring"])
Privacy = _settings_class("Privacy", "[privacy]: how published counts are protected.", "privacy", SCHEMA["privacy"])
Publication = _settings_class("Publication", "[publication]: the file dashboards read; `path` is resolved.",
                              "publication", SCHEMA["publication"])
# [source]: one class per source type, holding `type` and that type's keys only.
SOURCE_SETTINGS = {
    kind: _settings_class("".join(part.title() for part in kind.split("-")) + "Source",
                          f"[source] of type {kind!r}.", "source", ("type",) + tuple(sorted(keys)))
    for kind, (keys, _) in SOURCE_KEYS.items()
}


@dataclasses.dataclass(frozen=True)
class Config:
    """A validated configuration: the top-level keys, then one typed object per table.

    `origin` names the file it came from; `state_directory` and `key_file` are
    resolved (systemd's $STATE_DIRECTORY wins), as are `store.path` (SQLite)
    and `publication.path`.
    """

    origin: str
    timezone: str
    min_cell_size: int
    max_quarantine_share: float
    state_directory: str
    key_file: str
    window: Window
    source: object  # one of SOURCE_SETTINGS' classes
    store: Store
    retention: Retention
    retry: Retry
    alerts: Alerts
    monitoring: Monitoring
    privacy: Privacy
    publication: Publication

    @property
    def store_location(self):
        """The store as messages name it: the SQLite file, or the PostgreSQL URL (never with a password)."""
        return self.store.url if self.store.type == "postgresql" else self.store.path


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
            v.timezone(values["timezone"])
        except ValueError as error:
            raise ConfigError(f"{origin}: key 'timezone' {_phrase(error)}.")
    return values


def load_alerts(path):
    """Return the validated [alerts] table of the file at `path`, ignoring every other table.

    The alert must go out exactly when the rest of the configuration is broken
    (a misspelt key makes the run exit 78), so it depends on nothing else.
    """
    values = _section_values(read_toml(path), "alerts", path)
    return Alerts(**{key: values[f"alerts.{key}"] for key in SCHEMA["alerts"]})


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
    _check_privacy(values, origin)
    state_directory = resolve_state_directory(values["state_directory"], environ)
    key_file = values["pseudonymisation.key_file"] or os.path.join(state_directory, "pseudonymisation.key")
    if os.path.isdir(key_file):
        raise ConfigError(f"{origin}: key 'pseudonymisation.key_file' names a directory ({key_file}); "
                          "name the key file itself.")
    # Paths that default to a place in the state directory are resolved once, here.
    if values["store.type"] == "sqlite":
        values["store.path"] = values["store.path"] or os.path.join(state_directory, "metrics.sqlite")
    values["publication.path"] = values["publication.path"] or os.path.join(
        state_directory.rstrip("/") + "-publication", "serving.sqlite")

    def table(cls, section):
        return cls(**{field.name: values[f"{section}.{field.name}"] for field in dataclasses.fields(cls)})

    config = Config(
        origin=origin,
        timezone=values["timezone"],
        min_cell_size=values["min_cell_size"],
        max_quarantine_share=values["max_quarantine_share"],
        state_directory=state_directory,
        key_file=key_file,
        window=table(Window, "window"),
        source=table(SOURCE_SETTINGS[values["source.type"]], "source"),
        store=table(Store, "store"),
        retention=table(Retention, "retention"),
        retry=table(Retry, "retry"),
        alerts=table(Alerts, "alerts"),
        monitoring=table(Monitoring, "monitoring"),
        privacy=table(Privacy, "privacy"),
        publication=table(Publication, "publication"),
    )
    refuse_collisions(config)  # before anything is written: no key may name a file another one does
    return config


def _check_privacy(values, origin):
    """Refuse a variance that privacy.max_noise cannot carry."""
    from lms_refresh.privacy import noise_bounds

    method, noise, variance = (values[f"privacy.{key}"] for key in ("method", "max_noise", "variance"))
    if method == "cell-key" and variance > noise_bounds(noise):
        raise ConfigError(
            f"{origin}: key 'privacy.variance' is {variance}, more than privacy.max_noise = "
            f"{noise} allows ({float(noise_bounds(noise)):.2f}); lower the variance or raise max_noise.")


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


def is_configured(path, environ):
    """Return False only for an install not configured so far: no file, or a file whose every
    setting is valid but that has no [source] table yet (the packaged conffile, untouched or not).

    Anything else that is wrong — invalid TOML, a misspelt table such as [sources], an unknown
    key, a bad value — counts as configured, so the run itself fails loudly (78) and alerts.
    """
    try:
        document = read_toml(path)
    except NotConfiguredError:
        return False
    except ConfigError:
        return True
    try:
        validate(document, path, environ)
    except NotConfiguredError:
        try:  # the tables after [source] must be valid too: a typo there is not "unconfigured"
            for section in SCHEMA:
                if section != "source":
                    _section_values(document, section, path)
        except ConfigError:
            return True
        return False
    except ConfigError:
        return True
    return True


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
