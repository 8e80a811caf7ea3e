"""Connecting to PostgreSQL and saying what a failed connection means: one place for the Moodle source
and the PostgreSQL store, which both name the database they failed on and the settings to check.

Imported only when one of them is configured (psycopg is not needed otherwise).
"""

import os
import re
import socket

import psycopg

from lms_refresh.credentials import read_secret
from lms_refresh.errors import ConfigError, UnavailableError

# invalid_password, invalid_authorization_specification (no pg_hba.conf entry, unknown role)
_REFUSED = ("28P01", "28000")


def display_url(url):
    """The URL without any password, for messages."""
    return re.sub(r"(://[^/@:]*):[^/@]*@", r"\1@", url)


def first_line(error):
    """The first line of a driver error's message (its type's name if it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def connect(url, password_file, environ, *, what, section, **options):
    """Return an autocommit connection to `url`, named after this process in the server's activity view.

    `what` names the database in messages ("The store postgresql://..."); `section` is the
    configuration section whose `url` and `password_file` a refusal asks to check.
    """
    password = read_secret(password_file, environ) if password_file else None
    try:
        return psycopg.connect(url, password=password, autocommit=True,
                               application_name=f"lms-refresh pid {os.getpid()} on {socket.gethostname()}",
                               **options)
    except psycopg.OperationalError as error:
        raise connection_error(error, what, section) from error


def connection_error(error, what, section):
    """Return the domain error a psycopg.OperationalError means: refused credentials are the
    configuration's to fix (78); anything else is a server out of reach, which a later run may
    find again (69)."""
    if getattr(error, "sqlstate", None) in _REFUSED or "authentication failed" in str(error):
        return ConfigError(f"{what} refused the credentials ({first_line(error)}); check {section}.url's user "
                           f"and the file named by {section}.password_file.")
    return unreachable(error, what)


def unreachable(error, what):
    """Return the error of a server that cannot be reached, dropped the session or did not answer in time."""
    return UnavailableError(f"{what} is unreachable or dropped the connection, or timed out ({first_line(error)}); "
                            "nothing was committed.")
