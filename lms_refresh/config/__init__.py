"""Load and validate the TOML configuration.

Every key is declared once in `SCHEMA`; unknown keys, wrong types and
impossible values are refused with one sentence naming the file and the key.
"""

import dataclasses
import datetime as dt
import os
import tomllib

from lms_refresh.config import validators as v
from lms_refresh.config.drivers import refuse_missing_drivers
from lms_refresh.config.paths import refuse_collisions
from lms_refresh.config.schema import (
    CATEGORY_KEYS,
    DEFAULT_STATE_DIRECTORY,
    MAX_CATEGORIES,
    MAX_TERM_DAYS,
    MAX_TERMS,
    REQUIRED,
    SCHEMA,
    SQLITE_ONLY_KEYS,
    TERM_KEYS,
    TYPE_KEYS,
)
from lms_refresh.config.sections import (
    SOURCE_SETTINGS,
    Alerts,
    Category,
    Monitoring,
    MoodleSource,
    Privacy,
    Publication,
    Report,
    Retention,
    Retry,
    Store,
    Term,
    Window,
    XapiLrsSource,
    XapiNdjsonSource,
)
from lms_refresh.disclosure import folding
from lms_refresh.errors import ConfigError, NotConfiguredError
from lms_refresh.regular_files import NotRegularFile, TooLarge, read_bounded


@dataclasses.dataclass(frozen=True)
class Config:
    """A validated configuration: the top-level keys, then one typed object per table.

    `origin` names the file it came from; `state_directory` and `key_file` are
    resolved (systemd's $STATE_DIRECTORY wins), as are `store.path` (SQLite)
    `publication.path` and `report.path`.
    """

    origin: str
    timezone: str
    min_cell_size: int
    max_quarantine_share: float
    state_directory: str
    key_file: str
    window: Window
    source: XapiNdjsonSource | XapiLrsSource | MoodleSource  # by [source] type, see SOURCE_SETTINGS
    store: Store
    retention: Retention
    retry: Retry
    alerts: Alerts
    monitoring: Monitoring
    privacy: Privacy
    publication: Publication
    report: Report
    terms: tuple = ()  # of Term, from the [[terms]] tables, as written
    categories: tuple = ()  # of Category, from the [[categories]] tables, as written
    unused: tuple = ()  # the keys written in the file that this store type does not use (SQLITE_ONLY_KEYS)

    def unused_keys_sentence(self):
        """The warning `check` and each run give about `unused`, or None."""
        if not self.unused:
            return None
        keys = [f"'{key}'" for key in self.unused]
        named = (f"keys {', '.join(keys[:-1])} and {keys[-1]} only apply" if len(keys) > 1
                 else f"key {keys[0]} only applies")
        return (f"{self.origin}: {named} to a SQLite store; with store type \"{self.store.type}\" no publication "
                f"file or report is written (dashboards read the serving views), so "
                f"{'they do' if len(keys) > 1 else 'it does'} nothing: remove {'them' if len(keys) > 1 else 'it'}.")

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


MAX_CONFIG_BYTES = 1 << 20  # the packaged configuration, every key explained, is about 20 KB


