"""The PostgreSQL store's dialect: the store's description (tables.py) written for PostgreSQL.

Everything lives in schema `{s}` (the store's schema name, filled in when a migration runs);
dashboards read the view in `{s}_serving`, which is all a read-only role is granted (see
`grant-reader`). The view runs with its owner's rights, so such a role reads metrics without any
access to staging or pseudonymised actors.
"""

import dataclasses

from lms_refresh.store import tables
from lms_refresh.store.dialect import Dialect


class PostgresDialect(Dialect):
    types = {tables.SMALL: "smallint", tables.INTEGER: "integer", tables.BIGINT: "bigint", tables.REAL: "float8",
             tables.TEXT: "text", tables.BYTES: "bytea", tables.SERIAL: "bigserial"}
    serving = "{s}_serving.daily_metrics"
    serving_courses = "{s}_serving.courses"
    insertion_order = "seq"
    days_in = "day = ANY(?)"
    courses_in = "course_id = ANY(CAST(? AS bigint[]))"
    courses_table = "unnest(CAST(? AS bigint[])) AS c(value)"
    ranges_table = "unnest(CAST(? AS bigint[]), CAST(? AS text[]), CAST(? AS text[])) AS r(course, lo, hi)"
    legacy_average = "ROUND(m.score_sum_micro::numeric / m.score_count / 1000000, 6)::float8"
    legacy_duration = "(m.duration_ms / 1000.0)::float8"
    # One upsert per learner and period, not per learner-day: per-row upserts were 49 s of a 1M refresh
    # (1.75M rows, 587 MB of WAL).
    presence_by_period = True
    # A database's own collation (en_US.UTF-8: "B" < "a" is false) would break a tie of course names otherwise
    # than SQLite and Python do (course_names.py).
    bytewise = ' COLLATE "C"'

    def name(self, name):
        return f"{{s}}.{name}"

    def serving_of(self, table):
        return f"{{s}}_serving.{table}"

    def date(self, expression):
        return f"{expression}::date"

    def day_set(self, days):
        return sorted(days)

    def range_set(self, ranges):
        return tuple(list(column) for column in zip(*ranges, strict=True)) if ranges else ([], [], [])

    def prelude(self):
        return ["CREATE SCHEMA IF NOT EXISTS {s}", "CREATE SCHEMA IF NOT EXISTS {s}_serving",
                # One row per migration applied (SQLite keeps the version in meta alone).
                "CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now())"]

    def replace_view(self, name, select):
        """In place (a dashboard's own view that reads it would stop a DROP); its columns stay the same."""
        return [f"CREATE OR REPLACE VIEW {name} AS{select}"]

    def shape(self, table):
        """Rows of a table have no order here: a logged table's key is a row number (its own key stays unique)."""
        if not table.logged:
            return table
        return dataclasses.replace(table, columns=(tables.Column("seq", tables.SERIAL),) + table.columns,
                                   key=("seq",), unique=(table.key,) + table.unique)


POSTGRESQL = PostgresDialect()
MIGRATIONS = POSTGRESQL.migrations()
SCHEMA_VERSION = len(MIGRATIONS)
