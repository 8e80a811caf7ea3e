"""Two terms that overlap, under exact counts: the days one holds and the other does not are published as the
difference of their rows, exactly, though every one of those days is withheld (README, "Threat model"). In
each of 12 courses no day reaches min_cell_size and no daily row is published at all; the terms do, and the
autumn term minus its late start gives its first day's statements, attempts and completions. With the cell key
method each term's row has its own noise: a guess within 2D, never certain (tests/helpers/attacks.py)."""

import random

import pytest

from helpers.statements import statement

COURSES, D = 12, 3
TERMS = ('[[terms]]\nname = "Autumn"\nfirst_day = 2026-11-02\nlast_day = 2026-11-15\n'
         '[[terms]]\nname = "Autumn, late start"\nfirst_day = 2026-11-03\nlast_day = 2026-11-15\n')
COLUMNS = {"statements": 5, "attempts": 6, "completions": 7}  # their places in a period's serving row


def fortnight(seed):
    """Per course, 14 days of 4 learners each (never k = 10 a day, 56 distinct in the fortnight); the truth of the
    first day's counts."""
    rng, written, first_day = random.Random(seed), [], {}
    for number in range(COURSES):
        course = f"C{number}"
        truth = first_day[course] = dict.fromkeys(COLUMNS, 0)
        for offset in range(14):
            day = f"2026-11-{2 + offset:02d}"
            for learner in range(4):
                for _ in range(rng.randrange(1, 5)):
                    verb = rng.choice(("experienced", "attempted", "completed"))
                    written.append(statement(learner=f"d{offset}l{learner}", verb=verb, course=course,
                                             timestamp=f"{day}T10:00:00Z", stored="2026-11-16T01:00:00Z"))
                    if offset == 0:
                        truth["statements"] += 1
                        truth["attempts"] += verb == "attempted"
                        truth["completions"] += verb == "completed"
    return written, first_day


@pytest.mark.parametrize("privacy", ['method = "none"', 'method = "cell-key"'])
def test_two_overlapping_terms_give_the_day_between_them(project, privacy):
    project.configure(privacy=privacy)
    project.config.write_text(project.config.read_text() + TERMS)
    written, first_day = fortnight(3)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-20T04:15:00Z", check=0)
    assert [row for row in project.serving() if row[1] is not None and row[2] is not None] == []  # no day shown
    store = project.open_store()
    try:
        terms = store.period_serving_rows("term")
    finally:
        store.close()
    rows = {}
    for row in terms:
        if row[3] is not None:
            rows.setdefault(row[3].rsplit("/", 1)[1], {})[row[0]] = row
    assert sorted(rows) == sorted(first_day) and all(len(both) == 2 for both in rows.values())
    recovered = certain = 0
    for course, both in rows.items():
        guess = {column: both["Autumn"][place] - both["Autumn, late start"][place]
                 for column, place in COLUMNS.items()}
        recovered += guess == first_day[course]
        # Each term's count is within D of its truth: the difference within 2D of the day's.
        certain += all(len([value for value in range(guess[column] - 2 * D, guess[column] + 2 * D + 1)
                            if value >= 0]) == 1 for column in COLUMNS)
    if privacy == 'method = "none"':
        assert recovered == COURSES  # every course's withheld first day, exactly
    else:
        assert certain == 0 and recovered <= COURSES // 2, recovered


@pytest.mark.parametrize("privacy", ['method = "none"', 'method = "cell-key"'])
def test_check_warns_of_overlapping_terms_under_exact_counts(sqlite_project, privacy):
    project = sqlite_project
    project.configure(privacy=privacy)
    project.config.write_text(project.config.read_text() + TERMS
                              + '[[terms]]\nname = "Winter"\nfirst_day = 2027-01-04\nlast_day = 2027-03-26\n')
    result = project.invoke("check", now="2026-11-20T04:15:00Z")
    warned = ("note  privacy: warning: terms overlap: 'Autumn' and 'Autumn, late start' (1 day in only one: "
              "2026-11-02). With method = \"none\" each term's counts are exact, so the difference of two overlapping "
              "terms publishes "
              "the statements, attempts, completions, passes and fails of the days in only one of them exactly, even "
              "on days min_cell_size withholds; make terms that do not overlap, or use method = \"cell-key\" "
              "(/usr/share/doc/lms-refresh/docs/privacy.md)")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (warned in result.stdout) == (privacy == 'method = "none"'), result.stdout
    assert "Winter" not in result.stdout
