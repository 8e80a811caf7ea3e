"""Projects reading a Ralph LRS, and sample statements timed so that Ralph (on the real clock) stores them."""

import datetime as dt
import json
import time

from helpers.project import Project
from lms_refresh.demo.sample import generate

PARIS = "Europe/Paris"


def lrs_project(root, ralph, postgres=None, endpoint=None, password_file=None, **settings):
    source = {"type": "xapi-lrs", "endpoint": endpoint or ralph.endpoint, "username": ralph.USER,
              "password_file": password_file or ralph.password_file, "page_size": 500, "overlap": "20d",
              "request_attempts": 2, "request_delay": "0s", "timeout": "10s"}
    source.update(settings)
    return Project(root, postgres, source=source)


def utc_now():
    return dt.datetime.now(dt.UTC)


def text(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Ralph stores statements at its own clock's time and filters since/until on their timestamps, so the
# sample must lie in the last days of the real clock. It starts on a weekday of ANCHOR's: the generator
# then draws the same statements (ids, learners, verbs, voids, counts) whatever today is, only dated
# a whole number of weeks later, and every count below is the sample's own, never today's.
ANCHOR = dt.date(2026, 11, 2)  # a Monday


def sample_start(days, now):
    """The latest date on ANCHOR's weekday at least `days` + 2 days before `now`."""
    latest = (now - dt.timedelta(days=days + 2)).date()
    return latest - dt.timedelta(days=(latest - ANCHOR).days % 7)


def sample_statements(seed, learners=600, days=8):
    """Valid sample statements (with voids and late arrivals), timestamps in the last two weeks."""
    start = sample_start(days, utc_now())
    return [json.loads(line) for _, line in generate(seed, start, days, learners=learners, timezone=PARIS,
                                                     malformed_share=0.0, void_share=0.01)]


def post_then_mark(ralph, statements):
    """Post statements; return a time after all of them were stored and before anything later is.

    On the LRS's clock, which sets `stored`, not this process's: two processes need not agree on the time (two
    hosts' clocks drift; under `faketime -f "@<date> <time>"` each process's clock starts at that instant when the
    process starts, so Ralph's lags the tests' by the seconds between their starts). A mark from this process's
    clock could then lie before statements stored since, which a window ending there leaves unread."""
    ralph.post(statements)
    latest = max(parse_stored(s["stored"]) for s in ralph.all_statements())
    mark = latest + dt.timedelta(microseconds=1)
    time.sleep(0.05)  # Ralph stores anything posted from now on after the mark
    return mark


def parse_stored(value):
    """An LRS's `stored` text as an aware datetime (UTC)."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.UTC)
