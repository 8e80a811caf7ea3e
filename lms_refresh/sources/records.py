"""What every source's mapper produces, and the one loop that files it into a Batch.

A mapper (`xapi.StatementMapper`, `moodle.RowMapper`) turns one record into
(kind, row): an `Event` (the canonical event), a `Void` (a statement that
voids another), or NOTHING for a record that is no learner activity; an
unusable record raises `InvalidRecord`, whose message is the quarantine
reason. `Intake` maps a source's records through its mapper into one Batch:
the one loop, for every source, that files, quarantines or leaves out what a
mapper makes of a record.
"""

import collections
import zoneinfo

from lms_refresh import instants
from lms_refresh.disclosure.names import actor_identifiers, clean_name, pick_language
from lms_refresh.sources import Batch

# The canonical event, in the staging table's column order: the one list of its fields. The last two are
# its record keys (lms_refresh.disclosure.cell_key.RecordKeys), which the mapper computes as it maps.
EVENT_FIELDS = (
    "day", "course_id", "actor", "event_id", "stored", "occurred", "verb_id",
    "is_attempt", "is_completion", "is_passed", "is_failed", "score_micro", "duration_ms",
    "record_key", "learner_key",
)
# A tuple still, so the stores insert events in bulk as they come. The parsing workers' events reach the
# staging process as plain tuples of the same fields (see ndjson_worker._worker_read): what reads a batch's
# events reads them by position (DAY, EVENT_ID, RECORD_KEY), or names them with Event._make.
Event = collections.namedtuple("Event", EVENT_FIELDS)
DAY, EVENT_ID, STORED, RECORD_KEY = (EVENT_FIELDS.index(name) for name in ("day", "event_id", "stored", "record_key"))
TITLE = "title"  # a batch's names: (TITLE, course id) -> the course's name (see `title_of`)
# A statement that voids another: (the voided statement's key, the voiding statement's key, its stored cursor).
Void = collections.namedtuple("Void", ("target_id", "voiding_id", "stored"))
EVENT, VOID = "event", "void"
NOTHING = (None, None)  # what a mapper returns for a record that is no learner activity (or no record)

CACHE_LIMIT = 100_000  # entries a mapper's cache holds before it starts again
PREFILTER_STREAK = 256  # records in a row inside the window after which Intake stops peeking


def _builder(cls):
    """Return a plain function that builds `cls` from its fields, by keyword as by position.

    Sources build one Event per record, by name; calling the class itself with
    fifteen keywords costs about three times as much as calling this function
    (measured: 0.9 against 0.3 microseconds), which would show in a refresh.
    """
    fields = ", ".join(cls._fields)
    namespace = {"_new": tuple.__new__, "_cls": cls}
    # exec of our own field names, never input
    exec(f"def make({fields}):\n    return _new(_cls, ({fields},))", namespace)
    make = namespace["make"]
    make.__doc__ = f"Return a {cls.__name__} of the given fields."
    return make


make_event = _builder(Event)


def bounded(cache):
    """Return `cache` (a dict), emptied first if it is full: mappers' caches stay bounded."""
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    return cache


class InvalidRecord(ValueError):
    """A record that cannot be used; the message is the quarantine reason."""


class LocalDays(dict):
    """The local calendar day of moments, cached by a key that the mapper derives from the moment.

    Offsets are whole minutes, so every moment in one UTC minute has the same
    local day: a key may stand for a whole UTC minute (Moodle's timecreated // 60,
    an xAPI UTC time's first 16 characters). Mappers look a day up with `get`
    (a dict's, as cheap as can be) and compute it with `add` only on a miss.
    """

    def __init__(self, timezone):
        super().__init__()
        self.zone = zoneinfo.ZoneInfo(timezone)

    def add(self, minute, moment):
        """Return the local day (ISO text) of `moment`, an aware datetime, remembered under `minute`.

        Raises OverflowError within a day of the first or last time a datetime can hold.
        """
        day = moment.astimezone(self.zone).date().isoformat()
        bounded(self)[minute] = day
        return day


