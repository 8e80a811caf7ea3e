"""The store's one description (lms_refresh/store/tables.py): every schema version reaches the same store."""

import re

import pytest

from lms_refresh.config import load_config
from lms_refresh.store import open_store
from lms_refresh.store.sqlite_schema import SCHEMA_VERSION


def _checks(text):
    """The conditions of the CHECK constraints in a CREATE TABLE statement."""
    found = []
    for match in re.finditer(r"CHECK \(", text):
        depth, start = 1, match.end()
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                found.append(text[start:end])
                break
    return found


def _sqlite_structure(store):
    """Columns, keys, indexes, CHECKs, clustering and views of a SQLite store, as comparable data."""
    found = {}
    for kind, name, sql in store.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name").fetchall():
        text = re.sub(r"\s+", " ", sql or "")
        if kind == "view":
            found[name] = ("view", text)
        elif kind == "index":
            columns = [row[2] for row in store.execute(f"PRAGMA index_info({name})").fetchall()]
            found[name] = ("index", text.startswith("CREATE UNIQUE"), columns)
        else:
            columns = [tuple(row[1:]) for row in store.execute(f"PRAGMA table_xinfo({name})").fetchall()]
            checks = sorted(_checks(text))
            unique = sorted(tuple(row[2] for row in store.execute(f"PRAGMA index_info({index[1]})").fetchall())
                            for index in store.execute(f"PRAGMA index_list({name})").fetchall()
                            if index[3] == "u")
            found[name] = ("table", columns, checks, unique, "WITHOUT ROWID" in text.upper())
    return found


def _postgres_structure(store):
    """Columns, constraints, indexes and views of a PostgreSQL store's two schemas, as comparable data."""
    schemas = (store.schema, f"{store.schema}_serving")
    columns = store.db.execute(
        "SELECT table_schema, table_name, ordinal_position, column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = ANY(%s) ORDER BY 1, 2, 3", (list(schemas),)).fetchall()
    constraints = store.db.execute(
        "SELECT n.nspname, t.relname, c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
        "JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = ANY(%s) ORDER BY 1, 2, 3", (list(schemas),)).fetchall()
    indexes = store.db.execute("SELECT schemaname, indexname, indexdef FROM pg_indexes WHERE schemaname = ANY(%s) "
                               "ORDER BY 1, 2", (list(schemas),)).fetchall()
    views = store.db.execute("SELECT schemaname, viewname, definition FROM pg_views WHERE schemaname = ANY(%s) "
                             "ORDER BY 1, 2", (list(schemas),)).fetchall()
    return {"columns": columns, "constraints": constraints, "indexes": indexes, "views": views}


def structure(store):
    """The shape of `store` (not its rows): what two stores must share to be the same store."""
    return _postgres_structure(store) if hasattr(store, "schema") else _sqlite_structure(store)


def _store(project, target=None):
    """Open `project`'s store: created new, or built up to schema version `target` and then upgraded."""
    config = load_config(str(project.config), {})
    project.state.mkdir(exist_ok=True)
    if target is None:
        return open_store(config, {}, create=True)
    store = open_store(config, {}, create=True, migrate=False)
    store.migrate(target=target)
    assert store.schema_version() == target
    store.migrate()
    return store


@pytest.mark.parametrize("target", range(1, SCHEMA_VERSION))
def test_a_store_upgraded_from_every_version_equals_a_new_one(tmp_path, make_project, target):
    fresh, upgraded = _store(make_project(tmp_path / "new")), _store(make_project(tmp_path / "old"), target)
    try:
        assert upgraded.schema_version() == fresh.schema_version() == SCHEMA_VERSION
        shape = structure(fresh)
        assert structure(upgraded) == shape
        names = {row[1] for row in shape["columns"]} if "columns" in shape else set(shape)
        assert {"staged_events", "daily_metrics", "published_metrics", "privacy_settings", "pending_days"} <= names
    finally:
        fresh.close()
        upgraded.close()


# -- parameter styles: the PostgreSQL driver converts `?`, nothing else -------------------------------

def test_the_postgresql_driver_converts_only_placeholders_and_doubles_every_percent_sign():
    from lms_refresh.store.postgres import format_style

    statement = ("SELECT ?, 'it''s ?%', \"a?b%\", 7 % 4, $x$ ? % $x$ -- why? 100%\n"
                 "/* ? % */ FROM t WHERE day = ANY(?)")
    assert format_style(statement) == (
        "SELECT %s, 'it''s ?%%', \"a?b%%\", 7 %% 4, $x$ ? %% $x$ -- why? 100%%\n"
        "/* ? %% */ FROM t WHERE day = ANY(%s)")


def test_a_literal_question_mark_and_percent_sign_reach_either_store_unchanged(tmp_path, make_project):
    store = _store(make_project(tmp_path / "p"))
    try:
        row = store.execute("SELECT '?%' || ? AS \"a?%\", 7 % 4, ? -- is it? 100%\n/* ? */",
                            ("x", 5)).fetchone()
        assert tuple(row) == ("?%x", 3, 5)
        # A statement with no parameter at all is sent as written, too.
        assert tuple(store.execute("SELECT '50%?', 9 % 5").fetchone()) == ("50%?", 4)
    finally:
        store.close()
