"""The Moodle source against a real PostgreSQL holding Moodle's own log table."""

from helpers.moodledb import EXPECTED_TWO_DAYS, SITE, course_iri, load_two_days, moodle_project
from helpers.ports import unused_port
from helpers.project import Project


def test_moodle_metrics_match_hand_computed_ones(tmp_path, moodle, moodle_reader, store_kind, request):
    postgres = request.getfixturevalue("postgres_server") if store_kind == "postgresql" else None
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, postgres)
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert project.serving() == EXPECTED_TWO_DAYS
    # The grade, 8 on an item graded 0 to 10, is staged as the scaled score 0.8.
    assert project.query("SELECT score_micro FROM staged_events WHERE score_micro IS NOT NULL") == [(800000,)]
    assert project.meta()["watermark"] == "18" and project.meta()["cursor_kind"] == "log-id"
    assert project.runs()[-1] == ("run", "success", 0, "1", "18")


def test_rows_written_after_their_time_and_late_commits_are_picked_up(tmp_path, moodle, moodle_reader):
    """The buffered writer inserts rows after their timecreated; a transaction may commit an older id late."""
    load_two_days(moodle)  # ids 1..17
    # A request's transaction takes id 18 but commits only after the next run has begun.
    assert moodle.server.admin("SELECT nextval('mdl_logstore_standard_log_id_seq')", moodle.name) == [(18,)]
    moodle.log("page", 205, 9, "2026-11-24T12:00:00+01:00")  # id 19
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, id_lookback=10)
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert project.meta()["watermark"] == "20"
    moodle.log("page", 204, 9, "2026-11-24T12:30:00+01:00", id=18)  # the late commit, below the watermark
    # Written on the 25th (id 20), but it happened on the 23rd: the 23rd is recomputed.
    moodle.log("viewed", 106, 7, "2026-11-23T18:00:00+01:00")
    project.invoke("run", now="2026-11-26T04:15:00+01:00", check=0)
    rows = {row[:2]: row for row in project.serving()}
    assert rows[("2026-11-23", course_iri(7))][2:4] == (4, 8)
    assert rows[("2026-11-24", course_iri(9))][2:4] == (5, 5)
    assert project.runs()[-1][3:] == ("10", "21")  # watermark 20 less the lookback of 10
    # Re-reading the lookback twice more changes nothing.
    dump = project.dump()
    project.invoke("run", now="2026-11-27T04:15:00+01:00", check=0)
    assert project.dump() == dump
    once = moodle_project(tmp_path / "once", moodle, moodle_reader)
    once.invoke("run", now="2026-11-27T04:15:00+01:00", check=0)
    assert once.dump() == dump


def test_backfill_reads_by_time_and_leaves_the_id_watermark(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.invoke("backfill", "--since", "2026-11-24", "--until", "2026-11-25", now="2026-11-25T04:15:00+01:00",
                check=0)
    assert project.serving() == EXPECTED_TWO_DAYS[1:] and "watermark" not in project.meta()
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    project.invoke("backfill", "--since", "2026-11-23", "--until", "2026-11-25", now="2026-11-25T04:16:00+01:00",
                check=0)
    assert project.serving() == EXPECTED_TWO_DAYS and project.meta()["watermark"] == "18"
    status = project.invoke("status", check=0).stdout
    assert "watermark:    18 (log-id)" in status


def test_bootstrap_starts_at_the_first_row_within_bootstrap_days(tmp_path, moodle, moodle_reader):
    moodle.log("viewed", 301, 7, "2026-09-01T10:00:00+02:00")
    moodle.log("viewed", 302, 7, "2026-09-01T10:00:00+02:00")
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)  # bootstrap_days = 30
    assert project.serving() == EXPECTED_TWO_DAYS
    assert project.runs()[-1][3:] == ("3", "20")


