"""Erasure and retention complete (issue 20, class 7), on both stores.

`forget` finds a learner in every form the program writes them (lms_refresh/store/erasure.py
lists them): staged events, redacted quarantined records, conflicting versions of a statement
id (also as older versions wrote them, with the bare pseudonym), statements for closed days —
and a record quarantined under an earlier key, which no key can match any more, goes when the key changes. Closed days
(before the staging horizon) stay published through `rebuild`, and statements of closed days,
re-read after `watermark set`, are never counted as malformed.
"""

import json
import os
import re
import sqlite3

from helpers.publication import publication, read_publication
from helpers.statements import HOME, statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser, read_key
from lms_refresh.disclosure.redaction import marker
from lms_refresh.sources.xapi_fields import actor_identifier

NOW = "2026-11-03T04:15:00+01:00"
LEARNER = {"account": {"homePage": HOME, "name": "Zq81"}}
ACCOUNT = ("--account-homepage", HOME, "--account-name", "Zq81")
CONFLICT = "conflicting statement id: already staged with other content"
CLOSED = "older than the staging horizon"


def pseudonym(project):
    key = read_key(str(project.state / "pseudonymisation.key"))
    return Pseudonymiser(key)(actor_identifier(LEARNER))


def raws(project):
    return [row[0] for row in project.query("SELECT raw FROM quarantine ORDER BY id")]


def naming(project, number):
    """The quarantined records that name pseudonym `number`, in any form a record was ever written."""
    forms = (f'"{marker(number)}"', f'"actor": {number},', f'"actor": {number}}}')
    return [raw for raw in raws(project) if any(form in raw for form in forms)]


def insert_quarantined(project, origin, reason, raw):
    """Write a quarantine row straight into the store, as an older lms-refresh wrote it."""
    row = ("old", origin, reason, raw, origin, "2026-11-03T08:00:00.000000Z")
    if project.postgres:
        values = ", ".join("'" + value.replace("'", "''") + "'" for value in row)
        project.postgres.admin("INSERT INTO lms_refresh.quarantine (run_id, origin, reason, raw, digest, recorded_at) "
                               f"VALUES ({values})", project.database)
        return
    db = sqlite3.connect(project.store)
    with db:
        db.execute("INSERT INTO quarantine (run_id, origin, reason, raw, digest, recorded_at) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   row)
    db.close()


def crowd(day, stored=None, count=12):
    return [statement(learner=f"u{i}", timestamp=f"{day}T09:00:00Z", stored=stored) for i in range(count)]


def test_forget_deletes_the_learners_conflicting_versions_in_the_new_and_the_old_form(project):
    project.configure(extra_top="max_quarantine_share = 0.3")
    mine = statement(learner="Zq81", timestamp="2026-11-02T10:00:00Z", verb="attempted")
    project.write("a.ndjson", crowd("2026-11-02") + [mine])
    project.invoke("run", now=NOW, check=0)
    # The same id again with another result: a second version, quarantined, naming the learner by pseudonym.
    project.write("b.ndjson", [dict(mine, stored="2026-11-03T08:00:00Z", result={"success": True})]
                  + crowd("2026-11-03", stored="2026-11-03T08:00:00Z", count=4))
    project.invoke("run", now="2026-11-04T04:15:00+01:00", check=0)
    number = pseudonym(project)
    (reason, raw), = project.query("SELECT reason, raw FROM quarantine")
    assert reason == CONFLICT and json.loads(raw)["learner"] == marker(number) and '"actor"' not in raw
    # A record as versions before this one wrote it: the bare pseudonym under "actor".
    legacy = json.dumps({"actor": number, "day": "2026-11-02", "event_id": "00" * 16}, sort_keys=True)
    other = json.dumps({"actor": number + 1, "day": "2026-11-02"}, sort_keys=True)  # someone else: stays
    for origin, raw in (("statement 00", legacy), ("statement 01", other)):
        insert_quarantined(project, origin, CONFLICT, raw)
    assert len(naming(project, number)) == 2

    result = project.invoke("forget", *ACCOUNT, check=0)
    assert "deleted: 1 staged event, 2 quarantined records" in result.stdout
    assert naming(project, number) == [] and raws(project) == [other]
    assert project.query("SELECT COUNT(*) FROM staged_events WHERE actor = ?", (number,)) == [(0,)]
    assert project.query("SELECT COUNT(*) FROM learner_days WHERE actor = ?", (number,)) == [(0,)]


def test_a_statement_for_a_closed_day_carries_its_learner_and_forget_finds_it(project):
    project.configure(extra_top="min_cell_size = 2")
    project.config.write_text(project.config.read_text() + "[retention]\nstaging_days = 30\n")
    project.write("a.ndjson", crowd("2026-11-02", count=3))
    project.invoke("run", now=NOW, check=0)
    project.night_before("2026-12-13T04:15:00+01:00")
    late = statement(learner="Zq81", timestamp="2026-11-02T11:00:00Z", stored="2026-12-12T09:00:00Z")
    project.write("b.ndjson", [late] + crowd("2026-12-12", stored="2026-12-12T09:00:00Z", count=2))
    project.invoke("run", now="2026-12-13T04:15:00+01:00", check=0)
    (reason, raw), = project.query("SELECT reason, raw FROM quarantine")
    assert reason.startswith(CLOSED) and json.loads(raw)["learner"] == marker(pseudonym(project))
    result = project.invoke("forget", *ACCOUNT, check=0)
    assert "0 staged events, 1 quarantined record" in result.stdout
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]


