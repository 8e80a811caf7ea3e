"""Moodle on MySQL (8) or MariaDB (10.6 and later), through MySQLdb (Debian's python3-mysqldb, pip's mysqlclient).

MySQLdb, not PyMySQL: both are packaged by Debian 12 and 13, both stream, but reading a million log rows
takes MySQLdb (C) about 3.6 s and PyMySQL (pure Python) about 40 s on the same server (docs/sources/moodle.md, "Moodle
source"). Each query reads through an unbuffered cursor (mysql_use_result), so neither the driver nor the
server's client buffer holds more than the page the source asked for. The session is made read-only and
given the statement timeout once, as it opens; the connection speaks utf8mb4, which every character of a
utf8mb4 table and of a legacy utf8 (3-byte) one converts to without loss.
"""

import re

from lms_refresh.config.mysql_url import mysql_url
from lms_refresh.credentials import read_secret
from lms_refresh.errors import ConfigError, UnavailableError
from lms_refresh.sources.moodle_database import failed, no_table, refused, where

# The server's and the client library's error numbers (mysqld_error.h, errmsg.h; MariaDB's are the same).
_BAD_CREDENTIALS = {1045, 1698}  # access denied for the user (password; unix_socket authentication)
_NO_DATABASE = {1044, 1049}  # no access to the database; no such database
_DENIED = {1142, 1143}  # SELECT denied for a table, a column
_NO_TABLE = 1146
_UNKNOWN_VARIABLE = 1193
# The server went away or never answered, is shutting down or full, or a statement ran past its time
# (MariaDB's max_statement_time: 1969; MySQL's max_execution_time: 3024): a later run may succeed.
_UNREACHABLE = {1040, 1053, 1152, 1153, 1158, 1159, 1160, 1161, 1927, 1969, 3024}
_WRITES = ("INSERT", "UPDATE", "DELETE", "ALL PRIVILEGES", "ALL")
_GRANT = re.compile(r"^GRANT (.+?) ON (?:TABLE )?(\S+) TO ")


def _driver():
    try:
        import MySQLdb
        import MySQLdb.cursors
    except ImportError:
        raise ConfigError("source.url names a MySQL/MariaDB database, but its driver is not installed: install the "
                          "Debian package python3-mysqldb (pip: lms-refresh[mysql]).") from None
    return MySQLdb