def test_moodle_failures_exit_with_their_codes_and_commit_nothing(tmp_path, moodle, moodle_reader, postgres_server):
    load_two_days(moodle)
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    with unused_port() as port:
        cases = [
            ({"password_file": str(wrong)}, 78, "refused the credentials"),
            ({"url": f"postgresql://moodle_reader@127.0.0.1:{port}/{moodle.name}"}, 69, "is unreachable"),
            ({"prefix": "mdl2_"}, 78, "has no table mdl2_logstore_standard_log; check source.prefix"),
        ]
        for number, (settings, code, message) in enumerate(cases):
            project = moodle_project(tmp_path / f"p{number}", moodle, moodle_reader, **settings)
            result = project.invoke("run", now="2026-11-25T04:15:00+01:00")
            assert result.returncode == code and message in result.stderr, (settings, result.stderr)
            assert "moodle-secret" not in result.stderr and "nope" not in result.stderr
            assert project.serving() == [] and "watermark" not in (project.meta() if project.has_store() else {})
            assert project.invoke("check").returncode == code


def test_check_reads_without_writing_and_warns_about_a_writable_role(tmp_path, moodle, moodle_reader,
                                                                      postgres_server):
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    out = project.invoke("check", check=0).stdout
    assert f"Moodle database postgresql://moodle_reader@127.0.0.1:{postgres_server.port}/{moodle.name}: " \
           "reachable, mdl_logstore_standard_log readable, newest log id 17" in out
    assert "may write" not in out and not project.has_store()
    postgres_server.admin("GRANT INSERT ON mdl_logstore_standard_log TO moodle_reader", moodle.name)
    assert "warning: source.url's user may write mdl_logstore_standard_log" in project.invoke("check", check=0).stdout
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)  # and the session itself stays read-only
    assert postgres_server.admin("SELECT COUNT(*) FROM mdl_logstore_standard_log", moodle.name) == [(17,)]


def test_a_store_follows_one_kind_of_cursor(tmp_path, moodle, moodle_reader):
    project = Project(tmp_path / "p")
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)  # an (empty) xAPI run: a time watermark
    project.source_settings = {"type": "moodle", "url": moodle.url, "password_file": moodle_reader,
                               "site_url": SITE}
    project.configure()
    result = project.invoke("run", now="2026-11-25T04:16:00+01:00")
    assert result.returncode == 78
    assert "The store's watermark is a stored-time cursor but source type 'moodle' counts by log-id" in result.stderr


def test_dry_run_shows_the_id_window_and_writes_nothing(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    out = project.invoke("run", "--dry-run", now="2026-11-25T04:15:00+01:00", check=0).stdout
    assert "window:      1 .. 18" in out and "read:        17 statements" in out
    assert "partitions:  2026-11-23, 2026-11-24" in out and not project.has_store()


def test_the_textfile_has_no_watermark_time_for_a_log_id(tmp_path, moodle, moodle_reader):
    """A log id is not a time: the watermark gauge is left out rather than made up."""
    load_two_days(moodle)
    textfile = tmp_path / "lms_refresh.prom"
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.configure(extra_top=f'min_cell_size = 2\n[monitoring]\ntextfile = "{textfile}"')
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    text = textfile.read_text()
    assert "lms_refresh_last_exit_code 0.000000" in text and "lms_refresh_rows_written 2.000000" in text
    assert "lms_refresh_watermark_timestamp_seconds" not in text


def test_without_access_to_grade_items_grades_count_without_a_score(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)
    moodle.server.admin("REVOKE SELECT ON mdl_grade_items FROM moodle_reader", moodle.name)
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    checked = project.invoke("check", check=0)
    assert "GRANT SELECT ON mdl_grade_items" in checked.stdout and "grades count without a score" in checked.stdout
    result = project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert result.stderr.count("refused to let us read mdl_grade_items") == 1  # warned once, not per page
    assert project.serving() == EXPECTED_TWO_DAYS
    assert project.query("SELECT COUNT(*) FROM staged_events WHERE score_micro IS NOT NULL") == [(0,)]
