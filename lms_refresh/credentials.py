"""Secrets (passwords, URLs with tokens) from credential files, never from argv or the environment."""

import os

from lms_refresh.errors import ConfigError

_READ = set()  # every credential this process has read: lms_refresh.disclosure.redaction removes them from every output


def read_so_far():
    """Return the credential values read by this process so far."""
    return frozenset(_READ)


def read_secret(name, environ):
    """Return the stripped content of a credential: a bare name in $CREDENTIALS_DIRECTORY, or a path."""
    if not name:
        return None
    path = name
    if "/" not in name:
        directory = environ.get("CREDENTIALS_DIRECTORY")
        if not directory:
            raise ConfigError(f"Credential '{name}' needs $CREDENTIALS_DIRECTORY (LoadCredential={name}:...) or a path.")
        path = os.path.join(directory, name)
    try:
        with open(path, encoding="utf-8") as handle:
            secret = handle.read().strip()
    except OSError as error:
        raise ConfigError(f"Cannot read the credential {path}: {error.strerror}.")
    _READ.add(secret)
    return secret
