"""Quarantined records kept without the identifiers of the people in them.

A record is quarantined so that an operator can see what was wrong with it,
not who sent it. Before one is stored, every identifier of a person that can
be found in it — `mbox`, `mbox_sha1sum`, `openid`, `account.name` and `name`
wherever an Agent or Group can appear (actor, authority, context instructor
and team, an Agent/Group object, a SubStatement's, Group members), and a
Moodle row's `userid`, `relateduserid`, `realuserid` — is replaced by its
pseudonym (`pseudonym:N`, the keyed hash the run stages, so `forget` finds
it) or by `[redacted]`. Anything else equal to an identifier found, or shaped
like an e-mail address, is redacted too, in the reason and origin as well. A
record that cannot be read at all (not JSON, too deep, not an object) is kept
as its size only: its bytes may hold identifiers that cannot be located.
"""

import hashlib
import hmac
import json
import re

from lms_refresh.disclosure.pseudonyms import Pseudonymiser, moodle_identifier

REDACTED = "[redacted]"
MAX_DEPTH = 64  # deeper than any real statement; a deeper record is withheld, not walked
MOODLE_USER_FIELDS = ("userid", "relateduserid", "realuserid")
AGENT_OBJECT_TYPES = ("Agent", "Group")
_IDENTIFIER_KEYS = ("mbox", "mbox_sha1sum", "openid", "account", "member")


def _agent_shaped(value):
    return value.get("objectType") in AGENT_OBJECT_TYPES or any(key in value for key in _IDENTIFIER_KEYS)
