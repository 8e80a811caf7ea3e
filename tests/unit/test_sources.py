"""The source contract: every source is a Source on one base, maps its records through one Intake
into named Events, and says what `check` found as Findings."""

import datetime as dt
import json

import pytest

from helpers.moodledb import load_two_days, moodle_project
from helpers.statements import HOME, statement
from helpers.times import t
from lms_refresh.config import validate
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.instants import to_cursor
from lms_refresh.sources import DEVIATION, OK, WARNING, BaseSource, Finding, Source, build_source
from lms_refresh.sources.moodle import RowMapper
from lms_refresh.sources.ndjson import NdjsonSource
from lms_refresh.sources.records import EVENT_FIELDS, PREFILTER_STREAK, Event, Void, make_event
from lms_refresh.sources.xapi import ADL, StatementMapper
from lms_refresh.window import LOG_ID, TIME, Window

UTC = dt.UTC
WINDOW = Window(dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 11, 3, tzinfo=UTC))
PSEUDONYMISE = Pseudonymiser(b"k" * 32)
SOURCES = {
    "xapi-ndjson": {"path": "/srv/exports"},
    "xapi-lrs": {"endpoint": "https://lrs.example.edu/xAPI/", "username": "lms-refresh",
                 "password_file": "/etc/lms-refresh/lrs-password"},
    "moodle": {"url": "postgresql://reader@db.example.edu/moodle", "site_url": "https://moodle.example.edu"},
}


def config_of(kind, **settings):
    return validate({"timezone": "Europe/Paris", "source": dict(SOURCES[kind], type=kind, **settings)},
                    "test.toml", {})


@pytest.mark.parametrize("kind, axis", [("xapi-ndjson", TIME), ("xapi-lrs", TIME), ("moodle", LOG_ID)])
def test_each_source_type_is_built_as_a_source_on_the_one_base(kind, axis):
    source = build_source(config_of(kind), PSEUDONYMISE, {})
    try:
        assert isinstance(source, Source) and isinstance(source, BaseSource)
        assert source.axis is axis
        # A backfill is a time window on every axis, clamped by the safety lag alone when the source
        # does not say how far it is complete (neither files nor Moodle's log do).
        if kind != "xapi-lrs":  # the LRS is asked (one request) how far it is consistent
            now = dt.datetime(2026, 11, 3, 4, 15, tzinfo=UTC)
            window = source.backfill_window(WINDOW.since, now, now, config=config_of(kind))
            assert window == Window(WINDOW.since, now - dt.timedelta(minutes=5), TIME)
    finally:
        source.close()


def test_the_canonical_event_is_a_named_tuple_of_the_one_field_list():
    values = {name: number for number, name in enumerate(EVENT_FIELDS)}
    event = make_event(**values)
    assert type(event) is Event and Event._fields == EVENT_FIELDS
    assert event == tuple(range(len(EVENT_FIELDS))) == make_event(*range(len(EVENT_FIELDS)))
    assert (event.day, event.event_id, event.stored, event.duration_ms) == (0, 3, 4, 12)
    with pytest.raises(TypeError):
        make_event(**dict(values, stored_at=4))


def test_events_are_the_same_rows_in_one_process_or_across_the_workers(tmp_path):
    """Events cross the worker pool as plain tuples (marshal takes nothing else) and stay so (staging binds a
    plain tuple for fewer instructions than an Event): the same fields, in the same order, as one process's Events."""
    lines = [json.dumps(statement(learner=f"u{i}", timestamp=f"2026-11-0{1 + i % 3}T10:{i % 60:02d}:00Z"))
             for i in range(600)]
    (tmp_path / "a.ndjson").write_text("\n".join(lines) + "\n")

    def events(workers):
        source = NdjsonSource(str(tmp_path), StatementMapper("Europe/Paris", PSEUDONYMISE, r"^(.+?/course/[^/?#]+)"),
                              batch_size=50, workers=workers, parallel_min_bytes=0)
        return [event for batch in source.batches(WINDOW) for event in batch.events]

    alone, across = events(1), events(2)
    assert len(alone) == 400 and all(type(event) is Event for event in alone)
    assert all(type(event) is tuple for event in across) and across == [tuple(event) for event in alone]
    assert all(WINDOW.since_cursor <= event.stored < WINDOW.until_cursor for event in alone)
    assert {event.day for event in alone} == {"2026-11-01", "2026-11-02"}


