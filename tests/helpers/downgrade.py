"""Taking a store back past schema version 10 by hand, as the tests that upgrade an older store do: its learner
outcome columns and keys gone, and its views as version 9 wrote them (a view that reads a column stops its DROP)."""

from lms_refresh.store import tables


def before_outcomes(dialect, schema="lms_refresh", owner="lms_refresh"):
    """The statements that take a store of `dialect` (sqlite_schema.SQLITE, postgres_schema.POSTGRESQL) at schema
    version 10 back to version 9's tables and views; `schema` is a PostgreSQL store's, and its views go back to
    `owner`, its refresh role (run as the superuser, they would be the superuser's: a migration replaces a view in
    place only as its owner)."""
    views = {dialect.serving: tables.serving_view(dialect, tables.OUTCOMES_SINCE - 1)}
    views.update((dialect.serving_of(table), tables.period_view(dialect, grain, tables.OUTCOMES_SINCE - 1))
                 for grain, table in tables.PERIOD_VIEWS.items())
    statements = [f"DROP VIEW {name}" for name in views]
    statements += [f"ALTER TABLE {dialect.name(table)} DROP COLUMN {column}"
                   for table in ("daily_metrics", "period_metrics") for column in tables.OUTCOME_LEARNER_KEYS]
    statements += [f"ALTER TABLE {dialect.name(table)} DROP COLUMN {column}"
                   for table in ("published_metrics", "published_periods") for column in tables.OUTCOME_COLUMNS]
    statements += [f"CREATE VIEW {name} AS{select}" for name, select in views.items()]
    if "{s}" in dialect.serving:  # PostgreSQL
        statements += [f"ALTER VIEW {name} OWNER TO {owner}" for name in views]
    return [statement.replace("{s}", schema) for statement in statements]
