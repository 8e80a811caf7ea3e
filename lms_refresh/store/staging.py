"""Staging, in SQL written once: the events of each batch upserted by statement id, the voids recorded,
and the second versions of staged statement ids kept aside for the quarantine (a mixin of base.SqlStore;
each store inserts in bulk its own way: `insert_events`, between its `begin_staging` and `finish_staging`)."""

from lms_refresh.sources.records import DAY, EVENT_ID, RECORD_KEY, TITLE, Event, names_without, statement_of
from lms_refresh.sources.redelivery import same_statement


class StageAgain(Exception):
    """A run staged into an empty SQLite store without the unique index on statement ids (see
    sqlite.SqliteStore.begin_staging), and some id came under two staging keys: the index cannot be built.
    The run's transaction is rolled back and the run staged again, with the index in place from the start,
    so the first version of each id is kept and the others are quarantined, as in every other run."""


class Staging:
    """What SqlStore does with a batch of events (its `_voided`, `_void_targets` and `_conflicts`)."""

    def record_voids(self, voids):
        """Record voiding statements; return the set of every voided id known (for filtering events)."""
        if self._voided is None:
            # Voids are rare; their ids are kept in memory so each event is checked cheaply.
            self._voided = {bytes(row[0]) for row in self.execute("SELECT event_id FROM voided_events").fetchall()}
        for target, voiding, stored in voids:
            self.execute("INSERT INTO voided_events (event_id, voided_by, stored) VALUES (?, ?, ?) "
                         "ON CONFLICT DO NOTHING", (target, voiding, stored))
            self._voided.add(target)
            self._void_targets.add(target)
        return self._voided

    def stage(self, events, voids, names, rejected=frozenset()):
        """Upsert events (Events or plain tuples of their fields, with the record keys the mappers computed),
        record voids and new course/verb names; return the days the events touch.

        Voided targets are removed by `finish_staging`, once per run, so a target
        staged earlier in the same run (or in an earlier run) goes too. The courses' names are kept last, without
        those of the statements quarantined: `rejected` ({records.statement_of(event)}, held back before) and the
        conflicting versions found here.
        """
        self.record_names({key: name for key, name in names.items() if key[0] != TITLE})  # the IRIs conflicts read
        voided = self.record_voids(voids)
        if voided:
            events = [event for event in events if event[EVENT_ID] not in voided]
        if events and events[0][RECORD_KEY] is None:  # a mapper built without the run's keys (a bug)
            raise ValueError("events without record keys cannot be staged: their cells would have no cell key")
        if events and self.insert_events(events) < len(events):
            self._find_conflicts(events)
        if self._conflicts:
            rejected = {*rejected, *map(statement_of, self._conflicts)}
        self.record_names(names_without({key: name for key, name in names.items() if key[0] == TITLE}, rejected))
        return {event[DAY] for event in events}

    def _find_conflicts(self, events):
        """Some rows were not inserted: keep aside those whose id is staged with other content.

        A statement id counts once (the unique index on event_id makes sure). A delivery of the
        same statement in another form (a new `stored`, a time spelt otherwise: see
        lms_refresh.sources.redelivery) is that statement again; a version whose content
        differs is quarantined, never counted. Only this path, taken when a batch holds ids
        already staged, reads staging back.
        """
        staged = self.staged_versions(events)
        names = {}

        def name_of(kind, number):
            if (kind, number) not in names:
                table, column = ("verbs", "verb_id") if kind == "verb" else ("courses", "course_id")
                row = self.execute(f"SELECT iri FROM {table} WHERE {column} = ?", (number,)).fetchone()
                names[(kind, number)] = row[0] if row else None
            return names[(kind, number)]

        for event in events:
            kept = staged.get(event[EVENT_ID])
            if kept is not None and not same_statement(tuple(kept), event, name_of):
                self._conflicts.append(Event._make(event))  # named, for its quarantine record

    def take_conflicts(self):
        """Return and forget the conflicting versions found since the last call."""
        conflicts, self._conflicts = self._conflicts, []
        return conflicts
