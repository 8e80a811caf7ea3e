"""Map xAPI statements to canonical events.

Course rule, in order: a context activity (parent, then grouping) whose
definition type is the ADL course type; else the first capturing group (or
whole match) of `course_pattern` against the object id (of an Activity
object), then the parent and grouping ids; else "unknown".

Only the outer statement counts: its actor, verb and result. An object that
is an Agent, Group, SubStatement or StatementRef makes the statement an event
of its actor in its course; a SubStatement's own verb and result are what the
statement is about (e.g. "planned to attend"), not an attempt or completion.

This runs once per statement, so the common cases are kept cheap: canonical
times are recognised without parsing, and days, durations, pseudonyms and
checked IRIs are cached (bounded).
"""

import hashlib
import operator
import re

from lms_refresh import instants
from lms_refresh.disclosure.cell_key import NoRecordKeys
from lms_refresh.instants import UTC_MILLIS, UTC_TIME
from lms_refresh.sources.records import CACHE_LIMIT, EVENT, TITLE, VOID, LocalDays, Void, bounded, cleaned, make_event
from lms_refresh.sources.xapi_fields import (
    InvalidStatement,
    actor_identifier,
    checked_course,
    event_key,
    is_iri,
    parse_duration_ms,
    parse_time,
    shown,
    stored_cursor,
)

# Bump when a change alters which statements count or how a learner is identified:
# a store built by an earlier version holds other numbers and must be rebuilt.
# 2: Agent/Group/SubStatement objects, anonymous Groups, weeks/years/months in durations,
#    an mbox identified by its SHA-1 form, stricter identifiers, verb ids and booleans.
MAPPING_VERSION = 2

ADL = "http://adlnet.gov/expapi/verbs/"
VOIDED = ADL + "voided"
ATTEMPTED, COMPLETED, PASSED, FAILED = (ADL + v for v in ("attempted", "completed", "passed", "failed"))
COURSE_TYPE = "http://adlnet.gov/expapi/activities/course"
# Objects whose id is an activity's; Open edX's event-routing-backends sends "GroupActivity".
_NOT_ACTIVITIES = frozenset(("Agent", "Group", "SubStatement", "StatementRef"))
_STORED = operator.itemgetter(0)
# A course's naming statements kept per batch: the newest few, since which of them counts is known only when the
# store has looked for conflicts. Keeping every one sent each statement's name map and actor to the staging
# process: for the benchmark's 20,000 statements of a chunk, 3.4 MB marshalled against the events' 3.0 MB.
# A course whose NAMING_KEPT newest naming statements of one batch are all quarantined keeps its name until a
# later statement names it.
NAMING_KEPT = 4


def _newest(titles):
    """The NAMING_KEPT newest of a course's naming statements, newest first (of the same time, the first read: of
    more than NAMING_KEPT of one batch at its newest time, the first NAMING_KEPT read are compared: title_of)."""
    titles.sort(key=_STORED, reverse=True)  # stable
    return titles[:NAMING_KEPT]


def name_id(iri):
    """Return a stable 64-bit id for a course or verb IRI (a keyed table maps it back).

    Derived, not assigned, so worker processes agree on ids without asking the store.
    """
    return int.from_bytes(hashlib.blake2b(iri.encode(), digest_size=8).digest(), "big", signed=True)


def _activities(value, name):
    """Return a contextActivities entry (an activity or a list of them) as a list of activities."""
    if value is None:
        return []
    if type(value) is dict:
        return [value]
    if type(value) is list and all(type(item) is dict for item in value):
        return value
    raise InvalidStatement(f"context.contextActivities.{name} is not an activity or a list of activities")


