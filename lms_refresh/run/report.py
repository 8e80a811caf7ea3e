"""What a run did: its `Report`, the run-log row made from it, and the `Outcome` handed back to the caller.

The report is filled in by the run's phases (lms_refresh.run.refresh); the job
(retries, pings, textfile), the CLI (its last log line, a dry run's summary)
and the journal's fields (lms_refresh.logs.run_fields) read it.
"""

import dataclasses
import datetime as dt
import logging
import time
import typing

from lms_refresh import __version__, instants, logs, window as windows
from lms_refresh.errors import BadInputError
from lms_refresh.run import retention

logger = logging.getLogger("lms_refresh")


# What a run read, staged and recomputed, as opposed to what it is (its id, kind, start, note).
_READ = ("window", "statements_read", "staged", "voided", "quarantined", "closed", "partitions", "rows_written",
         "suppressed")


@dataclasses.dataclass
class Report:
    """What a run did (or, for a dry run, would do)."""

    run_id: str
    kind: str
    dry_run: bool
    outcome: str = "success"
    window: windows.Window = None
    statements_read: int = 0
    staged: int = 0
    voided: int = 0
    quarantined: int = 0
    closed: int = 0  # of the quarantined: statements for days before the staging horizon (not malformed)
    partitions: list = dataclasses.field(default_factory=list)
    rows_written: int = 0
    suppressed: int = 0
    lock_holder: str = ""
    note: str = ""  # what the run log's row says of a successful run (a deliberate weakening of privacy)
    started: float = dataclasses.field(default_factory=time.monotonic)

    def restart(self):
        """Forget what the run read, staged and recomputed (it is read again: store/staging.StageAgain)."""
        fresh = Report(self.run_id, self.kind, self.dry_run)
        for name in _READ:
            setattr(self, name, getattr(fresh, name))

    def count_quarantined(self, records, *, again):
        """Count the batch's quarantined `records` but `again`, those a successful run counted already; of
        those, the ones held back for closed days are no longer among this run's `closed` either."""
        self.quarantined += len(records) - len(again)
        self.closed -= sum(1 for _origin, reason, _raw in again if reason.startswith(retention.CLOSED_REASON))

    def past_share(self, share_allowed):
        """Return what is wrong (a sentence) if more than `share_allowed` (max_quarantine_share) of the records
        were malformed, else None: statements for closed days (older than the staging horizon) are quarantined
        too, but they are not malformed."""
        malformed = self.quarantined - self.closed
        if malformed and malformed > share_allowed * self.statements_read:
            share = malformed / self.statements_read
            return (f"{malformed} of {self.statements_read} records in the window were malformed "
                    f"({share:.1%}, more than max_quarantine_share = {share_allowed:.1%})")
        return None

    def refuse_past_share(self, share_allowed, *, accept=False):
        """Fail the run (65) past `share_allowed` of malformed records, unless the request accepts them (`accept`,
        `--accept-bad-input`): then the run goes on and says so, in the journal and in its row."""
        wrong = self.past_share(share_allowed)
        if wrong is None:
            return
        if accept:
            accepted = f"bad input accepted deliberately (--accept-bad-input): {wrong}"
            self.note = f"{self.note}; {accepted}" if self.note else accepted
            logger.warning("Bad input accepted deliberately (--accept-bad-input): %s; the records stay in the "
                           "quarantine.", wrong, extra=logs.fields(logs.BAD_INPUT_ACCEPTED, RUN_ID=self.run_id))
            return
        raise BadInputError(
            f"{wrong}; nothing was committed. See the quarantine table (lms-refresh status) and fix the source, "
            "or accept these records once: lms-refresh run --accept-bad-input "
            "(/usr/share/doc/lms-refresh/docs/admin/bad-input.md)."
        )

    def row(self, now, exit_code=0, message=""):
        """Return the run log's row for this run, which started at `now` and ends about now."""
        finished = now + dt.timedelta(seconds=time.monotonic() - self.started)
        return {
            "run_id": self.run_id, "kind": self.kind, "started_at": instants.to_cursor(now),
            "finished_at": instants.to_cursor(finished), "outcome": self.outcome,
            "exit_code": exit_code,
            "window_since": self.window.since_cursor if self.window else None,
            "window_until": self.window.until_cursor if self.window else None,
            "statements_read": self.statements_read, "staged": self.staged, "voided": self.voided,
            "quarantined": self.quarantined, "partitions": len(self.partitions),
            "rows_written": self.rows_written, "suppressed": self.suppressed, "message": message or self.note,
            "version": __version__,
        }


class Outcome(typing.NamedTuple):
    """How a run ended: its report (None if it failed before it took the store's lock, i.e. never
    began) and the exception that ended it (None on success, nothing to do or a held lock)."""

    report: Report | None
    error: BaseException | None = None
