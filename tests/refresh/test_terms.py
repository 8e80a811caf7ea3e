"""Academic terms (issue 22, part 1): `[[terms]]` in the configuration, term_metrics against the independent
recount (tests/helpers/period_reference.py) on both stores — overlapping terms, a term across a month end, a
late statement, daily runs against one backfill, terms changed between runs — and the configuration's refusals."""

import datetime as dt
import json
import sqlite3

import pytest

from helpers.period_reference import expected_periods
from helpers.project import Project
from helpers.statements import statement
from lms_refresh.store import presence
from refresh.test_weeks_and_months import (
    K,
    activity,
    check_every_grain,
    configure,
    daily_runs_and_one_backfill,
    dashboard,
    moment,
    readme_query,
)

AUTUMN = ("Autumn 2026", "2026-09-14", "2026-10-11")  # crosses the end of September
BLOCK = ("Block week", "2026-10-05", "2026-10-09")  # inside Autumn: terms may overlap
WINTER = ("Winter 2026", "2026-10-19", "2026-11-06")
TERMS = (AUTUMN, BLOCK, WINTER)


def with_terms(project, terms, timezone="Europe/Paris"):
    """The project's configuration (tests/refresh/test_weeks_and_months.py's) with these [[terms]] tables."""
    configure(project, timezone=timezone)
    add_terms(project, terms)


def add_terms(project, terms):
    text = project.config.read_text().split("\n[[terms]]")[0].rstrip("\n") + "\n"
    for name, first, last in terms:
        text += f'\n[[terms]]\nname = {json.dumps(name)}\nfirst_day = {first}\nlast_day = "{last}"\n'
    project.config.write_text(text)


def test_terms_are_true_distinct_counts_of_their_days_overlapping_or_not(project):
    with_terms(project, TERMS)
    written = activity(5, dt.date(2026, 9, 10), 60)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-20T04:15:00Z", check=0)
    check_every_grain(project, written, "Europe/Paris", moment("2026-11-20T04:15:00Z"), TERMS)
    rows = project.grain_rows("term", site=True)
    assert [row[:4] for row in rows if row[3] is None] == [
        ("Autumn 2026", "2026-09-14", "2026-10-11", None), ("Block week", "2026-10-05", "2026-10-09", None),
        ("Winter 2026", "2026-10-19", "2026-11-06", None)]  # in calendar order, the site's first
    weeks = {row[0]: row[4] for row in project.grain_rows("week", site=True) if row[3] is None}
    autumn = next(row for row in rows if row[0] == "Autumn 2026" and row[3] is None)
    assert autumn[4] < sum(weeks[week] for week in ("2026-W38", "2026-W39", "2026-W40", "2026-W41"))


def test_a_late_statement_recomputes_its_terms_and_no_other(project):
    with_terms(project, TERMS)
    written = activity(6, dt.date(2026, 9, 14), 54)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-09T04:15:00Z", check=0)
    before = project.grain_rows("term", site=True)
    late = [statement(learner=f"late{n}", course="BIO101", verb="passed", timestamp="2026-10-06T09:00:00Z",
                      stored="2026-11-09T05:00:00Z") for n in range(2)]
    project.write("b.ndjson", late)
    project.invoke("run", now="2026-11-09T06:00:00Z", check=0)
    check_every_grain(project, written + late, "Europe/Paris", moment("2026-11-09T06:00:00Z"), TERMS)
    changed = {row[0] for row in set(project.grain_rows("term", site=True)) ^ set(before)}
    assert changed == {"Autumn 2026", "Block week"}  # both terms that hold 6 October, not Winter


def test_daily_runs_over_the_terms_equal_one_backfill(tmp_path, make_project):
    daily, once = make_project(tmp_path / "daily"), make_project(tmp_path / "once")
    with_terms(daily, TERMS)
    with_terms(once, TERMS)
    written = activity(7, dt.date(2026, 9, 14), 56, per_day=10)
    daily_runs_and_one_backfill(daily, once, written, dt.date(2026, 9, 14), 57)
    assert daily.grain_rows("term", site=True) == once.grain_rows("term", site=True) != []
    check_every_grain(once, written, "Europe/Paris", moment("2026-11-09T04:15:00Z"), TERMS)


