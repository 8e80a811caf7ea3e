"""Every configuration key, declared once: its validator (what it accepts, its type), its default
and its one-line description. The typed sections (`sections.py`), the man page's CONFIGURATION
section and lms-refresh.toml(5), docs/reference/configuration.md and `debian/config.toml` are built from or checked
against `SCHEMA`.
"""

import collections

from lms_refresh.config import validators as v

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
                "guest_user_id", "timeout", "learner_roles"}, {"url", "site_url"}),
}

# The [store] keys each store type takes (beyond type), and those it requires.
STORE_KEYS = {
    "sqlite": ({"path"}, set()),
    "postgresql": ({"url", "password_file", "schema"}, {"url"}),
}
# Keys that only a SQLite store uses (its publication file's group and the report beside it): under another store
# they are accepted, for a configuration may switch stores, but `check` and every run say that they do nothing.
# Not publication.path: a PostgreSQL store's runs and copy-store remove the SQLite publication left there.
SQLITE_ONLY_KEYS = ("publication.group", "report.enabled", "report.path")
# The tables whose keys depend on their `type`.
TYPE_KEYS = {"source": SOURCE_KEYS, "store": STORE_KEYS}

# section -> key -> Key(check, default, description[, example]). Every entry is a `Key`:
# its description is the one place that explains the key (the man page is
# generated from it). A default of `None` means "unset" or "derived" (the
# description says from what); REQUIRED means the key must be given.
REQUIRED = object()
MAX_TERMS = 100  # [[terms]] tables at most
MAX_TERM_DAYS = 731  # a term's days, its first and last included, at most


class Key(collections.namedtuple("Key", "check default description example", defaults=(None,))):
    """One configuration key: a validator (value -> value, or ValueError), its default, one line on what it does,
    and, for a key with no default, an example value as TOML text (the packaged conffile shows it commented out;
    a dict by source type where the types' examples differ)."""

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
                                            "else /var/lib/lms-refresh.", example='"/var/lib/lms-refresh"'),
    },
    "window": {
        "bootstrap_days": Key(v.typed(int, 1, 3660), 7, "How many days back the very first run reads."),
        "safety_lag": Key(v.parse_duration, 300, "A run reads up to now minus this lag."),
        "lookback": Key(v.parse_duration, 0, "Re-read this much before the watermark (safe: staging is keyed)."),
    },
    # One table for every source type; SOURCE_KEYS says which keys each type takes (STORE_KEYS for [store]).
    "source": {
        "type": Key(v.choice(*SOURCE_TYPES), REQUIRED, "The kind of source: " + ", ".join(SOURCE_TYPES) + "."),
        "batch_size": Key(v.typed(int, 1, 100_000), 5000, "Records per batch; bounds memory."),
        "course_pattern": Key(v.regex, r"^(.+?/course/[^/?#]+)",
                              "xAPI: the course is this pattern's capture group on the object id "
                              "(then parent, grouping ids) when no context activity is a course."),
        "path": Key(v.path, None, "xapi-ndjson: a file or a directory of *.ndjson, *.jsonl (and .gz).",
                    example='"/srv/xapi-exports"'),
        "max_record_bytes": Key(v.typed(int, 1024, 16 << 20), 1 << 20,
                                "xapi-ndjson: a longer line is skipped unread and quarantined by origin and length."),
        "endpoint": Key(v.http_url, None, "xapi-lrs: the xAPI base URL before /statements, without credentials.",
                        example='"https://lrs.example.edu/xAPI/"'),
        "username": Key(v.typed(str), None, "xapi-lrs: the HTTP basic auth user.", example='"lms-refresh"'),
        "password_file": Key(v.credential, None, "xapi-lrs, moodle: the password's file, a credential name "
                                          "($CREDENTIALS_DIRECTORY, else /etc/lms-refresh/credentials) or a path.",
                                          example={"xapi-lrs": '"lrs-password"', "moodle": '"moodle-db-password"'}),
        "ca_bundle": Key(v.path, None, "xapi-lrs: CA certificates for a private CA (TLS is always verified).",
                         example='"/etc/ssl/certs/university-ca.pem"'),
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
        "url": Key(v.database_url, None, "moodle: Moodle's database, postgresql://, mysql:// or mariadb://.",
                   example='"postgresql://lms_reader@moodle-db.example.edu/moodle"'),
        "prefix": Key(v.identifier_prefix, "mdl_", "moodle: the table prefix ($CFG->prefix)."),
        "site_url": Key(v.http_url, None, "moodle: $CFG->wwwroot; names the courses in the store.",
                        example='"https://moodle.example.edu"'),
        "id_lookback": Key(v.typed(int, 0, 10_000_000), 10_000, "moodle: log ids re-read before the watermark."),
        "site_course_id": Key(v.typed(int, 0), 1, "moodle: $SITEID; the front page is not a course."),
        "guest_user_id": Key(v.typed(int, 0), 1, "moodle: $CFG->siteguest; the guest is not a learner."),
        "learner_roles": Key(v.moodle_roles, ("student",), "moodle: the roles whose enrolled users are counted as "
                             "enrolled learners, each a role's short name or archetype, assigned in the course."),
    },
    "store": {
        "type": Key(v.choice(*STORE_TYPES), "sqlite", "The kind of store: " + ", ".join(STORE_TYPES) + "."),
        "path": Key(v.path, None, "sqlite: the store file; default <state directory>/metrics.sqlite.",
                    example='"/var/lib/lms-refresh/metrics.sqlite"'),
        "url": Key(v.postgres_url, None, "postgresql: a URL without the password, "
                                        "e.g. postgresql://lms_refresh@db.example.edu/metrics.",
                                        example='"postgresql://lms_refresh@db.example.edu/metrics"'),
        "password_file": Key(v.credential, None, "postgresql: the password's file, a credential name "
                                          "($CREDENTIALS_DIRECTORY, else /etc/lms-refresh/credentials) or a path.",
                                          example='"store-password"'),
        "schema": Key(v.schema_name, "lms_refresh", "postgresql: the schema of the tables; the view is in "
                                                  "<schema>_serving."),
    },
    "pseudonymisation": {
        "key_file": Key(v.path, None, "The secret HMAC key for learner identifiers; default "
                                     "<state directory>/pseudonymisation.key, created on the first run.",
                                     example='"/var/lib/lms-refresh/pseudonymisation.key"'),
    },
    "retention": {
        "staging_days": Key(v.typed(int, 1, 36600), None,
                            "Staged events of local days older than this many days are dropped; those days stay "
                            "as published and later statements for them are quarantined (unset: keep everything).",
                            example="400"),
        "quarantine_days": Key(v.typed(int, 1, 3660), 30, "Quarantined records are deleted after this many days."),
    },
    "retry": {
        # Scheduled runs retry a source or store that is unreachable (exit 69).
        "attempts": Key(v.typed(int, 1, 20), 3, "Attempts of a scheduled run while the source or store is "
                                               "unreachable (exit 69)."),
        "delay": Key(v.parse_duration, 600, "Pause between those attempts."),
    },
    "alerts": {
        "mail_to": Key(v.typed(str), None, "Mail a failed run's alert to this address.",
                       example='"data-team@example.edu"'),
        "sendmail": Key(v.path, "/usr/sbin/sendmail", "The sendmail program the alert mail goes through."),
        # Files holding URLs with tokens are credentials: a bare name is looked up in
        # $CREDENTIALS_DIRECTORY (LoadCredential=), anything else is an absolute path.
        "webhook_url_file": Key(v.credential, None,
                                "A file holding the URL a failed run's alert is POSTed to as JSON.",
                                example='"alert-webhook"'),
        "healthchecks_url_file": Key(v.credential, None, "A file holding the Healthchecks URL scheduled runs ping.",
                                     example='"healthchecks-url"'),
        "timeout": Key(v.at_least_a_second, 10, "Timeout of each delivery and ping."),
    },
    "monitoring": {
        "textfile": Key(v.path, None, "Write Prometheus gauges to this node_exporter textfile after each run.",
                        example='"/var/lib/prometheus/node-exporter/lms_refresh.prom"'),
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
                                 "<state directory>-publication/serving.sqlite.",
                                 example='"/var/lib/lms-refresh-publication/serving.sqlite"'),
        "group": Key(v.typed(str), None, "The group that may read the publication (mode 0640); unset: every "
                                        "account may (0644).", example='"lms-dashboard"'),
        "language": Key(v.language_tag, "en", "The language of the published course names: Moodle's multilang "
                                            "markup is reduced to it; an xAPI name map is read in it, else en-US, "
                                            "en, any."),
    },
    "report": {
        "enabled": Key(v.boolean, True, "sqlite: write the HTML report beside the publication after each run "
                                        "(see lms-refresh report); false: do not."),
        "path": Key(v.path, None, "The HTML report a run writes, with the publication's mode and group; default "
                                  "report.html in the publication's directory.",
                                  example='"/var/lib/lms-refresh-publication/report.html"'),
    },
}