def test_records_quarantined_under_an_earlier_key_go_when_the_key_changes_and_forget_finds_the_new_ones(project):
    project.configure(extra_top="max_quarantine_share = 0.3")
    bad = statement(learner="Zq81", timestamp="2026-11-02T10:00:00Z", score=7)  # quarantined: score out of range
    bad["context"]["extensions"] = {"https://example.edu/x": "kept"}
    project.write("a.ndjson", crowd("2026-11-02") + [bad])
    project.invoke("run", now=NOW, check=0)
    insert_quarantined(project, "b.ndjson:1", "not JSON (a stray line)", '{"withheld": "", "bytes": 9}')
    old = pseudonym(project)
    assert len(naming(project, old)) == 1
    # The key is lost; the store is re-created from the source under a new one.
    os.unlink(project.state / "pseudonymisation.key")
    rebuilt = project.invoke("rebuild", "--since", "2026-10-01", now="2026-11-03T05:00:00+01:00", check=0)
    assert "Deleted 1 quarantined record that carried a pseudonym of the previous key" in rebuilt.stderr
    new = pseudonym(project)
    assert new != old
    # The record quarantined under the old key is gone: no key could match its pseudonym any more, so no forget
    # could erase it (it stayed, stripped of its pseudonym, while its statement id still led to the learner); the
    # one the rebuild quarantined again carries the new one, which forget finds. A record naming no one stays.
    assert naming(project, old) == [] and len(naming(project, new)) == 1
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(2,)]
    assert all('"https://example.edu/x": "[text: 4 characters, keyed hash ' in raw for raw in naming(project, new))
    result = project.invoke("forget", *ACCOUNT, check=0)
    assert re.search(r"^deleted: \d+ staged events?, 1 quarantined record$", result.stdout, re.M), result.stdout
    assert project.query("SELECT reason FROM quarantine") == [("not JSON (a stray line)",)]


def closed_store(project):
    """A store whose 2 November closed: staged at first, dropped by a run 40 days later (staging_days = 30)."""
    project.configure(extra_top="min_cell_size = 2")
    project.config.write_text(project.config.read_text() + "[retention]\nstaging_days = 30\n")
    project.write("a.ndjson", crowd("2026-11-02", count=5))
    project.invoke("run", now=NOW, check=0)
    closed = project.serving()
    project.night_before("2026-12-13T04:15:00+01:00")
    project.write("b.ndjson", crowd("2026-12-12", stored="2026-12-12T09:00:00Z", count=3))
    project.invoke("run", now="2026-12-13T04:15:00+01:00", check=0)
    assert project.meta()["staging_horizon"] == "2026-11-13"
    assert project.query("SELECT MIN(day) FROM staged_events") == [("2026-12-12",)]
    return closed