def test_changed_terms_are_counted_again_and_removed_ones_leave_the_publication(project):
    configure(project)
    written = activity(8, dt.date(2026, 9, 14), 56)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-09T04:15:00Z", check=0)
    assert project.grain_rows("term") == []  # no terms configured
    add_terms(project, (AUTUMN, BLOCK))  # added after the days were counted: counted from what the store keeps
    project.invoke("run", now="2026-11-09T05:15:00Z", check=0)
    check_every_grain(project, written, "Europe/Paris", moment("2026-11-09T05:15:00Z"), (AUTUMN, BLOCK))
    moved = ("Block week", "2026-10-12", "2026-10-16")
    add_terms(project, (moved, WINTER))  # Autumn removed, Block week moved, Winter new
    project.invoke("run", now="2026-11-09T06:15:00Z", check=0)
    check_every_grain(project, written, "Europe/Paris", moment("2026-11-09T06:15:00Z"), (moved, WINTER))
    assert {row[0] for row in project.grain_rows("term")} == {"Block week", "Winter 2026"}


def test_the_readme_term_query_runs_as_written(project):
    with_terms(project, TERMS)
    written = activity(9, dt.date(2026, 9, 14), 40)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-02T04:15:00Z", check=0)
    rows = dashboard(project, readme_query("Completions, passes and fails per course in each term"))
    expected = [(row[0], row[3], row[7], row[8], row[9]) for row in
                expected_periods(written, "Europe/Paris", K, "term", moment("2026-11-02T04:15:00Z"), TERMS)
                if row[3] is not None and row[4] is not None]
    assert rows == expected and {row[0] for row in rows} == {"Autumn 2026", "Block week", "Winter 2026"}


