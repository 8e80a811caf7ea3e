"""The state as a whole: key <-> store <-> recorded identity <-> clock.

A run refuses (exit 78) whatever would make it lose history or count a
statement twice without a word: a store gone while its key remains, a key
that is not the store's, a setting that changes what a staged row is, a
watermark or last run dated after now. Each refusal names the way out;
`lms-refresh rebuild` is the explicit one for all but the clock.
"""

import datetime as dt
import json
import logging
import os
import socket
import zoneinfo

from lms_refresh import atomic, instants, logs, window as windows
from lms_refresh.disclosure.pseudonyms import create_key, fingerprint, read_key
from lms_refresh.errors import StateError
from lms_refresh.sources.xapi import MAPPING_VERSION
from lms_refresh.state_directory import MARKER  # in the state directory: which store the key built

logger = logging.getLogger(__name__)

REBUILD = "'lms-refresh rebuild --since DATE' (/usr/share/doc/lms-refresh/docs/admin/recovery.md)"
# How far a recorded time may lie after now before the clock is suspect: more than
# hosts sharing a store drift apart, far less than any glitch worth stopping for.
CLOCK_TOLERANCE = dt.timedelta(minutes=5)
# How statements map to learners and counts is lms_refresh.sources.xapi.MAPPING_VERSION;
# a store that recorded none was built by version 1.

# meta key -> (the setting as the operator knows it, value assumed when a store recorded none)
IDENTITY = {
    "identity.course_pattern": ("source.course_pattern", None),
    "identity.mapping_version": ("the statement mapping version", "1"),
    "identity.site_url": ("source.site_url", None),
    "identity.site_course_id": ("source.site_course_id", None),
    "identity.guest_user_id": ("source.guest_user_id", None),
}


def identity(config):
    """Return {meta key: text} of the settings a staged row's identity derives from (besides
    the time zone and the key, recorded under their own names)."""
    source = config.source
    if source.type == "moodle":
        return {"identity.site_url": source.site_url, "identity.site_course_id": str(source.site_course_id),
                "identity.guest_user_id": str(source.guest_user_id)}
    return {"identity.course_pattern": source.course_pattern, "identity.mapping_version": str(MAPPING_VERSION)}


def record(store, config, key):
    """Write the identity the store's rows now derive from (inside the run's transaction)."""
    for name, value in identity(config).items():
        store.set_meta(name, value)
    store.set_meta("timezone", config.timezone)
    store.set_meta("key_fingerprint", fingerprint(key))


def mapping_upgrade(config, meta, has_events):
    """Return the store's older statement mapping version when this lms-refresh maps statements by
    a newer one (an upgrade of the package), else None. A run applies such an upgrade itself (see
    Refresh.upgrade_window); every other change of identity is the operator's to apply."""
    if not has_events or config.source.type == "moodle":
        return None
    was = meta.get("identity.mapping_version", IDENTITY["identity.mapping_version"][1])
    if was.isdigit() and int(was) < MAPPING_VERSION:
        return int(was)
    return None


def verify_identity(config, meta, has_events, *, upgrading=False):
    """Refuse settings that would stage the same statements under other identities than the store's
    (`upgrading`: the mapping version's change is being applied by this run)."""
    if not has_events:
        return
    recorded = meta.get("timezone")
    if recorded is not None and recorded != config.timezone:
        raise StateError(
            f"The store's days were computed in time zone {recorded} but the configuration ({config.origin}) "
            f"says {config.timezone}; keep {recorded}, or apply the change by rebuilding the store with {REBUILD}."
        )
    for name, value in identity(config).items():
        setting, assumed = IDENTITY[name]
        was = meta.get(name, assumed)
        if name == "identity.mapping_version" and upgrading:
            continue
        if was is not None and was != value and name == "identity.mapping_version":
            raise StateError(
                f"The store's rows were derived by statement mapping version {was} but this lms-refresh maps "
                f"statements by version {value} (see its changelog); apply the new mapping by rebuilding the store "
                f"with {REBUILD}, or keep the previous lms-refresh."
            )
        if was is not None and was != value:
            raise StateError(
                f"The store's rows were derived with {setting} = {was!r} but {config.origin} now gives {value!r}, "
                "which would count the same statements a second time under other names; put the old value back, "
                f"or apply the change by rebuilding the store with {REBUILD}."
            )


