"""What is published of a cell: the threshold, the perturbation applied, and no existence signal.

Published rows are computed here, in Python, from each store's per-cell
aggregates, so the two stores cannot drift apart. The store only hands over
aggregates and record keys and keeps the rows it is given (`publish`, which
the run layer calls: run/publication.py); nothing in lms_refresh.store
imports this package.
"""

import dataclasses
import datetime as dt
import functools

from lms_refresh.disclosure.cell_key import PerturbationTable
from lms_refresh.errors import StateError
from lms_refresh.instants import FIRST_DAY, LAST_DAY

METHODS = ("cell-key", "none")
# The event counts of a cell, each with the distinct learners it derives from (for the threshold).
COUNTS = {"attempts": "attempt", "completions": "completion", "passed": "passed", "failed": "failed"}
# The learner outcome counts: (published column, the statement count it is at most, its cell's learner count and
# the sum of those learners' keys, store.tables.OUTCOME_LEARNER_KEYS). Each is withheld exactly when its statement
# count is (the same learners decide both).
OUTCOMES = (("completed_learners", "completions", "completion_learners", "completion_learner_key"),
            ("passed_learners", "passed", "passed_learners", "passed_learner_key"),
            ("failed_learners", "failed", "failed_learners", "failed_learner_key"))
# The least scale of the noise on a sum (published_row): a hundredth of a scaled score, a second, in micro and ms.
SCALE_FLOORS = {"score": 10_000, "duration": 1_000}


@dataclasses.dataclass(frozen=True)
class PrivacySettings:
    """What the publication is computed with (the store keeps a typed copy: privacy_settings)."""

    min_cell_size: int
    method: str = "cell-key"
    max_noise: int = 3
    variance: float = 2.0
    withhold_zeros: bool = False

    def __post_init__(self):
        # Fail closed: a threshold that is not a positive integer never reaches the publication.
        if isinstance(self.min_cell_size, bool) or not isinstance(self.min_cell_size, int) or self.min_cell_size < 1:
            raise StateError(f"The stored threshold min_cell_size ({self.min_cell_size!r}) is not a positive integer; "
                             "nothing was published. Run lms-refresh again to store it from the configuration.")
        if self.method not in METHODS:
            raise StateError(f"The stored perturbation method {self.method!r} is unknown; nothing was published.")


def in_force(store, missing_ok=False):
    """Return the PrivacySettings in force in `store` (checked: a bad stored value publishes nothing), or
    None if it has none and `missing_ok`; without them, the store's StateError."""
    row = store.privacy_settings(missing_ok)
    return None if row is None else PrivacySettings(**row)


# Courses published together: one statement of each kind for them, and their cells in memory (a course's whole
# history when it is published whole).
CHUNK = 2000


def chunks(courses):
    """`courses` in order, in lists of at most CHUNK."""
    courses = sorted(courses)
    return (courses[start:start + CHUNK] for start in range(0, len(courses), CHUNK))


@functools.lru_cache(maxsize=4)
def table_of(settings):
    """The PerturbationTable of `settings`, made once: its base distribution and rows cost as much as publishing
    hundreds of cells, and they are the same for every cell."""
    return PerturbationTable(settings)


def publish(store, courses, settings, days=None):
    """Publish again the days of `courses` in `store` as `settings` allow: where `days` were rebuilt (None: all
    their rows, from all their cells)."""
    for chunk in chunks(courses):
        if days is None:
            cells, enrolled = store.cells("day", chunk), store.enrolled("day", chunk)
            store.write_published("day", [(course, row) for course in chunk
                                          for row in course_rows(cells.get(course, {}), settings,
                                                                 enrolled.get(course, {}))], courses=chunk)
        else:
            republish(store, "day", chunk, settings, rebuilt=days, between=_days_between,
                      row=lambda day, values: (day,) + values)


