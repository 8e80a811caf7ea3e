"""How long lms-refresh keeps what it holds (GDPR art. 5(1)(e), storage limitation).

`[retention] staging_days`: staged events are personal data (pseudonymised,
per learner). Those of local days before the *staging horizon* — today minus
`staging_days`, in `timezone`, today never more than a day after the last
successful run (`clock`) — are dropped in the run's transaction; those
days' published metrics stay as they were and are never recomputed again,
since a rebuild from what is left would publish an incomplete day. A
statement that arrives later for such a day is quarantined as "older than the
staging horizon", never merged — and not counted as malformed (toward
max_quarantine_share): it may well be one counted before its day closed.
The store records the horizon it enforced, and it never moves back: widening
`staging_days` later cannot bring dropped events back, so days before the
recorded horizon stay closed.

Learners' presence per (day, course) (learner_days, what weeks and months count
distinct learners from) is kept a little longer: from the first day of the week or
month that holds the horizon, or of a term that holds it — configured, or the one the
store's rows were counted with, until the run syncs an edited term — whichever is
earliest, so that a period with a day still open is always counted whole; it goes
with the staged events after that.

`[retention] quarantine_days`: quarantined records older than that are deleted
in the run's transaction.
"""

import datetime as dt
import json
import uuid
import zoneinfo

from lms_refresh import instants
from lms_refresh.disclosure.redaction import marker
from lms_refresh.run import period_publication
from lms_refresh.sources.records import DAY, Event, statement_of

CLOSED_REASON = "older than the staging horizon"
HORIZON_KEY = "staging_horizon"  # in the store's meta: the first local day whose staged events are kept


STEP = dt.timedelta(days=1)  # how far past the last successful refresh's start retention may count: a night's


def clock(now, store):
    """The time retention counts from: `now`, or one STEP after the last successful refresh's start if that is
    earlier.

    A clock set ahead by months for one run would otherwise drop every staged event at once, for good: the
    run itself looks fine, the next ones are refused for the future watermark until it is set back (docs/admin/
    recovery.md), and by then the events are gone and every re-read statement is quarantined as older than
    the horizon. So no run counts more than a day past the time an earlier run trusted: nightly runs are not
    held back at all, the first run after a longer pause (a weekend, an outage) goes a day further and the
    next catches up, and a wrong clock can drop at most a day's events early."""
    last_success = store.last_runs()[1]
    if last_success is None:
        return now
    return min(now, instants.from_cursor(last_success["started_at"], "run start") + STEP)


def staging_horizon(config, now, meta):
    """Return the first local day (ISO text) whose events are kept, or None to keep every day."""
    recorded = meta.get(HORIZON_KEY)
    days = config.retention.staging_days
    computed = None
    if days is not None:
        today = now.astimezone(zoneinfo.ZoneInfo(config.timezone)).date()
        computed = (today - dt.timedelta(days=days)).isoformat()
    candidates = [day for day in (recorded, computed) if day]
    return max(candidates) if candidates else None


def hold_back(batch, horizon):
    """Move the batch's events of days before the horizon to its quarantine, never staged; return their
    statements ({records.statement_of(event)}: what they named is not kept either).

    They are not malformed, so they do not count toward max_quarantine_share: a watermark set back
    before the horizon (or a rebuild or backfill from before it) re-reads statements counted long
    ago, and those must not fail the run. Each record carries its learner's pseudonym marker, so
    that `forget` finds it like any quarantined record of theirs.
    """
    if horizon is None or not batch.events:
        return set()
    late = [Event._make(event) for event in batch.events if event[DAY] < horizon]  # (plain tuples from workers)
    if not late:
        return set()
    batch.events = [event for event in batch.events if event[DAY] >= horizon]
    for event in late:
        record_id = str(uuid.UUID(bytes=bytes(event.event_id)))
        # The canonical event: which record, which day, which course, whose (as a pseudonym).
        raw = json.dumps({"id": record_id, "day": event.day, "course_id": event.course_id,
                          "learner": marker(event.actor), "timestamp": event.occurred or None,
                          "stored": event.stored})
        batch.quarantined.append((
            f"record {record_id}",
            f"{CLOSED_REASON}: its day {event.day} is before {horizon}, whose staged events "
            "were dropped (retention.staging_days), so it cannot be counted without publishing an incomplete day",
            raw,
        ))
    return set(map(statement_of, late))


def apply(store, config, now, *, horizon, days):
    """In the run's transaction: drop staged events before the horizon, record it, expire old quarantine.

    Return the days still to recompute: none before the horizon.
    """
    if horizon is not None:
        store.drop_staged_before(horizon)
        # The terms the store counted with too: until this run's recompute has synced an edited term, the presence
        # it is counted again from is the one kept for the term as it was.
        # A term that cannot be counted whole (it begins before the presence kept) holds none back.
        kept = min(store.countable(calendar).first_kept_presence(horizon)
                   for calendar in (period_publication.calendar(config), store.stored_calendar()))
        store.drop_presence_before(kept)  # until no open period needs it
        store.set_meta(HORIZON_KEY, horizon)
        days = {day for day in days if day >= horizon}
    store.expire_quarantine(instants.to_cursor(clock(now, store) - dt.timedelta(days=config.retention.quarantine_days)))
    return days