# [[terms]]: the academic terms, an array of tables (one `[[terms]]` header per term, in any order; terms may
# overlap). Each is a period of the publication's term_metrics (lms_refresh.store.periods).
TERM_KEYS = {
    "name": Key(v.label, REQUIRED, "The term's name: its `period` in term_metrics; no two terms share one, nor "
                                       "differ only in letter case or Unicode spelling.", example='"Autumn 2026"'),
    "first_day": Key(v.calendar_day, REQUIRED, "Its first local day, inclusive.", example="2026-09-14"),
    "last_day": Key(v.calendar_day, REQUIRED,
                    f"Its last local day, inclusive: on or after first_day, at most {MAX_TERM_DAYS - 1} days after "
                    f"it (a term of {MAX_TERM_DAYS} days at most).", example="2026-12-18"),
}


MAX_CATEGORIES = 1000  # [[categories]] tables at most

# [[categories]]: the course categories of an xAPI source (Moodle's come from its own course_categories), an array of
# tables, one per category; each is a category of the publication's category tables (lms_refresh.store.categories).
CATEGORY_KEYS = {
    "name": Key(v.label, REQUIRED, "The category's name, as the category tables show it; no two categories share "
                                   "one, nor differ only in letter case or Unicode spelling.",
                example='"Faculty of Science"'),
    "courses": Key(v.course_patterns, (), "The course IRIs it holds, as patterns; a course counts in the first "
                                          "category (in the order written) with a pattern that matches its IRI, "
                                          "and in every category above that one.",
                   example='["https://lms.example.edu/course/bio-*"]'),
    "parent": Key(v.label, None, "The `name` of the category it is in (another [[categories]] table); none: a "
                                 "top-level category.", example='"Faculty of Science"'),
}


def _check_schema(schema):
    """Refuse, at import, a SCHEMA entry that is not a Key with a documented validator and a description
    (the man page and the typed sections are built from them)."""
    for section, keys in schema.items():
        for name, key in keys.items():
            if (not isinstance(key, Key) or not callable(key.check) or not (key.description or "").strip()
                    or not getattr(key.check, "accepts", None)):
                raise TypeError(f"SCHEMA[{section!r}][{name!r}] must be Key(check, default, description) with a "
                                f"validator from lms_refresh.config.validators, not {key!r}")


_check_schema(SCHEMA)
_check_schema({"terms": TERM_KEYS, "categories": CATEGORY_KEYS})