def test_both_mappers_give_a_moment_the_same_local_day():
    """One day cache: an xAPI time and a Moodle timecreated of the same second fall on the same day."""
    xapi = StatementMapper("Europe/Paris", PSEUDONYMISE, "x")
    moodle = RowMapper("Europe/Paris", PSEUDONYMISE, "https://moodle.example.edu/", site_course_id=1, guest_user_id=1)
    start = dt.datetime(2026, 10, 24, 21, 0, tzinfo=UTC)  # the night the clocks go back, by 7-minute steps
    for step in range(600):
        moment = start + dt.timedelta(minutes=7 * step, seconds=step % 60)
        row = (step + 1, "\\core\\event\\course_viewed", "r", 2, 5, 7, None, 0, None, int(moment.timestamp()), None)
        kind, event = moodle.map(row)
        assert kind == "event" and event.day == xapi.day_of(to_cursor(moment)), moment
        assert event.day == moment.astimezone(moodle._days.zone).date().isoformat()


def lrs_source():
    from lms_refresh.sources.lrs import LrsSource

    config = config_of("xapi-lrs", page_size=100)
    return LrsSource(config.source, StatementMapper("Europe/Paris", PSEUDONYMISE, r"^(.+?/course/[^/?#]+)"), {})


def test_an_lrs_page_is_kept_skipped_or_quarantined_the_same_once_peeking_pauses():
    """After PREFILTER_STREAK statements in a row inside the window the Intake stops peeking at `stored`:
    what lies outside is still skipped and counted as such, and only what lies inside is quarantined."""
    inside = [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(PREFILTER_STREAK + 5)]
    outside = statement(timestamp="2026-11-05T10:00:00Z")
    bad_outside = dict(statement(timestamp="2026-11-05T11:00:00Z"), verb={})
    bad_inside = dict(statement(timestamp="2026-11-02T11:00:00Z"), verb={})
    bad_without_id = {"stored": "2026-11-02T12:00:00Z"}
    voiding = {"id": "0a4bcbb1-7f5e-4fb6-9d0a-35a3a3b9a0d1", "actor": {"mbox": "mailto:teacher@example.edu"},
               "verb": {"id": "http://adlnet.gov/expapi/verbs/voided"},
               "object": {"objectType": "StatementRef", "id": inside[0]["id"]}, "stored": "2026-11-02T13:00:00Z"}
    for page in (inside + [outside, bad_outside, bad_inside, bad_without_id, voiding],  # peeking paused
                 [outside, bad_outside, bad_inside, bad_without_id, voiding] + inside):  # peeking throughout
        batch, skipped = lrs_source()._map_page(page, WINDOW.since_cursor, WINDOW.until_cursor, page=3)
        assert skipped == 2 and batch.read == len(inside) + 3
        assert len(batch.events) == len(inside) and all(type(event) is Event for event in batch.events)
        assert batch.voids == [Void(target_id=batch.events[0].event_id, voiding_id=bytes.fromhex(
            voiding["id"].replace("-", "")), stored="2026-11-02T13:00:00.000000Z")]
        position = page.index(bad_without_id) + 1
        assert [(origin, reason) for origin, reason, _ in batch.quarantined] == [
            (f"https://lrs.example.edu/xAPI/statements id {bad_inside['id']}", "verb.id is missing"),
            (f"https://lrs.example.edu/xAPI/statements page 3 #{position}", "id is missing or not a UUID")]
        assert sorted(batch.names.values()) == [ADL + "experienced", f"{HOME}/course/BIO101"]


def test_findings_are_printed_by_level_not_by_their_words():
    assert str(Finding(OK, "3 export file(s) readable")) == "3 export file(s) readable"
    assert str(Finding(DEVIATION, "no header", about="source")) == "source: deviation: no header"
    assert str(Finding(WARNING, "a FIFO is skipped", about="source")) == "source: warning: a FIFO is skipped"
    assert Finding(OK, "warning: the word alone decides nothing").ok
    assert not Finding(WARNING, "x").ok and not Finding(DEVIATION, "x").ok


