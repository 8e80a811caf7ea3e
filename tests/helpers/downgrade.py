"""Taking a store back past schema versions 12, 11 and 10 by hand, as the tests that upgrade an older store do:
version 13's category tables and views gone (`before_categories`), then version 12's enrolment columns and tables
(`before_enrolments`), then version 11's site, freshness and by-name views and its tables (`before_site_apart`), then
the learner outcome columns and keys, and the views as version 9 wrote them (a view that reads a column stops its
DROP)."""

from lms_refresh.store import tables


def before_enrolments(dialect, schema="lms_refresh", owner="lms_refresh"):
    """The statements that take a store of `dialect` at schema version 13 back to version 11's tables and views
    (through `before_categories`): no enrolment columns in the published rows and their views, no enrolled_cells or
    enrolled_periods (see `before_outcomes` for `schema` and `owner`)."""
    first = before_categories(dialect, schema)
    version = tables.ENROLMENTS_SINCE - 1
    views = {dialect.serving: tables.serving_view(dialect, version)}
    views.update((dialect.serving_of(table), tables.period_view(dialect, grain, version))
                 for grain, table in tables.PERIOD_VIEWS.items())
    views.update((dialect.serving_of(table), tables.site_view(dialect, grain, version))
                 for grain, table in tables.SITE_TABLES.items())
    views.update((dialect.serving_of(view), tables.by_name_of(dialect, table, version))
                 for table, view in tables.BY_NAME.items())
    by_name = [dialect.serving_of(view) for view in tables.BY_NAME.values()]
    # IF EXISTS: a test may have dropped the views that read published_metrics already.
    statements = [f"DROP VIEW IF EXISTS {name}" for name in by_name + [name for name in views if name not in by_name]]
    statements += [f"ALTER TABLE {dialect.name(table)} DROP COLUMN {column}"
                   for table in ("published_metrics", "published_periods") for column in tables.ENROLMENT_COLUMNS]
    statements += [f"DROP TABLE {dialect.name(table)}" for table in ("enrolled_cells", "enrolled_periods")]
    statements += [f"CREATE VIEW {name} AS{select}" for name, select in views.items()]
    if "{s}" in dialect.serving:  # PostgreSQL
        statements += [f"ALTER VIEW {name} OWNER TO {owner}" for name in views]
    return first + [statement.replace("{s}", schema) for statement in statements]


def before_categories(dialect, schema="lms_refresh"):
    """The statements that take a store of `dialect` at schema version 13 back to version 12's: no category view
    or table."""
    views = ["categories", *tables.CATEGORY_TABLES.values()]
    statements = [f"DROP VIEW IF EXISTS {dialect.serving_of(view)}" for view in views]
    statements += [f"DROP TABLE {dialect.name(table.name)}" for table in tables.TABLES
                   if table.since == tables.CATEGORIES_SINCE]
    return [statement.replace("{s}", schema) for statement in statements]


def before_site_apart(dialect, schema="lms_refresh", owner="lms_refresh"):
    """The statements that take a store of `dialect` at schema version 13 back to version 10's tables and views
    (through `before_enrolments`): the site's rows back in the course views (course NULL), no site, freshness or
    by-name view, no course_labels or freshness table (see `before_outcomes` for `schema` and `owner`)."""
    first = before_enrolments(dialect, schema, owner)
    version = tables.SITE_APART_SINCE - 1
    views = {dialect.serving: tables.serving_view(dialect, version),
             dialect.serving_courses: tables.courses_view(dialect, version)}
    views.update((dialect.serving_of(table), tables.period_view(dialect, grain, version))
                 for grain, table in tables.PERIOD_VIEWS.items())
    new = [*tables.BY_NAME.values(), *tables.SITE_TABLES.values(), "freshness"]
    statements = [f"DROP VIEW IF EXISTS {dialect.serving_of(name)}" for name in new]
    statements += [f"DROP VIEW {name}" for name in views]
    statements += [f"DROP TABLE {dialect.name(table)}" for table in ("course_labels", "freshness")]
    statements += [f"CREATE VIEW {name} AS{select}" for name, select in views.items()]
    if "{s}" in dialect.serving:  # PostgreSQL
        statements += [f"ALTER VIEW {name} OWNER TO {owner}" for name in views]
    return first + [statement.replace("{s}", schema) for statement in statements]


def before_outcomes(dialect, schema="lms_refresh", owner="lms_refresh"):
    """The statements that take a store of `dialect` (sqlite_schema.SQLITE, postgres_schema.POSTGRESQL) at schema
    version 13 back to version 9's tables and views (through `before_site_apart`); `schema` is a PostgreSQL store's,
    and its views go back to `owner`, its refresh role (run as the superuser, they would be the superuser's: a
    migration replaces a view in place only as its owner)."""
    views = {dialect.serving: tables.serving_view(dialect, tables.OUTCOMES_SINCE - 1)}
    first = before_site_apart(dialect, schema, owner)
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
    return first + [statement.replace("{s}", schema) for statement in statements]
