"""Attacks on the linked tables (issue 22, part 4): a withheld day read from its week minus the week's other
days, a withheld course from the site's row minus the other courses, a withheld week from its month minus
the other weeks. In exact mode every such value is recovered; with the cell key method each row has its own
noise, so none is recovered with certainty (tests/helpers/attacks.py's strongest attacker, here on sums)."""

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
        if course is None:
            continue  # the site's row: the next attack's
        days.setdefault(course.rsplit("/", 1)[1], {})[day] = statements
    store = project.open_store()
    try:
        weeks = {row[3].rsplit("/", 1)[1]: row[5] for row in store.period_serving_rows("week") if row[3]}
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


def feasible(rest, shown):
    """Every value of the withheld count consistent with `rest` (the linked row minus the `shown` ones), when
    each published count is within D of its truth."""
    spread = D * (len(shown) + 1)
    return [value for value in range(rest - spread, rest + spread + 1) if value >= 0]


def judge(privacy, found, truth):
    """The attack's outcome: every value recovered in exact mode, none with certainty under the cell key method."""
    exact = sum(guess == truth[trial] for trial, (guess, _) in found.items())
    if privacy == 'method = "none"':
        assert exact == len(truth)  # what the README's threat model says exact mode exposes
    else:
        assert all(truth[trial] in values and len(values) > 1 for trial, (_, values) in found.items())
        assert exact <= len(truth) // 2, exact


@pytest.mark.parametrize("privacy", ['method = "none"', 'method = "cell-key"'])
def test_a_withheld_course_from_the_site_minus_the_other_courses(project, privacy):
    """On each of 24 days five courses of 12 learners are published and SMALL, with 3, is withheld; the site's
    row holds every statement of the day."""
    project.configure(privacy=privacy)
    rng, written, small = random.Random(11), [], {}
    for offset in range(COURSES):
        day = f"2026-10-{1 + offset:02d}"
        for course in ("C0", "C1", "C2", "C3", "C4", "SMALL"):
            for learner in range(3 if course == "SMALL" else 12):
                for _ in range(rng.randrange(1, 5)):
                    written.append(statement(learner=f"{course}-{learner}", course=course,
                                             timestamp=f"{day}T10:00:00Z", stored="2026-10-26T01:00:00Z"))
                    if course == "SMALL":
                        small[day] = small.get(day, 0) + 1
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-02T04:15:00Z", check=0)
    site, courses = {}, {}
    for day, course, _, statements, *_ in project.serving(site=True):
        if course is None:
            site[day] = statements
        else:
            courses.setdefault(day, {})[course.rsplit("/", 1)[1]] = statements
    assert sorted(site) == sorted(small) and all(value is not None for value in site.values())
    found = {}
    for day, total in site.items():
        shown = [value for course, value in courses[day].items() if course != "SMALL"]
        assert len(shown) == 5 and None not in shown and courses[day].get("SMALL") is None
        found[day] = (total - sum(shown), feasible(total - sum(shown), shown))
    judge(privacy, found, small)


@pytest.mark.parametrize("privacy", ['method = "none"', 'method = "cell-key"'])
def test_a_withheld_week_from_its_month_minus_the_other_weeks(project, privacy):
    """February 2021 is ISO weeks 5 to 8 exactly. In each of 24 courses, 12 learners in every week but week 6,
    which has 3: the month is the sum of its weeks' statements."""
    project.configure(privacy=privacy)
    rng, written, withheld = random.Random(13), [], {}
    for number in range(COURSES):
        course = f"C{number}"
        for week in range(4):
            day = f"2021-02-{3 + 7 * week:02d}"  # a Wednesday
            for learner in range(3 if week == 1 else 12):
                for _ in range(rng.randrange(1, 5)):
                    written.append(statement(learner=f"l{learner}", course=course, timestamp=f"{day}T10:00:00Z",
                                             stored="2021-03-02T01:00:00Z"))
                    if week == 1:
                        withheld[course] = withheld.get(course, 0) + 1
    project.write("a.ndjson", written)
    project.invoke("run", now="2021-03-10T04:15:00Z", check=0)
    store = project.open_store()
    try:
        weeks, months = store.period_serving_rows("week"), store.period_serving_rows("month")
    finally:
        store.close()
    by_course = {}
    for period, _, _, course, _, statements, *_ in weeks:
        if course is not None:  # the site's rows are the previous attack's
            by_course.setdefault(course.rsplit("/", 1)[1], {})[period] = statements
    found = {}
    for period, _, _, course, _, statements, *_ in months:
        if course is None:
            continue
        assert period == "2021-02" and statements is not None
        course = course.rsplit("/", 1)[1]
        shown = [value for week, value in by_course[course].items() if week != "2021-W06"]
        assert len(shown) == 3 and None not in shown and by_course[course]["2021-W06"] is None
        found[course] = (statements - sum(shown), feasible(statements - sum(shown), shown))
    assert sorted(found) == sorted(withheld)
    judge(privacy, found, withheld)
