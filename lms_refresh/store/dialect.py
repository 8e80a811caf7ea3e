"""The store's description (tables.py) written as one SQL dialect's statements.

A Dialect says how its database spells types, names, dates and a set of days; everything else
(keys, CHECKs, the migrations' order, the metric definitions) comes from tables.py, so the two
stores cannot drift apart. `sqlite_schema.SQLITE` and `postgres_schema.POSTGRESQL` are the dialects in use.
Statements are written with `?` placeholders; a driver that wants another style converts them.
"""

from lms_refresh.store import tables


class _Names(dict):
    """A format mapping in which every field is a name in the store, as the dialect writes it."""

    def __init__(self, dialect):
        super().__init__()
        self.dialect = dialect

    def __missing__(self, name):
        return self.dialect.name(name)


class Dialect:
    types = {}  # tables' column types -> the dialect's
    serving = ""  # the serving view's name
    serving_courses = ""  # the serving view of course names (tables.courses_view)
    insertion_order = ""  # what orders a logged table's rows (tables.Table.logged)
    days_in = ""  # the condition "day is one of the days given as the statement's one parameter"
    courses_in = ""  # the condition "course_id is one of the ids given as the statement's one parameter" (id_set)
    # Tables made of one statement's parameters: `c` of course ids (c.value; one parameter, id_set) and `r` of
    # (course, lo, hi) ranges of labels (range_set's parameters). Each is read first when written before CROSS JOIN
    # (SQLite keeps that order), so that a statement about some courses looks each one up by its index.
    courses_table = ""
    ranges_table = ""
    legacy_average = legacy_duration = ""  # the serving view's computed columns until schema version 3
    presence_by_period = False  # move a period's presence in one grouped statement, not day by day (grains.py)
    # Sum a learner's counts packed into one integer (presence.py; grains.SITE_DAY), and fill a period from the
    # shorter ones filled before it (presence.parts_of): never where learner_periods is filled in bulk without its
    # key (pg_bulk.py), which each fill would scan whole for its parts (0.26-0.43 s a month of a 400-day window on
    # PostgreSQL against 0.05-0.07 s from its days).
    packed_sums = False
    bytewise = ""  # after a text expression: compare it by code point, as Python and SQLite do

    def name(self, name):
        """Return a table's or an index's name as the migrations write it."""
        return name

    def serving_of(self, table):
        """Return the name of the serving view of a publication table (weekly_metrics, monthly_metrics)."""
        return f"serving_{table}"

    def date(self, expression):
        """Return an expression that turns ISO day text into the dialect's day (for the serving view)."""
        return expression

    def day_set(self, days):
        """Return the parameter of `days_in` that holds `days`."""
        raise NotImplementedError

    def indexed_by(self, index):
        """Return what follows a table's name to have a statement read it through `index` (nothing: the planner's
        statistics choose it)."""
        return ""

    def id_set(self, ids):
        """Return the parameter of `courses_in` and `courses_table` that holds the course ids `ids`."""
        return self.day_set(ids)

    def range_set(self, ranges):
        """Return the parameters of `ranges_table` that hold `ranges` [(course id, first label, last label)]."""
        raise NotImplementedError

    def prelude(self):
        """Return the statements that come before migration 1's (a place and a record for the version)."""
        return []

    def shape(self, table):
        """Return `table` as this dialect stores it."""
        return table

    def check(self, table, column):
        """Return the condition of a column's CHECK constraint."""
        return column.check

    def suffix(self, table):
        """Return what follows a CREATE TABLE's column list."""
        return ""

    # -- statements ------------------------------------------------------------

    def column(self, table, column):
        """Return a column's definition: a one-column key or unique group is written beside it."""
        parts = [column.name, self.types[column.type]]
        if table.key == (column.name,):
            parts.append("PRIMARY KEY")
        elif not column.null:
            parts.append("NOT NULL")
        if (column.name,) in table.unique:
            parts.append("UNIQUE")
        if column.default is not None:
            parts.append(f"DEFAULT {column.default}")
        if column.check:
            parts.append(f"CHECK ({self.check(table, column)})")
        return " ".join(parts)

    def create_table(self, table, version):
        table = self.shape(table)
        lines = [self.column(table, column) for column in table.columns_at(version)]
        if len(table.key) > 1:
            lines.append(f"PRIMARY KEY ({', '.join(table.key)})")
        lines += [f"UNIQUE ({', '.join(group)})" for group in table.unique if len(group) > 1]
        exists = " IF NOT EXISTS" if table.since >= tables.IDEMPOTENT_SINCE else ""
        return f"CREATE TABLE{exists} {self.name(table.name)} (\n    " + ",\n    ".join(lines) + ")" + \
            self.suffix(table)

    def add_column(self, table, column):
        return f"ALTER TABLE {self.name(table.name)} ADD COLUMN {self.column(self.shape(table), column)}"

    def create_index(self, index):
        exists = " IF NOT EXISTS" if index.since >= tables.IDEMPOTENT_SINCE else ""
        return (f"CREATE {'UNIQUE ' if index.unique else ''}INDEX{exists} {index.name} "
                f"ON {self.name(index.table)} ({', '.join(index.columns)})")

    def replace_view(self, name, select):
        """Return the statements that make view `name` the SELECT `select`, whether or not it exists."""
        return [f"DROP VIEW IF EXISTS {name}", f"CREATE VIEW {name} AS{select}"]

    def migration(self, version):
        """Return the statements that bring a store from schema version `version` - 1 to `version`."""
        statements = self.prelude() if version == 1 else []
        for kind, item in tables.migration(version):
            if kind == "table":
                statements.append(self.create_table(item, version))
            elif kind == "column":
                statements.append(self.add_column(*item))
            elif kind == "sql":
                statements.append(item.format_map(_Names(self)))
            elif kind == "index":
                statements.append(self.create_index(item))
            elif kind == "period view" and version >= tables.OUTCOMES_SINCE:  # columns added at its end
                statements += self.replace_view(self.serving_of(tables.PERIOD_VIEWS[item]),
                                                tables.period_view(self, item, version))
            elif kind == "period view":  # created again if a store was taken back past it by hand
                name = self.serving_of(tables.PERIOD_VIEWS[item])
                statements += [f"DROP VIEW IF EXISTS {name}",
                               f"CREATE VIEW {name} AS{tables.period_view(self, item, version)}"]
            elif kind == "courses view":  # replaced whole: a store taken back by hand may still have it
                statements += self.replace_view(self.serving_courses, tables.courses_view(self, item))
            elif kind == "site view":
                statements += self.replace_view(self.serving_of(tables.SITE_TABLES[item]),
                                                tables.site_view(self, item, version))
            elif kind == "category view":
                name = item if item == "categories" else tables.CATEGORY_TABLES[item]
                statements += self.replace_view(self.serving_of(name), tables.category_view(self, item))
            elif kind == "freshness view":
                statements += self.replace_view(self.serving_of("freshness"), tables.freshness_view(self))
            elif kind == "by-name view":
                statements += self.replace_view(self.serving_of(tables.BY_NAME[item]),
                                                tables.by_name_of(self, item, version))
            elif version >= tables.OUTCOMES_SINCE:  # the serving view, columns added at its end (or kept)
                statements += self.replace_view(self.serving, tables.serving_view(self, version))
            else:  # the serving view
                if version > 1:
                    statements.append(f"DROP VIEW {self.serving}")
                statements.append(f"CREATE VIEW {self.serving} AS{tables.serving_view(self, version)}")
        return statements

    def migrations(self):
        """Return every migration's statements, the first first."""
        return [self.migration(version) for version in range(1, tables.SCHEMA_VERSION + 1)]