def republish(store, grain, courses, settings, *, rebuilt, between, row):
    """Rewrite what the `rebuilt` labels of `courses`' `grain` change of their published rows, as `course_rows` and
    `period_rows` would publish them whole: each rebuilt label in a course's span, the labels the span gains
    (withheld unless rebuilt), and none outside it. The rows of other labels stay: their cells and the settings are
    what they were published with. `between(first, last)` lists the labels from first to last, in order;
    `row(label, values)` makes a stored row of a label's published values."""
    spans = store.visible_spans(grain, courses, settings.min_cell_size)
    olds = store.published_spans(grain, courses)
    wanted, ranges = {}, []
    for course, (first, last) in sorted(spans.items()):
        labels = {label for label in rebuilt if first <= label <= last}
        ranges += [(course, label, label) for label in sorted(labels)]
        old = olds.get(course)
        if old is None:
            labels.update(between(first, last))
            ranges.append((course, first, last))
        else:
            if first < old[0]:
                labels.update(label for label in between(first, min(last, old[0])) if label < old[0])
                ranges.append((course, first, min(last, old[0])))
            if last > old[1]:
                labels.update(label for label in between(max(first, old[1]), last) if label > old[1])
                ranges.append((course, max(first, old[1]), last))
        wanted[course] = labels
    cells, enrolled, table = store.cells_in(grain, ranges), store.enrolled_in(grain, ranges), table_of(settings)
    store.write_published(grain, [(course, row(label, published_row(cells.get(course, {}).get(label), settings, table,
                                                                    enrolled.get(course, {}).get(label))))
                                  for course, labels in wanted.items() for label in sorted(labels)],
                          courses=[course for course in courses if course not in spans], keep=spans)


def _days_between(first, last):
    first, last = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    return [(first + dt.timedelta(days=offset)).isoformat() for offset in range((last - first).days + 1)]


def period_rows(cells, settings, span, enrolled=None):
    """Given one course's cells of one grain {period label: aggregates}, return its published rows
    [(label, values...)]: every period from its first to its last with at least k learners, as `course_rows`
    does for days — each cell thresholded on its own true counts and perturbed on its own keys.
    `span(labels)` returns, in order, the labels from the earliest to the latest of `labels`; `enrolled`
    {label: (enrolled learners, their key sum)} the course's enrolled cells."""
    table, enrolled = table_of(settings), enrolled or {}
    visible = [label for label, cell in cells.items() if cell["learners"] >= settings.min_cell_size]
    if not visible:
        return []
    return [(label,) + published_row(cells.get(label), settings, table, enrolled.get(label)) for label in span(visible)]


def published_row(cell, settings, table, enrolled=None):
    """Given one cell's aggregates (a dict, see `store.published.CELL_FIELDS`) and its enrolled cell (None, or
    (enrolled learners, the sum of their keys): store.tables' enrolled_cells), return its published values.

    Returns (active_learners, statements, attempts, completions, passed, failed, completed_learners,
    passed_learners, failed_learners, completed_share, pass_rate, avg_scaled_score, total_duration_seconds,
    suppressed, enrolled_learners, active_share).
    """
    values = _activity(cell, settings, table)
    return values + _enrolment(enrolled, values[0], settings, table)


def _enrolment(enrolled, active, settings, table):
    """(enrolled_learners, active_share) of a row: the enrolled learners thresholded and perturbed like the active
    ones, on their own keys (no enrolled cell: none enrolled, or a source that reads no enrolments, withheld as 1 to
    k - 1 are), and the share computed from the published values alone (NULL if either is withheld, or enrolled is
    0); `active` is the row's published active_learners. `suppressed` says nothing of them: a withheld count of
    enrolled learners is its NULL."""
    if enrolled is None or enrolled[0] < settings.min_cell_size:
        return None, None
    learners = table.perturb(enrolled[0], enrolled[1], "enrolled learners")
    return learners, (None if active is None or not learners else active / learners)


