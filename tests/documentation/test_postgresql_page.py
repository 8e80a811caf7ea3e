"""The PostgreSQL page's commands to create the store's role and database (docs/admin/postgresql.md), run as written
on a real server (with names of this test's own, the server being shared): a store configured on them refreshes,
and the dashboard's role reads the serving views after grant-reader and nothing else."""

import json
import re

import psycopg
import pytest

from helpers import docs
from helpers.project import Project
from helpers.statements import statement

PAGE = docs.page("docs/admin/postgresql.md")


def creation_statements():
    """The statements of the page's block under "Creating the role and the database", as written."""
    block = docs.sql_after(PAGE, "## Creating the role and the database")
    return [line for line in block.strip().splitlines() if line.strip()]


@pytest.mark.postgresql
def test_the_role_and_database_of_the_page_hold_a_store_and_a_reader(tmp_path, postgres_server):
    statements = creation_statements()
    assert statements == ["CREATE ROLE lms_refresh LOGIN PASSWORD 'choose-a-password';",
                          "CREATE DATABASE metrics OWNER lms_refresh;",
                          "CREATE ROLE metabase LOGIN PASSWORD 'another-password';"]
    names = {"lms_refresh": "docs_refresh", "metrics": "docs_metrics", "metabase": "docs_reader"}
    for line in statements:
        postgres_server.admin(re.sub(r"\b(lms_refresh|metrics|metabase)\b", lambda m: names[m.group(1)], line)
                              .rstrip(";"))
    password = tmp_path / "store-password"
    password.write_text("choose-a-password\n")
    project = Project(tmp_path / "site")
    project.config.write_text(project.config.read_text() + "\n[store]\n" + "\n".join(
        f"{key} = {json.dumps(value)}" for key, value in {
            "type": "postgresql", "url": f"postgresql://docs_refresh@127.0.0.1:{postgres_server.port}/docs_metrics",
            "password_file": str(password)}.items()) + "\n")
    project.write("a.ndjson", [statement(learner=f"l{n}", timestamp="2026-11-02T10:00:00Z") for n in range(12)])
    project.cli("check", now="2026-11-03T04:15:00Z", check=0)
    project.cli("run", now="2026-11-03T04:15:00Z", check=0)
    granted = project.cli("grant-reader", "docs_reader", now="2026-11-03T04:15:00Z", check=0)
    assert "docs_reader may now read" in granted.stdout + granted.stderr
    reader = dict(host="127.0.0.1", port=postgres_server.port, dbname="docs_metrics", user="docs_reader",
                  password="another-password")
    with psycopg.connect(**reader) as db:
        assert db.execute("SELECT count(*) FROM lms_refresh_serving.daily_metrics").fetchone()[0] > 0
    with psycopg.connect(**reader) as db, pytest.raises(psycopg.errors.InsufficientPrivilege):
        db.execute("SELECT count(*) FROM lms_refresh.staged_events")