class StatementMapper:
    """Turn parsed statements into ('event', Event) or ('void', Void) (see `lms_refresh.sources.records`)."""

    def __init__(self, timezone, pseudonymise, course_pattern, *, now=None, language="en", record_keys=None):
        self.pseudonymise = pseudonymise
        # The events' record keys (a cell_key.RecordKeys: the run's), computed here, in the parsing workers.
        self._event_key, self._learner_key = (record_keys or NoRecordKeys).keyers()
        self.language = language  # course names: this one of a definition.name map first (disclosure/names.py)
        # A timestamp after this (cursor text) lies in the future; None: no run's clock to compare with.
        self.latest = None if now is None else instants.to_cursor(instants.future_limit(now))
        # A timestamp whose text (any offset, less than a day) is not after now's is not after `latest`.
        self._now = None if now is None else instants.to_cursor(now)
        self.course_pattern = re.compile(course_pattern)
        self._days = LocalDays(timezone)
        self._durations = {}
        self._accounts = {}  # (homePage, name) -> pseudonym, for actors known to be valid
        self._mboxes = {}  # mbox -> pseudonym, likewise
        self._iris = set()  # object and course ids known to be IRIs
        self._courses = {}  # course -> 64-bit id
        self._verbs = {}  # verb IRI -> 64-bit id (only IRIs get here)
        self.new_names = {}  # (kind, id) -> IRI first seen by this mapper; the store records them
        self._titles = {}  # course id -> [(stored, statement id, definition.name, statement, language)] of its namings
        self._name_limit = self.latest or "\uffff"  # a later stored names no course (see map)

    def day_of(self, timestamp):
        """Return the local calendar day of an ISO time; cached per UTC minute (a UTC time's first 16
        characters: a minute found there was checked whole), or per text for a time with another offset."""
        if len(timestamp) == 24 and UTC_MILLIS.fullmatch(timestamp) \
                or timestamp.endswith("Z") and UTC_TIME.fullmatch(timestamp) and timestamp[17:19] <= "59":  # no :60
            key = timestamp[:16]
        else:
            key = timestamp
        day = self._days.get(key)
        if day is None:
            day = self._days.add(key, parse_time(timestamp, "timestamp"))  # in range: every zone's day is a date
        return day

    def check_not_future(self, timestamp):
        """Raise InvalidStatement if `timestamp` lies after `latest` (a day past the run's time).

        Learning cannot have happened in the future, beyond clock skew; such a day
        would stretch its course's published span up to the year 2999.
        """
        if parse_time(timestamp, "timestamp") > instants.cursor_moment(self.latest):
            raise InvalidStatement(f"timestamp {timestamp[:40]!r} lies in the future (after {self.latest}, "
                                   f"{instants.TOLERANCE_WORDS} past this run's time): a device's clock was wrong")

    def actor_of(self, actor):
        """Return the actor's pseudonym; cached per account and per mbox, the usual identifiers of learners."""
        if type(actor) is dict:
            kind = actor.get("objectType")
            if kind == "Agent" or kind is None or kind == "Group":
                account = actor.get("account")
                if type(account) is dict and "mbox" not in actor and "mbox_sha1sum" not in actor \
                        and "openid" not in actor:
                    home, name = account.get("homePage"), account.get("name")
                    if type(home) is str and type(name) is str:
                        pseudonym = self._accounts.get((home, name))
                        if pseudonym is None:  # checked before it is cached: a hit is a valid account
                            pseudonym = bounded(self._accounts)[home, name] = self._pseudonym(actor)
                        return pseudonym
                mbox = actor.get("mbox")
                if type(mbox) is str and account is None and "mbox_sha1sum" not in actor and "openid" not in actor:
                    pseudonym = self._mboxes.get(mbox)
                    if pseudonym is None:
                        pseudonym = bounded(self._mboxes)[mbox] = self._pseudonym(actor)
                    return pseudonym
        return self._pseudonym(actor)

    def _pseudonym(self, actor):
        try:
            return self.pseudonymise(actor_identifier(actor))
        except UnicodeEncodeError:
            raise InvalidStatement("the actor's identifier is not valid Unicode") from None

    def duration_of(self, text):
        duration = self._durations.get(text) if type(text) is str else None
        if duration is None:
            duration = parse_duration_ms(text)
            bounded(self._durations)[text] = duration
        return duration

    def _iri(self, value, field):
        """Return `value` if it is an IRI (remembered), else raise InvalidStatement."""
        if not is_iri(value):
            raise InvalidStatement(f"{field} {shown(value, 60)} is not an IRI")
        if len(self._iris) >= CACHE_LIMIT:
            self._iris.clear()
        self._iris.add(value)
        return value

    def _course_id(self, activity):
        """Return the activity's id if it is typed as a course and is an IRI, else None."""
        definition = activity.get("definition")
        if type(definition) is dict and definition.get("type") == COURSE_TYPE:
            iri = activity.get("id")
            if type(iri) is str and (iri in self._iris or is_iri(iri) and self._iri(iri, "course")):
                return iri
        return None

    def course_of(self, statement, object_id, target=None):
        """Return (course, the activity that is the course or None): a course-typed context activity,
        or `target` (the object) or a context activity whose id the pattern gives whole."""
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
            course = self._course_id(parents[0])  # the common case: the first parent is the course
            if course is not None:
                return course, parents[0]
        related = _activities(parents, "parent") + _activities(activities.get("grouping"), "grouping")
        for activity in related:
            course = self._course_id(activity)
            if course is not None:
                return course, activity
        for activity, candidate in [(target, object_id)] + [(a, a.get("id")) for a in related]:
            # A context activity's id that is no IRI is passed over, as a course-typed one's is: the course
            # column is published as the pattern gives it (the object's id was checked where it was read).
            if isinstance(candidate, str) and (activity is target or candidate in self._iris or is_iri(candidate)):
                match = self.course_pattern.search(candidate)
                if match:
                    course = match.group(1) if match.re.groups else match.group(0)
                    return course, activity if course == candidate else None
        return "unknown", None

    def _name_id(self, kind, iri, cache):
        """Return the stable id of a course or verb IRI, remembering it as new for the store."""
        try:
            number = name_id(iri)
        except UnicodeEncodeError:  # JSON can escape a lone surrogate, which no text column can hold
            raise InvalidStatement(f"the {kind} IRI is not valid Unicode") from None
        bounded(cache)[iri] = number
        self.new_names[(kind, number)] = iri
        return number

    def _verb_key(self, verb_id):
        if not is_iri(verb_id):
            raise InvalidStatement(f"verb.id {verb_id[:60]!r} is not an IRI")
        return self._name_id("verb", verb_id, self._verbs)

    def take_new_names(self):
        """Return and forget the names first seen since the last call, with each course's naming statements
        ((TITLE, course id): [(stored, statement id, definition.name, statement, language)], newest first), once per
        batch. Which of them names the course waits until the run knows which statements count (records.title_of);
        the newest ones' names are made safe to publish here (records.cleaned: in the parsing worker, not in the
        staging process), and no more than one per course unless several share the newest `stored`."""
        names, self.new_names = self.new_names, {}
        for course, titles in self._titles.items():
            names[(TITLE, course)] = cleaned(_newest(titles))
        self._titles = {}
        return names

    def _object_id(self, target, kind):
        """Return the id of an object that is not typed Activity, if it is an activity's; else None, or raise."""
        if type(kind) is not str or kind in _NOT_ACTIVITIES:
            return None  # an Agent, Group, SubStatement or StatementRef: the context alone names the course
        object_id = target.get("id")  # an unknown type is read as an Activity (Open edX: "GroupActivity")
        return None if object_id is None else self._iri(object_id, "object.id")

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
            return VOID, Void(target_id=target_key, voiding_id=key, stored=stored)
        actor = self.actor_of(statement.get("actor"))
        kind = target.get("objectType")
        if kind == "Activity" or kind is None:  # the usual object, inline: this runs for every statement
            object_id = target.get("id")  # an Activity without an id (Open edX sends some) has no candidate
            if object_id is not None and (type(object_id) is not str or object_id not in self._iris):
                object_id = self._iri(object_id, "object.id")
        else:
            object_id = self._object_id(target, kind)
        timestamp = occurred = statement.get("timestamp")
        if timestamp is None:
            if any(type(name) is str and name.lower() == "timestamp" for name in statement):
                raise InvalidStatement("timestamp is spelt with other letter case (keys are case-sensitive)")
            timestamp, occurred = raw_stored, ""  # xAPI: the LRS sets timestamp to stored when absent
        if not isinstance(timestamp, str):
            raise InvalidStatement("timestamp is not a string")
        day = self.day_of(timestamp)
        # Rare: maybe in the future. The whole text is later whenever its first 19 characters are (and without a
        # slice); a time in the same second as now is checked exactly.
        if self._now is not None and timestamp > self._now:
            self.check_not_future(timestamp)

        result = statement.get("result") or {}
        if not isinstance(result, dict):
            raise InvalidStatement("result is not an object")
        success = result.get("success")
        completion = result.get("completion")
        if success is not None and type(success) is not bool:
            raise InvalidStatement("result.success is not true or false")  # a string "true" would be a lost pass
        if completion is not None and type(completion) is not bool:
            raise InvalidStatement("result.completion is not true or false")
        score_micro = duration_ms = None
        score = result.get("score")
        if score is not None:
            if type(score) is not dict:
                raise InvalidStatement("result.score is not an object")
            scaled = score.get("scaled")
            if scaled is not None:
                # raw, min and max are not read: Open edX sends min = max = 0 for zero-weight problems.
                if isinstance(scaled, bool) or not isinstance(scaled, (int, float)) or not -1 <= scaled <= 1:
                    raise InvalidStatement("result.score.scaled is not a number between -1 and 1")
                # Integers keep sums exact, so a partition rebuilt in any order is byte-identical.
                score_micro = round(scaled * 1_000_000)
        if "duration" in result:
            duration_ms = self.duration_of(result["duration"])
        course, activity = self.course_of(statement, object_id, target)
        # A course met for the first time is checked once (the cache holds only courses that passed): its IRI is
        # published as it is, so one that carries an address quarantines the statement (checked_course).
        course_key = self._courses.get(course) or self._name_id("course", checked_course(course), self._courses)
        verb_key = self._verbs.get(verb_id) or self._verb_key(verb_id)
        # The course's own activity may name it: the latest stored of the statements that count wins
        # (records.title_of), never a statement stored after the future limit (quarantined).
        if activity is not None:
            definition = activity.get("definition")
            if type(definition) is dict and "name" in definition and stored <= self._name_limit:
                titles = self._titles.get(course_key)
                if titles is None:
                    titles = self._titles[course_key] = []
                # The statement: everyone in it leaves the name, found only for a name cleaned (names.actor_identifiers)
                titles.append((stored, key, definition["name"], statement, self.language))
                if len(titles) >= 2 * NAMING_KEPT:
                    titles[:] = _newest(titles)
        return EVENT, make_event(
            day=day, course_id=course_key, actor=actor, event_id=key, stored=stored, occurred=occurred,
            verb_id=verb_key,
            is_attempt=1 if verb_id == ATTEMPTED else 0,
            is_completion=1 if verb_id == COMPLETED or completion is True else 0,
            is_passed=1 if verb_id == PASSED or success is True else 0,
            is_failed=1 if verb_id == FAILED or success is False else 0,
            score_micro=score_micro, duration_ms=duration_ms,
            record_key=self._event_key(key), learner_key=self._learner_key(actor),
        )