# An e-mail address; not a URL's user ("postgresql://reader@host" stays readable in messages).
_EMAIL = re.compile(r"(?<![\w.+/-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_SHORTEST = 3  # shorter identifier values are not searched for in free text (they would match everywhere)


def marker(pseudonym):
    """Return the text that stands for a pseudonymised learner in a quarantined record."""
    return f"pseudonym:{pseudonym}"


def scrub_text(text):
    """Return `text` with anything shaped like an e-mail address redacted (messages, run rows, logs)."""
    return _EMAIL.sub(REDACTED, text) if isinstance(text, str) else text


class _Unreadable(ValueError):
    """The record cannot be walked safely; it is kept as its size only."""


class Redactor:
    """Turn a quarantine row (origin, reason, raw text) into one without identifiers."""

    def __init__(self, key, identify, moodle_site=None):
        """`identify(actor)` is the source's own reading of an actor's identifier text (the xAPI
        mapper's `actor_identifier`), raising ValueError for an actor it gives no pseudonym: the
        marker of a pseudonym here is then the one the mapper gives, and redaction needs no source."""
        self._key = key
        self._identify = identify
        self._pseudonymise = Pseudonymiser(key)
        self._moodle_site = moodle_site  # the Moodle source's site_url; None for xAPI sources

    def row(self, origin, reason, raw):
        """Return (origin, reason, kept text, digest) for a quarantined record.

        The digest is keyed, so a short record cannot be confirmed by hashing guesses.
        """
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
        digest = hmac.new(self._key, b"quarantine\0" + data, hashlib.sha256).hexdigest()
        found = set()
        try:
            document = json.loads(data)
            if isinstance(document, dict):
                kept = self._statement(document, found, 0)
            elif isinstance(document, list) and document and all(isinstance(item, dict) for item in document):
                kept = [self._statement(item, found, 1) for item in document]
            else:
                raise _Unreadable("not an object")
            text = json.dumps(self._scrub(kept, _patterns(found), 0), sort_keys=True)
        except (ValueError, RecursionError, UnicodeError):
            text = json.dumps({"withheld": "the record could not be read as a JSON object, so none of it is kept",
                               "bytes": len(data)})
        patterns = _patterns(found)
        return _scrub_string(str(origin), patterns), _scrub_string(str(reason), patterns), text, digest

    # -- the places where a person can be named --------------------------------

    def _statement(self, value, found, depth, *, role="statement"):
        """Return `value` with every Agent or Group in it redacted.

        `role` says where `value` sits: in a statement (or SubStatement) the actor and
        authority are agents, and so are the context's instructor and team. Anywhere
        else, a dict shaped like an agent (an Agent/Group objectType or an identifier
        key) is redacted as one: an Agent object, or an actor under a misspelt key.
        """
        if depth > MAX_DEPTH:
            raise _Unreadable("too deep")
        if role == "agent" or isinstance(value, dict) and _agent_shaped(value):
            return self._agent(value, found, depth + 1)
        if isinstance(value, list):
            return [self._statement(item, found, depth + 1, role="any") for item in value]
        if not isinstance(value, dict):
            return value
        kept = {}
        for key, item in value.items():
            child = "any"
            if role == "statement":
                if key in ("actor", "authority"):
                    child = "agent"
                elif key == "context":
                    child = "context"
                elif key == "object" and isinstance(item, dict) and item.get("objectType") == "SubStatement":
                    child = "statement"
                elif key in MOODLE_USER_FIELDS and item is not None:
                    kept[key] = self._moodle_user(item, found)
                    continue
            elif role == "context" and key in ("instructor", "team"):
                child = "agent"
            kept[key] = self._statement(item, found, depth + 1, role=child)
        return kept

    def _agent(self, agent, found, depth):
        """Return an Agent or Group with its identifiers replaced; unknown members of it are redacted."""
        if depth > MAX_DEPTH:
            raise _Unreadable("too deep")
        if isinstance(agent, list):
            return [self._agent(item, found, depth + 1) for item in agent]
        if not isinstance(agent, dict):
            if isinstance(agent, str):
                _remember(agent, found)
                return REDACTED
            return agent
        kept = {}
        for key, value in agent.items():
            if key == "objectType" and value in AGENT_OBJECT_TYPES:
                kept[key] = value
            elif key == "member":
                kept[key] = self._agent(value, found, depth + 1)
            elif key in ("mbox", "mbox_sha1sum", "openid"):
                kept[key] = self._pseudonym({key: value}, value, found)
            elif key == "account":
                kept[key] = self._account(value, found)
            else:  # name, and anything an Agent should not have
                _remember(value, found)
                kept[key] = REDACTED
        return kept

    def _account(self, account, found):
        if not isinstance(account, dict):
            _remember(account, found)
            return REDACTED
        kept = {}
        for key, value in account.items():
            if key == "homePage" and isinstance(value, str):
                kept[key] = value  # the system's address, not the person's
            elif key == "name":
                kept[key] = self._pseudonym({"account": account}, value, found)
            else:
                _remember(value, found)
                kept[key] = REDACTED
        return kept

    def _pseudonym(self, actor, value, found):
        """Return the marker of the pseudonym the mapper would give `actor`, or REDACTED if it gives none."""
        _remember(value, found)
        try:
            return marker(self._pseudonymise(self._identify(actor)))
        except (ValueError, TypeError, KeyError):  # InvalidStatement and UnicodeError are ValueErrors
            return REDACTED

    def _moodle_user(self, value, found):
        if isinstance(value, str):
            _remember(value, found)  # a number is not searched for in free text: it would match log ids
        if self._moodle_site is None or isinstance(value, bool) or not isinstance(value, int):
            return REDACTED
        return marker(self._pseudonymise(moodle_identifier(self._moodle_site, value)))

    # -- everything else ---------------------------------------------------------

    def _scrub(self, value, patterns, depth):
        """Redact what remains of an identifier found, and e-mail addresses, anywhere in the record."""
        if depth > MAX_DEPTH:
            raise _Unreadable("too deep")
        if isinstance(value, str):
            return _scrub_string(value, patterns)
        if isinstance(value, list):
            return [self._scrub(item, patterns, depth + 1) for item in value]
        if isinstance(value, dict):
            return {_scrub_string(key, patterns): self._scrub(item, patterns, depth + 1) for key, item in value.items()}
        return value


def _remember(value, found):
    """Note the identifier values in `value`, so free text elsewhere in the record loses them too."""
    if isinstance(value, str):
        if len(value) >= _SHORTEST:
            found.add(value)
        if value.lower().startswith("mailto:") and len(value) - 7 >= _SHORTEST:
            found.add(value[7:])
    elif isinstance(value, dict):
        for item in value.values():
            _remember(item, found)
    elif isinstance(value, list):
        for item in value:
            _remember(item, found)


def _patterns(found):
    if not found:
        return None
    # Longest first, so an address is replaced whole before a shorter value inside it; whole
    # words only, so an account name "123" leaves the origin "export.ndjson:1234" alone.
    alternatives = "|".join(re.escape(value) for value in sorted(found, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


def _scrub_string(text, patterns):
    if patterns is not None and text:
        text = patterns.sub(REDACTED, text)
    return scrub_text(text)
