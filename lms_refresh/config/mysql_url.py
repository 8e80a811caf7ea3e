"""A mysql:// or mariadb:// URL of Moodle's database, taken apart once: for the configuration's check and the
Moodle source's connection (lms_refresh.sources.moodle_mysql)."""

import re
import urllib.parse

MYSQL_SCHEME = re.compile(r"^(mysql|mariadb)://", re.I)
_MYSQL_PARAMETERS = {"unix_socket"}


def mysql_url(value):
    """Given a mysql:// or mariadb:// URL, return its parts as a dict: user, host, port, database, unix_socket
    (None where not given); raise ValueError (the end of a sentence that never quotes the URL) if it is none.

    mysql://user@host:3306/moodle, or mysql://user@localhost/moodle?unix_socket=/run/mysqld/mysqld.sock.
    """
    if any(char.isspace() or not char.isprintable() for char in value):
        raise ValueError("contains a space or a control character (percent-encode it)")
    parts = urllib.parse.urlsplit(value)
    if parts.password is not None or "password=" in parts.query:
        raise ValueError("must not contain a password; put it in the file named by source.password_file")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has a port that is not a number from 1 to 65535") from None
    database = urllib.parse.unquote(parts.path.removeprefix("/"))
    if not parts.hostname or not parts.username or not database or "/" in database or parts.fragment:
        raise ValueError("expected a URL such as \"mariadb://user@host:3306/moodle\", with a user, a host and "
                         "the database")
    try:
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError("has a query that is not name=value pairs") from None
    unknown = sorted(set(query) - _MYSQL_PARAMETERS)
    if unknown or any(len(values) > 1 for values in query.values()):
        raise ValueError(f"takes only {', '.join(sorted(_MYSQL_PARAMETERS))}=... after '?' (once), not "
                         f"{', '.join(unknown) or 'a repeated one'}")
    socket = query.get("unix_socket", [None])[0]
    if socket is not None and not socket.startswith("/"):
        raise ValueError("has a unix_socket that is not an absolute path")
    return {"user": urllib.parse.unquote(parts.username), "host": parts.hostname, "port": port or 3306,
            "database": database, "unix_socket": socket}
