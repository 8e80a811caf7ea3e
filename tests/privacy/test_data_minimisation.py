"""No identifier of a person at rest or in messages; a retention limit on what is kept (issue 15, items 4 and 5)."""

import datetime as dt
import json
import os
import re

from helpers.statements import HOME, statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser, read_key
from lms_refresh.disclosure.redaction import REDACTED, Redactor, marker
from lms_refresh.sources.moodle import RowMapper
from lms_refresh.sources.xapi import ADL, StatementMapper
from lms_refresh.sources.xapi_fields import actor_identifier

NOW = "2026-11-03T04:15:00+01:00"
NAME, ADDRESS = "Learner-Zq81", "zq81@example.edu"
LEAK = re.compile(rb"zq81", re.IGNORECASE)  # in both identifiers; no digest or pseudonym can contain "zq"
KEY = bytes(range(32))


def carrying_identifiers():
    """Malformed records of every kind the sources quarantine, each naming the learner somewhere."""
    bad_score = statement(learner=NAME, score=3)
    bad_score["actor"]["name"] = NAME
    in_timestamp = statement(learner="u-other", timestamp=ADDRESS)  # the reason quotes the bad value
    in_timestamp["stored"] = "2026-11-02T10:00:00Z"
    substatement = statement(learner="u-other", duration="PT1X")
    substatement["object"] = {"objectType": "SubStatement", "actor": {"mbox": f"mailto:{ADDRESS}", "name": NAME},
                              "verb": {"id": ADL + "attempted"}, "object": {"id": f"{HOME}/course/BIO101"}}
    no_verb = statement(learner="u-other")
    del no_verb["verb"]
    no_verb["authority"] = {"objectType": "Group", "member": [{"mbox": f"mailto:{ADDRESS}"},
                                                             {"account": {"homePage": HOME, "name": NAME}}]}
    no_verb["context"]["instructor"] = {"name": NAME, "openid": f"https://id.example.edu/{NAME}"}
    no_verb["context"]["team"] = {"objectType": "Group", "name": f"{NAME}'s team",
                                  "member": [{"mbox_sha1sum": "0" * 40, "name": NAME}]}
    no_verb["context"]["extensions"] = {"https://example.edu/contact": f"write to {ADDRESS}"}
    misspelt = statement(learner=NAME)  # as `lms-refresh demo` makes them: the actor under another key
    misspelt["actr"] = dict(misspelt.pop("actor"), name=NAME)
    bad_mbox = statement(learner="-")  # an mbox that is not a mailto: IRI names no learner: [redacted]
    bad_mbox["actor"] = {"mbox": ADDRESS, "name": NAME}
    two_ifis = statement(learner=NAME)
    two_ifis["actor"]["mbox"] = f"mailto:{ADDRESS}"
    nested = statement(learner=NAME, score=5)
    value = "end"
    for _ in range(200):  # parses, but deeper than a statement can be: withheld whole
        value = {"a": value}
    nested["result"]["extensions"] = {"https://example.edu/x": value}
    return [json.dumps(item).encode() for item in (bad_score, in_timestamp, substatement, no_verb, misspelt,
                                                             bad_mbox, two_ifis, nested)] + [
        f'{{"actor": {{"mbox": "mailto:{ADDRESS}", "name": "{NAME}"'.encode(),  # not JSON
        f'{{"actor": {{"mbox": "mailto:{ADDRESS}"}}, "name": "{NAME}", "bad": "'.encode() + b'\xff\xfe"} trailing',
    ]


def files_under(directory):
    for root, _, names in os.walk(directory):
        for name in names:
            yield os.path.join(root, name)