# The [[terms]] as the installation that last changed them configured them, which installation that was, and
# what each installation configured at its last run: terms are settings every installation sharing a store
# must share, or each would count its own on alternate nights.
TERMS, TERMS_BY, TERMS_OF = "terms.configured", "terms.configured_by", "terms.configured."


def installation(config):
    """This installation, as the store's meta names it: the host and its state directory."""
    return f"{socket.gethostname()}:{config.state_directory}"


def _terms_text(config):
    return json.dumps(sorted([term.name, term.first_day, term.last_day] for term in config.terms))


def verify_terms(config, meta):
    """Refuse (78) [[terms]] other than the store's when another installation set the store's and this one's
    configuration is not a change made here: unchanged since this installation's last run, or never run here.
    A change made here applies (and the others are then refused until they are given the same terms)."""
    stored, mine, by = meta.get(TERMS), _terms_text(config), meta.get(TERMS_BY)
    here = installation(config)
    if stored is None or stored == mine or by in (None, here):
        return
    last_here = meta.get(TERMS_OF + here)
    if last_here is not None and last_here != mine:
        return  # edited here since this installation's last run: the change is this installation's to make
    host, _, directory = by.partition(":")
    raise StateError(
        f"The store's [[terms]] were set by the lms-refresh on host {host} (state directory {directory}), but "
        f"{config.origin} configures other terms; every host that shares a store must configure the same "
        "[[terms]], or each would publish its own on alternate nights: copy them from that host's configuration.")


def record_terms(store, config, meta):
    """Write the terms this run counted, and this installation's, into the store's meta (inside the run's
    transaction); `meta` is the store's as the run began."""
    mine, here = _terms_text(config), installation(config)
    if meta.get(TERMS) != mine:
        store.set_meta(TERMS, mine)
        store.set_meta(TERMS_BY, here)
    store.set_meta(TERMS_OF + here, mine)


def changed_settings(config, meta, key_fingerprint):
    """Describe each setting the store's rows were derived with that `config` (or the key) changes."""
    changes = []
    if meta.get("timezone") not in (None, config.timezone):
        changes.append(f"time zone {meta['timezone']} -> {config.timezone}")
    for name, value in identity(config).items():
        setting, assumed = IDENTITY[name]
        was = meta.get(name, assumed)
        if was is not None and was != value:
            changes.append(f"{setting} {was!r} -> {value!r}")
    if meta.get("key_fingerprint") not in (None, key_fingerprint):
        changes.append("the pseudonymisation key")
    return changes


def begin_rebuild(store, config, since, key_fingerprint, *, horizon, run_id):
    """Empty what a rebuild from `since` replaces (inside its transaction): every day from the local day of
    `since` on. The days before it stay as they are, with their staged events, presence and published rows: the
    source may still hold them, and a week, month or term that holds `since` is counted whole from them. A
    rebuild that applies a changed setting is refused (78) if it would keep such days (from the staging
    `horizon` on), derived with the old setting."""
    first = since.astimezone(zoneinfo.ZoneInfo(config.timezone)).date().isoformat()
    changes = changed_settings(config, store.meta(), key_fingerprint)
    kept = store.days_between(horizon or "", first) if changes else None
    if kept:
        raise StateError(
            f"rebuild --since {first} applies a changed setting ({', '.join(changes)}) but would keep the store's "
            f"days from {kept[0]} to {kept[1]}, derived with the old one; rebuild --since {kept[0]} (or earlier), "
            "or put the old setting back.")
    store.reset_derived(max(horizon or "", first))
    if store.days_between("", first) is None:
        # Nothing is kept before `first`: a week, month or term that holds it is counted from part of its days.
        # Such a term is not counted (it begins before the presence the store keeps, meta presence_from), and
        # such a week or month is never published as complete (meta counted_from, store/grains.py).
        store.set_meta("counted_from", first)
        store.set_meta("presence_from", max(first, store.meta().get("presence_from") or first))
    logger.warning("Rebuilding the store from %s: what it derived from the source from that day on is replaced by "
                   "what the source holds; the days before it stay as they are%s.", max(horizon or "", first),
                   f" (days before the staging horizon {horizon} stay as published)" if horizon else "",
                   extra={"RUN_ID": run_id})


def marker_path(config):
    """The state directory's note that a store was built with this key (see `remember_store`)."""
    return os.path.join(config.state_directory, MARKER)


def _store_location(config):
    """What the note records of a store: its file, or its database URL and schema."""
    if config.store.type == "sqlite":
        return {"store": config.store.path, "schema": None}
    return {"store": config.store.url, "schema": config.store.schema}