def test_a_moodle_log_restored_below_the_watermark_is_read_from_the_lookback_with_a_warning(
        tmp_path, moodle, moodle_reader):
    load_two_days(moodle)  # ids 1..17
    project = moodle_project(tmp_path / "p", moodle, moodle_reader, id_lookback=10)
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert project.meta()["watermark"] == "18"
    moodle.server.admin("DELETE FROM mdl_logstore_standard_log WHERE id > 5", moodle.name)  # an older backup
    result = project.invoke("run", now="2026-11-26T04:15:00+01:00", check=0)
    assert ("The newest id of mdl_logstore_standard_log (5) is below the watermark (18): was the Moodle "
            "database restored from an older backup?") in result.stderr
    assert project.runs()[-1][3:] == ("8", "6")  # 18 less the lookback of 10, up to the newest id 5 + 1
    assert project.meta()["watermark"] == "18"  # never moved backwards


# -- the base's run window -------------------------------------------------------------------

CONFIG = validate({"source": {"type": "xapi-ndjson", "path": "/x"}, "window": {"safety_lag": "10m",
                  "lookback": "1h"}}, "test.toml", {})


class CompleteThrough(BaseSource):
    """A source on the time axis that says it is complete through `through` (None: it does not say)."""

    def __init__(self, through=None):
        self.through = through

    def complete_through(self, now):
        return self.through


def test_run_window_bootstrap_lag_lookback_and_completeness():
    now = t("2026-11-03T04:15:00+01:00")
    assert CompleteThrough().run_window(None, now, CONFIG) == Window(now - dt.timedelta(days=7),
                                                                     now - dt.timedelta(minutes=10))
    mark = t("2026-11-02T03:05:00+00:00")
    assert CompleteThrough().run_window(mark, now, CONFIG).since == mark - dt.timedelta(hours=1)
    complete = t("2026-11-03T01:00:00+00:00")
    assert CompleteThrough(complete).run_window(mark, now, CONFIG).until == complete


def test_the_mappers_give_each_event_its_record_keys_and_a_store_refuses_events_without(tmp_path):
    """The run's record keys are computed as records are mapped (in the parsing workers, for files): each
    mapper given the run's RecordKeys fills record_key and learner_key; one built without them (`check`) gives
    None, and staging such an event would leave its cells without a cell key, so the store refuses it."""
    from lms_refresh.disclosure.cell_key import RecordKeys
    from lms_refresh.store.sqlite import SqliteStore

    keys = RecordKeys(b"s" * 32)
    body = statement(learner="u1", timestamp="2026-11-02T10:00:00Z")
    row = (7, "\\core\\event\\course_viewed", "r", 2, 5, 7, None, 0, None, 1793613600, None)
    keyed = [StatementMapper("Europe/Paris", PSEUDONYMISE, "x", record_keys=keys).map(body)[1],
             RowMapper("Europe/Paris", PSEUDONYMISE, "https://moodle.example.edu/", site_course_id=1, guest_user_id=1,
                       record_keys=keys).map(row)[1]]
    for event in keyed:
        assert (event.record_key, event.learner_key) == (keys.event(event.event_id), keys.learner(event.actor))
    keyless = StatementMapper("Europe/Paris", PSEUDONYMISE, "x").map(body)[1]
    assert (keyless.record_key, keyless.learner_key) == (None, None)
    store = SqliteStore.open(str(tmp_path / "metrics.sqlite"), create=True)
    store.begin()
    with pytest.raises(ValueError, match="events without record keys cannot be staged"):
        store.stage([keyless], [], {})
    assert store.stage([tuple(keyed[0])], [], {}) == {keyed[0].day}  # as the workers send them: plain tuples
    staged = store.db.execute("SELECT record_key, learner_key FROM staged_events").fetchall()
    assert staged == [(keyed[0].record_key, keyed[0].learner_key)]
    store.rollback()
    store.close()