BAD_TERMS = [
    ('[[terms]]\nname = "Autumn"\nfirst_day = 2026-09-14\nlast_day = 2026-09-01\n',
     "term 1 ('Autumn'): key 'terms.last_day' (2026-09-01) is before its first_day (2026-09-14)."),
    ('[[terms]]\nname = "A"\nfirst_day = 2026-09-14\nlast_day = 2026-12-01\n'
     '[[terms]]\nname = "A"\nfirst_day = 2027-01-04\nlast_day = 2027-03-01\n',
     "term 2 ('A'): key 'terms.name' is the name of term 1 too; each term needs a name of its own."),
    # Two names a reader cannot tell apart: letter case, and the two Unicode spellings of one letter.
    ('[[terms]]\nname = "Spring"\nfirst_day = 2026-09-14\nlast_day = 2026-12-01\n'
     '[[terms]]\nname = "SPRING"\nfirst_day = 2027-01-04\nlast_day = 2027-03-01\n',
     "term 2 ('SPRING'): key 'terms.name' is the name of term 1 too ('Spring', as a reader sees it); each term "
     "needs a name of its own."),
    ('[[terms]]\nname = "Fall 2026"\nfirst_day = 2026-09-14\nlast_day = 2026-12-01\n'
     '[[terms]]\nname = "Fall  2026\ufe0f "\nfirst_day = 2027-01-04\nlast_day = 2027-03-01\n',
     "term 2 ('Fall  2026\ufe0f '): key 'terms.name' is the name of term 1 too ('Fall 2026', as a reader sees it);"
     " each term needs a name of its own."),
    ('[[terms]]\nname = "Fall 2026"\nfirst_day = 2026-09-14\nlast_day = 2026-12-01\n'
     '[[terms]]\nname = "Fall\u31642026"\nfirst_day = 2027-01-04\nlast_day = 2027-03-01\n',
     "term 2 ('Fall\u31642026'): key 'terms.name' is the name of term 1 too"),
    ('[[terms]]\nname = "\u00c9t\u00e9"\nfirst_day = 2026-06-01\nlast_day = 2026-08-01\n'
     '[[terms]]\nname = "E\u0301te\u0301"\nfirst_day = 2027-06-01\nlast_day = 2027-08-01\n',
     "term 2 ('E\u0301te\u0301'): key 'terms.name' is the name of term 1 too ('\u00c9t\u00e9', as a reader sees it);"
     " each term needs a name of its own."),
    ('[[terms]]\nname = "Spring"\nfirst_day = 2027-02-30\nlast_day = 2027-05-01\n',
     "is not valid TOML: Invalid date or datetime"),  # TOML's own refusal, with the line
    ('[[terms]]\nname = "Spring"\nfirst_day = "2027-02-30"\nlast_day = 2027-05-01\n',
     "term 1 ('Spring'): key 'terms.first_day' is no such day: '2027-02-30'."),
    ('[[terms]]\nname = "Spring"\nfirst_day = 2027-01-04T08:00:00\nlast_day = 2027-05-01\n',
     "term 1 ('Spring'): key 'terms.first_day' must be a date without a time, not 2027-01-04T08:00:00."),
    ('[[terms]]\nname = "Spring"\nfirst = 2027-01-04\nlast_day = 2027-05-01\n',
     "term 1 ('Spring'): unknown key 'terms.first' (known in [[terms]]: first_day, last_day, name)."),
    ('[[terms]]\nfirst_day = 2027-01-04\nlast_day = 2027-05-01\n', "term 1: key 'terms.name' is required."),
    ('[[terms]]\nname = "Two years"\nfirst_day = 2026-09-01\nlast_day = 2028-09-01\n',
     "term 1 ('Two years'): 732 days from first_day to last_day, more than 731."),
    ('[[terms]]\nname = "Evil\\u202e"\nfirst_day = 2026-09-01\nlast_day = 2026-12-01\n',
     "term 1 ('Evil\\u202e'): key 'terms.name' must not contain control or format characters."),
    ('[[terms]]\nname = "   "\nfirst_day = 2026-09-01\nlast_day = 2026-12-01\n',
     "term 1 ('   '): key 'terms.name' must not be blank."),
    (f'[[terms]]\nname = "{"x" * 101}"\nfirst_day = 2026-09-01\nlast_day = 2026-12-01\n',
     f"term 1 ('{'x' * 100}'): key 'terms.name' must be at most 100 characters, not 101."),
    ('terms = "Autumn"\n', "'terms' must be an array of tables, one [[terms]] header per term."),
    # Names a reader sees as nothing (a Hangul filler, marks alone) or as whatever the font draws (private use).
    ('[[terms]]\nname = "\u3164"\nfirst_day = 2026-09-01\nlast_day = 2026-12-01\n',
     "term 1 ('\u3164'): key 'terms.name' must show as something: it is only marks or characters shown as nothing."),
    ('[[terms]]\nname = "\u2800\u2800"\nfirst_day = 2026-09-01\nlast_day = 2026-12-01\n',
     "term 1 ('\u2800\u2800'): key 'terms.name' must show as something: it is only marks or characters shown as "
     "nothing."),
    ('[[terms]]\nname = "\u0301\u0302"\nfirst_day = 2026-09-01\nlast_day = 2026-12-01\n',
     "term 1 ('\u0301\u0302'): key 'terms.name' must show as something: it is only marks or characters shown as "
     "nothing."),
    ('[[terms]]\nname = "Term \ue000"\nfirst_day = 2026-09-01\nlast_day = 2026-12-01\n',
     "term 1 ('Term \\ue000'): key 'terms.name' must not contain private-use or unassigned characters."),
]


@pytest.mark.parametrize("text, message", BAD_TERMS)
def test_check_and_run_refuse_a_bad_term_and_name_it(sqlite_project, text, message):
    configure(sqlite_project)
    config = sqlite_project.config.read_text()
    if text.startswith("terms ="):  # a top-level key: before the first table
        sqlite_project.config.write_text(text + config)
    else:
        sqlite_project.config.write_text(config + text)
    for command in ("check", "run"):
        result = sqlite_project.invoke(command, now="2026-11-09T04:15:00Z", check=78)
        separator = " " if message.startswith("is not valid TOML") else ": "
        assert f"{sqlite_project.config}{separator}{message}" in result.stdout + result.stderr, (command, result.stderr)
    assert not sqlite_project.store.exists()  # refused before anything was opened


