"""How long lms-refresh keeps what it holds (GDPR art. 5(1)(e), storage limitation).

`[retention] staging_days`: staged events are personal data (pseudonymised,
per learner). Those of local days before the *staging horizon* — today minus
`staging_days`, in `timezone` — are dropped in the run's transaction; those
days' published metrics stay as they were and are never recomputed again,
since a rebuild from what is left would publish an incomplete day. A
statement that arrives later for such a day is quarantined as "older than the
staging horizon" (and counted like any quarantined record), never merged.
The store records the horizon it enforced, and it never moves back: widening
`staging_days` later cannot bring dropped events back, so days before the
recorded horizon stay closed.

`[retention] quarantine_days`: quarantined records older than that are deleted
in the run's transaction.
"""

import datetime as dt
import json
import uuid
import zoneinfo

from lms_refresh import instants

HORIZON_KEY = "staging_horizon"  # in the store's meta: the first local day whose staged events are kept


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
    """Move the batch's events of days before the horizon to its quarantine (counted there, never staged)."""
    if horizon is None or not batch.events:
        return
    late = [event for event in batch.events if event.day < horizon]
    if not late:
        return
    batch.events = [event for event in batch.events if event.day >= horizon]
    for event in late:
        record_id = str(uuid.UUID(bytes=bytes(event.event_id)))
        # The canonical event without its learner: which record, which day, which course.
        raw = json.dumps({"id": record_id, "day": event.day, "course_id": event.course_id,
                          "timestamp": event.occurred, "stored": event.stored})
        batch.quarantined.append((
            f"record {record_id}",
            f"older than the staging horizon: its day {event.day} is before {horizon}, whose staged events "
            "were dropped (retention.staging_days), so it cannot be counted without publishing an incomplete day",
            raw,
        ))


def apply(store, config, now, *, horizon, days):
    """In the run's transaction: drop staged events before the horizon, record it, expire old quarantine.

    Return the days still to recompute: none before the horizon.
    """
    if horizon is not None:
        store.drop_staged_before(horizon)
        store.set_meta(HORIZON_KEY, horizon)
        days = {day for day in days if day >= horizon}
    store.expire_quarantine(instants.to_cursor(now - dt.timedelta(days=config.retention.quarantine_days)))
    return days