def future_reason(cursor, future):
    """The quarantine reason of a record that arrived (its `stored` says) after `future`, the run's limit."""
    return (f"stored {cursor} lies in the future (after {future}, {instants.TOLERANCE_WORDS} past this run's "
            "time): the clock of the LRS or exporter that stored it was wrong")


def statement_of(event):
    """The (statement id, stored) that tells an event's statement apart, even from another version of its id."""
    return event[EVENT_ID], event[STORED]


def names_without(names, rejected):
    """Return a batch's `names` without what statements in `rejected` ({statement_of(event)}: quarantined, or left
    out of the run) named: a statement that does not count names no course either. An xAPI course's names are its
    naming statements, newest first (see xapi.StatementMapper.take_new_names), of which `title_of` picks the one
    the store keeps; a source's own names (a tuple) stay as they are."""
    if not rejected:
        return names
    kept = {}
    for key, name in names.items():
        if type(name) is list:
            name = [title for title in name if (title[1], title[0]) not in rejected]
            if not name:
                continue
        kept[key] = name
    return kept


# The fourth field of a naming statement whose name was cleaned where it was mapped (`cleaned`): its third is then
# that clean name (or None), not the language map.
CLEANED = "cleaned where mapped"


def cleaned(titles):
    """Return a course's naming statements (newest first, as `title_of` takes them) with the newest ones' names made
    safe to publish here, each then (stored, statement id, clean name or None, CLEANED, language): in the parsing
    worker that mapped them, so that the staging process neither receives a whole statement nor walks it for the
    people in it (at 50,000 courses of one statement, that was most of a run's time). Only the newest are cleaned,
    which `title_of` reads whatever else it meets; an older one is cleaned there if it is read at all (every newer
    one quarantined, or cleaned to nothing)."""
    newest = titles[0][0] if titles else None
    return [(stored, key, clean_name(pick_language(texts, language), identifiers=actor_identifiers(actor)),
             CLEANED, language) if stored == newest else (stored, key, texts, actor, language)
            for stored, key, texts, actor, language in titles]


class CategoryTree(collections.namedtuple("CategoryTree", "categories courses")):
    """A source's course categories (sources.BaseSource.standing_categories): {category id: (name or None, parent id
    or None, path text: the ids from the top down, "/1/4/7")}, and {course id: the id of the course's own category}.
    Each name is already safe to publish (lms_refresh.disclosure.names); the store checks the paths, and takes each
    category's parent from its path (store/categories.py)."""

    __slots__ = ()


def title_of(name):
    """Return a batch's name of a course as the store keeps it, (named_at or None, name, short name, category,
    start, end): a source's own as it is; of an xAPI course's naming statements (newest first), the newest one's
    name made safe to publish (disclosure/names.py: its language, without the identifiers of anyone in it) — of the same
    `stored`, the greatest; a statement whose name cleans to nothing names nothing, and the next one is read —,
    or None if none is left. The store compares names across batches alike (course_names.py), so whether two
    statements share a batch does not decide the name (of at most NAMING_KEPT of them: xapi._newest)."""
    if type(name) is not list:
        return name
    best = None
    for stored, _, texts, actor, language in name:  # at most NAMING_KEPT
        if best is not None and stored < best[0]:
            break
        if actor == CLEANED:
            text = texts
        else:
            text = clean_name(pick_language(texts, language), identifiers=actor_identifiers(actor))
        if text is not None and (best is None or (stored, text) > best):
            best = (stored, text)
    return None if best is None else (*best, None, None, None, None)


