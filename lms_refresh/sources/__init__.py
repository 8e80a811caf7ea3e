"""Sources of learning activity, behind one small interface.

A source is built from the `[source]` table. It has an `axis` (its arrival
order, see `lms_refresh.window`), chooses the window of a scheduled run and of
a backfill, yields `Batch`es for a window, and says what `check` found. The
engine never interprets a source's cursor beyond comparing it: for xAPI it is
the `stored` time, for Moodle's log the row id.
"""

import dataclasses

from lms_refresh import window as windows
from lms_refresh.errors import ConfigError

# Characters of a quarantined record's raw text that are kept: enough to see what is wrong with
# it (its origin says where the rest is), and little enough that the records a failed run keeps
# in memory to record after its rollback stay bounded whatever the input.
RAW_KEPT = 16_384


@dataclasses.dataclass
class Batch:
    """One bounded slice of a window.

    events: canonical event tuples (see `lms_refresh.sources.xapi.EVENT_FIELDS`).
    voids: (target_id, voiding_id, stored) for statements that void others.
    quarantined: (origin, reason, raw_text) for records that could not be used (raw_text at
        most RAW_KEPT characters).
    read: records in the window this batch covers (events + voids + quarantined).
    state: source bookkeeping to commit with the run (e.g. the file index).
    names: {(kind, id): IRI} for course and verb ids first seen in this batch.
    """

    events: list = dataclasses.field(default_factory=list)
    voids: list = dataclasses.field(default_factory=list)
    quarantined: list = dataclasses.field(default_factory=list)
    read: int = 0
    state: dict = dataclasses.field(default_factory=dict)
    names: dict = dataclasses.field(default_factory=dict)

    def __len__(self):
        return len(self.events) + len(self.voids) + len(self.quarantined)


class TimeOrderedSource:
    """The windows of a source whose arrival order is the xAPI `stored` time."""

    axis = windows.TIME

    def complete_through(self, now):
        """Return the time up to which the source says it is complete, or None if it does not say."""
        return None

    def run_window(self, watermark, now, config):
        return windows.run_window(watermark, now, config, self.complete_through(now))

    def backfill_window(self, since, until, now, config):
        return windows.backfill_window(since, until, now, config, self.complete_through(now))

    def close(self):
        """Release connections; the base holds none."""


def build_source(config, pseudonymise, environ):
    """Given a Config, the pseudonymising function and the environment, return the source object."""
    settings = config.source
    kind = settings.type
    if kind in ("xapi-ndjson", "xapi-lrs"):
        from lms_refresh.sources.xapi import StatementMapper

        mapper = StatementMapper(config.timezone, pseudonymise, settings.course_pattern)
        if kind == "xapi-ndjson":
            from lms_refresh.sources.ndjson import NdjsonSource

            return NdjsonSource(settings.path, mapper, settings.batch_size,
                                max_record_bytes=settings.max_record_bytes)
        from lms_refresh.sources.lrs import LrsSource

        return LrsSource(settings, mapper, environ)
    if kind == "moodle":
        from lms_refresh.sources.moodle import MoodleSource

        return MoodleSource(settings, config.timezone, pseudonymise, environ)
    raise ConfigError(f"source type {kind!r} is not supported")
