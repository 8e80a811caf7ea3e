"""The course categories of an xAPI source: the configuration's [[categories]] tables matched to the store's courses.

Moodle names its categories itself (sources/moodle_courses.py); an xAPI statement names none, so the configuration
says which course IRIs each category holds, as fnmatch patterns (case-sensitive), and which category it is in. A course
counts in the first category, in the order written, with a pattern that matches its IRI (and in every category above
it: store/categories.py); a course no pattern matches is in none. Every run matches every course the store knows
again, so a changed pattern moves courses from that run on, as a course moved in Moodle does. A category's id is a
64-bit hash of its name: a renamed category is a new one, whose rows begin again.
"""

import fnmatch
import hashlib
import re

from lms_refresh.disclosure.names import clean_name
from lms_refresh.sources.records import CategoryTree


def category_id(name):
    """The id of the category `name`: positive, stable across runs and configurations."""
    return int.from_bytes(hashlib.blake2b(b"category\0" + name.encode(), digest_size=8).digest(), "big") >> 1


def tree(categories, course_iris):
    """Given the configuration's Categories (config.sections.Category) and {course id: IRI} of the store's courses,
    return the records.CategoryTree they make (an empty one without [[categories]]: the store then forgets any)."""
    if not categories:
        return CategoryTree({}, {})
    ids = {category.name: category_id(category.name) for category in categories}
    parents = {category.name: category.parent for category in categories}
    found = {}
    for category in categories:
        path, above = [ids[category.name]], category.parent
        while above is not None:  # the configuration refuses a parent that leads back (config._categories)
            path.insert(0, ids[above])
            above = parents[above]
        found[ids[category.name]] = (clean_name(category.name), ids.get(category.parent),
                                     "/" + "/".join(str(number) for number in path))
    # fnmatch.fnmatchcase's own translation, compiled once: not once per course and pattern.
    compiled = [(ids[category.name], [re.compile(fnmatch.translate(pattern)) for pattern in category.courses])
                for category in categories]
    courses = {}
    for course, iri in course_iris.items():
        for number, patterns in compiled:
            if any(pattern.match(iri) for pattern in patterns):
                courses[course] = number
                break
    return CategoryTree(found, courses)


def standing_tree(config, source, store):
    """The categories a run records (store.record_categories): the source's own (Moodle's), or for an xAPI source
    the configuration's [[categories]] matched to the store's courses."""
    if config.source.type == "moodle":
        return source.standing_categories()
    return tree(config.categories, store.course_iris() if config.categories else {})
