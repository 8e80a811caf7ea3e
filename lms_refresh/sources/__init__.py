"""Sources of learning activity, behind one contract: `Source`.

A source is built from the `[source]` table by `build_source`. The engine
asks it for the window of a run on its `axis` (its arrival order, see
`lms_refresh.window`), gives it back the state it saved with the last
committed run (`restore`), reads the window as `Batch`es (`batches`) and
commits each batch's `state` with the run. `check` says what it found as
`Finding`s. The engine never interprets a source's cursor beyond comparing
it: for xAPI it is the `stored` time, for Moodle's log the row id.

`BaseSource` gives every source its windows, parametrised by its axis;
`lms_refresh.sources.records` holds what the mappers produce and the one loop
that files mapped records into a batch.
"""

import dataclasses
import datetime as dt
import typing

from lms_refresh import window as windows
from lms_refresh.errors import ConfigError

# Characters of a quarantined record's raw text that are kept: enough to see what is wrong with
# it (its origin says where the rest is), and little enough that the records a failed run keeps
# in memory to record after its rollback stay bounded whatever the input.
RAW_KEPT = 16_384

# The levels of a Finding: as it should be; a departure from the source's specification that the
# refresh works around; something an operator should fix or know.
OK, DEVIATION, WARNING = "ok", "deviation", "warning"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing `check` found: its level and one sentence.

    A check that cannot go on raises a domain error (`lms_refresh.errors`) instead:
    that, not a finding, is what makes `check` fail.
    """

    level: str
    sentence: str
    about: str = ""  # what it is about ("source"), said before the sentence

    @property
    def ok(self):
        """True if it is as it should be; False if it is a finding to read (a deviation or a warning)."""
        return self.level == OK

    def __str__(self):
        text = self.sentence if self.level == OK else f"{self.level}: {self.sentence}"
        return f"{self.about}: {text}" if self.about else text


@dataclasses.dataclass
class Batch:
    """One bounded slice of a window.

    events: canonical events (`lms_refresh.sources.records.Event`; from the parsing workers, plain tuples
        of its fields).
    voids: `records.Void`s, for statements that void others.
    quarantined: (origin, reason, raw_text) for records that could not be used (raw_text at
        most RAW_KEPT characters).
    read: records in the window this batch covers (events + voids + quarantined, and Moodle rows
        that are no learner activity).
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


@typing.runtime_checkable
class Source(typing.Protocol):
    """What the engine asks of a source, in the order of a run (`BaseSource` provides the windows)."""

    axis: object  # windows.TIME or windows.LOG_ID: the order records arrive in, and the watermark's kind

    def describe(self) -> str:
        """Name the source for messages, e.g. 'xAPI NDJSON files at /srv/exports'."""

    def preflight(self) -> list:
        """Reach the source and return what was found (Findings); write nothing; raise if it cannot be used."""

    def run_window(self, watermark, now, config) -> windows.Window:
        """Given the stored watermark (or None), return the window of a scheduled run."""

    def backfill_window(self, since, until, now, *, config) -> windows.Window:
        """Given an operator's time window, return it clamped to what the source has complete."""

    def restore(self, lookup: typing.Callable) -> None:
        """Take up the state saved with the last committed run (its batches' `state`, merged), through
        `lookup(keys)`, which returns {key: saved value} for those of `keys` it holds."""

    def batches(self, window) -> typing.Iterator[Batch]:
        """Yield the window's records as Batches, each with the state to commit with it."""

    def close(self) -> None:
        """Release connections."""

    # None, or a callable(first day, last day) returning an iterable of (course id, learner, learner key, first
    # local day or None, last local day or None) of every enrolment of a learner overlapping those local days (ISO
    # text), as the source holds them now (run/enrolment.py counts the enrolled learners from it).
    enrolments: object


class BaseSource:
    """The windows of every source, on its axis; no state to restore; nothing to close.

    A source says how far it is complete (`complete_through`, a time). One whose
    axis is not time says instead where a scheduled run ends (`run_until`), where
    a first run starts (`first_since`) and how far a run reads back (`lookback`);
    a backfill is a time window whatever the axis.
    """

    axis = windows.TIME
    enrolments = None  # most sources say nothing of enrolments: no enrolled learners are published

    def complete_through(self, now):
        """Return the time up to which the source says it is complete, or None if it does not say."""
        return None

    def run_until(self, now, config):
        """Return the end of a scheduled run's window: now less the lag, never past what is complete."""
        return windows.upper_bound(now, config.window.safety_lag, self.complete_through(now))

    def first_since(self, moment, until):
        """Return where a first run starts, given the time `bootstrap_days` before now: there, on the time axis."""
        return moment

    def lookback(self, config):
        """Return how far a scheduled run reads back behind the watermark, in the axis's units."""
        return config.window.lookback

    def run_window(self, watermark, now, config):
        until = self.run_until(now, config)
        if watermark is None:
            since = self.first_since(now - dt.timedelta(days=config.window.bootstrap_days), until)
        else:
            since = self.axis.back(watermark, self.lookback(config))
        return windows.Window(since, until, self.axis)

    def backfill_window(self, since, until, now, *, config):
        return windows.backfill_window(since, until, now, config=config, complete_through=self.complete_through(now))

    def restore(self, lookup):
        """Most sources keep no state: where they stand is the watermark."""

    def standing_names(self):
        """Return the names ({(kind, key): value}, as a Batch's) the source holds apart from its records: every
        run reads them after its records (the store names the courses it has events of), an empty window's
        too, so a rename reaches the publication. Most sources have none: their records carry their names."""
        return {}

    def standing_categories(self):
        """Return the course categories the source holds apart from its records (a records.CategoryTree), read by
        every run after its records as the names are, or None where it has none to say (the store keeps its own)."""
        return None

    def close(self):
        """Release connections; the base holds none."""


def build_source(config, pseudonymise, environ, *, now=None, record_keys=None):
    """Given a Config, the pseudonymising function and the environment, return the Source.

    `now`, the run's time, lets the mappers quarantine records dated in the future (None: no check).
    `record_keys` (the run's cell_key.RecordKeys) gives each event its record keys as it is mapped; without
    it (`check`) the events have none, and no store stages them.
    """
    settings = config.source
    kind = settings.type
    if kind in ("xapi-ndjson", "xapi-lrs"):
        from lms_refresh.sources.xapi import StatementMapper

        mapper = StatementMapper(config.timezone, pseudonymise, settings.course_pattern, now=now,
                                 language=config.publication.language, record_keys=record_keys)
        if kind == "xapi-ndjson":
            from lms_refresh.sources.ndjson import NdjsonSource

            return NdjsonSource(settings.path, mapper, settings.batch_size,
                                max_record_bytes=settings.max_record_bytes)
        from lms_refresh.sources.lrs import LrsSource

        return LrsSource(settings, mapper, environ)
    if kind == "moodle":
        from lms_refresh.sources.moodle import MoodleSource

        return MoodleSource(settings, config.timezone, pseudonymise, environ=environ, now=now,
                            language=config.publication.language, record_keys=record_keys,
                            bootstrap_days=config.window.bootstrap_days)
    raise ConfigError(f"source type {kind!r} is not supported")
