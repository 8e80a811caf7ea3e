"""Review (branch review-a): `forget` of a learner whose staged events retention already dropped, but whose
presence on a closed day still counts in a week, month and term with days open."""

from helpers.statements import HOME, statement

TERM = '[[terms]]\nname = "Autumn"\nfirst_day = 2026-09-14\nlast_day = 2026-12-18\n'


def _configure(project, retention):
    project.configure(extra_top="min_cell_size = 1\n" + (f"[retention]\nstaging_days = {retention}\n" if retention
                                                          else "") + TERM)


def _site(project, grain, period):
    return [row[4] for row in project.grain_rows(grain, site=True) if row[0] == period and row[3] is None]


def test_forget_counts_again_the_open_periods_that_held_the_learner_on_a_closed_day(project):
    stored = "2026-11-19T10:00:00Z"
    statements = [statement(learner=learner, timestamp=f"2026-10-{day}T10:00:00Z", stored=stored)
                  for learner in ("a", "b") for day in (20, 23)]
    statements.append(statement(learner="x", timestamp="2026-10-20T10:00:00Z", stored=stored))  # only on the 20th
    project.write("a.ndjson", statements)
    _configure(project, None)
    project.cli("run", now="2026-11-20T00:00:00Z", check=0)
    _configure(project, 30)  # the horizon becomes 2026-10-22: the 20th closes, its week, month and term stay open
    project.cli("run", now="2026-11-21T12:00:00Z", check=0)
    assert project.meta()["staging_horizon"] == "2026-10-22"
    assert _site(project, "week", "2026-W43") == [3] and _site(project, "month", "2026-10") == [3]

    forgot = project.cli("forget", "--account-homepage", HOME, "--account-name", "x", check=0)
    assert "deleted: 0 staged events, 0 quarantined records" in forgot.stdout  # only on the closed 20th
    assert "closed:      presence on 1 day before the staging horizon deleted; their weeks, months and terms " \
           "with a day still open counted again" in forgot.stdout

    # The closed day keeps its published row; the open periods no longer count the forgotten learner.
    assert [row[2] for row in project.serving(site=True) if row[0] == "2026-10-20" and row[1] is None] == [3]
    assert _site(project, "week", "2026-W43") == [2]
    assert _site(project, "month", "2026-10") == [2]
    assert _site(project, "term", "Autumn") == [2]


def test_forget_finds_a_learner_whose_only_trace_is_presence_on_closed_days(sqlite_project):
    """Every staged event aged out, nothing quarantined, but the learners' presence is kept for a month still open:
    forget must delete theirs (it returned early, saying nothing matched, and left their rows)."""
    project = sqlite_project
    project.configure(extra_top="min_cell_size = 2")
    project.config.write_text(project.config.read_text() + "[retention]\nstaging_days = 30\n")
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-12-02T10:00:00Z") for i in range(3)])
    project.invoke("run", now="2026-12-03T04:15:00Z", check=0)
    project.night_before("2027-01-05T04:15:00Z")
    project.invoke("run", now="2027-01-05T04:15:00Z", check=0)
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(0,)]
    assert project.query("SELECT COUNT(*) FROM learner_days") == [(3,)]  # kept while a period holding it is open
    result = project.invoke("forget", "--account-homepage", HOME, "--account-name", "u0", now="2027-01-05T05:00:00Z",
                            check=0)
    assert "closed:      presence on 1 day before the staging horizon deleted" in result.stdout
    assert "Nothing in the store matched" not in result.stderr
    assert project.query("SELECT COUNT(*) FROM learner_days") == [(2,)]


def test_a_count_left_with_no_learner_after_forget_is_withheld_not_published(project):
    """The only learner who failed in a week did so on a day now closed: forget takes their presence (the week's
    failed learners: 0) but not their events, which stay in the closed day's row and so in the week's sums. The
    week's `failed` was withheld (one learner) and must stay so: published, it was the forgotten learner's alone."""
    stored = "2026-11-19T10:00:00Z"
    statements = [statement(learner=learner, timestamp=f"2026-10-{day}T10:00:00Z", stored=stored)
                  for learner in ("a", "b", "c") for day in (20, 23)]
    statements += [statement(learner="x", verb="failed", timestamp=f"2026-10-20T1{hour}:00:00Z", stored=stored)
                   for hour in (0, 1)]
    project.write("a.ndjson", statements)
    project.configure(extra_top="min_cell_size = 3\n" + TERM)
    project.cli("run", now="2026-11-20T00:00:00Z", check=0)
    project.configure(extra_top="min_cell_size = 3\n[retention]\nstaging_days = 30\n" + TERM)
    project.cli("run", now="2026-11-21T12:00:00Z", check=0)
    assert project.meta()["staging_horizon"] == "2026-10-22"  # the 20th is closed, its week, month and term open

    def failed(grain, period):  # (active learners, failed, suppressed) of the course's and the site's rows
        return [(row[4], row[9], row[12]) for row in project.grain_rows(grain, site=True) if row[0] == period]

    for grain, period in (("week", "2026-W43"), ("month", "2026-10"), ("term", "Autumn")):
        assert failed(grain, period) == [(4, None, 1), (4, None, 1)], (grain, failed(grain, period))
    project.cli("forget", "--account-homepage", HOME, "--account-name", "x", check=0)
    for grain, period in (("week", "2026-W43"), ("month", "2026-10"), ("term", "Autumn")):
        assert failed(grain, period) == [(3, None, 1), (3, None, 1)], (grain, failed(grain, period))
