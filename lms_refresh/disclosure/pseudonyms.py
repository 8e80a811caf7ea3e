"""Keyed pseudonymisation of actor identifiers (HMAC-SHA256 with a secret key file)."""

import hashlib
import hmac
import secrets

from lms_refresh import atomic
from lms_refresh.errors import StateError

KEY_BYTES = 32


def read_key(path):
    """Return the key in `path`, None if the file does not exist, or raise StateError."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        return None
    except PermissionError as error:
        raise StateError(f"Cannot read the pseudonymisation key {path}: permission denied.") from error
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) < 16:
        raise StateError(
            f"The pseudonymisation key {path} is damaged (expected at least 32 hex digits); "
            "restore it from a backup — a new key would count every learner twice."
        )
    return key


def create_key(path):
    """Write a new random key to `path` (mode 0600, atomically and durably: its loss stops every run) and
    return it."""
    key = secrets.token_bytes(KEY_BYTES)
    atomic.replace_bytes(path, key.hex().encode() + b"\n", mode=0o600,
                         what=f"the pseudonymisation key {path}")
    return key


def fingerprint(key):
    """Return a short public fingerprint of `key`, stored to detect a swapped key."""
    return hmac.new(key, b"lms-refresh key fingerprint", hashlib.sha256).hexdigest()[:16]


def moodle_identifier(site_url, user_id):
    """Return the text a Moodle user is pseudonymised from: the mapper, `forget` and the quarantine share it."""
    return f"moodle:{site_url.rstrip('/')}|{user_id}"


class Pseudonymiser:
    """Map actor identifiers to stable keyed hashes (64-bit integers), caching the recent ones.

    64 bits keep the staging table compact; two of a million learners share a
    pseudonym with a probability of about 3 in 100 million.
    """

    CACHE_LIMIT = 200_000

    def __init__(self, key):
        self._key = key
        self._cache = {}

    def __call__(self, identifier):
        cached = self._cache.get(identifier)
        if cached is None:
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()  # bounded memory; learners recur, so it refills cheaply
            digest = hmac.new(self._key, identifier.encode(), hashlib.sha256).digest()
            cached = int.from_bytes(digest[:8], "big", signed=True)
            self._cache[identifier] = cached
        return cached
