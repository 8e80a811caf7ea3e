"""What the source readers' unit tests share: the window they read, the statement mapper, an LRS source
built without a server (its rules are tested without one)."""

import datetime as dt

from lms_refresh.config import validate
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.sources.lrs import LrsSource
from lms_refresh.sources.xapi import StatementMapper
from lms_refresh.window import Window

UTC = dt.UTC
WINDOW = Window(dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 11, 3, tzinfo=UTC))
MAPPER = StatementMapper("Europe/Paris", Pseudonymiser(b"k" * 32), r"^(.+?/course/[^/?#]+)")


def lrs_source(endpoint="https://lrs.example.edu/xAPI/", overlap=3600, sleeps=None):
    table = {"type": "xapi-lrs", "endpoint": endpoint, "username": "u", "password_file": "/nonexistent",
             "page_size": 100, "overlap": overlap, "timeout": 5, "request_attempts": 3, "request_delay": 2,
             "response_deadline": 60, "max_response_bytes": 1 << 20, "read_deadline": 600, "max_pages": 1000}
    settings = validate({"source": table}, "test", {}).source
    return LrsSource(settings, MAPPER, {}, sleep=(sleeps if sleeps is not None else []).append, jitter=lambda: 1.0)
