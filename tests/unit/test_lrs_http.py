"""The LRS client's rules (lms_refresh.sources.lrs_http), without a server: links, Retry-After, backoff."""

import datetime as dt

import pytest

from helpers.readers import lrs_source
from lms_refresh.errors import ConfigError, UnavailableError
from lms_refresh.sources import lrs_http
from lms_refresh.sources.lrs_http import retry_after_seconds

UTC = dt.UTC


def test_more_links_stay_on_the_endpoints_origin():
    source = lrs_source()
    assert source.follow("/xAPI/statements?page=2") == "https://lrs.example.edu/xAPI/statements?page=2"
    assert source.follow("statements?page=2") == "https://lrs.example.edu/xAPI/statements?page=2"
    assert source.follow("https://LRS.example.edu:443/xAPI/statements?p=3") == \
        "https://LRS.example.edu:443/xAPI/statements?p=3"
    for foreign in ("http://lrs.example.edu/xAPI/statements", "https://lrs.example.edu:8443/xAPI/statements",
                    "https://evil.example.org/xAPI/statements", "//evil.example.org/steal"):
        with pytest.raises(ConfigError, match="was not followed"):
            source.follow(foreign)


def test_retry_after_in_seconds_or_as_a_date():
    now = dt.datetime(2026, 11, 30, 4, 15, tzinfo=UTC)
    assert retry_after_seconds("7", now) == 7
    assert retry_after_seconds("Mon, 30 Nov 2026 04:15:30 GMT", now) == 30
    assert retry_after_seconds("Mon, 30 Nov 2026 04:00:00 GMT", now) == 0
    assert retry_after_seconds("soon", now) is None and retry_after_seconds(None, now) is None


def test_backoff_is_exponential_and_ends_in_69():
    sleeps = []
    source = lrs_source(sleeps=sleeps)

    def fail(url, params, where, deadline):
        raise lrs_http._Retryable("HTTP 503")

    source._attempt = fail
    with pytest.raises(UnavailableError, match=r"could not be read after 3 attempt\(s\) \(HTTP 503\)"):
        source.get("https://lrs.example.edu/xAPI/statements", {})
    assert sleeps == [2, 4]  # jitter pinned at its maximum
