"""A `stored` later than the run's time (issue 20, class 1): within the 2 days allowed for clock skew it waits for
the run whose window reaches it; beyond them it is quarantined, once, with one sentence — from NDJSON files, from
an LRS that filters on `stored` (which never sends it with a window) and from one that filters on `timestamp`
(Ralph, which does). Moodle's `stored` is its `timecreated` (tested here too). README, "Times at the edge"."""

import datetime as dt
import uuid

from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.statements import statement
from lms_refresh import instants

NOW = dt.datetime(2026, 11, 3, 3, 15, tzinfo=dt.UTC)  # every run here, but the last, is at this time
LIMIT = instants.to_cursor(NOW + dt.timedelta(days=2))
COURSE = "https://lms.example.edu/course/BIO101"
FEW = settings(max_examples=6, derandomize=True, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def reason(cursor, limit=LIMIT):
    return (f"stored {cursor} lies in the future (after {limit}, 2 days past this run's time): the clock of the "
            "LRS or exporter that stored it was wrong")


def text(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Ahead of the run's time by anything from a second to the end of the range, in the forms a `stored` is written.
ahead = st.one_of(st.timedeltas(min_value=dt.timedelta(seconds=1), max_value=dt.timedelta(days=5)),
                  st.timedeltas(min_value=dt.timedelta(days=5), max_value=instants.END - NOW - dt.timedelta(days=1)))
forms = st.sampled_from([lambda m: m.isoformat().replace("+00:00", "Z"), lambda m: m.isoformat(),
                         lambda m: m.astimezone(dt.timezone(dt.timedelta(hours=-5))).isoformat(), text])


@FEW
@given(st.lists(st.tuples(ahead, forms), min_size=1, max_size=4))
def test_a_stored_beyond_the_tolerance_is_quarantined_once_and_never_counted(tmp_path_factory, make_project, aheads):
    project = make_project(tmp_path_factory.mktemp("ahead") / uuid.uuid4().hex[:8])
    project.configure(extra_top="max_quarantine_share = 0.5", lookback='"2d"')
    good = [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z", stored="2026-11-02T11:00:00Z")
            for i in range(12)]
    moments = [(NOW + delta).replace(microsecond=0) for delta, _ in aheads]
    late = [statement(learner=f"late{i}", timestamp="2026-11-02T10:00:00Z", stored=form(moment))
            for i, (moment, (_, form)) in enumerate(zip(moments, aheads, strict=True))]
    path = project.write("a.ndjson", good + late)
    beyond = [(f"{path}:{13 + i}", reason(text(m))) for i, m in enumerate(moments) if m > NOW + dt.timedelta(days=2)]

    project.invoke("run", now=text(NOW), check=0)
    assert sorted(project.query("SELECT origin, reason FROM quarantine")) == sorted(beyond)
    assert project.runs()[-1][:3] == ("run", "success", 0)
    assert project.query("SELECT quarantined FROM runs") == [(len(beyond),)]

    # The file is read again (the lookback, a line still within the tolerance): nothing counts twice.
    project.invoke("run", now=text(NOW + dt.timedelta(hours=1)), check=0)
    assert project.query("SELECT quarantined FROM runs ORDER BY started_at")[-1] == (0,)

    # Five days on, the window holds every line that was ahead by less: those within the tolerance count then,
    # on their own day; those quarantined stay so (a quarantine is final), with no new record.
    project.invoke("run", now=text(NOW + dt.timedelta(days=5, hours=2)), check=0)
    counted = 12 + sum(1 for m in moments if m <= NOW + dt.timedelta(days=2))
    assert [row[:4] for row in project.serving() if row[2]] == [("2026-11-02", COURSE, counted, counted)]
    assert sorted(project.query("SELECT origin, reason FROM quarantine")) == sorted(beyond)
    assert project.query("SELECT SUM(quarantined) FROM runs") == [(len(beyond),)]


def test_a_stored_within_the_tolerance_waits_for_its_window_and_is_not_quarantined(project):
    """Clock skew: an exporter a day ahead. Its line is in no window yet, then in the next run's."""
    project.configure(lookback='"0s"')
    stored = text(NOW + dt.timedelta(days=1))
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z", stored=stored)
                               for i in range(12)])
    project.invoke("run", now=text(NOW), check=0)
    assert project.serving() == [] or all(row[2] == 0 for row in project.serving())
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]
    project.invoke("run", now=text(NOW + dt.timedelta(days=1, seconds=1)), check=0)
    assert [row[:4] for row in project.serving() if row[2]] == [("2026-11-02", COURSE, 12, 12)]


