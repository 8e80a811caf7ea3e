"""The typed, frozen sections of a validated configuration: one class per table of the file.

Each field is a key declared in `schema.SCHEMA` (its validator, default and description live
there, once); tests/unit/test_config.py checks these classes against it field by field, so the two
cannot drift apart. A field typed `X | None` is a key without a default: it may be unset.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Window:
    """[window]: which records a run reads."""

    bootstrap_days: int
    safety_lag: int
    lookback: int


@dataclasses.dataclass(frozen=True)
class Store:
    """[store]: where the metrics live; `path` is resolved (sqlite), `url` is set for postgresql."""

    type: str
    path: str | None
    url: str | None
    password_file: str | None
    schema: str


@dataclasses.dataclass(frozen=True)
class Retention:
    """[retention]: how long staged and quarantined records stay."""

    staging_days: int | None
    quarantine_days: int


@dataclasses.dataclass(frozen=True)
class Retry:
    """[retry]: a scheduled run's attempts while unreachable."""

    attempts: int
    delay: int


@dataclasses.dataclass(frozen=True)
class Alerts:
    """[alerts]: who hears of a failed run."""

    mail_to: str | None
    sendmail: str
    webhook_url_file: str | None
    healthchecks_url_file: str | None
    timeout: int


@dataclasses.dataclass(frozen=True)
class Monitoring:
    """[monitoring]: the textfile and staleness."""

    textfile: str | None
    grace: int


@dataclasses.dataclass(frozen=True)
class Privacy:
    """[privacy]: how published counts are protected."""

    method: str
    max_noise: int
    variance: float
    withhold_zeros: bool


@dataclasses.dataclass(frozen=True)
class Publication:
    """[publication]: the file dashboards read; `path` is resolved; the course names' language."""

    path: str | None
    group: str | None
    language: str


@dataclasses.dataclass(frozen=True)
class Report:
    """[report]: the HTML report a run writes beside the publication; `path` is resolved."""

    enabled: bool
    path: str | None


@dataclasses.dataclass(frozen=True)
class Term:
    """One [[terms]] table: an academic term, its days inclusive (ISO text)."""

    name: str
    first_day: str
    last_day: str


@dataclasses.dataclass(frozen=True)
class Category:
    """One [[categories]] table: a course category of an xAPI source, the patterns of the course IRIs it holds and the
    name of the category it is in (None: a top-level one)."""

    name: str
    courses: tuple
    parent: str | None


@dataclasses.dataclass(frozen=True)
class XapiNdjsonSource:
    """[source] of type "xapi-ndjson"."""

    type: str
    batch_size: int
    course_pattern: str
    max_record_bytes: int
    path: str | None


@dataclasses.dataclass(frozen=True)
class XapiLrsSource:
    """[source] of type "xapi-lrs"."""

    type: str
    batch_size: int
    ca_bundle: str | None
    course_pattern: str
    endpoint: str | None
    max_pages: int
    max_response_bytes: int
    overlap: int
    page_size: int
    password_file: str | None
    read_deadline: int
    request_attempts: int
    request_delay: int
    response_deadline: int
    timeout: int
    username: str | None


@dataclasses.dataclass(frozen=True)
class MoodleSource:
    """[source] of type "moodle"."""

    type: str
    batch_size: int
    guest_user_id: int
    id_lookback: int
    learner_roles: tuple
    password_file: str | None
    prefix: str
    site_course_id: int
    site_url: str | None
    timeout: int
    url: str | None



# [source]: one class per source type, holding `type` and that type's keys only.
SOURCE_SETTINGS = {
    "xapi-ndjson": XapiNdjsonSource,
    "xapi-lrs": XapiLrsSource,
    "moodle": MoodleSource,
}