def test_a_term_that_begins_before_the_kept_presence_is_not_counted_and_says_so(sqlite_project):
    project = sqlite_project
    early = ("Early", "2026-09-14", "2026-09-18")  # counted whole by the first run, closed since
    with_terms(project, (early,))
    project.config.write_text(project.config.read_text().replace(
        "[retry]", "[retention]\nstaging_days = 400\n[retry]"))
    written = activity(10, dt.date(2026, 9, 14), 30)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-10-14T04:15:00Z", check=0)
    # 400 days later the staging horizon is 1 October 2026: the learners' presence is kept from the start of
    # the periods that hold it (the week from Monday 28 September), and no term held it then.
    project.night_before("2027-11-05T04:15:00Z")
    project.invoke("run", now="2027-11-05T04:15:00Z", check=0)
    assert project.meta()["presence_from"] == "2026-09-28"
    october = ("October", "2026-10-01", "2026-10-13")
    add_terms(project, (early, AUTUMN, october))  # Autumn, between the other two, begins before what is kept
    says = ("The term 'Autumn 2026' is not counted: it begins before the oldest day whose learners the store "
            "still keeps (retention.staging_days)")
    result = project.invoke("run", now="2027-11-05T05:15:00Z", check=0)
    assert says in result.stderr
    assert project.grain_rows("term", site=True) == expected_periods(
        written, "Europe/Paris", K, "term", moment("2027-11-05T05:15:00Z"), (early, october)) != []
    # Later runs, with days of Autumn still open rebuilt, neither count it from part of its presence nor publish it
    # (it was kept among the store's terms and counted from the rebuilt days on), and say so each time.
    late = [statement(learner=f"late{i}", course="BIO101", timestamp="2026-10-05T10:00:00Z",
                      stored="2027-11-05T20:00:00Z") for i in range(12)]
    project.write("b.ndjson", late)
    for now in ("2027-11-06T04:15:00Z", "2027-11-07T04:15:00Z"):
        result = project.invoke("run", now=now, check=0)
        assert says in result.stderr, now
        assert project.grain_rows("term", site=True) == expected_periods(
            written + late, "Europe/Paris", K, "term", moment(now), (early, october)), now
    assert json.loads(project.meta()["terms"]) == [list(early), list(october)]
    assert project.query("SELECT COUNT(*) FROM learner_periods WHERE period = 'Autumn 2026'") == [(0,)]

    # A store that counted such a term from part of its presence (it kept the term among its own) drops it.
    db = sqlite3.connect(project.store)
    db.execute("UPDATE meta SET value = ? WHERE key = 'terms'", (json.dumps([list(early), list(AUTUMN),
                                                                             list(october)]),))
    db.execute("INSERT INTO learner_periods SELECT 'term', 'Autumn 2026', course_id, actor, learner_key, days, "
               "attempt_days, completion_days, passed_days, failed_days, score_days, duration_days "
               "FROM learner_periods WHERE grain = 'term' AND period = 'October'")
    db.commit()
    db.close()
    result = project.invoke("run", now="2027-11-08T04:15:00Z", check=0)
    assert says in result.stderr
    assert project.grain_rows("term", site=True) == expected_periods(
        written + late, "Europe/Paris", K, "term", moment("2027-11-08T04:15:00Z"), (early, october))
    assert project.query("SELECT COUNT(*) FROM learner_periods WHERE period = 'Autumn 2026'") == [(0,)]


