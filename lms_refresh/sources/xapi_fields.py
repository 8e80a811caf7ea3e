"""Readers of the xAPI fields that a published number is computed from.

Each returns what the mapper needs or raises InvalidStatement, whose message
is the quarantine reason. Only fields that can change a number are checked
(docs/sources/xapi-statements.md lists them); a violation anywhere else in a
statement is tolerated, because no metric reads it.
"""

import hashlib
import json
import re

from lms_refresh import instants
from lms_refresh.disclosure.names import carries_address
from lms_refresh.disclosure.redaction import scrub_text
from lms_refresh.sources.records import InvalidRecord

# An absolute IRI (RFC 3987): a scheme, a colon, then none of the characters IRIs exclude — space, controls,
# <>"{}|\^`, surrogates, what section 2.2's ucschar leaves out (noncharacters, specials, tags), the bidirectional
# formatting characters section 4.1 forbids (LRM, RLM, LRE..RLO, and the isolates LRI..PDI) — with the private use
# characters (iprivate) in the query alone.
_EXCLUDED = ("\x00-\x20<>\"{}|\\\\^`\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
             "\ufdd0-\ufdef\ufff0-\uffff"
             + "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(1, 17))
             + "\U000e0000-\U000e0fff")
_PRIVATE = "\ue000-\uf8ff\U000f0000-\U0010ffff"
_IRI = re.compile(rf"[A-Za-z][A-Za-z0-9+.\-]*:(?=.)[^{_EXCLUDED}{_PRIVATE}?#]*(?:\?[^{_EXCLUDED}#]*)?"
                  rf"(?:#[^{_EXCLUDED}{_PRIVATE}]*)?", re.DOTALL)
_MAILTO = re.compile(r"(?i:mailto):[^@\s]+@[^@\s]+")
_SHA1 = re.compile(r"[0-9a-fA-F]{40}")
_NUMBER = r"([0-9]+(?:[.,][0-9]+)?)"
# ISO 8601:2004 4.4.3.2 (the form xAPI Data 4.6 requires): PnYnMnDTnHnMnS or PnW; a decimal
# fraction (point or comma) on the last part only, which parse_duration_ms checks.
_DURATION = re.compile(
    rf"P(?!$)(?:{_NUMBER}Y)?(?:{_NUMBER}M)?(?:{_NUMBER}D)?(?:T(?=[0-9])(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:{_NUMBER}S)?)?"
    rf"|P{_NUMBER}W"
)
MAX_DURATION_DAYS = 10_000  # about 27 years: far beyond any time on task, and a day's sum cannot overflow
IFI_KEYS = ("mbox", "mbox_sha1sum", "openid", "account")


class InvalidStatement(InvalidRecord):
    """The statement cannot be used; the message is the quarantine reason."""


def event_key(statement_id):
    """Return the 16-byte key of a statement id (a UUID in any letter case), or None if it is not one."""
    # [8:24:5]: the four hyphens' places (8, 13, 18, 23), in one slice rather than four look-ups
    if type(statement_id) is not str or len(statement_id) != 36 or statement_id[8:24:5] != "----":
        return None
    try:
        key = bytes.fromhex(statement_id.replace("-", ""))
    except ValueError:
        return None
    return key if len(key) == 16 else None


def stored_cursor(text):
    """Given an ISO 8601 time, return its cursor text (fixed-width UTC) or raise InvalidStatement."""
    try:
        return instants.iso_cursor(text, "stored")
    except instants.NotAnInstant as error:
        raise InvalidStatement(str(error)) from None


def shown(value, width=40):
    """Return a short quoted form of a value for a reason, without rendering a large or deep one whole."""
    if type(value) is not str:
        value = str(value) if value is None or type(value) in (bool, int, float) else f"<a JSON {type(value).__name__}>"
    return repr(value[:width])


def is_iri(value):
    return type(value) is str and _IRI.fullmatch(value) is not None


def checked_course(course):
    """Return `course`, a course IRI the mapper meets for the first time (or again, its cache emptied), or raise
    InvalidStatement if it carries an e-mail address (as `scrub_text` finds one, hidden or not): the IRI is
    published as it is, as the key of its course's rows, so it cannot be redacted (two courses would become one)
    and the statement is quarantined instead. The reason shows the IRI redacted."""
    if carries_address(course):
        raise InvalidStatement(f"its course IRI {shown(scrub_text(course), 80)} carries an e-mail address, which would "
                               "be published: a course IRI is the key of its published rows and is never redacted; "
                               "send the course's activity with an IRI that names no one")
    return course


def parse_time(text, field):
    """Return the aware datetime of an ISO 8601 time in range (UTC when it has no offset), or raise InvalidStatement."""
    try:
        return instants.parse_iso(text, field)
    except instants.NotAnInstant as error:
        raise InvalidStatement(str(error)) from None


