"""lms_refresh/store/datasette.py: the Datasette metadata follows the data dictionary with no edit of its own (a new
table, a new column, a table without a course), and the copies the package ships are what it generates. Served by a
real Datasette: tests/operations/test_datasette_served.py."""

import os
import re

from helpers.paths import REPO
from lms_refresh.cli import reference
from lms_refresh.store import datasette, dictionary

DOCS = os.path.join(REPO, "docs")


def served(metadata, database="serving"):
    return metadata["databases"][database]


def test_every_table_sqlite_publishes_and_every_column_is_described_with_label_unit_and_meaning():
    tables = served(datasette.metadata())["tables"]
    published = [entry for entry in dictionary.TABLES if any(column.sqlite for column in entry.columns)]
    assert list(tables) == [entry.name for entry in published]
    for entry in published:
        settings = tables[entry.name]
        assert settings["title"] and entry.grain in settings["title"]
        assert entry.description in settings["description"] and entry.key in settings["description"]
        assert list(settings["columns"]) == [column.name for column in entry.columns if column.sqlite]
        for column in entry.columns:
            said = settings["columns"][column.name]
            assert said.startswith(datasette.label(column)) and column.meaning in said, (entry.name, column.name)
            assert (f"[{column.unit}]" in said) == (column.unit != "—"), (entry.name, column.name)
            assert ("Perturbed" in said) == column.perturbed and (column.null in said) == (column.null != "never NULL")


def test_a_table_or_column_added_to_the_dictionary_is_described_without_an_edit_here():
    site = dictionary.Table("site_weekly_metrics", "ISO week", "period", "The whole site's weeks.", [
        *dictionary.table("weekly_metrics").columns[:3],
        dictionary.Column("completed_learners", "INTEGER", "bigint", "learners", "Distinct learners who completed.",
                          dictionary.LEARNERS, True, True, dictionary.WITHHELD_NULL),
        next(column for column in dictionary.table("weekly_metrics").columns if column.name == "complete")])
    freshness = dictionary.Table("freshness", "one row", "—", "When the data is from.", [
        dictionary.Column("data_as_of", "TEXT", "timestamptz", "—", "The watermark.", dictionary.NEITHER, False,
                          False, "never NULL")])
    postgres_only = dictionary.Table("serving_only", "—", "—", "Not in the file.", [
        dictionary.Column("x", None, "text", "—", "PostgreSQL only.", dictionary.NEITHER, False, False, "never NULL")])
    tables = served(datasette.metadata(tables=[site, freshness, postgres_only]))["tables"]
    assert list(tables) == ["site_weekly_metrics", "freshness"]
    weeks = tables["site_weekly_metrics"]
    assert weeks["columns"]["completed_learners"].startswith("Completed learners [learners]: Distinct learners who")
    # Facets and the order on the columns the table has, and only those: no course here.
    assert weeks["facets"] == ["complete"] and weeks["sort_desc"] == "period_start"
    assert "facets" not in tables["freshness"] and "sort_desc" not in tables["freshness"]
    assert tables["freshness"]["columns"] == {"data_as_of": "Data as of: The watermark."}


def test_the_canned_queries_are_the_dictionarys_with_names_fit_for_a_url():
    queries = served(datasette.metadata())["queries"]
    assert [entry["sql"] for entry in queries.values()] == [query.sql for query in dictionary.QUERIES]
    assert [entry["title"] for entry in queries.values()] == [query.title for query in dictionary.QUERIES]
    assert len(queries) == len(dictionary.QUERIES)  # no two titles give one name
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) for name in queries)
    assert "weekly-active-learners-per-course-by-name-with-the-whole-site" in queries


def test_the_database_is_named_after_the_publication_file():
    assert list(datasette.metadata("metrics")["databases"]) == ["metrics"]
    assert "\n  metrics:\n    tables:\n" in datasette.render("metrics")


def test_keys_yaml_reads_as_something_else_are_quoted():
    assert datasette._key("course") == "course" and datasette._key("period_start") == "period_start"
    assert [datasette._key(word) for word in ("on", "Yes", "null", "x y", "1st")] == [
        '"on"', '"Yes"', '"null"', '"x y"', '"1st"']


def test_the_shipped_metadata_and_plugin_are_what_the_dictionary_generates():
    found = reference.shipped(DOCS)
    assert sorted(os.path.relpath(path, REPO) for path in found) == sorted(reference.SHIPPED)
    for path, text in found.items():
        with open(path, encoding="utf-8") as handle:
            assert handle.read() == text, f"{path} differs: run python3 -m lms_refresh.cli.reference docs"
    assert "  serving:\n" in found[os.path.join(REPO, "debian/datasette/datasette.yml")]


def test_the_package_installs_them_in_usr_share_lms_refresh():
    with open(os.path.join(REPO, "debian", "lms-refresh.install"), encoding="utf-8") as handle:
        lines = {tuple(line.split()) for line in handle if line.strip()}
    assert ("debian/datasette/datasette.yml", "usr/share/lms-refresh/") in lines
    assert ("debian/datasette/datasette-plugins", "usr/share/lms-refresh/") in lines
    assert os.listdir(os.path.join(REPO, "debian", "datasette", "datasette-plugins")) == [datasette.PLUGIN_NAME]