def test_a_rebuild_whose_staging_horizon_straddles_a_week_and_a_term_keeps_them_whole(project):
    """The horizon (1 September, a Tuesday) falls inside a week and a term: rebuilt, they still count the
    learners of the closed Monday, whose presence retention kept."""
    summer = ("Summer school", "2026-08-24", "2026-09-11")
    configure(project)
    text = project.config.read_text().replace("bootstrap_days = 400", "bootstrap_days = 90")
    project.config.write_text(text.replace("[retry]", "[retention]\nstaging_days = 90\n[retry]"))
    add_terms(project, (summer,))
    early = activity(11, dt.date(2026, 8, 24), 12)  # 24 August .. 4 September
    project.write("a.ndjson", early)
    project.invoke("run", now="2026-09-05T04:15:00Z", check=0)
    later = activity(12, dt.date(2026, 9, 5), 80)
    project.write("b.ndjson", later)
    project.night_before("2026-11-30T04:15:00Z")  # reads them; retention then counts from the night after
    project.invoke("run", now="2026-11-30T04:15:00Z", check=0)
    assert project.meta()["staging_horizon"] == "2026-09-01"
    assert project.meta()["presence_from"] == "2026-08-24"  # the term holds the horizon: kept from its start
    closed = moment("2026-11-30T04:15:00Z")
    before = {grain: project.grain_rows(grain, site=True) for grain in ("week", "month", "term")}
    check_every_grain(project, early + later, "Europe/Paris", closed, (summer,))
    project.invoke("rebuild", "--since", "2026-08-01", now="2026-11-30T05:15:00Z", check=0)
    after = {grain: project.grain_rows(grain, site=True) for grain in ("week", "month", "term")}
    assert after == before
    assert [row[:3] for row in after["week"] if row[3] is None][:2] == [
        ("2026-W35", "2026-08-24", "2026-08-30"), ("2026-W36", "2026-08-31", "2026-09-06")]


def test_a_term_edited_off_the_staging_horizon_is_counted_as_a_fresh_store_counts_it(tmp_path, make_project):
    """A term that held the staging horizon kept its days' presence; edited so that it no longer holds it, the run
    that counts it again must still find that presence (retention keeps it for the terms the store counted with
    until they are synced): its rows equal a store that had the edited term from the start, and the recount."""
    summer, edited = ("Summer school", "2026-08-24", "2026-09-11"), ("Summer school", "2026-08-24", "2026-08-31")
    early, later = activity(13, dt.date(2026, 8, 24), 12), activity(14, dt.date(2026, 9, 5), 80)
    stores = {}
    for name, term in (("edited", summer), ("fresh", edited)):
        project = stores[name] = make_project(tmp_path / name)
        configure(project)
        text = project.config.read_text().replace("bootstrap_days = 400", "bootstrap_days = 90")
        project.config.write_text(text.replace("[retry]", "[retention]\nstaging_days = 90\n[retry]"))
        add_terms(project, (term,))
        project.write("a.ndjson", early)
        project.invoke("run", now="2026-09-05T04:15:00Z", check=0)
        project.write("b.ndjson", later)
        project.night_before("2026-11-30T04:15:00Z")
        project.invoke("run", now="2026-11-30T04:15:00Z", check=0)
    assert stores["edited"].meta()["presence_from"] == "2026-08-24"  # the term holds the horizon, 1 September
    add_terms(stores["edited"], (edited,))  # now it ends before the horizon
    for project in stores.values():
        result = project.invoke("run", now="2026-11-30T05:15:00Z", check=0)
        assert "is not counted" not in result.stderr
    rows = stores["edited"].grain_rows("term", site=True)
    assert rows == stores["fresh"].grain_rows("term", site=True)
    assert rows == expected_periods(early + later, "Europe/Paris", K, "term", moment("2026-11-30T05:15:00Z"),
                                    (edited,)) != []
    # Once the store counts with the edited term, the presence it no longer needs goes.
    stores["edited"].invoke("run", now="2026-11-30T06:15:00Z", check=0)
    assert stores["edited"].meta()["presence_from"] == "2026-08-31"
    assert stores["edited"].grain_rows("term", site=True) == rows


def test_a_term_longer_than_a_packed_count_holds_is_counted_count_by_count(project):
    # A period's learners are grouped with their day counts packed, presence.PACKED_DAYS at most a count: a
    # learner active on more days of a term than that would carry into the next count (here, days with an
    # attempt). A longer term is summed count by count.
    days = presence.PACKED_DAYS + 9
    long_term = ("Two years", "2025-01-06", "2026-12-31")
    with_terms(project, [long_term])
    project.config.write_text(project.config.read_text().replace("bootstrap_days = 400", "bootstrap_days = 800"))
    first = dt.date(2025, 1, 6)
    written = [statement(learner=f"l{n}", course="BIO101", timestamp=f"{first + dt.timedelta(days=offset)}T10:00:00Z")
               for offset in range(days) for n in range(K)]
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-07-01T04:15:00Z", check=0)
    assert project.query("SELECT days, attempt_days FROM learner_periods WHERE grain = 'term'") == [(days, 0)] * K
    check_every_grain(project, written, "Europe/Paris", moment("2026-07-01T04:15:00Z"), [long_term])


