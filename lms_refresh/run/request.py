"""What a refresh is asked to do: the `Request` of a run, a backfill or a rebuild (see run/refresh.py)."""

import dataclasses
import datetime as dt

RUN, BACKFILL, REBUILD = "run", "backfill", "rebuild"
UNDONE = {BACKFILL: "backfilled", REBUILD: "rebuilt"}  # what was not done when the lock is held


@dataclasses.dataclass(frozen=True)
class Request:
    """What was asked for: the scheduled window (run), [since, until) (backfill) or everything
    from since on, replacing what the store derived (rebuild); a dry run writes nothing."""

    kind: str = RUN
    since: dt.datetime | None = None
    until: dt.datetime | None = None  # a backfill's end; None: now
    dry_run: bool = False
    accept_weaker_privacy: bool = False  # apply a configuration that protects less than the store's (weakening.py)
    accept_bad_input: bool = False  # commit although more than max_quarantine_share of the records were malformed

    def __post_init__(self):
        if self.kind not in (RUN, BACKFILL, REBUILD) or (self.since is None) != (self.kind == RUN):
            raise ValueError(f"a {self.kind!r} request with since={self.since!r}")

    @property
    def scheduled(self):
        """The timer's run: the only kind that is retried and pinged."""
        return self.kind == RUN and not self.dry_run
