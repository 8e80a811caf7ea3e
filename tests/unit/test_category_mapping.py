"""run/category_mapping.py: the configuration's [[categories]] matched to course IRIs, independently of any store."""

from lms_refresh.config.sections import Category
from lms_refresh.run.category_mapping import category_id, tree

HOME = "https://lms.example.edu/course"
CATEGORIES = (Category("Science", (f"{HOME}/BIO*",), None), Category("Genetics", ("*/GEN?",), "Science"),
              Category("Arts", ("*/ART*", f"{HOME}/BIO1"), None), Category("Empty", (), "Genetics"))


def test_a_course_counts_in_the_first_category_that_matches_it_and_paths_follow_the_parents():
    science, genetics, arts, empty = (category_id(c.name) for c in CATEGORIES)
    found = tree(CATEGORIES, {1: f"{HOME}/BIO1", 2: f"{HOME}/GEN1", 3: f"{HOME}/GEN10", 4: f"{HOME}/ART9",
                              5: f"{HOME}/bio2", 6: f"{HOME}/MATH"})
    assert found.courses == {1: science, 2: genetics, 4: arts}  # GEN10: ? is one character; bio2: case-sensitive
    assert found.categories == {science: ("Science", None, f"/{science}"),
                                genetics: ("Genetics", science, f"/{science}/{genetics}"),
                                arts: ("Arts", None, f"/{arts}"),
                                empty: ("Empty", genetics, f"/{science}/{genetics}/{empty}")}


def test_without_categories_the_tree_is_empty_and_ids_are_positive_and_stable():
    assert tree((), {1: f"{HOME}/BIO1"}) == ({}, {})
    assert category_id("Science") == category_id("Science") != category_id("science")
    assert all(0 < category_id(name) < 2 ** 63 for name in ("", "Science", "x" * 100))