def read_toml(path):
    """Given a path, return the parsed TOML document or raise ConfigError saying what is wrong."""
    try:
        return tomllib.loads(read_bounded(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise NotConfiguredError(
            f"No configuration file at {path}; create it (see man 5 lms-refresh.toml) "
            "or pass --config / set LMS_REFRESH_CONFIG."
        ) from None
    except PermissionError:
        raise ConfigError(f"Cannot read the configuration file {path}: permission denied.") from None
    except NotRegularFile as error:
        raise ConfigError(f"The configuration path {path} is {error.strerror}, not a regular file; "
                          "point --config at the TOML file.") from None
    except TooLarge:
        raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a configuration file.") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}.") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not valid UTF-8 text.") from None


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
                raise ConfigError(f"{origin}: key '{name}' {_phrase(error)}.") from None
        elif spec.default is REQUIRED and section == "source" and "source" not in document:
            raise NotConfiguredError(
                f"No source is configured yet: {origin} has no [source] table; uncomment and fill in one of "
                "the commented [source] examples in it (xapi-ndjson, xapi-lrs or moodle; see "
                "/usr/share/doc/lms-refresh/docs/sources/), then run 'lms-refresh check'."
            )
        elif spec.default is REQUIRED:
            raise ConfigError(f"{origin}: key '{name}' is required.")
        else:
            values[name] = spec.default
    if "timezone" in keys and "timezone" not in table:
        try:  # the default zone needs the time zone database too
            v.timezone(values["timezone"])
        except ValueError as error:
            raise ConfigError(f"{origin}: key 'timezone' {_phrase(error)}.") from None
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
        if key in ("terms", "categories"):
            continue  # an array of tables: _terms, _categories
        if key in SCHEMA and key != "":
            if not isinstance(value, dict):
                raise ConfigError(f"{origin}: '{key}' must be a table ([{key}]).")
        elif key not in SCHEMA[""]:
            raise ConfigError(f"{origin}: unknown key '{key}' (known: {', '.join(_known_keys())}).")
    for section in SCHEMA:
        values.update(_section_values(document, section, origin))

    for section in TYPE_KEYS:
        _check_type_keys(section, document.get(section, {}), values, origin)
    refuse_missing_drivers(values, origin)
    staging_days = values["retention.staging_days"]
    if staging_days is not None and staging_days < values["window.bootstrap_days"]:
        raise ConfigError(f"{origin}: key 'retention.staging_days' ({staging_days}) must be at least "
                          f"window.bootstrap_days ({values['window.bootstrap_days']}), or a first run would "
                          "quarantine the days it reads.")
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
    values["report.path"] = values["report.path"] or os.path.join(
        os.path.dirname(values["publication.path"]), "report.html")

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
        report=table(Report, "report"),
        terms=_terms(document.get("terms", []), origin),
        categories=_categories(document.get("categories", []), origin, values["source.type"]),
        unused=() if values["store.type"] == "sqlite" else tuple(
            key for key in SQLITE_ONLY_KEYS if key.split(".")[1] in document.get(key.split(".")[0], {})),
    )
    refuse_collisions(config)  # before anything is written: no key may name a file another one does
    return config


def _array_of_tables(tables, origin, section, noun, keys, most):
    """Yield (number, how an error names it, its values checked by `keys`) for each table of the array of tables
    `section` ([[terms]], [[categories]]): an error names the table by its place and its name."""
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise ConfigError(f"{origin}: '{section}' must be an array of tables, one [[{section}]] header per {noun}.")
    if len(tables) > most:
        raise ConfigError(f"{origin}: {len(tables)} [[{section}]] tables, more than the {most} allowed.")
    for number, table in enumerate(tables, 1):
        shown = table.get("name")
        which = f"{noun} {number}" + (f" ({str(shown)[:100]!r})" if isinstance(shown, str) else "")
        for key in table:
            if key not in keys:
                raise ConfigError(f"{origin}: {which}: unknown key '{section}.{key}' (known in [[{section}]]: "
                                  f"{', '.join(sorted(keys))}).")
        values = {}
        for key, spec in keys.items():
            if key not in table:
                if spec.default is REQUIRED:
                    raise ConfigError(f"{origin}: {which}: key '{section}.{key}' is required.")
                values[key] = spec.default
                continue
            try:
                values[key] = spec.check(table[key])
            except ValueError as error:
                raise ConfigError(f"{origin}: {which}: key '{section}.{key}' {_phrase(error)}.") from None
        yield number, which, values