def _activity(cell, settings, table):
    """The activity values of published_row (all but the enrolment columns)."""
    k = settings.min_cell_size
    if cell is None or cell["learners"] < k:
        return (None,) * 13 + (1,)
    suppressed = 0
    counts = {"active_learners": table.perturb(cell["learners"], cell["learner_key"], "learners"),
              "statements": table.perturb(cell["statements"], cell["statement_key"], "statements")}
    for name, stem in COUNTS.items():
        learners = cell[f"{stem}_learners"]
        # A count above 0 with no learner behind it is a forgotten learner's events on a closed day, still in its
        # week's sums (their presence is gone, their events with the day's row): withheld, as one learner's are.
        if 0 < learners < k or (learners == 0 and (settings.withhold_zeros or cell[name])):
            counts[name] = None
            suppressed = 1
        else:
            counts[name] = table.perturb(cell[name], cell[f"{stem}_key"], name)
    for name, events, learners, key in OUTCOMES:
        # Perturbed on the cell key of its own learners. A cell counted before schema version 10 on a day whose
        # events are gone has no such key: its count is withheld (fail closed) when it has learners to count.
        if counts[events] is None or (cell[key] is None and cell[learners] > 0):
            counts[name] = None
            suppressed |= counts[events] is not None
        else:
            counts[name] = table.perturb(cell[learners], cell[key] or 0, name.replace("_", " "))
    values = consistent(counts)
    # A sum of scores or of durations is published with a noise of its own, scaled by the cell's largest record
    # (table.magnitude): an exact sum under a noisy count gives itself away (the count is a small integer near
    # the published statements, and few denominators make a mean of two-decimal scores round), and exact sums
    # subtract exactly — the site's minus its courses', a week's minus its days', a cell filled by an attacker's
    # own accounts minus what they sent — down to one learner's score or time. A cell without a scale (counted
    # before schema version 9, on a day whose events are gone) publishes neither sum.
    if cell["score_learners"] >= k and cell["score_max_micro"] is not None:
        # A mean: the noisy sum over the perturbed number of scores, within the scaled score's range. The scale has
        # a floor: a cell whose records all scored 0 would otherwise publish exactly 0, and say so for certain.
        scores = table.perturb(cell["score_count"], cell["score_key"], "scores")
        scale = max(cell["score_max_micro"], SCALE_FLOORS["score"])
        total = cell["score_sum_micro"] + table.magnitude(cell["score_key"], "score sum") * scale
        values.append(round(min(1.0, max(-1.0, total / scores / 1000000.0)), 6))
    else:
        values.append(None)  # as a count's: with withhold_zeros, "nobody" and "1..k-1" must look the same
        suppressed |= cell["score_learners"] > 0 or settings.withhold_zeros
    if cell["duration_learners"] >= k and cell["duration_max_ms"] is not None:
        scale = max(cell["duration_max_ms"], SCALE_FLOORS["duration"])
        total = cell["duration_ms"] + table.magnitude(cell["duration_key"], "time sum") * scale
        values.append(round(max(0.0, total) / 1000.0, 3))
    else:
        values.append(None)
        suppressed |= cell["duration_learners"] > 0 or settings.withhold_zeros
    return tuple(values) + (int(suppressed),)


def consistent(published):
    """Given a row's published counts {column: value or None}, return them (and the shares computed from them) in
    their published order, made to satisfy the relations that every true row satisfies: statements at least
    each other count, each learner outcome count at most the active learners and its statement count.

    Computed from the published values alone, never from the true ones: the row says nothing that its values
    before did not, and is the same whenever they are. Raising `statements` to the largest count it must exceed,
    and lowering a learner outcome count to the least it must not exceed, keeps each within ± max_noise of its
    true value (each bound is itself a perturbed count whose true value lies on the right side) and at least the
    threshold (every bound is a published count of at least min_cell_size learners, or 0 where the count is)."""
    values = dict(published)
    if values["statements"] is not None:
        values["statements"] = max(value for name, value in values.items()
                                   if value is not None and name not in _LEARNER_OUTCOMES)
    for name, events, _, _ in OUTCOMES:
        if values[name] is not None:
            values[name] = min(values[name], values["active_learners"], values[events])
    completed, passed, failed = (values[name] for name in _LEARNER_OUTCOMES)
    values["completed_share"] = None if completed is None or not values["active_learners"] else \
        completed / values["active_learners"]
    values["pass_rate"] = None if passed is None or failed is None or passed + failed == 0 else \
        passed / (passed + failed)
    return [values[name] for name in _PUBLISHED_COUNTS]


_LEARNER_OUTCOMES = tuple(name for name, _, _, _ in OUTCOMES)
_PUBLISHED_COUNTS = ("active_learners", "statements", *COUNTS, *_LEARNER_OUTCOMES, "completed_share", "pass_rate")


def course_rows(cells, settings, enrolled=None):
    """Given one course's cells {day text: aggregates} and its enrolled cells {day text: (enrolled learners, key
    sum)}, return its published rows [(day, values...)].

    Every day from the course's first to its last day with at least k learners is
    published, withheld or not, so a day without activity and a day with 1..k-1
    learners look the same; a course that never reaches k publishes no row.
    The span is bounded: sources quarantine times outside `lms_refresh.instants`'
    range and in the future, and a day outside what an instant in range can
    fall on (staged by an earlier version) neither stretches the span nor is published.
    """
    table, enrolled = table_of(settings), enrolled or {}
    visible = sorted(day for day, cell in cells.items()
                     if cell["learners"] >= settings.min_cell_size and FIRST_DAY <= day <= LAST_DAY)
    if not visible:
        return []
    first, last = dt.date.fromisoformat(visible[0]), dt.date.fromisoformat(visible[-1])
    rows = []
    for offset in range((last - first).days + 1):  # never a day past `last`: no date overflow
        text = (first + dt.timedelta(days=offset)).isoformat()
        rows.append((text,) + published_row(cells.get(text), settings, table, enrolled.get(text)))
    return rows