def leaks_in_store(project):
    """Every text cell of every table of the store, whichever store it is, that names the learner."""
    store = project.open_store()
    try:
        if project.postgres:
            tables = [r[0] for r in store.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'lms_refresh'").fetchall()]
        else:
            tables = [r[0] for r in store.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
        found = []
        for table in tables:
            for row in store.execute(f"SELECT * FROM {table}").fetchall():
                text = repr(tuple(row)).encode()
                if LEAK.search(text):
                    found.append((table, row))
        return found
    finally:
        store.close()


def test_no_identifier_in_any_file_of_the_state_directory_nor_on_stderr(project):
    """Malformed records that name a learner (in the actor, a SubStatement, the authority, the context,
    the reason, unparseable bytes) leave no trace of the name or address in the state directory, the
    publication, the store's tables, the run log or on stderr, after a committed run and a failed one (65)."""
    project.configure(extra_top="max_quarantine_share = 0.5\nmin_cell_size = 2")
    good = [statement(learner=f"u{i}") for i in range(12)] + [statement(learner=NAME)]
    bad = carrying_identifiers()
    path = project.write("a.ndjson", good)
    with open(path, "ab") as handle:
        handle.write(b"\n".join(bad) + b"\n")  # the last is not UTF-8
    committed = project.invoke("-v", "run", now=NOW, check=0)
    assert project.runs()[-1][1:3] == ("success", 0)
    assert project.query("SELECT quarantined FROM runs") == [(len(bad),)]
    # A second window with too much bad input fails with 65 and keeps its evidence after the rollback.
    project.write("b.ndjson", [statement(learner=NAME, timestamp="2026-11-03T08:00:00Z", score=2)] * 3
                  + [statement(learner="u1", timestamp="2026-11-03T08:00:00Z")])
    failed = project.invoke("-v", "run", now="2026-11-04T04:15:00+01:00")
    assert failed.returncode == 65 and "records in the window were malformed" in failed.stderr
    assert project.runs()[-1][1:3] == ("failed", 65)

    assert not LEAK.search(committed.stderr.encode()) and not LEAK.search(failed.stderr.encode())
    published = str(project.state) + "-publication"  # the dashboards' file (SQLite)
    assert os.path.exists(os.path.join(published, "serving.sqlite")) == (project.postgres is None)
    for name in list(files_under(project.state)) + list(files_under(published)):
        with open(name, "rb") as handle:
            assert not LEAK.search(handle.read()), name
    assert leaks_in_store(project) == []
    rows = project.query("SELECT reason, raw FROM quarantine ORDER BY id")
    assert len(rows) == len(bad) + 3
    reasons = [reason for reason, _ in rows]
    assert f"timestamp '{REDACTED}' is not an ISO 8601 time" in reasons
    withheld = [json.loads(raw) for _, raw in rows if "withheld" in raw]
    assert len(withheld) == 3  # not JSON, not UTF-8 (and trailing data), too deep
    assert all(set(item) == {"withheld", "bytes"} and item["bytes"] > 40 for item in withheld)


def test_quarantined_actors_carry_the_pseudonym_the_run_stages(sqlite_project):
    """An operator correlates a quarantined record with a learner's events (and `forget` finds it)."""
    project = sqlite_project
    project.configure(extra_top="max_quarantine_share = 0.5")
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)]
                  + [statement(learner=NAME), statement(learner=NAME, score=7)])
    project.invoke("run", now=NOW, check=0)
    pseudonym = Pseudonymiser(read_key(str(project.state / "pseudonymisation.key")))(
        actor_identifier({"account": {"homePage": HOME, "name": NAME}}))
    assert project.query("SELECT COUNT(*) FROM staged_events WHERE actor = ?", (pseudonym,)) == [(1,)]
    (raw,), = project.query("SELECT raw FROM quarantine")
    assert json.loads(raw)["actor"] == {"objectType": "Agent", "account": {"homePage": HOME, "name": marker(pseudonym)}}