def _terms(tables, origin):
    """Validate the [[terms]] tables; return them as Terms. An error names the term by its place and name."""
    terms, names = [], {}
    for number, which, values in _array_of_tables(tables, origin, "terms", "term", TERM_KEYS, MAX_TERMS):
        term = Term(**values)
        length = (dt.date.fromisoformat(term.last_day) - dt.date.fromisoformat(term.first_day)).days
        if length < 0:
            raise ConfigError(f"{origin}: {which}: key 'terms.last_day' ({term.last_day}) is before its first_day "
                              f"({term.first_day}).")
        if length >= MAX_TERM_DAYS:
            raise ConfigError(f"{origin}: {which}: {length + 1} days from first_day to last_day, more than "
                              f"{MAX_TERM_DAYS}.")
        seen = folding.looks_like(term.name)  # two rows of term_metrics that look the same are refused
        if seen in names:
            other, spelt = names[seen]
            raise ConfigError(f"{origin}: {which}: key 'terms.name' is the name of term {other} too"
                              + ("" if spelt == term.name else f" ({spelt[:100]!r}, as a reader sees it)")
                              + "; each term needs a name of its own.")
        names[seen] = number, term.name
        terms.append(term)
    return tuple(terms)


def _categories(tables, origin, source_type):
    """Validate the [[categories]] tables; return them as Categories. An error names the category by its place and
    name."""
    if tables and source_type == "moodle" and isinstance(tables, list):
        raise ConfigError(f"{origin}: [[categories]] applies to xAPI sources only: a Moodle source's categories are "
                          "its own course categories (course_categories); remove the [[categories]] tables.")
    categories, names = [], {}
    for number, which, values in _array_of_tables(tables, origin, "categories", "category", CATEGORY_KEYS,
                                                  MAX_CATEGORIES):
        seen = folding.looks_like(values["name"])  # two categories that look the same are refused
        if seen in names:
            raise ConfigError(f"{origin}: {which}: key 'categories.name' is the name of category {names[seen]} too; "
                              "each category needs a name of its own.")
        names[seen] = number
        categories.append(Category(**values))
    known = {category.name for category in categories}
    for number, category in enumerate(categories, 1):
        if category.parent is not None and category.parent not in known:
            raise ConfigError(f"{origin}: category {number} ({category.name[:100]!r}): key 'categories.parent' "
                              f"({category.parent[:100]!r}) names no [[categories]] table.")
    parents = {category.name: category.parent for category in categories}
    for number, category in enumerate(categories, 1):
        above, seen = category.parent, {category.name}
        while above is not None:
            if above in seen:
                raise ConfigError(f"{origin}: category {number} ({category.name[:100]!r}) is inside itself through "
                                  "its parents; a category's parents must end at a top-level category.")
            seen.add(above)
            above = parents[above]
    return tuple(categories)


def _check_privacy(values, origin):
    """Refuse a variance that privacy.max_noise cannot carry."""
    from lms_refresh.disclosure.cell_key import noise_bounds

    method, noise, variance = (values[f"privacy.{key}"] for key in ("method", "max_noise", "variance"))
    if method == "cell-key" and variance > noise_bounds(noise):
        raise ConfigError(
            f"{origin}: key 'privacy.variance' is {variance}, more than privacy.max_noise = "
            f"{noise} allows ({float(noise_bounds(noise)):.2f}); lower the variance or raise max_noise.")


def _check_type_keys(section, table, values, origin):
    """Refuse keys of [source] or [store] that do not apply to its chosen type, and require the ones it needs."""
    kind, by_type = values[f"{section}.type"], TYPE_KEYS[section]
    allowed, required = by_type[kind]
    for key in table:
        if key != "type" and key not in allowed:
            users = [name for name, (keys, _) in by_type.items() if key in keys]
            raise ConfigError(
                f"{origin}: key '{section}.{key}' does not apply to {section} type \"{kind}\""
                + (f" (it is for {', '.join(users)})." if users else ".")
            )
    for key in sorted(required):
        if values[f"{section}.{key}"] is None:
            raise ConfigError(f"{origin}: key '{section}.{key}' is required when {section}.type is \"{kind}\".")


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
    # [[terms]], [[categories]]: arrays of tables
    return sorted(set(SCHEMA[""]) | {name for name in SCHEMA if name} | {"terms", "categories"})


def _phrase(error):
    text = str(error)
    if text.startswith(("expected", "must", "may", "is ")):
        return text
    return f"is invalid: {text}"
