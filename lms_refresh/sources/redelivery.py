"""Whether a statement delivered again is the version already staged (xAPI 1.0.3, Data 2.3.1).

A statement is immutable, but a source may hand one out again in another form: an LRS
re-import gives it a new `stored`, another LRS writes its times with `+00:00` for `Z` or
with another precision. xAPI's Statement Comparison Requirements say which differences
a comparison of two versions must ignore — those the Statement Immutability exceptions
can cause — and that every other difference counts. What the staged row holds of a
statement (its canonical event) is compared accordingly:

- `stored`, `authority`, `version`: set by an LRS; ignored (`authority` and `version`
  are not staged at all). `timestamp` is one of them too when a version has none (the
  LRS sets it to `stored`): then neither the times nor the days are compared.
- Timestamp serialisation: two timestamps are the same when they name the same
  instant, whatever their offset (`Z`, `+00:00`, `+01:00`, ...), to the millisecond
  xAPI requires be kept — a version truncated or rounded to it is the same time.
- Case: the statement id is read case-insensitively already; course and verb IRIs are
  compared with their scheme and host in lower case (and %-escapes in upper case).
- The order of a Group's members: an anonymous Group's learner is its sorted members.
- Activity definitions, a verb's display, attachments: not staged, so not compared.

Everything else staged is compared: the learner, the course, the verb, the result's
flags, score and duration. A statement's content that no number reads (a response,
extensions) is not staged, so a version that differs only there counts once too.
"""

import datetime as dt
import json
import re

from lms_refresh.disclosure.redaction import marker
from lms_refresh.sources.records import EVENT_FIELDS
from lms_refresh.sources.xapi_fields import InvalidStatement, parse_time

CONFLICT = "conflicting statement id: already staged with other content"
_AT = {name: position for position, name in enumerate(EVENT_FIELDS)}
_NOT_CONTENT = ("actor", "record_key", "learner_key")  # what a conflicting version's record does not show
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_ADL = "http://adlnet.gov/expapi/verbs/"
# The flags a verb implies by itself (lms_refresh.sources.xapi), besides what the result says.
_FLAG_VERBS = {"is_attempt": _ADL + "attempted", "is_completion": _ADL + "completed", "is_passed": _ADL + "passed",
               "is_failed": _ADL + "failed"}
_AUTHORITY = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*:)(?://(?P<user>[^/?#@]*@)?(?P<host>[^/?#:]*))?")
_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")


def canonical_iri(text):
    """Return an IRI with the parts RFC 3987 makes case-insensitive (scheme, host, %-escapes) in one case."""
    if not isinstance(text, str):
        return text
    match = _AUTHORITY.match(text)
    if match is None:
        return text
    head = match.group("scheme").lower()
    if match.group("host") is not None:
        head += "//" + (match.group("user") or "") + match.group("host").lower()
    return head + _ESCAPE.sub(lambda escape: escape.group().upper(), text[match.end():])


def _milliseconds(text):
    """Return {the instant truncated to the millisecond, rounded to it} of an ISO time, or None if unreadable."""
    try:
        moment = parse_time(text, "timestamp")
    except InvalidStatement:
        return None
    micro = (moment - _EPOCH) // _MICROSECOND
    return {micro // 1000, (micro + 500) // 1000}


def same_time(one, other):
    """Whether two timestamps name the same instant, to the millisecond (either truncated or rounded to it)."""
    if one == other:
        return True
    first, second = _milliseconds(one), _milliseconds(other)
    return first is not None and second is not None and not first.isdisjoint(second)


def same_statement(kept, event, name_of):
    """Given a staged row `kept` (the event's fields in EVENT_FIELDS order; more may follow), an `event`
    mapped from a delivery of the same statement id, and `name_of(kind, number)` that returns the IRI of
    a "course" or "verb" id, return True if the two are versions of one statement."""
    for field in ("actor", "score_micro", "duration_ms"):
        if kept[_AT[field]] != event[_AT[field]]:
            return False
    verbs = []
    for kind, field in (("course", "course_id"), ("verb", "verb_id")):
        one, other = kept[_AT[field]], event[_AT[field]]
        if one != other:
            one, other = name_of(kind, one), name_of(kind, other)
            if one is None or other is None or canonical_iri(one) != canonical_iri(other):
                return False
            if kind == "verb":
                verbs = [one, other]
    for flag, verb in _FLAG_VERBS.items():
        if kept[_AT[flag]] != event[_AT[flag]] and not (verbs and (verbs[0] == verb) != (verbs[1] == verb)):
            return False  # (a verb spelt in another case implies its flag in only one of them)
    one, other = kept[_AT["occurred"]], event[_AT["occurred"]]
    if not one or not other:
        return True  # a version without a timestamp: the LRS sets one (and so its day) from `stored`
    return same_time(one, other)


def conflict_records(events):
    """Return quarantine records (origin, reason, raw) for second versions of staged statement ids: their
    canonical content (its record keys apart: derived with the secret key, and no part of the statement), the
    learner as the pseudonym marker every quarantined record uses (`forget` finds it)."""
    records = []
    for event in events:
        content = {name: value.hex() if isinstance(value, bytes) else value
                   for name, value in event._asdict().items() if name not in _NOT_CONTENT}
        content["learner"] = marker(event.actor)
        records.append((f"statement {event.event_id.hex()}", CONFLICT, json.dumps(content, sort_keys=True)))
    return records