def test_a_term_filled_from_its_months_counts_a_learner_who_passed_on_every_day_of_them(project):
    # A first run fills each term from the months (and weeks) it filled before it, their counts packed into one
    # integer: a month's count of 31 days in its field must not overflow what the database computes it in.
    term = ("Autumn 2026", "2026-09-01", "2026-10-31")
    with_terms(project, [term])
    written = [statement(learner=f"l{n}", course="BIO101", verb="passed", success=True, score=1.0,
                         duration="PT1M", timestamp=f"{dt.date(2026, 9, 1) + dt.timedelta(days=offset)}T10:00:00Z")
               for offset in range(61) for n in range(K)]
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-20T04:15:00Z", check=0)
    assert project.query("SELECT days, passed_days, failed_days, score_days, duration_days FROM learner_periods "
                         "WHERE grain = 'term'") == [(61, 61, 0, 61, 61)] * K
    check_every_grain(project, written, "Europe/Paris", moment("2026-11-20T04:15:00Z"), [term])


def test_terms_edited_before_a_run_with_nothing_to_read_take_effect_at_that_run(project):
    """A run with nothing to read (here the same instant; with Moodle's id_lookback = 0, every quiet night) left
    renamed and removed terms published: a settings change takes effect at the next run, whatever it reads."""
    with_terms(project, (AUTUMN, BLOCK))
    written = activity(9, dt.date(2026, 9, 14), 56)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-09T04:15:00Z", check=0)
    renamed = ("Autumn term 2026", AUTUMN[1], AUTUMN[2])
    add_terms(project, (renamed, WINTER))  # Autumn renamed, Block week removed, Winter new
    result = project.invoke("run", now="2026-11-09T04:15:00Z", check=0)
    assert "Nothing to do" in result.stderr
    check_every_grain(project, written, "Europe/Paris", moment("2026-11-09T04:15:00Z"), (renamed, WINTER))
    assert {row[0] for row in dashboard(project, "SELECT period FROM term_metrics")} == {
        "Autumn term 2026", "Winter 2026"}


def test_two_installations_with_other_terms_on_one_store_refuse_the_one_that_disagrees(tmp_path, postgres_server):
    """Two hosts sharing a PostgreSQL store with different [[terms]] made the terms appear and disappear on
    alternate nights. The terms are settings every host must share: the host whose configuration disagrees with
    the terms another host set is refused (78) with a sentence; a change made on a host applies, and then the
    other host is refused until it has the same terms."""
    first = Project(tmp_path / "first", postgres_server)
    second = Project(tmp_path / "second", postgres_server, first.database)
    for project in (first, second):
        with_terms(project, (AUTUMN, BLOCK))
    written = activity(10, dt.date(2026, 9, 14), 56)
    first.write("a.ndjson", written)
    second.write("a.ndjson", written)
    first.invoke("run", now="2026-11-09T04:15:00Z", check=0)
    second.state.mkdir()
    for key in first.state.glob("*.key"):  # every host sharing a store has its key
        (second.state / key.name).write_bytes(key.read_bytes())
        (second.state / key.name).chmod(0o600)
    second.invoke("run", now="2026-11-10T04:15:00Z", check=0)  # the same terms: fine
    add_terms(second, (AUTUMN, WINTER))  # edited on the second host: its change applies
    second.invoke("run", now="2026-11-10T05:15:00Z", check=0)
    assert {row[0] for row in second.grain_rows("term")} == {"Autumn 2026", "Winter 2026"}
    refused = first.invoke("run", now="2026-11-11T04:15:00Z")  # the first host still has the old terms
    assert refused.returncode == 78, refused.stderr
    assert "The store's [[terms]] were set by the lms-refresh on host " in refused.stderr
    assert (f"(state directory {second.state}), but {first.config} configures other terms; every host that "
            "shares a store must configure the same [[terms]]") in refused.stderr
    assert {row[0] for row in first.grain_rows("term")} == {"Autumn 2026", "Winter 2026"}  # nothing flipped
    add_terms(first, (AUTUMN, WINTER))
    first.invoke("run", now="2026-11-11T04:15:00Z", check=0)
    second.invoke("run", now="2026-11-12T04:15:00Z", check=0)
    check_every_grain(second, written, "Europe/Paris", moment("2026-11-12T04:15:00Z"), (AUTUMN, WINTER))


