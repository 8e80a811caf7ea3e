"""The grants docs/sources/moodle.md tells a Moodle administrator to give are exactly those the tests' reader has
(helpers.moodledb.READER_TABLES, granted on PostgreSQL and MariaDB alike): what the suite proves is what the page
asks for, no table more (SELECT on mdl_config_plugins, optional, is granted only by the tests that read it)."""

import os
import re

from helpers.moodledb import READER_TABLES
from helpers.paths import REPO

PAGE = os.path.join(REPO, "docs", "sources", "moodle.md")


def _text():
    with open(PAGE, encoding="utf-8") as handle:
        return handle.read()


def test_the_postgresql_grants_of_the_moodle_page_are_the_readers():
    text = _text()
    grants = re.findall(r"GRANT SELECT ON ((?:mdl_\w+(?:, )?)+) TO lms_reader", text)
    assert len(grants) == 2, grants  # the step by step, and the paragraph after every key
    for grant in grants:
        assert tuple(grant.split(", ")) == READER_TABLES


def test_the_mysql_grants_of_the_moodle_page_are_the_readers_and_the_optional_log_lifetime():
    lines = re.findall(r"GRANT SELECT ON moodle\.(mdl_\w+) TO moodle_reader@'%';(.*)", _text())
    required = tuple(table for table, note in lines if "optional" not in note)
    assert required == READER_TABLES
    assert [table for table, note in lines if "optional" in note] == ["mdl_config_plugins"]