def _message(error):
    """The server's sentence of a MySQLdb error (its first line), without the number."""
    text = str(error.args[1] if len(error.args) > 1 else error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _like(pattern):
    """A regex for a grant's database name, which may be a LIKE pattern (moodle\\_%)."""
    parts, escaped = [], False
    for char in pattern:
        if escaped:
            parts.append(re.escape(char))
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            parts.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
    return re.compile("".join(parts), re.S)


def _unquote(name):
    return name[1:-1].replace("``", "`") if len(name) > 1 and name[0] == name[-1] == "`" else name


class MySQLDatabase:
    """Moodle on MySQL or MariaDB: one autocommit connection in a read-only session."""

    def __init__(self, url, password_file, environ, timeout):
        self.url, self.password_file, self.environ, self.timeout = url, password_file, environ, timeout
        self.parts = mysql_url(url)
        self._db = None

    def _connect(self, driver):
        parts = self.parts
        options = {"user": parts["user"], "db": parts["database"], "charset": "utf8mb4", "use_unicode": True,
                   "autocommit": True, "connect_timeout": min(self.timeout, 60),
                   # The client gives up on a server that stops answering, whatever the server's own timeout.
                   "read_timeout": self.timeout + 5, "write_timeout": self.timeout + 5}
        if parts["unix_socket"]:
            options["unix_socket"] = parts["unix_socket"]
        else:
            options.update(host=parts["host"], port=parts["port"])
        password = read_secret(self.password_file, self.environ) if self.password_file else None
        if password is not None:
            options["passwd"] = password
        db = driver.connect(**options)
        try:
            cursor = db.cursor()
            # Read-only by construction, whatever the account may do; and never a runaway scan.
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
            if "MariaDB" in db.get_server_info():
                cursor.execute(f"SET SESSION max_statement_time = {int(self.timeout)}")
            else:
                cursor.execute(f"SET SESSION max_execution_time = {int(self.timeout) * 1000}")
            cursor.close()
        except BaseException:
            db.close()
            raise
        return db

    def _rows(self, statement, parameters):
        driver = _driver()
        if self._db is None:
            self._db = self._connect(driver)
        cursor = self._db.cursor(driver.cursors.SSCursor)
        try:
            cursor.execute(statement, parameters or None)
            return cursor.fetchall()
        finally:
            cursor.close()

    def query(self, statement, parameters, table, log_table):
        driver = _driver()
        try:
            return self._rows(statement, parameters)
        except driver.Error as error:
            code = error.args[0] if error.args and isinstance(error.args[0], int) else None
            self.close()  # whatever went wrong, the next query starts a clean session
            raise self._domain_error(code, _message(error), table, log_table) from error

    def _domain_error(self, code, message, table, log_table):
        if code in _BAD_CREDENTIALS:
            return ConfigError(f"{where(self.url)} refused the credentials ({message}); check source.url's user "
                               "and the file named by source.password_file.")
        if code in _NO_DATABASE:
            return ConfigError(f"{where(self.url)} refused the database ({message}); check source.url's database "
                               "and GRANT SELECT ON its Moodle tables to source.url's user.")
        if code in _DENIED:
            # The table the server names: a query may read several (the course names join their categories).
            named = re.search(r"for table [`'\"]?(?:[^`'\".]+[`'\"]?\.[`'\"]?)?([^`'\"]+)", message)
            table = named.group(1) if named else table
            # The server says the same of a table that does not exist: it hides what the account may not see.
            return refused(self.url, table, message, f"check source.prefix (Moodle's $CFG->prefix), and GRANT SELECT "
                                                     f"ON {table}")
        if code == _NO_TABLE:
            return no_table(self.url, table, log_table)
        if code is None or code >= 2000 or code in _UNREACHABLE:  # 2000 and up: the client's own errors
            return UnavailableError(f"{where(self.url)} is unreachable or dropped the connection, or timed out "
                                    f"({message}); nothing was committed.")
        return failed(self.url, table, message)

    def grants(self, table):
        """Return the account's grants as 'PRIVILEGES ON object' (SHOW GRANTS, without what identifies it)."""
        found = []
        for (line,) in self.query("SHOW GRANTS", (), table, table):
            matched = _GRANT.match(line)
            if matched:
                found.append(f"{matched.group(1)} ON {matched.group(2)}")
        return found

    def may_write(self, table):
        """Whether a grant lets the account insert, update or delete rows of `table` in this database."""
        database = self.parts["database"]
        for grant in self.grants(table):
            privileges, _, target = grant.rpartition(" ON ")
            names = re.split(r",\s*", re.sub(r"\([^)]*\)", "", privileges))
            if not any(name.strip().upper() in _WRITES for name in names):
                continue
            schema, _, name = target.partition(".")
            if schema == "*" or _like(_unquote(schema)).fullmatch(database):
                if name == "*" or _unquote(name) == table:
                    return True
        return False

    def server(self, table):
        """One sentence about the server, the session and the grants, for `check`."""
        version = self.query("SELECT VERSION()", (), table, table)[0][0]
        try:
            read_only = self.query("SELECT @@session.transaction_read_only", (), table, table)[0][0]
        except UnavailableError:  # MariaDB before 11.1 knows only the older name (MySQL 8 only the newer)
            read_only = self.query("SELECT @@session.tx_read_only", (), table, table)[0][0]
        kind = "MariaDB" if "mariadb" in version.lower() else "MySQL"
        return (f"{kind} {version}, session read-only: {'yes' if read_only else 'NO'}, grants: "
                f"{'; '.join(self.grants(table))}")

    def close(self):
        if self._db is not None:
            try:
                self._db.close()
            except Exception:  # a connection the server already dropped
                pass
            self._db = None
