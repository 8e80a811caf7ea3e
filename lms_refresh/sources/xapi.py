"""Map xAPI statements to canonical events.

Course rule, in order: a context activity (parent, then grouping) whose
definition type is the ADL course type; else the first capturing group (or
whole match) of `course_pattern` against the object id, then the parent and
grouping ids; else "unknown".

This runs once per statement, so the common cases are kept cheap: canonical
times are recognised without parsing, and days, durations and pseudonyms are
cached (bounded).
"""

import datetime as dt
import hashlib
import re
import zoneinfo

from lms_refresh.window import CURSOR_FORMAT

UTC = dt.timezone.utc
ADL = "http://adlnet.gov/expapi/verbs/"
VOIDED = ADL + "voided"
ATTEMPTED, COMPLETED, PASSED, FAILED = (ADL + v for v in ("attempted", "completed", "passed", "failed"))
COURSE_TYPE = "http://adlnet.gov/expapi/activities/course"

# A canonical event, as a tuple in this order (the staging table's column order).
EVENT_FIELDS = (
    "day", "course_id", "actor", "event_id", "stored", "occurred", "verb_id",
    "is_attempt", "is_completion", "is_passed", "is_failed", "score_micro", "duration_ms",
)

_UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d{1,6}))?Z")
_UTC_MILLIS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d\d\dZ")  # a cheaper test of the usual form
_DURATION = re.compile(
    r"P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?"
)
CACHE_LIMIT = 100_000


class InvalidStatement(ValueError):
    """The statement cannot be used; the message is the quarantine reason."""


def event_key(statement_id):
    """Return the 16-byte key of a statement id (a UUID in any letter case), or None if it is not one."""
    if type(statement_id) is not str or len(statement_id) != 36 or statement_id[8] != "-" or statement_id[13] != "-" \
            or statement_id[18] != "-" or statement_id[23] != "-":
        return None
    try:
        key = bytes.fromhex(statement_id.replace("-", ""))
    except ValueError:
        return None
    return key if len(key) == 16 else None


def name_id(iri):
    """Return a stable 64-bit id for a course or verb IRI (a keyed table maps it back).

    Derived, not assigned, so worker processes agree on ids without asking the store.
    """
    return int.from_bytes(hashlib.blake2b(iri.encode(), digest_size=8).digest(), "big", signed=True)


def stored_cursor(text):
    """Given an ISO 8601 time, return its cursor text (fixed-width UTC) or raise InvalidStatement."""
    if type(text) is str and len(text) == 24 and _UTC_MILLIS.fullmatch(text):
        return text[:23] + "000Z"  # the form LRSs write: UTC with milliseconds
    if isinstance(text, str) and text.endswith("Z"):
        match = _UTC_TIME.fullmatch(text)
        if match:  # already UTC: only the fraction needs padding to six digits
            fraction = match.group(1) or ""
            return f"{text[:19]}.{fraction:0<6}Z"
    return parse_time(text, "stored").astimezone(UTC).strftime(CURSOR_FORMAT)


