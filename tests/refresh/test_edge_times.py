"""Times at the edge of the range through real runs, on both stores, and the CLI's dates as real processes.

Statements dated in year 3000 or 9999, or later than the run's time plus two days, are quarantined and stretch
no course's published span; a `stored` that is no real time is quarantined, never staged; a date on the
command line outside 1970..2999 is one sentence (README, "Times").
"""

import datetime as dt
import re
import uuid

from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.statements import statement
from lms_refresh import instants

NOW = "2026-11-03T04:15:00+01:00"  # run time: 2026-11-03T03:15Z; later than 2026-11-05T03:15Z is the future
COURSE = "https://lms.example.edu/course/BIO101"
RANGE = "(1970-01-01T00:00:00Z .. 2999-12-31T23:59:59Z)"
LATEST = dt.datetime(2026, 11, 5, 3, 15, tzinfo=dt.UTC)
FEW = settings(max_examples=4, derandomize=True, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

offsets = st.sampled_from(["Z", "+00:00", "-23:59", "+14:00", "-05:00", ""])
far = st.one_of(
    st.datetimes(min_value=dt.datetime(2026, 11, 5, 3, 16), max_value=dt.datetime(2999, 12, 31)),
    st.datetimes(min_value=dt.datetime(2999, 12, 30), max_value=dt.datetime.max),
    st.sampled_from([dt.datetime(9999, 12, 31, 10), dt.datetime(3000, 1, 1), dt.datetime(2999, 12, 31, 23, 59)]),
)


@FEW
@given(st.lists(st.tuples(far, offsets), min_size=1, max_size=3))
def test_statements_dated_far_ahead_are_quarantined_and_stretch_no_course(tmp_path_factory, make_project, dates):
    project = make_project(tmp_path_factory.mktemp("far") / uuid.uuid4().hex[:8])
    project.configure(extra_top="max_quarantine_share = 0.9")
    good = [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(12)]
    texts = [moment.isoformat() + offset for moment, offset in dates]
    # k learners on each far day: enough to make it a visible day of the course if it were counted.
    ahead = [statement(learner=f"u{i}", timestamp=text, stored="2026-11-02T11:00:00Z") for text in texts
             for i in range(12)]
    project.write("a.ndjson", good + ahead)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert [row[:4] for row in project.serving()] == [("2026-11-02", COURSE, 12, 12)]
    reasons = {reason for (reason,) in project.query("SELECT reason FROM quarantine")}
    expected = set()
    for text in texts:
        moment = dt.datetime.fromisoformat(text)
        moment = moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
        try:
            beyond_range = not moment.astimezone(dt.UTC) < instants.END
        except OverflowError:
            beyond_range = True
        expected.add(f"timestamp {text!r} is out of range" if beyond_range else
                     f"timestamp {text!r} lies in the future (after {instants.to_cursor(LATEST)}, 2 days past "
                     "this run's time): a device's clock was wrong")
    assert reasons == expected
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(len(ahead),)]


def test_a_timestamp_within_two_days_of_the_run_counts_on_its_day(project):
    """Clock skew is tolerated: a device a day ahead still counts (on the day it claims)."""
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-05T03:00:00Z",
                                         stored="2026-11-02T11:00:00Z") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    assert [row[:4] for row in project.serving()] == [("2026-11-05", COURSE, 12, 12)]


IMPOSSIBLE = ["2026-13-02T11:00:00Z", "2026-11-31T11:00:00Z", "2026-11-02T25:00:00Z", "2026-02-29T10:00:00.000Z",
              "2026-11-02T10:61:00.000Z", "2026-11-02T10:00:61Z", "2026-00-10T10:00:00.123Z", "0999-11-02T10:00:00Z"]


def test_a_stored_that_is_no_real_time_is_quarantined_and_never_staged(project):
    good = [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(20)]
    bad = [statement(learner="u1", timestamp="2026-11-02T10:00:00Z", stored=text) for text in IMPOSSIBLE]
    path = project.write("a.ndjson", good + bad)
    project.configure(extra_top="max_quarantine_share = 0.5")
    project.invoke("run", now=NOW, check=0)
    assert sorted(project.query("SELECT origin, reason FROM quarantine")) == sorted(
        (f"{path}:{21 + n}", f"stored {text!r} " + ("is out of range" if text.startswith("0999") else
                                                    "is not an ISO 8601 time")) for n, text in enumerate(IMPOSSIBLE))
    staged = [stored for (stored,) in project.query("SELECT stored FROM staged_events")]
    assert len(staged) == 20 and all(instants.cursor_moment(text) is not None for text in staged)
    assert [row[:4] for row in project.serving()] == [("2026-11-02", COURSE, 20, 20)]


# -- the command line, as real processes ---------------------------------------------------------------------

def _one_sentence(result, code, sentence):
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert sentence in result.stderr, result.stderr


