"""A quarantined record read again is counted once (issue 20, re-deliveries): Moodle's id lookback re-reads the last
ids, and a changed export file is read again whole, so the same malformed record comes back run after run. Only the
first successful run that quarantines it counts it (toward max_quarantine_share and the run log's `quarantined`);
a failed run's kept evidence is adopted by that run. Otherwise one bad line in a quiet source would fail every
later run, `--accept-bad-input` or not (README, "Bad input")."""

import datetime as dt
import json

from helpers.statements import statement

NOW = dt.datetime(2026, 11, 3, 3, 15, tzinfo=dt.UTC)
COURSE = "https://lms.example.edu/course/BIO101"


def text(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def good(first, count, stored):
    return [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z", stored=stored) for i in
            range(first, first + count)]


def test_a_bad_line_of_a_growing_export_file_is_counted_by_the_first_run_only(project):
    path = project.write("a.ndjson", good(0, 100, "2026-11-02T11:00:00Z"))
    with open(path, "a") as handle:
        handle.write("{not json\n")  # no cursor: quarantined whenever the file is read
    project.invoke("run", now=text(NOW), check=0)  # 1 of 101: within the default 1%
    assert project.query("SELECT statements_read, quarantined FROM runs") == [(101, 1)]
    for night in (1, 2):  # the file grows by two statements a night and is read again whole
        with open(path, "a") as handle:
            for line in good(100 + 2 * night, 2, text(NOW + dt.timedelta(days=night, hours=-1))):
                handle.write(json.dumps(line) + "\n")
        result = project.invoke("run", now=text(NOW + dt.timedelta(days=night)))
        assert result.returncode == 0, result.stderr
        assert project.query("SELECT quarantined FROM runs ORDER BY started_at DESC LIMIT 1") == [(0,)]
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(1,)]
    assert [row[:4] for row in project.serving() if row[2]] == [("2026-11-02", COURSE, 104, 104)]


def test_a_failed_runs_evidence_is_counted_by_the_accepting_run_and_then_never_again(project):
    path = project.write("a.ndjson", good(0, 3, "2026-11-02T11:00:00Z"))
    with open(path, "a") as handle:
        handle.write("{not json\n")
    failed = project.invoke("run", now=text(NOW))
    assert failed.returncode == 65 and "1 of 4 records in the window were malformed" in failed.stderr, failed.stderr
    project.invoke("run", "--accept-bad-input", now=text(NOW), check=0)
    assert project.query("SELECT outcome, quarantined FROM runs ORDER BY started_at") == [("failed", 1), ("success", 1)]
    with open(path, "a") as handle:  # changed: read again whole, the bad line with it
        handle.write(json.dumps(good(3, 1, text(NOW + dt.timedelta(hours=20)))[0]) + "\n")
    result = project.invoke("run", now=text(NOW + dt.timedelta(days=1)))
    assert result.returncode == 0, result.stderr
    assert project.query("SELECT outcome, quarantined FROM runs ORDER BY started_at DESC LIMIT 1") == [
        ("success", 0)]


def test_a_bad_moodle_row_within_the_id_lookback_is_counted_once(tmp_path, moodle, moodle_reader):
    from helpers.moodledb import load_two_days, moodle_project

    load_two_days(moodle)  # ids 1..17, on 2026-11-23 and 24
    moodle.log("viewed", 106, 7, "2999-12-31T23:59:59+00:00")  # id 18: quarantined (in the future)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, id_lookback=50)
    project.configure(extra_top="min_cell_size = 2\nmax_quarantine_share = 0.2")
    project.invoke("run", now="2026-11-25T04:15:00+00:00", check=0)
    assert project.query("SELECT quarantined FROM runs") == [(1,)]
    moodle.log("viewed", 101, 7, "2026-11-25T10:00:00+00:00")  # one new row; the lookback re-reads ids 1..18
    # Read again with the 17 others and 1 new row; counted again, 1 of 19 would be past a 5% share.
    project.configure(extra_top="min_cell_size = 2\nmax_quarantine_share = 0.05")
    result = project.invoke("run", now="2026-11-26T04:15:00+00:00")
    assert result.returncode == 0, result.stderr
    assert project.query("SELECT quarantined FROM runs ORDER BY started_at DESC LIMIT 1") == [(0,)]
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(1,)]
