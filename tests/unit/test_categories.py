"""store/categories.py: which categories a category's path puts above it (a hostile or broken path nests nothing)."""

import pytest

from lms_refresh.store.categories import ancestry


@pytest.mark.parametrize("path, number, expected", [
    ("/1/4/7", 7, (1, 4, 7)),
    ("/7", 7, (7,)),
    ("/1/4/8", 7, (7,)),  # not this category's path
    ("/1/7/7", 7, (7,)),  # a category above itself
    ("/1/../7", 7, (7,)), ("1/7", 7, (7,)), ("/1//7", 7, (7,)), ("", 7, (7,)), (None, 7, (7,)), (17, 7, (7,)),
    ("/0/7", 7, (7,)),  # no category has id 0
    (f"/{2 ** 63}/7", 7, (7,)),  # past a BIGINT
    ("/1" * 64 + "/7", 7, (7,)),  # deeper than 64
    ("".join(f"/{n}" for n in range(1, 64)) + "/99", 99, tuple(range(1, 64)) + (99,)),
])
def test_a_path_nests_a_category_only_if_it_is_its_own_path(path, number, expected):
    assert ancestry(path, number) == expected