class Intake:
    """The one loop that maps a source's records into a Batch.

    Each record is mapped: an event or void is filed, an invalid record is
    quarantined with its reason, a record that is no learner activity is left
    out (and not counted as read); the names the mapper met go with the batch.

    `mapper` has `map(record, cursor)` and `take_new_names()`; `where(number,
    record)` returns the (origin, raw text) an invalid record is kept as. With a
    window [since, until), records outside it are left out, uncounted: `peek`,
    if given, tells a record's cursor cheaply (or None) so that one outside is
    not even mapped; otherwise the mapped event's `stored` decides. Peeking only
    saves work when there are records outside, so during a long run of records
    inside it pauses; the first record found outside turns it on again. An
    invalid record is quarantined only if it is in the window or its cursor
    cannot be told, paused or not.

    `future` (a cursor, or None) is the latest arrival time a record may carry
    (`instants.future_limit` of the run's time): one after it is in no window
    before the year its clock names, so it is quarantined, with the reason,
    instead of waiting unread (and it is no part of the range of cursors seen,
    so a file index need not read its file again for it). `settled`, an
    interval (after, through] of cursors (through None: no end), holds records
    an earlier committed run already quarantined so: a source that reads them
    again (an unchanged export file, an LRS) leaves them out, uncounted — in
    the window or not: a quarantine is final, and counted once.
    """

    def __init__(self, mapper, where, since=None, *, until=None, peek=None, batch=None, future=None, settled=None):
        self.batch = Batch() if batch is None else batch
        self._map, self._names, self._where, self._peek = mapper.map, mapper.take_new_names, where, peek
        self.since, self.until = since, until
        self.future, self.settled = future, settled
        self.low = self.high = None  # the range of the cursors seen, in the window or not (future ones apart)
        self.newest_future = None  # the latest cursor quarantined as in the future
        self.skipped = 0  # records left out because they lie outside the window

    def map_all(self, records):
        """Map (number, record) pairs into the batch; return the batch."""
        batch = self.batch
        events, voids, quarantined = batch.events, batch.voids, batch.quarantined
        map_record, where, peek = self._map, self._where, self._peek
        since, until, low, high = self.since, self.until, self.low, self.high
        future, settled = self.future, self.settled
        windowed = since is not None
        prefilter, streak, read, skipped, left_out = peek is not None, 0, 0, 0, set()
        # This runs once per record (in the NDJSON workers, per line): its state is kept in locals.
        for number, record in records:
            cursor = peek(record) if prefilter else None
            kind = None
            if cursor is None or since <= cursor < until:
                try:
                    kind, row = map_record(record, cursor)
                except InvalidRecord as error:
                    if cursor is None and peek is not None and not prefilter:
                        cursor = peek(record)  # what the paused pre-filter would have seen
                    if cursor is None or since <= cursor < until:
                        origin, raw = where(number, record)
                        quarantined.append((origin, str(error), raw))
                        read += 1
                        continue
                else:
                    if kind is None:  # no learner activity (a Moodle page counts its rows itself)
                        continue
                    if cursor is None and windowed:
                        cursor = row.stored
            if windowed:
                if settled is not None and settled[0] < cursor and (settled[1] is None or cursor <= settled[1]):
                    skipped += 1
                    if kind == EVENT:
                        left_out.add(statement_of(row))
                    continue
                inside = kind is not None and since <= cursor < until
                if not inside and future is not None and cursor > future:
                    origin, raw = where(number, record)
                    quarantined.append((origin, future_reason(cursor, future), raw))
                    read += 1
                    if self.newest_future is None or cursor > self.newest_future:
                        self.newest_future = cursor
                    continue
                if low is None or cursor < low:
                    low = cursor
                if high is None or cursor > high:
                    high = cursor
                if not inside:
                    skipped += 1
                    prefilter, streak = peek is not None, 0
                    if kind == EVENT:
                        left_out.add(statement_of(row))  # it names no course in this run either
                    continue
                streak += 1
                if streak >= PREFILTER_STREAK:
                    prefilter = False
            (voids if kind == VOID else events).append(row)
            read += 1
        self.low, self.high = low, high
        self.skipped += skipped
        batch.read += read
        batch.names = self._names()
        batch.names = names_without(batch.names, left_out)
        return batch
