"""What may be shown of a message, a URL or a quarantined record: one rule for every output.

`scrub_text` is applied to every text written for people (log records, the run log, alerts, `check` and `status
--check` lines, Healthchecks bodies, the quarantine): it removes credentials read by this process, URLs' passwords,
secret-named query parameters and anything shaped like an e-mail address, as a reader sees it too (disclosure/
folding.py; docs/admin/bad-input.md, "What is redacted, and where"). A URL shown on its own goes through `url_origin` or
`url_without_password` (a database URL), a quarantined record through `Redactor`, a published course name through
`without_identifiers` (names.carries_address tells a course IRI that must not be published at all).
"""

import contextlib
import functools
import hashlib
import hmac
import json
import re
import urllib.parse

from lms_refresh.credentials import read_so_far
from lms_refresh.disclosure import folding, free_text
from lms_refresh.disclosure.pseudonyms import Pseudonymiser, moodle_identifier

REDACTED = "[redacted]"
MAX_DEPTH = 64  # deeper than any real statement; a deeper record is withheld, not walked
MOODLE_USER_FIELDS = ("userid", "relateduserid", "realuserid")
AGENT_OBJECT_TYPES = ("Agent", "Group")
_IDENTIFIER_KEYS = ("mbox", "mbox_sha1sum", "openid", "account", "member")
_SHORTEST = 3  # shorter identifiers are redacted where a whole string equals them, not inside other text
_HOLE = "REDACTEDzqHOLE"  # where an identifier was, until scrub_text has seen the text
_SHORTEST_SECRET = 4  # a shorter credential would garble every message; URLs' passwords go by their place
_DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "postgres": 5432}
_HOST = re.compile(r"[a-z0-9.\-]{1,253}|\[[0-9a-f:.]{2,45}\]")
_SECRET_NAME = re.compile(r"pass|secret|token|key|sig|auth", re.IGNORECASE)
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"  # combining marks: not \w, but in names
# An address letter holds no @ or %40: one place to split, linear time (no possessive quantifiers: 3.11.2)
_ADDRESS_LETTER = rf"(?:[\w{_MARKS}-]|%(?!40|2540)[0-9a-fA-F]{{2}})"
_ADDRESS = (rf"(?:(?<![\w.+%{_MARKS}-])|(?<=%40))(?:{_ADDRESS_LETTER}|[.+])+(?:@|%40|%2540)"
            rf"{_ADDRESS_LETTER}+(?:\.{_ADDRESS_LETTER}+)+")
ADDRESS = re.compile(_ADDRESS)  # the address rule alone
# One pass over the text; the alternatives are tried in this order at each position. Letter case is
# ignored only where it must be: for classes as wide as \w, re.IGNORECASE costs 10 times the time.
_TEXT = re.compile(
    r"(?P<database>(?<![\w.+%-])(?i:postgres(?:ql)?|mysql|mariadb)://[\w.~-]+)(?::[^\s/?#]*)?@"  # a role name stays
    r"|(?P<scheme>(?<![\w.+%-])[a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/?#]*@"  # any other URL's user:password@
    r"|(?P<parameter>[?&;][\w.-]+=)(?P<value>[^&;#\s]*)"
    r"|(?P<auth>\b(?i:authorization)\b[\"']?\s*[:=]\s*[\"']?(?:(?i:basic|bearer|token)\s+)?|\b(?i:bearer)\s+)"
    r"[\w.~+/-]+=*"
    rf"|{_ADDRESS}"
)
_TRIGGERS = ("@", "%40", "%2540", "=", "bearer", "authorization")  # most texts hold none of these: no pass at all


def marker(pseudonym):
    """Return the text that stands for a pseudonymised learner in a quarantined record."""
    return f"pseudonym:{pseudonym}"


def _replace(match):
    if match.group("database"):
        return match.group("database") + "@"
    if match.group("scheme"):
        return f"{match.group('scheme')}{REDACTED}@"
    if match.group("parameter"):
        name, value = match.group("parameter"), match.group("value")
        return name + (REDACTED if value and _SECRET_NAME.search(name) else _TEXT.sub(_replace, value))
    return match.group("auth") + REDACTED if match.group("auth") else REDACTED


def scrub_text(text, secrets=()):
    """Return `text` without credentials, URL passwords and e-mail addresses (see the module doc). `secrets` are
    credential values (passwords, URLs with tokens) besides those this process read through lms_refresh.credentials;
    anything but a string is returned as is."""
    if not isinstance(text, str) or not text:
        return text
    for secret in (*secrets, *read_so_far()):
        for form in _secret_forms(secret):
            text = text.replace(form, REDACTED)
    # First the addresses only a reader sees ("jane\ufe0f@…", "jane＠…"), whole: the pass below would leave a part.
    text = folding.redacted(text, ADDRESS, REDACTED, ("@", "%"))
    lowered = text.lower()
    return _TEXT.sub(_replace, text) if any(trigger in lowered for trigger in _TRIGGERS) else text