def remember_store(config, key):
    """After a commit, note in the state directory which store this key built (a key copied here
    for a first run has no such note; a key whose store was lost has one)."""
    path = marker_path(config)
    text = json.dumps(dict(_store_location(config), key_fingerprint=fingerprint(key)), sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return
    except OSError:
        pass
    atomic.replace_bytes(path, text.encode(), mode=0o640, what=f"the store note {path}",
                         outcome="the run stands; the next one writes the note again.")


def _remembered_location(config):
    """The store location the note records, or None without a (readable) note."""
    try:
        with open(marker_path(config), encoding="utf-8") as handle:
            note = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # a note we cannot read: assume it names this store (refusing is the safe side)
    return {"store": note.get("store"), "schema": note.get("schema")}


def verify_store_present(config, store_is_new):
    """Refuse to start a new store where the store built with this key existed and is gone.

    Only the location the note names counts: pointing store.path (or store.url) at a new
    store, as a change of source requires, starts that store beside the old one."""
    if not (store_is_new and os.path.exists(config.key_file)):
        return
    remembered = _remembered_location(config)
    if remembered is not None and remembered in ({}, _store_location(config)):
        raise StateError(
            f"The store {config.store_location} is missing (or empty) but the pseudonymisation key {config.key_file} "
            f"and the note of the store it built ({marker_path(config)}) are there, so the store was deleted or "
            "replaced and its history would be lost; restore the store from a backup, or re-create its history "
            f"from the source with {REBUILD}."
        )


def follow_key(store, key_fingerprint):
    """Inside the transaction: have the quarantine follow the key of `key_fingerprint` (store/erasure.py), saying
    what went with the previous key."""
    gone = store.follow_key(key_fingerprint)
    if gone:
        logger.warning("Deleted %s that carried a pseudonym of the previous key: no key can match them any more, so "
                       "no forget could erase them; those the source still holds are quarantined again under this "
                       "key by the next run that reads them (a rebuild reads them all).",
                       logs.counted(gone, "quarantined record"))
    return gone


def open_key(config, meta, has_events, *, dry_run, rebuild):
    """Return the pseudonymisation key, refusing one that does not match the store's data."""
    key = read_key(config.key_file)
    recorded = meta.get("key_fingerprint")
    if key is None:
        if (recorded is not None or has_events) and not rebuild:
            raise StateError(
                f"The pseudonymisation key {config.key_file} is missing but the store already holds pseudonymised "
                "learners; every host that shares a store needs the same key: copy it from a host that has it (or "
                f"restore it from a backup) to {config.key_file}, owned by the service user, mode 0600 — a new key "
                f"would count every learner twice (or re-create the store's history with {REBUILD})."
            )
        if dry_run:
            return os.urandom(32)  # a dry run creates no key (nor says it did)
        key = create_key(config.key_file)
        logger.info("Created a new pseudonymisation key at %s", config.key_file)
    elif recorded is not None and recorded != fingerprint(key) and not rebuild:
        raise StateError(
            f"The pseudonymisation key {config.key_file} is not the key this store was built with; restore the "
            "original key file (every host sharing a store needs the same one), or re-create the store's history "
            f"under this key with {REBUILD}."
        )
    return key


def verify_clock(now, meta, last_run):
    """Refuse a watermark or last run dated after now (beyond CLOCK_TOLERANCE): the clock was or is wrong,
    and a window from a future watermark would silently skip everything stored before it."""
    limit = now + CLOCK_TOLERANCE
    found = []
    if meta.get("watermark") and meta.get("cursor_kind", windows.TIME.name) == windows.TIME.name:
        found.append(("watermark", instants.from_cursor(meta["watermark"])))
    if last_run is not None:
        found.append(("last run's start", instants.from_cursor(last_run["started_at"], "run start")))
    for what, moment in found:
        if moment > limit:
            raise StateError(
                f"The store's {what} {instants.to_cursor(moment)} is later than the current time "
                f"{instants.to_cursor(now)} (by {_span(moment - now)}): the clock was wrong then or is wrong now. "
                "Check it (timedatectl), then set the watermark back to the last time you trust with "
                "'lms-refresh watermark set TIME' (/usr/share/doc/lms-refresh/docs/admin/recovery.md); re-reading a "
                "stretch twice is safe."
            )


def _span(delta):
    if delta >= dt.timedelta(days=2):
        return f"{delta.days} days"
    return f"{int(delta.total_seconds() // 60)} minutes"
