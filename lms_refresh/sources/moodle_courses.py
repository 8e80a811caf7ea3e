"""Moodle's course names: `{prefix}course` and `{prefix}course_categories`, read once per run.

Each run reads every course's `fullname`, `shortname`, `startdate` and `enddate` (Unix times, 0 for
none) and its category's `name`, read-only like the log, and hands them to the store as one last
batch of names (store/course_names.py), which keeps them for the courses it has events of. The site
course (`site_course_id`, Moodle's front page) is left out: the log mapping never counts it, so it
never has published rows to name. Names never block a run: a table that cannot be read is a warning,
and the courses keep the names they had.
"""

import datetime as dt
import logging
import zoneinfo

from lms_refresh.disclosure.names import clean_name
from lms_refresh.errors import ConfigError, UnavailableError
from lms_refresh.sources import WARNING, Batch, Finding
from lms_refresh.sources.records import CategoryTree
from lms_refresh.sources.xapi import name_id

logger = logging.getLogger(__name__)

_QUERY = ("SELECT c.id, c.fullname, c.shortname, c.startdate, c.enddate, cc.name FROM {table} c "
          "LEFT JOIN {categories} cc ON cc.id = c.category WHERE c.id <> %s ORDER BY c.id")
_LATEST_DAY = dt.date(2999, 12, 31)  # the range every time read keeps to (lms_refresh/instants.py)


def _tables(source):
    return f"{source.prefix}course", f"{source.prefix}course_categories"


def local_date(seconds, timezone):
    """Return the ISO local date of a Moodle time (Unix seconds; 0 or nonsense: None)."""
    if type(seconds) is not int or seconds <= 0:
        return None
    try:
        day = dt.datetime.fromtimestamp(seconds, zoneinfo.ZoneInfo(timezone)).date()
    except (OverflowError, OSError, ValueError):
        return None
    return day.isoformat() if day <= _LATEST_DAY else None


def names_batch(source):
    """Return a Batch holding the names of every course of the Moodle site (none, with a warning, if the
    course tables cannot be read)."""
    course, categories = _tables(source)
    try:
        rows = source.query(_QUERY.replace("{categories}", categories), (source.site_course_id,), table=course)
    except (ConfigError, UnavailableError) as error:
        logger.warning("Course names were not read (%s); the courses keep the names they had. GRANT SELECT ON %s, "
                       "%s to source.url's user.", error, course, categories)
        return Batch()
    language, timezone, names = source.language, source.timezone, {}
    for number, fullname, shortname, start, end, category in rows:
        iri = f"{source.site}/course/view.php?id={number}"
        names[("title", name_id(iri))] = (
            None, clean_name(fullname, language=language), clean_name(shortname, language=language),
            clean_name(category, language=language), local_date(start, timezone), local_date(end, timezone))
    return Batch(names=names)


# Each category's parent and path of ids ("/1/4/7"), and each course's category (0: none): the courses counted in it.
_CATEGORIES = "SELECT id, name, parent, path FROM {table} ORDER BY id"
_MEMBERS = "SELECT id, category FROM {table} WHERE id <> %s ORDER BY id"


def category_tree(source):
    """Return the site's course categories as a records.CategoryTree keyed by Moodle's ids (None, with a warning,
    if the course tables cannot be read: the store keeps the categories it had)."""
    course, categories = _tables(source)
    try:
        rows = source.query(_CATEGORIES, (), table=categories)
        members = source.query(_MEMBERS, (source.site_course_id,), table=course)
    except (ConfigError, UnavailableError) as error:
        logger.warning("Course categories were not read (%s); the courses count in the categories they did. GRANT "
                       "SELECT ON %s, %s to source.url's user.", error, course, categories)
        return None
    tree = {}
    for number, name, parent, path in rows:
        if type(number) is int and number > 0:
            tree[number] = (clean_name(name, language=source.language), parent if type(parent) is int else None,
                            path if isinstance(path, str) else None)
    courses = {name_id(f"{source.site}/course/view.php?id={number}"): category for number, category in members
               if type(category) is int and category in tree}
    return CategoryTree(tree, courses)


def preflight(source):
    """Return the Findings about the course tables: a warning if they cannot be read (names are not needed)."""
    course, categories = _tables(source)
    try:
        source.query(_QUERY.replace("{categories}", categories) + " LIMIT 0", (source.site_course_id,), table=course)
    except (ConfigError, UnavailableError) as error:
        return [Finding(WARNING, f"{error} Until then, courses are published without names "
                                 f"(GRANT SELECT ON {course}, {categories}).")]
    return []
