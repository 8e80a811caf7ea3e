"""The publication's weeks, months and terms: what lms_refresh.disclosure.policy allows of their cells, and their
tables in the SQLite publication file (run/publication.py; on PostgreSQL, views of the same names in
`<schema>_serving`).

Each period's cell is thresholded on its own true counts and perturbed with its own record keys
(its distinct learners' keys for its learner count), never summed from published days: the
tables do not add up, and are not meant to. `complete` is 1 once the period's last local day
has ended and the safety lag after that has passed, as of the run that published it (every run,
even one with nothing to read, marks the periods that have closed since).
"""

import datetime as dt

from lms_refresh import instants
from lms_refresh.disclosure import policy
from lms_refresh.store import periods


def calendar(config):
    """The periods.Calendar of `config`: its [[terms]] besides the weeks and months."""
    return periods.Calendar((term.name, term.first_day, term.last_day) for term in config.terms)


def cutoff(config, now):
    """The instant a period must have ended by to be complete: `now` minus the safety lag."""
    return now - dt.timedelta(seconds=config.window.safety_lag)


def publish(store, period_courses, settings, *, config, now, rebuilt=None, whole=periods.GRAINS, counted=None):
    """Publish again each grain's courses in `period_courses` ({grain: course ids}): where the periods `rebuilt`
    ({grain: labels}) were, and whole for the grains in `whole` (and the terms, always: their names do not sort
    as their periods do, and a course has few). `counted`: the calendar the store counted (`config`'s terms
    but those it could not count, which get no row, not even a withheld one between two others)."""
    closed_before = instants.to_cursor(cutoff(config, now))
    periods_in_force, counted_from = counted or calendar(config), store.counted_from()

    def row(grain, label, values):
        start, end = periods_in_force.bounds(grain, label)
        ends = periods.closes_at(end, config.timezone)
        return (label, start, end, *values, ends, int(ends <= closed_before and start >= counted_from))

    for grain in periods.GRAINS:
        def span(labels, grain=grain):
            return periods_in_force.span(grain, labels)

        for chunk in policy.chunks(period_courses.get(grain, ())):
            if grain == "term" or grain in whole or rebuilt is None:
                cells, enrolled = store.cells(grain, chunk), store.enrolled(grain, chunk)
                store.write_published(grain, [(course, row(grain, label, tuple(values))) for course in chunk
                                              for label, *values in policy.period_rows(
                                                  cells.get(course, {}), settings, span, enrolled.get(course, {}))],
                                      courses=chunk)
            else:
                policy.republish(store, grain, chunk, settings, rebuilt=rebuilt.get(grain, ()),
                                 between=lambda first, last, span=span: span((first, last)),
                                 row=lambda label, values, grain=grain: row(grain, label, values))
    store.close_periods(cutoff(config, now))