@functools.lru_cache(maxsize=64)
def _secret_forms(secret):
    """The texts a credential can be shown as: itself, without a trailing /, and a URL's path (its token)."""
    if not isinstance(secret, str) or len(secret.strip()) < _SHORTEST_SECRET:
        return ()
    forms, parts = {secret.strip(), secret.strip().rstrip("/")}, None
    with contextlib.suppress(ValueError):  # an unbalanced or surrounded [: no URL, so no token of one
        parts = urllib.parse.urlsplit(secret.strip())
    token = parts.path + (f"?{parts.query}" if parts.query else "") if parts and parts.netloc else ""
    forms.add(token.rstrip("/") if len(token.strip("/")) >= 8 else secret.strip())
    return tuple(sorted((form for form in forms if len(form) >= _SHORTEST_SECRET), key=len, reverse=True))


def url_origin(url):
    """Return "scheme://host:port" of `url` and nothing else, for a URL that may carry a token (a webhook, a
    Healthchecks check) or that a server sent (an LRS's redirect). The port is the URL's or its scheme's default;
    a scheme, host or port that is not one is named as such ("<not a host name>"), a text that is no scheme://host
    URL at all "<not a URL>"."""
    try:
        parts = urllib.parse.urlsplit(url.strip() if isinstance(url, str) else "")
    except ValueError:  # an unbalanced [
        return "<not a URL>"
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if not scheme or not parts.netloc:
        return "<not a URL>"
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # not a number, or out of range
        port = "<not a port>"
    scheme = scheme if re.fullmatch(r"[a-z][a-z0-9+.-]{0,31}", scheme) else "<not a scheme>"
    host = f"[{host}]" if ":" in host else host
    host = host if _HOST.fullmatch(host) else "<not a host name>"
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


def url_without_password(url):
    """Return a database URL as configured, without its password (in the user part or a query parameter),
    for messages that name the database: its user, host, port and database name stay."""
    return _TEXT.sub(_database_part, url) if isinstance(url, str) else url


def _database_part(match):
    if match.group("database") or match.group("parameter") or match.group("auth"):
        return _replace(match)
    return match.group(0)  # scheme://user@ of another scheme, and addresses, are for scrub_text to judge


class _Unreadable(ValueError):
    """The record cannot be walked safely; it is kept as its size only."""


def _agent_shaped(value):
    return value.get("objectType") in AGENT_OBJECT_TYPES or any(key in value for key in _IDENTIFIER_KEYS)


class Redactor:
    """Turn a quarantine row (origin, reason, raw text) into one without identifiers.

    Every identifier of a person that can be found in a record — `mbox`, `mbox_sha1sum`, `openid`,
    `account.name` and `name` wherever an Agent or Group can appear (actor, authority, context instructor and
    team, an Agent/Group object, a SubStatement's, Group members), and a Moodle row's `userid`, `relateduserid`,
    `realuserid` — is replaced by its pseudonym (`pseudonym:N`, the keyed hash the run stages, so `forget` finds
    it) or by `[redacted]`. Every other string of the record, and its origin and reason, loses those identifiers
    (and an mbox's address and its part before the @) in any letter case — a string that equals a shorter one
    goes whole — and then goes through `scrub_text`; and of the record's strings only those that are no one's
    words are kept (IRIs, ids, times, numbers...), every other one as its length and a keyed hash, in the reason
    too where it quotes one (disclosure/free_text.py). A record that cannot be read at all (not JSON, too deep,
    not an object) is kept as its size only: its bytes may hold identifiers that cannot be located.

    `identify(actor)` is the source's own reading of an actor's identifier text (the xAPI mapper's
    `actor_identifier`), raising ValueError for an actor it gives no pseudonym: a marker here is then the one the
    mapper gives, and redaction needs no source. `moodle_site` is the Moodle source's site_url (None for xAPI).
    """

    def __init__(self, key, identify, moodle_site=None):
        self._key = key
        self._pseudonymise = Pseudonymiser(key)
        self._identify = identify
        self._moodle_site = moodle_site

    def row(self, origin, reason, raw):
        """Return (origin, reason, kept text, digest) for a quarantined record. The digest is keyed, so a short
        record cannot be confirmed by hashing guesses."""
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
        digest = hmac.new(self._key, b"quarantine\0" + data, hashlib.sha256).hexdigest()
        found = _Found()
        try:
            document = json.loads(data)
            if isinstance(document, dict):
                kept = self._statement(document, found, 0)
            elif isinstance(document, list) and document and all(isinstance(item, dict) for item in document):
                kept = [self._statement(item, found, 1) for item in document]
            else:
                raise _Unreadable("not an object")
        except (ValueError, RecursionError, UnicodeError):
            kept = None
        scrub, reason = found.rule(), str(reason)
        if kept is None:
            text = json.dumps({"withheld": "the record could not be read as a JSON object, so none of it is kept",
                               "bytes": len(data)})
        else:
            shape = free_text.Shape(self._key, scrub, moodle=self._moodle_site is not None)
            text = json.dumps(shape.of(kept), sort_keys=True)
            reason = shape.quoted(reason)
        return scrub(str(origin)), scrub(reason), text, digest

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
            if child != "agent" and type(item) in _LEAVES and depth < MAX_DEPTH:
                kept[key] = item  # what the call would return, without one for each of a statement's leaves
                continue
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
                found.remember(agent)
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
                found.remember(value)
                kept[key] = REDACTED
        return kept

    def _account(self, account, found):
        if not isinstance(account, dict):
            found.remember(account)
            return REDACTED
        kept = {}
        for key, value in account.items():
            if key == "homePage" and isinstance(value, str):
                kept[key] = value  # the system's address, not the person's
            elif key == "name":
                kept[key] = self._pseudonym({"account": account}, value, found)
            else:
                found.remember(value)
                kept[key] = REDACTED
        return kept

    def _pseudonym(self, actor, value, found):
        """Return the marker of the pseudonym the mapper would give `actor`, or REDACTED if it gives none."""
        found.remember(value)
        try:
            return marker(self._pseudonymise(self._identify(actor)))
        except (ValueError, TypeError, KeyError):  # InvalidStatement and UnicodeError are ValueErrors
            return REDACTED

    def _moodle_user(self, value, found):
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            found.whole.add(folding.one_case(str(value)))  # a number goes where a whole string is it: not in log ids
        if self._moodle_site is None or isinstance(value, bool) or not isinstance(value, int):
            return REDACTED
        return marker(self._pseudonymise(moodle_identifier(self._moodle_site, value)))


