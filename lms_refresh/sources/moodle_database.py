"""Moodle's database behind one interface, PostgreSQL or MySQL/MariaDB as the URL's scheme says.

`open_database` returns a connection object with `query(statement, parameters, table)` (rows, read in a
read-only session under the statement timeout; driver errors become the domain's, naming Moodle and the
table), `may_write(table)` (whether the account's grants would let it write the table), `server()` (what
`check` says of the server) and `close()`. The statements are written once, in the SQL both dialects
read, with %s placeholders. The MySQL/MariaDB half lives in `moodle_mysql`.
"""

import re

from lms_refresh.disclosure.redaction import url_without_password
from lms_refresh.errors import ConfigError, UnavailableError


def open_database(url, password_file, environ, timeout):
    """Return the database object for `url` (not yet connected: the first query connects)."""
    if re.match(r"^(mysql|mariadb)://", url, re.I):
        from lms_refresh.sources.moodle_mysql import MySQLDatabase

        return MySQLDatabase(url, password_file, environ, timeout)
    return PostgresDatabase(url, password_file, environ, timeout)


def where(url):
    return f"The Moodle database {url_without_password(url)}"


def no_table(url, table, log_table):
    log_store = " and that the standard log store is enabled" if table == log_table else ""
    return ConfigError(f"{where(url)} has no table {table}; check source.prefix (Moodle's $CFG->prefix){log_store}.")


def refused(url, table, detail, grant):
    return ConfigError(f"{where(url)} refused to let us read {table} ({detail}); {grant} to source.url's user.")


def failed(url, table, detail):
    return UnavailableError(f"Reading {table} from {url_without_password(url)} failed ({detail}); "
                            "nothing was committed.")


class PostgresDatabase:
    """Moodle on PostgreSQL, through psycopg: one autocommit connection, read-only by its options."""

    def __init__(self, url, password_file, environ, timeout):
        self.url, self.password_file, self.environ, self.timeout = url, password_file, environ, timeout
        self._db = None

    def query(self, statement, parameters, table, log_table):
        import psycopg  # imported only when a PostgreSQL Moodle is configured

        from lms_refresh.postgresql import connect, connection_error, first_line

        try:
            if self._db is None:
                self._db = connect(
                    self.url, self.password_file, self.environ, what=where(self.url), section="source",
                    connect_timeout=min(self.timeout, 60),
                    # Read-only by construction, whatever the role may do; and never a runaway scan.
                    options=f"-c default_transaction_read_only=on -c statement_timeout={self.timeout * 1000}",
                )
            return self._db.execute(statement, parameters).fetchall()
        except psycopg.OperationalError as error:
            raise connection_error(error, where(self.url), "source") from error
        except psycopg.errors.UndefinedTable:
            raise no_table(self.url, table, log_table) from None
        except psycopg.errors.InsufficientPrivilege as error:
            # The table the server names: a query may read several (the course names join their categories).
            denied = re.search(r"permission denied for (?:table|relation) (\w+)", first_line(error))
            table = denied.group(1) if denied else table
            raise refused(self.url, table, first_line(error), f"GRANT SELECT ON {table}") from error
        except psycopg.Error as error:
            raise failed(self.url, table, first_line(error)) from error

    def may_write(self, table):
        return self.query("SELECT has_table_privilege(current_user, %s, 'INSERT, UPDATE, DELETE')", (table,),
                          table, table)[0][0]

    def server(self, table):
        """One sentence about the server and the session, for `check`."""
        version, read_only = self.query("SELECT current_setting('server_version'), "
                                        "current_setting('transaction_read_only')", (), table, table)[0]
        return f"PostgreSQL {version}, session read-only: {'yes' if read_only == 'on' else 'NO'}"

    def close(self):
        if self._db is not None:
            self._db.close()
            self._db = None
