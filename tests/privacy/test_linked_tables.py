"""Attacks on the linked tables (issue 22, part 3): a withheld day read from its week minus the week's other
days. In exact mode every such value is recovered; with the cell key method each row has its own noise,
so none is recovered with certainty (tests/helpers/attacks.py's strongest attacker, here on sums)."""

import random

import pytest

from helpers.statements import statement

COURSES, D = 24, 3


def week_with_a_withheld_wednesday(seed):
    """Per course: 12 learners a day from Monday to Sunday (visible days) but Wednesday, 3 (a withheld day)."""
    rng, written, wednesdays = random.Random(seed), [], {}
    for number in range(COURSES):
        course = f"C{number}"
        for offset in range(7):
            day = f"2026-11-{2 + offset:02d}"
            for learner in range(3 if offset == 2 else 12):
                for _ in range(rng.randrange(1, 5)):
                    written.append(statement(learner=f"l{learner}", course=course, timestamp=f"{day}T10:00:00Z",
                                             stored="2026-11-09T01:00:00Z"))
                    if offset == 2:
                        wednesdays[course] = wednesdays.get(course, 0) + 1
    return written, wednesdays


def recover(project):
    """For each course: (the attacker's guess at Wednesday's statements, every value consistent with the rows)."""
    days = {}
    for day, course, _, statements, *_ in project.serving():
        days.setdefault(course.rsplit("/", 1)[1], {})[day] = statements
    store = project.open_store()
    try:
        weeks = {row[3].rsplit("/", 1)[1]: row[5] for row in store.period_serving_rows("week")}
    finally:
        store.close()
    found = {}
    for course, week in weeks.items():
        shown = [value for day, value in days[course].items() if day != "2026-11-04"]
        assert days[course]["2026-11-04"] is None and len(shown) == 6  # Wednesday withheld, the rest published
        rest = week - sum(shown)
        spread = D * (len(shown) + 1)  # every published count is within D of its truth
        found[course] = (rest, [value for value in range(rest - spread, rest + spread + 1) if value >= 0])
    return found


@pytest.mark.parametrize("privacy", ['method = "none"', 'method = "cell-key"'])
def test_a_withheld_day_from_its_week_minus_the_other_days(project, privacy):
    project.configure(privacy=privacy)
    written, wednesdays = week_with_a_withheld_wednesday(7)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-20T04:15:00Z", check=0)
    found = recover(project)
    assert len(found) == COURSES
    exact = sum(guess == wednesdays[course] for course, (guess, _) in found.items())
    if privacy == 'method = "none"':
        assert exact == COURSES  # what the README's threat model says exact mode exposes
    else:
        assert all(wednesdays[course] in feasible and len(feasible) > 1 for course, (_, feasible) in found.items())
        assert exact <= COURSES // 2, exact  # the sum of seven noises is rarely 0