def test_every_place_an_agent_can_appear_is_redacted_with_the_mappers_pseudonym():
    redactor = Redactor(KEY, actor_identifier)
    mapper = StatementMapper("UTC", Pseudonymiser(KEY), r"^(.+?/course/[^/?#]+)")
    agent = {"mbox": f"mailto:{ADDRESS}"}
    expected = marker(mapper.actor_of(agent))
    record = {
        "actor": {"objectType": "Group", "name": NAME, "member": [dict(agent), {"openid": f"https://o.example/{NAME}"}]},
        "authority": dict(agent, name=NAME),
        "object": {"objectType": "SubStatement", "actor": dict(agent),
                   "object": {"objectType": "Agent", "mbox_sha1sum": "ab" * 20},
                   "context": {"instructor": [dict(agent)], "team": {"member": [dict(agent)]}}},
        "context": {"instructor": "a bare string naming " + NAME, "team": {"account": {"homePage": HOME, "name": NAME}},
                    "extensions": {"x": [f"{NAME} said so", {"y": ADDRESS.upper()}]}},
        "result": {"extensions": {"https://example.edu/by": {"objectType": "Agent", "name": "N. N.", **agent}}},
        "actr": {"account": {"homePage": HOME, "name": NAME}, "name": "N. N."},
        "userid": 7,
    }
    origin, reason, text, digest = redactor.row(f"exports/{ADDRESS}.ndjson:3", f"{NAME} did something",
                                                json.dumps(record))
    kept = json.loads(text)
    assert not LEAK.search(text.encode() + origin.encode() + reason.encode())
    assert kept["actor"]["member"][0] == {"mbox": expected} and kept["actor"]["name"] == REDACTED
    assert kept["authority"] == {"mbox": expected, "name": REDACTED}
    assert kept["object"]["actor"] == {"mbox": expected}
    assert kept["object"]["object"]["mbox_sha1sum"].startswith("pseudonym:")
    assert kept["object"]["context"]["instructor"] == [{"mbox": expected}]
    assert kept["object"]["context"]["team"] == {"member": [{"mbox": expected}]}
    assert kept["context"]["instructor"] == REDACTED
    account = mapper.actor_of({"account": {"homePage": HOME, "name": NAME}})
    assert kept["context"]["team"] == {"account": {"homePage": HOME, "name": marker(account)}}
    said, = kept["context"]["extensions"]["x"][:1]  # free text: its length and keyed hash only
    assert kept["context"]["extensions"] == {"x": [said, {"y": REDACTED}]} and said.startswith("[text: ")
    assert kept["result"]["extensions"]["https://example.edu/by"] == {"objectType": "Agent", "name": REDACTED,
                                                                      "mbox": expected}
    assert kept["actr"] == {"account": {"homePage": HOME, "name": marker(account)}, "name": REDACTED}
    assert kept["userid"] == REDACTED  # an xAPI source has no Moodle site to pseudonymise it with
    assert (origin, reason) == (f"exports/{REDACTED}.ndjson:3", f"{REDACTED} did something")
    # The digest is keyed and stable: the same record is kept once, and a guess cannot be confirmed without the key.
    other_key = Redactor(b"\1" * 32, actor_identifier)
    assert redactor.row("o", "r", json.dumps(record))[3] == digest != other_key.row("o", "r", json.dumps(record))[3]


def test_a_moodle_row_keeps_its_user_ids_only_as_the_pseudonyms_staged():
    site = "https://moodle.example.edu"
    pseudonymise = Pseudonymiser(KEY)
    mapper = RowMapper("UTC", pseudonymise, site + "/", site_course_id=1, guest_user_id=1)
    _, event = mapper.map((5, "\\core\\event\\course_viewed", "r", 2, 4242, 9, None, 0, None, 1_700_000_000, None))
    row = {"id": 6, "eventname": "\\core\\event\\course_module_completion_updated", "userid": 3,
           "relateduserid": 4242, "realuserid": None, "other": json.dumps({"note": ADDRESS})}
    _, _, text, _ = Redactor(KEY, actor_identifier, site).row("mdl_logstore_standard_log id 6", "no completionstate",
                                                              json.dumps(row))
    kept = json.loads(text)
    assert kept["relateduserid"] == marker(event.actor)
    assert kept["userid"] == marker(pseudonymise(f"moodle:{site}|3")) and kept["realuserid"] is None
    assert ADDRESS not in text and kept["eventname"] == row["eventname"]


def test_records_that_cannot_be_read_are_kept_as_their_size_only():
    redactor = Redactor(KEY, actor_identifier)
    for raw in (f'{{"actor": {{"mbox": "mailto:{ADDRESS}"}}', f'"{NAME}"', f'[1, "{NAME}"]',
                "[" * 100_000 + "]" * 100_000, f'{{"actor": "{NAME}", "a": "\\ud800"}}'.encode() + b"\xff"):
        origin, reason, text, digest = redactor.row("file:1", "not valid JSON", raw)
        size = len(raw) if isinstance(raw, bytes) else len(raw.encode())
        assert json.loads(text) == {"withheld": "the record could not be read as a JSON object, so none of it is kept",
                                    "bytes": size}
        assert len(digest) == 64