def parse_time(text, field):
    if not isinstance(text, str):
        raise InvalidStatement(f"{field} is not a string")
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidStatement(f"{field} {text[:40]!r} is not an ISO 8601 time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # xAPI: a time without offset is read as UTC
    return moment


def parse_duration_ms(text):
    """Given an ISO 8601 duration such as 'PT1H2M3.5S', return whole milliseconds."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) and text not in ("P", "PT") else None
    if not match or not any(match.groups()) or text.endswith("T"):
        raise InvalidStatement(f"result.duration {str(text)[:40]!r} is not an ISO 8601 duration")
    days, hours, minutes, seconds = (float(part or 0) for part in match.groups())
    return round((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def actor_identifier(actor):
    """Return the actor's inverse functional identifier as text, or raise InvalidStatement."""
    if not isinstance(actor, dict):
        raise InvalidStatement("actor is missing or not an object")
    for key in ("mbox", "mbox_sha1sum", "openid"):
        value = actor.get(key)
        if isinstance(value, str) and value:
            return f"{key}:{value}"
    account = actor.get("account")
    if isinstance(account, dict) and account.get("homePage") and account.get("name"):
        return f"account:{account['homePage']}|{account['name']}"
    raise InvalidStatement("actor has no inverse functional identifier (mbox, mbox_sha1sum, openid, account)")


def _activities(value, name):
    """Return a contextActivities entry (an activity or a list of them) as a list of activities."""
    if value is None:
        return []
    if type(value) is dict:
        return [value]
    if type(value) is list and all(type(item) is dict for item in value):
        return value
    raise InvalidStatement(f"context.contextActivities.{name} is not an activity or a list of activities")


def _course_id(activity):
    """Return the activity's id if it is typed as a course, else None."""
    definition = activity.get("definition")
    if type(definition) is dict and definition.get("type") == COURSE_TYPE:
        iri = activity.get("id")
        if type(iri) is str and iri:
            return iri
    return None


def _bounded(cache):
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    return cache


class StatementMapper:
    """Turn parsed statements into ('event', tuple) or ('void', (target, voiding id, stored))."""

    def __init__(self, timezone, pseudonymise, course_pattern):
        self.zone = zoneinfo.ZoneInfo(timezone)
        self.pseudonymise = pseudonymise
        self.course_pattern = re.compile(course_pattern)
        self._days = {}
        self._durations = {}
        self._accounts = {}  # (homePage, name) -> pseudonym
        self._ids = {}  # IRI -> 64-bit id, for courses and verbs
        self.new_names = {}  # (kind, id) -> IRI first seen by this mapper; the store records them

    def day_of(self, timestamp):
        """Return the local calendar day of an ISO time; cached per UTC minute."""
        # Offsets are whole minutes, so every UTC time in the same minute has the same local day.
        if len(timestamp) == 24 and _UTC_MILLIS.fullmatch(timestamp) \
                or timestamp.endswith("Z") and _UTC_TIME.fullmatch(timestamp):
            key = timestamp[:16]
        else:
            key = timestamp
        day = self._days.get(key)
        if day is None:
            day = parse_time(timestamp, "timestamp").astimezone(self.zone).date().isoformat()
            _bounded(self._days)[key] = day
        return day

    def actor_of(self, actor):
        """Return the actor's pseudonym; cached per account, the usual identifier of an LMS's learners."""
        account = actor.get("account") if type(actor) is dict else None
        if type(account) is dict and "mbox" not in actor and "mbox_sha1sum" not in actor and "openid" not in actor:
            key = (account.get("homePage"), account.get("name"))
            if type(key[0]) is str and type(key[1]) is str:
                pseudonym = self._accounts.get(key)
                if pseudonym is None:
                    pseudonym = _bounded(self._accounts)[key] = self._pseudonym(actor)
                return pseudonym
        return self._pseudonym(actor)

    def _pseudonym(self, actor):
        try:
            return self.pseudonymise(actor_identifier(actor))
        except UnicodeEncodeError:
            raise InvalidStatement("the actor's identifier is not valid Unicode")

    def duration_of(self, text):
        duration = self._durations.get(text) if isinstance(text, str) else None
        if duration is None:
            duration = parse_duration_ms(text)
            _bounded(self._durations)[text] = duration
        return duration

    def course_of(self, statement, object_id):
        context = statement.get("context")
        if context is None:
            context = {}
        elif type(context) is not dict:
            raise InvalidStatement("context is not an object")
        activities = context.get("contextActivities")
        if activities is None:
            activities = {}
        elif type(activities) is not dict:
            raise InvalidStatement("context.contextActivities is not an object")
        parents = activities.get("parent")
        if type(parents) is list and parents and type(parents[0]) is dict:
            course = _course_id(parents[0])  # the common case: the first parent is the course
            if course is not None:
                return course
        related = _activities(parents, "parent") + _activities(activities.get("grouping"), "grouping")
        for activity in related:
            course = _course_id(activity)
            if course is not None:
                return course
        for candidate in [object_id] + [a.get("id") for a in related]:
            if isinstance(candidate, str):
                match = self.course_pattern.search(candidate)
                if match:
                    return match.group(1) if match.re.groups else match.group(0)
        return "unknown"

    def _name_id(self, kind, iri):
        """Return the stable id of a course or verb IRI, remembering it as new for the store."""
        try:
            number = name_id(iri)
        except UnicodeEncodeError:  # JSON can escape a lone surrogate, which no text column can hold
            raise InvalidStatement(f"the {kind} IRI is not valid Unicode")
        if len(self._ids) >= CACHE_LIMIT:
            self._ids.clear()
        self._ids[iri] = number
        self.new_names[(kind, number)] = iri
        return number

    def take_new_names(self):
        """Return and forget the names first seen since the last call."""
        names, self.new_names = self.new_names, {}
        return names

    def map(self, statement, stored=None):
        """Map one statement; `stored` is its already-normalised cursor when the caller has it."""
        if not isinstance(statement, dict):
            raise InvalidStatement("not a JSON object")
        key = event_key(statement.get("id"))
        if key is None:
            raise InvalidStatement("id is missing or not a UUID")
        raw_stored = statement.get("stored")
        if raw_stored is None:
            raise InvalidStatement("stored is missing (export statements from an LRS)")
        if stored is None or not isinstance(raw_stored, str):
            stored = stored_cursor(raw_stored)
        verb = statement.get("verb")
        verb_id = verb.get("id") if isinstance(verb, dict) else None
        if not isinstance(verb_id, str) or not verb_id:
            raise InvalidStatement("verb.id is missing")
        target = statement.get("object")
        if not isinstance(target, dict):
            raise InvalidStatement("object is missing or not an object")
        if verb_id == VOIDED:
            target_key = event_key(target.get("id"))
            if target.get("objectType") != "StatementRef" or target_key is None:
                raise InvalidStatement("a voiding statement's object must be a StatementRef to a UUID")
            return "void", (target_key, key, stored)
        actor = self.actor_of(statement.get("actor"))
        object_id = target.get("id")
        if not isinstance(object_id, str) or not object_id:
            raise InvalidStatement("object.id is missing")
        timestamp = statement.get("timestamp")
        if timestamp is None:
            timestamp = raw_stored  # xAPI: the LRS sets timestamp to stored when absent
        if not isinstance(timestamp, str):
            raise InvalidStatement("timestamp is not a string")
        day = self.day_of(timestamp)

        result = statement.get("result") or {}
        if not isinstance(result, dict):
            raise InvalidStatement("result is not an object")
        success = result.get("success")
        completion = result.get("completion")
        score_micro = duration_ms = None
        score = result.get("score")
        if isinstance(score, dict) and "scaled" in score:
            scaled = score["scaled"]
            if isinstance(scaled, bool) or not isinstance(scaled, (int, float)) or not -1 <= scaled <= 1:
                raise InvalidStatement("result.score.scaled is not a number between -1 and 1")
            # Integers keep sums exact, so a partition rebuilt in any order is byte-identical.
            score_micro = round(scaled * 1_000_000)
        if "duration" in result:
            duration_ms = self.duration_of(result["duration"])
        ids = self._ids
        course = self.course_of(statement, object_id)
        course_key = ids.get(course) or self._name_id("course", course)
        verb_key = ids.get(verb_id) or self._name_id("verb", verb_id)
        return "event", (
            day, course_key, actor, key, stored, timestamp, verb_key,
            1 if verb_id == ATTEMPTED else 0,
            1 if verb_id == COMPLETED or completion is True else 0,
            1 if verb_id == PASSED or success is True else 0,
            1 if verb_id == FAILED or success is False else 0,
            score_micro, duration_ms,
        )