def parse_duration_ms(text):
    """Given an ISO 8601 duration, return whole milliseconds, or None if it has years or months.

    Weeks are 7 days. Years and months have no fixed length, so a duration with
    a non-zero number of them is no duration (NULL) rather than a guessed one.
    """
    if type(text) is not str:
        raise InvalidStatement(f"result.duration {shown(text)} is not an ISO 8601 duration")
    decimal = text.replace(",", ".") if "," in text else text  # ISO 8601 prefers the comma; xAPI uses the point
    match = _DURATION.fullmatch(decimal)
    if match is None:
        raise InvalidStatement(f"result.duration {text[:40]!r} is not an ISO 8601 duration")
    if "." in decimal and not decimal[decimal.index(".") + 1:-1].isdigit():  # digits, then the last designator
        raise InvalidStatement(f"result.duration {text[:40]!r} has a fraction before its last part")
    years, months, days, hours, minutes, seconds, weeks = match.groups()
    if weeks is not None:
        milliseconds = float(weeks) * 604_800_000
    elif years is not None and float(years) or months is not None and float(months):
        return None
    else:
        milliseconds = 0.0
        if days is not None:
            milliseconds += float(days) * 86_400_000
        if hours is not None:
            milliseconds += float(hours) * 3_600_000
        if minutes is not None:
            milliseconds += float(minutes) * 60_000
        if seconds is not None:
            milliseconds += float(seconds) * 1000
    if not milliseconds <= MAX_DURATION_DAYS * 86_400_000:  # also an infinite float from hundreds of digits
        raise InvalidStatement(f"result.duration {text[:40]!r} is longer than {MAX_DURATION_DAYS} days")
    return round(milliseconds)


def mbox_sha1sum(mbox):
    """Return the mbox_sha1sum form of an mbox: the SHA-1 hex of the whole mailto: IRI (xAPI Data 2.4.2.3)."""
    return hashlib.sha1(mbox.encode()).hexdigest()


def agent_identifier(agent, where):
    """Return the identifier text of an Agent or identified Group, None if it has none, or raise.

    An mbox is identified by its SHA-1 form, so that a learner sent once as mbox
    and once as mbox_sha1sum is one learner.
    """
    found = [key for key in IFI_KEYS if agent.get(key) is not None]
    if not found:
        return None
    if len(found) > 1:
        raise InvalidStatement(f"{where} has more than one inverse functional identifier ({', '.join(found)})")
    key = found[0]
    value = agent[key]
    if key == "mbox":
        if not is_iri(value) or not _MAILTO.fullmatch(value):
            raise InvalidStatement(f"{where}.mbox is not a mailto: IRI with an address")
        return "mbox_sha1sum:" + mbox_sha1sum(value)
    if key == "mbox_sha1sum":
        if type(value) is not str or not _SHA1.fullmatch(value):
            raise InvalidStatement(f"{where}.mbox_sha1sum is not 40 hexadecimal digits")
        return "mbox_sha1sum:" + value.lower()
    if key == "openid":
        if not is_iri(value):
            raise InvalidStatement(f"{where}.openid is not a URI")
        return "openid:" + value
    if type(value) is not dict:
        raise InvalidStatement(f"{where}.account is not an object")
    home, name = value.get("homePage"), value.get("name")
    if not is_iri(home):
        raise InvalidStatement(f"{where}.account.homePage is not an IRL")
    if type(name) is not str or not name:
        raise InvalidStatement(f"{where}.account.name is not a non-empty string")
    return f"account:{home}|{name}"


def actor_identifier(actor):
    """Return the actor's identifier text, or raise InvalidStatement.

    An anonymous Group (objectType Group, members, no identifier of its own) is
    one learner, identified by its sorted, distinct member identifiers: the same
    members in any order are the same group.
    """
    if type(actor) is not dict:
        raise InvalidStatement("actor is missing or not an object")
    kind = actor.get("objectType")
    if kind is not None and kind != "Agent" and kind != "Group":
        raise InvalidStatement(f"actor.objectType {shown(kind)} is neither Agent nor Group")
    identifier = agent_identifier(actor, "actor")
    if identifier is not None:
        return identifier
    if kind != "Group":
        raise InvalidStatement("actor has no inverse functional identifier (mbox, mbox_sha1sum, openid, account)")
    members = actor.get("member")
    if type(members) is not list or not members:
        raise InvalidStatement("actor is an anonymous Group without members")
    identifiers = set()
    for member in members:
        if type(member) is not dict:
            raise InvalidStatement("actor.member holds something that is not an Agent")
        identifier = agent_identifier(member, "actor.member")
        if identifier is None:
            raise InvalidStatement("actor.member holds an Agent without an inverse functional identifier")
        identifiers.add(identifier)
    return "group:" + json.dumps(sorted(identifiers))
