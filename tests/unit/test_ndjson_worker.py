"""The NDJSON source's reading of one chunk (lms_refresh.sources.ndjson_worker)."""

import json

import pytest

from helpers.readers import MAPPER, WINDOW
from helpers.statements import statement
from lms_refresh.sources import ndjson_worker, records

# Every test here runs with each JSON parser (lms_refresh/sources/json_decoding.py).
pytestmark = pytest.mark.usefixtures("json_parser")


def test_a_bad_line_outside_the_window_is_skipped_whether_or_not_the_prefilter_has_paused(tmp_path):
    """The pre-filter pauses after a long run of lines inside the window; that must not change
    which lines are quarantined (only those in the window, or whose `stored` cannot be told)."""
    inside = [json.dumps(statement(learner=f"u{i}", timestamp="2026-11-01T10:00:00Z"))
              for i in range(records.PREFILTER_STREAK + 10)]
    bad_outside = json.dumps(statement(timestamp="2026-11-05T10:00:00Z")).replace('"actor"', '"actr"')
    bad_inside = json.dumps(statement(timestamp="2026-11-02T10:00:00Z")).replace('"actor"', '"actr"')
    for name, lines in (("paused", inside + [bad_outside, bad_inside]), ("active", [bad_outside, bad_inside] + inside)):
        path = tmp_path / f"{name}.ndjson"
        path.write_text("\n".join(lines) + "\n")
        result = ndjson_worker.read_chunk(MAPPER, ndjson_worker.Chunk(str(path), 0, None),
                                          ndjson_worker.Reading(WINDOW.since_cursor, WINDOW.until_cursor))
        assert [reason for _, reason, _ in result.batch.quarantined] == ["actor is missing or not an object"], name
        assert len(result.batch.events) == len(inside)
        assert result.high == "2026-11-05T10:00:00.000000Z", name  # the file index still sees the late line
