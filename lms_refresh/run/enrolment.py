"""Enrolled learners: who was enrolled in each course at any moment of a day or period, counted from what the source
says of its enrolments now, for the days and periods a run recomputes that are not settled yet.

Enrolments are state, not events: a source is asked which enrolments overlap some local days (Moodle's
`user_enrolments`, sources/moodle_enrolments.py), as they are when the run reads them. A day's or period's
enrolled cell ({course: (learners, the sum of their keys)}, the site's under tables.SITE: each learner once
however many courses) is counted by every run that recomputes it while it is open, and by the first run after it
closed (its end and the safety lag past, as `complete` says of a published period); then it is settled, and no
later run reads or changes it: an enrolment deleted or whose dates are edited in the source afterwards changes
no closed period, only a rebuild counts it again from the enrolments as they are then. A run's cost follows the
enrolments overlapping the days and periods it counts (the open ones), never the settled history.
"""

from lms_refresh import instants
from lms_refresh.store import periods
from lms_refresh.store.tables import SITE

_MODULUS = 4294967296  # key sums modulo 2**32, as every cell key (lms_refresh.disclosure.cell_key)


def count(store, enrolments, days, period_labels, calendar, *, timezone, cutoff):
    """Count the enrolled cells of the recomputed `days` and periods `period_labels` ({grain: labels} of
    `calendar`), and of every day and period counted before but not settled, but those settled, from
    `enrolments(first day, last day)` (the source's: (course id, learner, learner key, first local day or None,
    last local day or None) of each enrolment overlapping those days, None for open); write them, each settled if
    it ended (in `timezone`) at or before the instant `cutoff`. Return ({grain: courses whose enrolled cells
    changed}, {grain: the labels counted}), both empty if the source reads no enrolments."""
    if enrolments is None:
        return {}, {}
    terms = {name for name, _, _ in calendar.terms}
    # The unsettled first, so that a term whose days were changed in the configuration takes its new ones; one no
    # longer configured is not counted (nor published).
    wanted = {period: bounds for period, bounds in store.unsettled_enrolment_periods().items()
              if period[0] != "term" or period[1] in terms}
    wanted.update((("day", day), (day, day)) for day in days if instants.FIRST_DAY <= day <= instants.LAST_DAY)
    wanted.update(((grain, label), calendar.bounds(grain, label))
                  for grain, labels in (period_labels or {}).items() for label in labels)
    # A settled period stays as it is, unless its days changed (a term moved: counted again, as its activity is).
    for period, bounds in store.settled_enrolment_periods(wanted).items() if wanted else ():
        if wanted[period] == bounds:
            del wanted[period]
    if not wanted:
        return {}, {}
    rows = enrolments(min(first for first, _ in wanted.values()), max(last for _, last in wanted.values()))
    if rows is None:  # the source could not read them (it warned): nothing counted, nothing settled
        return {}, {}
    # Each enrolment once into the bucket of its (first day, last day): {(first, last): {course: {learner: key}}}
    # (few distinct pairs: enrolments start and end on few days), then each period merges the buckets that overlap
    # it, course by course, with dict.update: the per-row work is one insertion, whatever the number of periods.
    buckets = {}
    for course, learner, key, first, last in rows:
        bucket = buckets.get((first, last))
        if bucket is None:
            bucket = buckets[(first, last)] = {}
        learners = bucket.get(course)
        if learners is None:
            learners = bucket[course] = {}
        learners[learner] = key
    closed, counted, done = instants.to_cursor(cutoff), {}, {}
    for period, (start, end) in wanted.items():
        overlapping = tuple(pair for pair in buckets if (pair[0] is None or pair[0] <= end)
                            and (pair[1] is None or pair[1] >= start))
        if overlapping not in done:  # periods that the same enrolments overlap (often all of a run's) count once
            done[overlapping] = _cells([buckets[pair] for pair in overlapping])
        counted[period] = (start, end, periods.closes_at(end, timezone) <= closed, done[overlapping])
    changed, labels = {}, {}
    for (grain, label), courses in store.write_enrolled(counted).items():
        changed.setdefault(grain, set()).update(courses)
        labels.setdefault(grain, set()).add(label)
    return changed, labels


def _cells(buckets):
    """{course: (enrolled learners, the sum of their keys modulo 2**32)} of the enrolments in `buckets` ({course:
    {learner: key}} each), and the site's under SITE: each learner once per course, and once in the site."""
    by_course = {}
    for bucket in buckets:
        for course, learners in bucket.items():
            by_course.setdefault(course, []).append(learners)
    cells, site = {}, {}
    for course, parts in by_course.items():
        learners = parts[0] if len(parts) == 1 else {learner: key for part in parts for learner, key in part.items()}
        cells[course] = (len(learners), sum(learners.values()) % _MODULUS)
        site.update(learners)  # each learner once, however many courses
    if site:
        cells[SITE] = (len(site), sum(site.values()) % _MODULUS)
    return cells