def test_one_line_stored_in_the_future_alone_in_a_quiet_run_fails_until_it_is_accepted_once(project):
    """It is bad input like any malformed record: past max_quarantine_share the run fails (65), saying why and how to
    accept it; every later quiet run fails the same way (the watermark stays) until one run accepts it, deliberately
    and logged; after that the scheduled runs read only what is new."""
    project.write("a.ndjson", [statement(timestamp="2026-11-02T10:00:00Z", stored="2999-12-31T23:59:59Z")])
    for later in (0, 1):  # a quiet night, and the next one: the same record, the same refusal
        result = project.invoke("run", now=text(NOW + dt.timedelta(days=later)))
        assert result.returncode == 65, result.stderr
        assert ("1 of 1 records in the window were malformed (100.0%, more than max_quarantine_share = 1.0%); "
                "nothing was committed. See the quarantine table (lms-refresh status) and fix the source, or accept "
                "these records once: lms-refresh run --accept-bad-input") in result.stderr
    assert project.query("SELECT COUNT(*) FROM runs WHERE outcome = 'success'") == [(0,)]
    accepted = project.invoke("run", "--accept-bad-input", now=text(NOW + dt.timedelta(days=2)))
    assert accepted.returncode == 0, accepted.stderr
    assert ("Bad input accepted deliberately (--accept-bad-input): 1 of 1 records in the window were malformed "
            "(100.0%, more than max_quarantine_share = 1.0%); the records stay in the quarantine.") in accepted.stderr
    assert project.query("SELECT outcome, quarantined, message FROM runs ORDER BY started_at DESC LIMIT 1") == [
        ("success", 1, "bad input accepted deliberately (--accept-bad-input): 1 of 1 records in the window were "
                       "malformed (100.0%, more than max_quarantine_share = 1.0%)")]
    # Kept once, as the first refusal recorded it (a failed run's records are kept as evidence).
    assert project.query("SELECT reason FROM quarantine") == [(reason("2999-12-31T23:59:59.000000Z"),)]
    # The next scheduled run, without the option: the record is settled, the new statements count.
    project.write("b.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-05T10:00:00Z",
                                         stored="2026-11-05T11:00:00Z") for i in range(12)])
    result = project.invoke("run", now=text(NOW + dt.timedelta(days=3)))
    assert result.returncode == 0, result.stderr
    assert project.query("SELECT statements_read, quarantined, message FROM runs ORDER BY started_at DESC LIMIT 1"
                         ) == [(12, 0, "")]
    assert [row[:4] for row in project.serving() if row[2]] == [("2026-11-05", COURSE, 12, 12)]


def test_accepting_bad_input_is_refused_for_nothing_and_changes_no_run_within_the_share(project):
    """The option accepts only what is past the share: a run within it commits as always, its row says nothing of it."""
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(12)])
    result = project.invoke("run", "--accept-bad-input", now=text(NOW))
    assert result.returncode == 0, result.stderr
    assert "accepted deliberately" not in result.stderr
    assert project.query("SELECT outcome, message FROM runs") == [("success", "")]


# -- an LRS ----------------------------------------------------------------------------------------------------

def post_then_mark(ralph, statements):
    from helpers.lrs_sample import post_then_mark

    return post_then_mark(ralph, statements)


def _lrs(tmp_path, ralph, name):
    from helpers.lrs_sample import lrs_project

    project = lrs_project(tmp_path / name, ralph)
    project.configure(extra_top="max_quarantine_share = 0.5")
    return project


def test_an_lrs_filtering_on_stored_has_its_future_statements_asked_for_and_quarantined_once(tmp_path, ralph):
    """A spec-conforming LRS sends no statement stored after a window's end: the run asks for those stored after its
    future limit (the request after the window's pages), and the next run asks only after the newest quarantined."""
    now = dt.datetime.now(dt.UTC)
    good = [statement(learner=f"u{i}", timestamp=text(now - dt.timedelta(hours=2))) for i in range(12)]
    now = post_then_mark(ralph, good)  # after Ralph stored them
    project = _lrs(tmp_path, ralph, "spec")
    far = dict(statement(learner="far", timestamp=text(now - dt.timedelta(hours=2))), stored="2999-06-01T00:00:00Z")
    limit = instants.to_cursor(now + dt.timedelta(days=2))
    # GET 1: the consistent-through probe; GET 2: the window's one page; GET 3: the statements after the limit.
    ralph.inject(200, first=3, last=3, body={"statements": [far], "more": ""})
    project.invoke("run", now=text(now), check=0)
    assert project.query("SELECT origin, reason FROM quarantine") == [
        (f"{ralph.endpoint}statements id {far['id']}", reason("2999-06-01T00:00:00.000000Z", limit))]
    assert project.query("SELECT statements_read, quarantined FROM runs") == [(13, 1)]
    # The next run: the same LRS answers the same statement again; it is not counted again.
    ralph.inject(200, first=3, last=3, body={"statements": [far], "more": ""})
    project.invoke("run", now=text(now + dt.timedelta(seconds=1)), check=0)
    assert project.query("SELECT quarantined FROM runs ORDER BY started_at")[-1] == (0,)
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(1,)]
    ralph.heal()