_LEAVES = frozenset((str, int, float, bool, type(None)))  # JSON's values that hold no other (no agent either)


class _Found:
    """The identifiers found in one record, and the rule that removes them from its other strings."""

    def __init__(self, values_only=False):
        self.whole = set()  # folded: a string equal to one of these goes whole
        self.inside = set()  # searched for inside every string, in any letter case
        self.values = []  # every identifier string noted, as it was written (people_in)
        self._values_only = values_only  # people_in's: no rule is made, so the folded forms are not worth making

    def remember(self, value):
        """Note the identifier values in `value` (an mbox's address and its part before the @ too)."""
        if isinstance(value, str):
            self.values.append(value)
            if self._values_only:
                return
            self._add(value)
            if value[:7].lower() == "mailto:":
                self._add(value[7:])
                self._add(value[7:].rsplit("@", 1)[0])
        elif isinstance(value, (dict, list)):
            for item in value.values() if isinstance(value, dict) else value:
                self.remember(item)

    def _add(self, value):
        for form in {value, value.strip()} if value.strip() else ():
            self.whole.add(folding.one_case(folding.bare(form) or form))  # as a text is compared with it
            if len(form) >= _SHORTEST:
                self.inside.add(form)

    def rule(self):
        """Return a function of a string: without these identifiers (as words, as written and as a reader sees them:
        "ｊｄｏｅ" is "jdoe", "Jane_Doe" "Jane Doe": folding.words), then through `scrub_text`."""
        whole, pattern = self.whole, folding.words(self.inside, _SHORTEST) if self.inside else None
        # Matching folds one character to one ("ß" is not "SS"): a text still holding a non-ASCII one goes whole.
        folded = [folding.one_case(value) for value in self.inside if not value.isascii()]

        def scrub(text):
            if folding.one_case(folding.bare(text)) in whole:
                return REDACTED
            if pattern is not None and text:  # a hole of letters: what is left of an address keeps its shape
                text = folding.replaced(pattern.sub(_HOLE, text), pattern, _HOLE)
            # Before scrub_text, which may redact a part of such a value (an address in it) and hide the rest.
            if folded and any(value in folding.one_case(text) for value in folded):
                return REDACTED
            return scrub_text(text).replace(_HOLE, REDACTED)
        return scrub


def without_identifiers(text, identifiers):
    """Return `text` without the strings `identifiers`, as a quarantined record's strings lose them, then scrubbed."""
    found = _Found()
    found.remember(list(identifiers))
    return found.rule()(text)


def people_in(statement):
    """The identifier strings, as written, of every person in an xAPI statement, found where a Redactor finds them
    (no pseudonym is made: an `identify` of None gives none); None if it cannot be walked (too deep)."""
    found = _Found(values_only=True)
    with contextlib.suppress(_Unreadable, RecursionError):
        Redactor(b"", None)._statement(statement, found, 0)
        return list(dict.fromkeys(found.values))
    return None
