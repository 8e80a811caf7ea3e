"""Erase one learner (GDPR art. 17): their staged events and quarantined records go, their days are rebuilt.

The learner is named as the source knows them (an xAPI agent's identifier, a
Moodle user id); the pseudonym is computed by the mappers' own identifier
functions, so it is the one that was staged. Everything happens under the
run's lock, in one transaction, with the exit codes of a run. Nothing that
names the learner is logged or stored.
"""

import dataclasses
import datetime as dt
import logging

from lms_refresh import logs
from lms_refresh.disclosure.cell_key import RecordKeys
from lms_refresh.disclosure.pseudonyms import Pseudonymiser, fingerprint, moodle_identifier
from lms_refresh.disclosure.redaction import REDACTED, scrub_text
from lms_refresh.errors import ConfigError
from lms_refresh.run import identity, stopping
from lms_refresh.run.lock import LockHeld, lock_held, locked_store, run_lock
from lms_refresh.run.publication import publish_if_behind, recompute
from lms_refresh.state_directory import check_writable_file
from lms_refresh.store import load_driver, store_exists

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ForgetReport:
    dry_run: bool
    events: int = 0
    quarantined: int = 0
    partitions: list = dataclasses.field(default_factory=list)
    rows_written: int = 0
    suppressed: int = 0
    closed_days: int = 0  # days before the staging horizon whose presence of the learner was deleted

    def journal_fields(self):
        return {"FORGOTTEN_EVENTS": self.events, "FORGOTTEN_QUARANTINED": self.quarantined,
                "FORGOTTEN_CLOSED_DAYS": self.closed_days, "PARTITIONS": len(self.partitions),
                "ROWS_WRITTEN": self.rows_written, "SUPPRESSED": self.suppressed}


def learner_identifier(config, agent=None, moodle_user_id=None):
    """Return the identifier text the configured source's mapper pseudonymises for this learner.

    `agent` is an xAPI Agent (a dict with one identifier) for xAPI sources;
    `moodle_user_id` a Moodle user id for the Moodle source.
    """
    kind = config.source.type
    if kind == "moodle":
        if moodle_user_id is None:
            raise ConfigError(f"The source in {config.origin} is Moodle's log, which names learners by user id; "
                              "use --moodle-user-id.")
        return moodle_identifier(config.source.site_url, moodle_user_id)
    if agent is None:
        raise ConfigError(f"The source in {config.origin} is xAPI ({kind}), which names learners by an agent "
                          "identifier; use --mbox, --mbox-sha1sum, --openid or --account-homepage with --account-name.")
    from lms_refresh.sources.xapi_fields import InvalidStatement, actor_identifier

    try:
        return actor_identifier(agent)
    except InvalidStatement as error:
        reason = str(error)
        for value in _strings(agent):  # the reason may quote the value; the message never does
            reason = reason.replace(value, REDACTED)
        raise ConfigError(f"That learner identifier cannot name an xAPI agent ({scrub_text(reason)}); "
                          "check the option's value.") from None


def _strings(value):
    """The texts in `value` that may name the learner: a mailto: IRI's address, not its scheme (which the
    reason's own words hold: "not a mailto: IRI")."""
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, str) and value.lower().startswith("mailto:"):
        value = value[len("mailto:"):]
    return [value] if isinstance(value, str) and value else []


FORGET_STOPPED = "Stopped by SIGTERM before the erasure was committed; nothing was forgotten."


def forget(config, identifier, environ, *, euid, dry_run=False):
    """Delete the staged events and quarantined records of the learner `identifier` names, and rebuild their days.

    Returns a ForgetReport; raises a RefreshError subclass on failure, after rolling back.
    """
    report = ForgetReport(dry_run=dry_run)
    load_driver(config)
    if not store_exists(config, environ):
        # A store gone beside its key is one to restore, whose learner would come back with it: refused as a run is.
        identity.verify_store_present(config, True)
        logger.info("There is no store yet (%s); nothing to forget.", config.store_location)
        return report
    try:
        # SIGTERM before the commit rolls back; after it, the erasure stands and the command finishes.
        with run_lock(config, euid, dry_run), stopping.installed() as stop, stop.during(FORGET_STOPPED):
            if config.store.type == "sqlite" and not dry_run:
                check_writable_file(config.store.path, euid)
            with locked_store(config, environ, create=False, rehearsal=dry_run) as store:
                _forget(config, store, identifier, report=report, stop=stop)
                _log(report)
                if not dry_run:
                    # The dashboards' copy, after the commit (see run/publication.py); the CLI writes the report.
                    publish_if_behind(config, store, euid)
    except LockHeld as held:  # the learner is still there, so say so
        raise lock_held(held.holder, "nothing was forgotten", "forget") from None
    return report


def _log(report):
    logger.info(
        "%s one learner: %s and %s deleted; rebuilt %s (%s, %s).",
        "Would forget (dry run, nothing written)" if report.dry_run else "Forgot",
        logs.counted(report.events, "staged event"), logs.counted(report.quarantined, "quarantined record"),
        logs.counted(len(report.partitions), "daily partition"), logs.counted(report.rows_written, "row"),
        logs.counted(report.suppressed, "suppressed cell"),
        extra=report.journal_fields(),
    )


def _forget(config, store, identifier, *, report, stop):
    meta, has_events = store.meta(), store.has_events()
    # Presence outlives the staged events of a closed day while a period holding it is open: it is the learner's too.
    if not has_events and not store.quarantine_count() and store.is_empty("learner_days"):
        _matched_nothing()
        return
    # A missing or different key is refused: nothing would match.
    key = identity.open_key(config, meta, True, dry_run=report.dry_run, rebuild=False)
    pseudonym = Pseudonymiser(key)(identifier)
    store.begin()
    try:
        identity.follow_key(store, fingerprint(key))  # before it: records no key can match go (store/erasure.py)
        days, present = store.forget_learner(pseudonym)
        report.events = len(days)
        report.quarantined = store.forget_quarantined(pseudonym)
        # Days before the staging horizon hold no staged events, so none of them is rebuilt here; the weeks, months
        # and terms that counted the learner on such a day and still have a day open are counted again.
        report.partitions = sorted(set(days))
        closed = present - set(days)
        report.closed_days = len(closed)
        if not (days or present or report.quarantined):
            _matched_nothing()
        if report.partitions or closed:
            # A store upgraded in place gets its cell keys in the rebuild.
            report.rows_written, report.suppressed = recompute(store, set(days), record_keys=RecordKeys(key),
                                                                  config=config, now=dt.datetime.now(dt.UTC),
                                                                  periods_of=closed)
        if report.dry_run:
            store.rollback()
        else:
            with stop.commit():
                store.commit()
    except BaseException:
        store.rollback()
        raise


def _matched_nothing():
    # Not an error (forgetting twice is harmless), but an operator's typo must not look like an erasure.
    logger.warning("Nothing in the store matched this learner: no staged event, no presence on a closed day "
                   "and no quarantined record. Identifiers are compared exactly (letter case, a trailing "
                   "'/'); a learner forgotten before matches nothing either.")
