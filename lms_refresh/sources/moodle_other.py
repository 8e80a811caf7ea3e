"""What a Moodle log row's `other` column says: JSON, or PHP-serialised data before Moodle 3.x, written by
Moodle's plugins, so read defensively (lms_refresh.sources.moodle maps the rows)."""

import json
import math
import re

from lms_refresh.sources import json_decoding
from lms_refresh.sources.records import InvalidRecord

# One scalar field of PHP-serialised data: s:LEN:"name"; then an int, a float, a bool or null.
_PHP_SCALAR = re.compile(r's:\d+:"(\w+)";(?:i:(-?\d+)|d:([^;]*)|b:([01])|N);')


def _php_scalars(text):
    """Return the scalar fields of PHP-serialised data as a dict (the first of each name wins)."""
    values = {}
    for name, integer, number, boolean in _PHP_SCALAR.findall(text):
        if integer:
            value = int(integer)
        elif number:
            try:
                value = float(number)  # PHP writes INF and NAN too; callers check
            except ValueError:
                value = None
        elif boolean:
            value = boolean == "1"
        else:
            value = None
        values.setdefault(name, value)
    return values


def _other(other):
    """Return a row's `other` as a dict: JSON, or PHP-serialised before Moodle 3.x; {} if it is neither."""
    if not other:
        return {}
    try:
        value = json_decoding.decode_document(other)
    except json_decoding.NotJSON:  # too deep included: no field of ours lies that deep
        return _php_scalars(other)
    return value if isinstance(value, dict) else {}


def graded(other):
    """Return (grade item id, final grade or None) from a user_graded row's `other`, or (None, None)."""
    values = _other(other)
    item, final = values.get("itemid"), values.get("finalgrade")
    if type(item) is not int:
        return None, None
    if isinstance(final, bool) or not isinstance(final, (int, float)) or not math.isfinite(final):
        final = None
    return item, None if final is None else float(final)


def scaled_micro(final, grade_range):
    """Return a final grade as millionths of its item's range (0 to 1, clamped), or None if it has none."""
    if final is None or grade_range is None:
        return None
    low, high = grade_range
    if not high > low:
        return None
    # Above the maximum happens with Moodle's "unlimited grades" setting; xAPI's scaled stops at 1.
    return round(min(max((final - low) / (high - low), 0.0), 1.0) * 1_000_000)


class InvalidRow(InvalidRecord):
    """A log row that cannot be used; the message is the quarantine reason."""


def completion_state(other):
    """Return the completion state from a row's `other`."""
    state = _other(other).get("completionstate")
    if type(state) is int:  # not True, which Python counts as 1: a completion no Moodle wrote
        return state
    raise InvalidRow("a completion update without other.completionstate" if state is None else
                     f"a completion update whose other.completionstate {json.dumps(state)[:40]} is not a number")