def test_quarantined_records_older_than_quarantine_days_are_deleted(project):
    project.configure(extra_top="max_quarantine_share = 0.5")
    project.config.write_text(project.config.read_text() + "[retention]\nquarantine_days = 30\n")
    first = dt.datetime(2026, 11, 2, 10, tzinfo=dt.UTC)

    def day(n, learner):
        moment = (first + dt.timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
        good = [statement(learner=f"u{i}", timestamp=moment) for i in range(12)]
        return good + [statement(learner=learner, timestamp=moment, score=9)]

    project.write("a.ndjson", day(0, "old"))
    project.invoke("run", now="2026-11-03T04:15:00Z", check=0)
    project.write("b.ndjson", day(29, "kept"))
    project.invoke("run", now="2026-12-02T04:15:00Z", check=0)  # 29 days later: the first record stays
    assert project.query("SELECT recorded_at FROM quarantine ORDER BY id") == [
        ("2026-11-03T04:15:00.000000Z",), ("2026-12-02T04:15:00.000000Z",)]
    project.night_before("2026-12-04T04:00:00Z")  # before day 31's statements (stored 3 December, 10:00)
    project.write("c.ndjson", day(31, "new"))
    project.invoke("run", now="2026-12-04T04:15:00Z", check=0)  # 31 days after the first: it is deleted
    assert project.query("SELECT recorded_at FROM quarantine ORDER BY id") == [
        ("2026-12-02T04:15:00.000000Z",), ("2026-12-04T04:15:00.000000Z",)]


def test_a_statement_older_than_the_staging_horizon_is_quarantined_and_counted(project):
    """Staged events of days before the horizon are dropped, their published rows frozen; a late
    statement for such a day is quarantined and counted, also after staging_days is removed."""
    project.configure(extra_top="max_quarantine_share = 0.5\nmin_cell_size = 2")
    retention = "[retention]\nstaging_days = 30\n"
    project.config.write_text(project.config.read_text() + retention)
    old = [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(5)]
    project.write("a.ndjson", old)
    project.invoke("run", now=NOW, check=0)
    before = project.serving()
    assert [row[:3] for row in before] == [("2026-11-02", f"{HOME}/course/BIO101", 5)]

    # 40 days later: a late statement for 2 November (stored now), and two of today.
    project.night_before("2026-12-13T04:15:00+01:00")
    late = statement(learner="u9", timestamp="2026-11-02T11:00:00Z", stored="2026-12-12T09:00:00Z")
    recent = [statement(learner=f"u{i}", timestamp="2026-12-12T09:00:00Z") for i in range(2)]
    project.write("b.ndjson", [late] + recent)
    result = project.invoke("run", now="2026-12-13T04:15:00+01:00", check=0)
    assert "quarantined 1" in result.stderr
    assert project.query("SELECT statements_read, staged, quarantined FROM runs ORDER BY started_at")[-1] == (3, 2, 1)
    assert project.meta()["staging_horizon"] == "2026-11-13"
    assert project.query("SELECT MIN(day), COUNT(*) FROM staged_events") == [("2026-12-12", 2)]
    # Learners' presence stays from the first day of the week or month that holds the horizon (November), so
    # that November is still counted whole; a horizon in December would drop it.
    assert project.query("SELECT MIN(day) FROM learner_days") == [("2026-11-02",)]
    (origin, reason), = project.query("SELECT origin, reason FROM quarantine")
    assert origin == f"record {late['id']}"
    assert reason.startswith("older than the staging horizon: its day 2026-11-02 is before 2026-11-13")
    rows = {row[0]: row for row in project.serving()}  # every day of the course's span is published
    assert rows["2026-11-02"] == before[0]  # the closed day stays as published, never rebuilt from what is left
    assert rows["2026-12-12"][:3] == ("2026-12-12", f"{HOME}/course/BIO101", 2)

    # Without staging_days, the recorded horizon still holds: nothing is merged into a closed day.
    project.config.write_text(project.config.read_text().replace(retention, ""))
    project.write("c.ndjson", [statement(learner="u8", timestamp="2026-11-05T11:00:00Z", stored="2026-12-13T09:00:00Z"),
                               statement(learner="u8", timestamp="2026-12-13T09:00:00Z")])
    project.invoke("run", now="2026-12-14T04:15:00+01:00", check=0)
    assert project.query("SELECT quarantined FROM runs ORDER BY started_at")[-1] == (1,)
    assert project.query("SELECT MIN(day), COUNT(*) FROM staged_events") == [("2026-12-12", 3)]
    assert project.serving()[0] == before[0]


def test_staging_days_shorter_than_the_first_run_is_refused(project):
    project.config.write_text(project.config.read_text() + "[retention]\nstaging_days = 7\n")
    result = project.invoke("check")
    assert result.returncode == 78
    assert (f"{project.config}: key 'retention.staging_days' (7) must be at least window.bootstrap_days (30)"
            in result.stderr)


def test_retention_applies_in_runs_with_nothing_to_read(project):
    """A quiet source does not keep old data alive: a run whose window is empty still deletes."""
    project.configure(extra_top="max_quarantine_share = 0.5")
    retention = "[retention]\nquarantine_days = 30\nstaging_days = 30\n"
    project.config.write_text(project.config.read_text() + retention)
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)] + [statement(learner="x", score=9)])
    project.invoke("run", now=NOW, check=0)
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(1,)]
    # 31 days on, a safety lag of 31 days ends the window where the last run ended: nothing to read.
    project.configure(extra_top="max_quarantine_share = 0.5", safety_lag='"31d"')
    project.config.write_text(project.config.read_text() + retention)
    project.night_before("2026-12-04T04:15:00+01:00")
    quiet = project.invoke("run", now="2026-12-04T04:15:00+01:00", check=0)
    assert "Nothing to do" in quiet.stderr
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(0,)]  # 2 November is before 4 November
    assert project.meta()["staging_horizon"] == "2026-11-04"
    assert project.serving()[0][:3] == ("2026-11-02", f"{HOME}/course/BIO101", 12)  # still as published