def test_a_rebuild_keeps_the_closed_days_published(project):
    closed = closed_store(project)
    published = project.serving()
    assert published[0] == closed[0] and published[-1][:3] == ("2026-12-12", f"{HOME}/course/BIO101", 3)
    result = project.invoke("rebuild", "--since", "2026-12-01", now="2026-12-13T05:00:00+01:00", check=0)
    assert "days before the staging horizon 2026-11-13 stay as published" in result.stderr
    assert project.serving() == published  # the closed day (and the span's gap-filled days) as before
    if not project.postgres:  # and so is the file dashboards read, republished after the commit
        assert read_publication(publication(project))[1] == published
    # a rebuild from before the horizon re-reads the closed day's statements: held back, never counted twice
    project.invoke("rebuild", "--since", "2026-10-01", now="2026-12-13T06:00:00+01:00", check=0)
    assert project.serving() == published
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(3,)]
    if not project.postgres:
        assert read_publication(publication(project))[1] == published


def test_statements_of_closed_days_read_again_are_not_malformed(project):
    """`watermark set` before the horizon re-reads statements counted long ago: held back as closed,
    quarantined as evidence, never counted toward max_quarantine_share (default 1%)."""
    published = None
    closed_store(project)
    published = project.serving()
    project.invoke("watermark", "set", "2026-11-01T00:00", now="2026-12-13T05:00:00+01:00", check=0)
    result = project.invoke("run", now="2026-12-13T06:00:00+01:00")
    assert result.returncode == 0, result.stderr
    assert "malformed" not in result.stderr
    assert project.query("SELECT statements_read, staged, quarantined FROM runs ORDER BY started_at")[-1] == (8, 3, 5)
    assert {row[0][:len(CLOSED)] for row in project.query("SELECT reason FROM quarantine")} == {CLOSED}
    assert project.serving() == published
    # and the next run, and the next watermark set back, just the same
    project.invoke("run", now="2026-12-14T06:00:00+01:00", check=0)
    project.invoke("watermark", "set", "2026-11-01T00:00", now="2026-12-14T07:00:00+01:00", check=0)
    project.invoke("run", now="2026-12-14T08:00:00+01:00", check=0)
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(5,)]  # once per statement
    assert project.serving() == published


def test_a_malformed_record_beside_closed_ones_still_counts_toward_the_share(project):
    closed_store(project)
    project.write("c.ndjson", [statement(learner="x", timestamp="2026-12-12T10:00:00Z",
                                         stored="2026-12-12T10:00:00Z", score=5)])
    project.invoke("watermark", "set", "2026-11-01T00:00", now="2026-12-13T05:00:00+01:00", check=0)
    result = project.invoke("run", now="2026-12-13T06:00:00+01:00")
    assert result.returncode == 65
    assert "1 of 9 records in the window were malformed" in result.stderr


def test_the_store_overwrites_what_it_deletes_whatever_sqlites_own_default(sqlite_project, monkeypatch):
    """Debian's SQLite overwrites deleted content by default; upstream's does not (a pip install elsewhere), and an
    erased learner's rows would stay in the file's free pages beside the key. The store asks for it itself."""
    import sqlite3

    from lms_refresh.store.sqlite import SqliteStore

    connect = sqlite3.connect

    def with_upstreams_default(*args, **kwargs):
        db = connect(*args, **kwargs)
        db.execute("PRAGMA secure_delete = OFF")
        return db

    monkeypatch.setattr(sqlite3, "connect", with_upstreams_default)
    sqlite_project.state.mkdir()
    store = SqliteStore.open(str(sqlite_project.store), create=True)
    try:
        assert store.db.execute("PRAGMA secure_delete").fetchone() == (1,)
    finally:
        store.close()
