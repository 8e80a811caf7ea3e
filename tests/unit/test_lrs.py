"""The LRS source's rules (lms_refresh.sources.lrs), without a server: its query, its pages."""

import pytest

from helpers.readers import WINDOW, lrs_source
from lms_refresh.errors import UnavailableError


def test_the_query_widens_the_window_by_the_overlap():
    query = lrs_source(overlap=3600).query(WINDOW)
    assert query == {"since": "2026-10-31T22:59:59.000000Z", "until": "2026-11-03T01:00:00.000000Z",
                     "limit": 100, "ascending": "true"}


def test_a_more_link_that_repeats_ends_the_run_instead_of_looping():
    source = lrs_source()
    page = {"statements": [], "more": "/xAPI/statements?page=2"}
    source.get = lambda url, params=None: (page, {})
    with pytest.raises(UnavailableError, match="sent the same 'more' link twice"):
        list(source.batches(WINDOW))