def test_a_rebuild_since_a_day_inside_a_period_keeps_the_days_before_it(project):
    """`rebuild --since DATE` inside a week, a month and two terms, with the source still holding everything,
    deleted every earlier day and published the periods that straddle DATE from their later days only, as whole
    (a term's statements 601 -> 169, complete = 1). Days before DATE stay as they are (re-read only if a
    statement stored from DATE on belongs to them) and every period is counted whole: every grain equals the
    recount of everything written."""
    with_terms(project, TERMS)
    written = activity(15, dt.date(2026, 9, 14), 56)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-09T04:15:00Z", check=0)
    days, before = project.serving(site=True), {grain: project.grain_rows(grain, site=True)
                                                 for grain in ("week", "month", "term")}
    result = project.invoke("rebuild", "--since", "2026-10-07", now="2026-11-09T05:15:00Z", check=0)
    assert "Rebuilding the store from 2026-10-07" in result.stderr, result.stderr
    check_every_grain(project, written, "Europe/Paris", moment("2026-11-09T05:15:00Z"), TERMS)
    assert {grain: project.grain_rows(grain, site=True) for grain in before} == before
    assert project.serving(site=True) == days


def test_a_rebuild_that_applies_a_changed_setting_is_refused_if_it_would_keep_days_derived_by_the_old(project):
    """Days kept from before DATE were derived with the store's settings: a rebuild that applies a changed one
    (here the time zone) must start the store over from its first day, or it would mix the two."""
    with_terms(project, TERMS)
    written = activity(16, dt.date(2026, 9, 14), 56)
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-09T04:15:00Z", check=0)
    with_terms(project, TERMS, timezone="America/New_York")
    refused = project.invoke("rebuild", "--since", "2026-10-07", now="2026-11-09T05:15:00Z")
    assert refused.returncode == 78, refused.stderr
    assert ("rebuild --since 2026-10-07 applies a changed setting (time zone Europe/Paris -> America/New_York) "
            "but would keep the store's days from 2026-09-14 to 2026-10-06, derived with the old one; rebuild "
            "--since 2026-09-14 (or earlier)") in refused.stderr
    project.invoke("rebuild", "--since", "2026-09-01", now="2026-11-09T05:15:00Z", check=0)
    check_every_grain(project, written, "America/New_York", moment("2026-11-09T05:15:00Z"), TERMS)


def test_a_rebuild_that_keeps_nothing_before_its_first_day_never_publishes_the_period_holding_it_as_whole(project):
    """A rebuild from inside a week, a month and two terms, of a store that holds nothing before (a lost store):
    those periods are counted from part of their days. The terms are not counted (with the warning), and the week
    and the month are published but never complete, then as at later runs; the weeks after are whole."""
    with_terms(project, TERMS)
    written = activity(17, dt.date(2026, 9, 14), 56)
    project.write("a.ndjson", written)
    result = project.invoke("rebuild", "--since", "2026-10-07", now="2026-11-09T04:15:00Z", check=0)
    assert "The term 'Autumn 2026' is not counted" in result.stderr and "The term 'Block week' is not counted" \
        in result.stderr
    for now in ("2026-11-09T04:15:00Z", "2026-12-10T04:15:00Z"):
        project.invoke("run", now=now, check=0)
        complete = {row[0]: row[13] for grain in ("week", "month") for row in project.grain_rows(grain, site=True)
                    if row[3] is None}
        assert complete["2026-W41"] == 0 and complete["2026-10"] == 0, complete  # from Wednesday 7 October on
        assert complete["2026-W42"] == 1 and complete["2026-W45"] == 1
        assert {row[0] for row in project.grain_rows("term", site=True)} == {"Winter 2026"}
    assert complete["2026-11"] == 1  # ended before 10 December, and counted whole