def test_dates_at_the_edge_on_the_command_line_are_one_sentence(sqlite_project):
    project = sqlite_project
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    _one_sentence(project.cli("backfill", "--since", "0001-01-01", "--until", "2026-11-01", now=NOW), 2,
                  f"Invalid value for '--since': '0001-01-01' in Europe/Paris is outside the times lms-refresh "
                  f"handles {RANGE}")
    _one_sentence(project.cli("rebuild", "--since", "1970-01-01", now=NOW), 2,
                  f"Invalid value for '--since': '1970-01-01' in Europe/Paris (1969-12-31T23:00:00.000000Z) is "
                  f"outside the times lms-refresh handles {RANGE}")
    _one_sentence(project.cli("run", now="9999-12-31T23:59:59-23:59"), 2,
                  f"Invalid value for '--now': '9999-12-31T23:59:59-23:59' is outside the times lms-refresh "
                  f"handles {RANGE}")
    project.config.write_text(project.config.read_text().replace("Europe/Paris", "America/Los_Angeles"))
    _one_sentence(project.cli("backfill", "--since", "2026-01-01", "--until", "9999-12-31T23:00", now=NOW), 2,
                  f"Invalid value for '--until': '9999-12-31T23:00' in America/Los_Angeles is outside the times "
                  f"lms-refresh handles {RANGE}")
    assert not project.has_store()  # refused before anything was opened


def test_watermark_set_outside_the_range_is_refused_and_the_next_run_still_works(sqlite_project):
    project = sqlite_project
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.cli("run", now=NOW, check=0)
    watermark = project.meta()["watermark"]
    _one_sentence(project.cli("watermark", "set", "0999-06-01", now=NOW), 78,
                  f"'0999-06-01' in Europe/Paris (0999-05-31T23:50:39.000000Z) is outside the times lms-refresh "
                  f"handles {RANGE}.")
    assert project.meta()["watermark"] == watermark
    result = project.cli("watermark", "set", "1970-01-01T00:00Z", now=NOW, check=0)
    assert "-> 1970-01-01T00:00:00.000000Z" in result.stdout
    again = project.cli("run", now=NOW, check=0)
    assert "damaged" not in again.stderr
    assert project.meta()["watermark"] == "2026-11-03T03:15:00.000000Z"


@settings(max_examples=40, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.datetimes(min_value=dt.datetime.min, max_value=dt.datetime.max),
       st.sampled_from(["", "Z", "-23:59", "+14:00"]), st.sampled_from(["--since", "--until"]))
def test_any_backfill_date_is_a_window_or_one_sentence(sqlite_project, moment, offset, option):
    text = moment.isoformat(timespec="minutes") + offset
    other = "2026-11-04" if option == "--since" else "2026-11-01"
    args = ["backfill", option, text, "--until" if option == "--since" else "--since", other, "--dry-run"]
    result = sqlite_project.invoke(*args, now=NOW)
    assert "Traceback" not in result.stderr
    local = dt.datetime.fromisoformat(text)
    if result.returncode == 2:
        assert f"Invalid value for '{option}': {text!r}" in result.stderr
        assert "is outside the times lms-refresh handles" in result.stderr
        assert not (local.tzinfo and dt.datetime(1971, 1, 1, tzinfo=dt.UTC) <= local
                    <= dt.datetime(2999, 1, 1, tzinfo=dt.UTC))
    else:
        assert result.returncode == 0, result.stderr
        assert dt.datetime(1969, 12, 30) <= local.replace(tzinfo=None) <= dt.datetime(3000, 1, 2)


def test_a_timestamp_with_a_control_character_or_no_end_is_quarantined_and_the_run_goes_on(project):
    """Python's fromisoformat takes "...Z" followed by a NUL, a tab before the Z, and any number of fraction
    digits. The timestamp is kept as sent, and a NUL would stop PostgreSQL's COPY, and so every night's run:
    such a statement is quarantined with one sentence, and the others are counted."""
    good = [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(20)]
    texts = ["2026-11-02T10:00:00Z\x00", "2026-11-02T10:00:00\tZ", "2026-11-02T10:00:00." + "0" * 10_000 + "+00:00"]
    path = project.write("a.ndjson", good + [statement(learner="u1", timestamp=text, stored="2026-11-02T10:00:05Z")
                                             for text in texts])
    project.configure(extra_top="max_quarantine_share = 0.5")
    project.invoke("run", now=NOW, check=0)
    # The value is quoted as what the quarantine keeps of it (no free text at rest: disclosure/free_text.py).
    kinds = [", control characters", ", control characters", ""]
    assert sorted((origin, re.sub("keyed hash [0-9a-f]{16}", "keyed hash H", reason))
                  for origin, reason in project.query("SELECT origin, reason FROM quarantine")) == sorted(
        (f"{path}:{21 + n}", f"timestamp '[text: {len(text)} characters{kinds[n]}, keyed hash H]' is not an ISO 8601 "
         "time") for n, text in enumerate(texts))
    assert [row[:4] for row in project.serving()] == [("2026-11-02", COURSE, 20, 20)]