def test_an_lrs_ignoring_since_and_until_sends_one_twice_in_a_run_and_it_is_counted_once(tmp_path, ralph):
    """The window's page and the request after the future limit both answer every statement: the one stored in the
    future was quarantined by the window's page, then again by the future request, two toward max_quarantine_share
    for one record (the review: 2 of 102, exit 65, where 1 of 101 is under the default 1%)."""
    now = dt.datetime.now(dt.UTC)
    good = [statement(learner=f"u{i}", timestamp=text(now - dt.timedelta(hours=2))) for i in range(12)]
    now = post_then_mark(ralph, good)
    project = _lrs(tmp_path, ralph, "deaf")
    far = dict(statement(learner="far", timestamp=text(now - dt.timedelta(hours=2))), stored="2999-06-01T00:00:00Z")
    answer = [dict(s, stored=text(now - dt.timedelta(hours=1))) for s in good] + [far]
    ralph.inject(200, first=2, last=3, body={"statements": answer, "more": ""})  # the window's page, then the future's
    project.invoke("run", now=text(now), check=0)
    assert project.query("SELECT statements_read, quarantined FROM runs") == [(13, 1)]
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(1,)]
    ralph.heal()


def test_an_lrs_filtering_on_timestamp_sends_them_with_the_window_and_they_are_quarantined_once(tmp_path, ralph):
    """Ralph stores at its own clock's time and filters on `timestamp`: to a run whose clock is 3 days behind
    Ralph's (the LRS's clock is ahead), everything new is stored in the future and comes with the window. All
    of the window malformed: 65, the reason in the quarantine; accepted (max_quarantine_share = 1), once."""
    now = dt.datetime.now(dt.UTC)
    statements = [statement(learner=f"u{i}", timestamp=text(now - dt.timedelta(days=3, hours=2))) for i in range(12)]
    ralph.post(statements)
    project = _lrs(tmp_path, ralph, "ralph")
    behind = now - dt.timedelta(days=3)
    limit = instants.to_cursor(behind + dt.timedelta(days=2))
    failed = project.invoke("run", now=text(behind))
    assert failed.returncode == 65 and "12 of 12 records in the window were malformed" in failed.stderr, failed.stderr
    reasons = [row[0] for row in project.query("SELECT reason FROM quarantine")]
    assert len(reasons) == 12 and all(r.startswith("stored ") and r.endswith(reason("", limit)[7:]) for r in reasons)
    project.configure(extra_top="max_quarantine_share = 1.0")
    project.invoke("run", now=text(behind), check=0)
    assert project.serving() == [] or all(row[2] == 0 for row in project.serving())
    assert project.query("SELECT quarantined FROM runs ORDER BY started_at")[-1] == (12,)
    project.invoke("run", now=text(behind + dt.timedelta(seconds=1)), check=0)
    assert project.query("SELECT quarantined FROM runs ORDER BY started_at")[-1] == (0,)
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(12,)]


# -- Moodle: `timecreated` is its `stored` ------------------------------------------------------------------------

def test_a_moodle_row_created_in_the_future_is_quarantined_with_its_sentence(tmp_path, moodle, moodle_reader):
    from helpers.moodledb import load_two_days, moodle_project

    load_two_days(moodle)  # ids 1..17, on 2026-11-23 and 24
    moodle.log("viewed", 106, 7, "2026-11-27T04:16:00+00:00")  # id 18: 2 days and a minute after the run
    moodle.log("viewed", 106, 7, "2999-12-31T23:59:59+00:00")  # id 19
    moodle.log("viewed", 106, 7, "2026-11-26T04:00:00+00:00")  # id 20: a day ahead, within the tolerance
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, id_lookback=0)
    project.configure(extra_top="min_cell_size = 2\nmax_quarantine_share = 0.2")
    project.invoke("run", now="2026-11-25T04:15:00+00:00", check=0)
    assert sorted(project.query("SELECT reason FROM quarantine")) == [
        (f"timecreated {unix} ({cursor}) lies in the future, more than 2 days after this run's time: the Moodle "
         "server's clock was wrong",) for unix, cursor in sorted([
             (int(dt.datetime(2026, 11, 27, 4, 16, tzinfo=dt.UTC).timestamp()), "2026-11-27T04:16:00.000000Z"),
             (int(dt.datetime(2999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()),
              "2999-12-31T23:59:59.000000Z")])]
    assert project.query("SELECT quarantined FROM runs") == [(2,)]
    assert project.query("SELECT COUNT(*) FROM staged_events WHERE day = '2026-11-26'") == [(1,)]  # on its day
