"""Sources of learning activity, behind one small interface.

A source is built from the `[source]` table and yields `Batch`es for a
window. The engine never interprets a source's cursor beyond comparing it:
for xAPI it is the `stored` time, for a log table it would be an id.
"""

import dataclasses

from lms_refresh.errors import ConfigError


@dataclasses.dataclass
class Batch:
    """One bounded slice of a window.

    events: canonical event tuples (see `lms_refresh.sources.xapi.EVENT_FIELDS`).
    voids: (target_id, voiding_id, stored) for statements that void others.
    quarantined: (origin, reason, raw_text) for records that could not be used.
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


def build_source(source_config, mapper):
    """Given the validated [source] table and a statement mapper, return the source object."""
    if source_config["type"] == "xapi-ndjson":
        from lms_refresh.sources.ndjson import NdjsonSource

        return NdjsonSource(source_config["path"], mapper, source_config["batch_size"])
    raise ConfigError(f"source type {source_config['type']!r} is not supported")