def test_one_run_under_a_clock_months_ahead_drops_no_staged_event(project):
    """A clock set ahead by months for one run (a bad NTP source, a restored VM) must not drop every staged event:
    the next runs are refused for the future watermark until it is set back (README, "Recovery"), and by then a
    horizon months ahead would have dropped every day for good, each re-read statement quarantined as older than
    it. Retention counts at most a day past the last successful run (lms_refresh.run.retention.clock); a clock
    wrong for several runs is not caught (README, "Erasure and retention")."""
    project.configure(extra_top="min_cell_size = 2")
    project.config.write_text(project.config.read_text() + "[retention]\nstaging_days = 30\n")
    days = [f"2026-11-{day:02d}" for day in range(1, 10)]
    written = [statement(learner=f"u{i}", timestamp=f"{day}T10:00:00Z") for day in days for i in range(3)]
    project.write("a.ndjson", written)
    project.invoke("run", now="2026-11-10T00:00:00Z", check=0)
    project.invoke("run", now="2027-03-01T00:00:00Z", check=0)  # the clock jumped ahead for this run
    assert project.meta()["staging_horizon"] == "2026-10-12"  # 11 November, the day after the last run, - 30 days
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(27,)]
    refused = project.invoke("run", now="2026-11-12T00:00:00Z")  # the clock is right again
    assert refused.returncode == 78 and "is later than the current time" in refused.stderr
    project.invoke("watermark", "set", "2026-11-10T00:00", now="2026-11-12T00:01:00Z", check=0)
    late = [statement(learner=f"u{i}", timestamp="2026-11-11T10:00:00Z") for i in range(4)]
    project.write("b.ndjson", late)
    project.invoke("run", now="2026-11-12T00:02:00Z", check=0)
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]
    course = f"{HOME}/course/BIO101"
    assert [row[:4] for row in project.serving()] == [(day, course, 3, 3) for day in days] + [
        ("2026-11-10", course, None, None), ("2026-11-11", course, 4, 4)]  # the gap, then the day read again
