"""`lms-refresh forget`: erasure of one learner, under the run's lock, in one transaction (issue 15, item 5)."""

import datetime as dt
import json
import re
import subprocess

from helpers.moodledb import EXPECTED_TWO_DAYS, SITE, course_iri, load_two_days, moodle_project
from helpers.publication import publication, read_publication
from helpers.reference import expected_serving
from helpers.statements import HOME, statement
from lms_refresh.disclosure.pseudonyms import Pseudonymiser, read_key
from lms_refresh.run.lock import RunLock
from lms_refresh.sources.xapi_fields import actor_identifier

NOW = "2026-11-06T04:15:00+01:00"
NAME, ADDRESS = "Learner-Zq81", "zq81@example.edu"
LEAK = re.compile(r"zq81", re.IGNORECASE)
SINCE, UNTIL = dt.datetime(2026, 10, 1, tzinfo=dt.UTC), dt.datetime(2026, 11, 6, tzinfo=dt.UTC)


def activity():
    """Three days in two courses; the learner to forget is active on the 2nd (BIO101) and 3rd (CHEM2)."""
    items = []
    for i in range(4):
        items.append(statement(learner=f"u{i}", course="BIO101", timestamp="2026-11-02T09:00:00Z",
                               verb="passed" if i % 2 else "failed", score=0.5))
        items.append(statement(learner=f"u{i}", course="CHEM2", timestamp="2026-11-03T09:00:00Z", verb="attempted"))
        items.append(statement(learner=f"u{i}", course="BIO101", timestamp="2026-11-04T09:00:00Z", verb="completed"))
    items.append(statement(learner=NAME, course="BIO101", timestamp="2026-11-02T10:00:00Z", verb="passed", score=1.0))
    items.append(statement(learner=NAME, course="BIO101", timestamp="2026-11-02T11:00:00Z", verb="attempted"))
    items.append(statement(learner=NAME, course="CHEM2", timestamp="2026-11-03T10:00:00Z", verb="completed",
                           duration="PT5M"))
    return [json.dumps(item) for item in items]


def staged_of(project, actor):
    pseudonym = Pseudonymiser(read_key(str(project.state / "pseudonymisation.key")))(actor_identifier(actor))
    return project.query("SELECT COUNT(*) FROM staged_events WHERE actor = ?", (pseudonym,))[0][0]


def test_forget_deletes_the_learner_and_rebuilds_their_days_to_a_recount_without_them(project):
    project.configure(extra_top="min_cell_size = 2")
    lines = activity()
    project.write("a.ndjson", lines)
    project.invoke("run", now=NOW, check=0)
    before = project.serving(site=True)
    assert before == expected_serving(lines, SINCE, UNTIL, "Europe/Paris", 2)
    account = ("--account-homepage", HOME, "--account-name", NAME)

    dry = project.invoke("forget", "--dry-run", *account, check=0)
    assert "would delete: 3 staged events, 0 quarantined records" in dry.stdout
    assert project.serving(site=True) == before
    assert staged_of(project, {"account": {"homePage": HOME, "name": NAME}}) == 3
    if not project.postgres:
        assert read_publication(publication(project), site=True)[1] == before

    result = project.invoke("forget", *account, check=0)
    assert "deleted: 3 staged events, 0 quarantined records" in result.stdout
    assert "rebuilt:     2 daily partitions" in result.stdout
    assert "Forgot one learner: 3 staged events and 0 quarantined records deleted; rebuilt 2 daily partitions" \
        in result.stderr
    assert not LEAK.search(result.stdout + result.stderr + dry.stdout + dry.stderr)
    assert staged_of(project, {"account": {"homePage": HOME, "name": NAME}}) == 0
    after = project.serving(site=True)
    if not project.postgres:  # the dashboards' file is republished after the commit
        assert read_publication(publication(project), site=True)[1] == after
    assert after == expected_serving([line for line in lines if NAME not in line], SINCE, UNTIL, "Europe/Paris", 2)
    assert after != before
    untouched = [row for row in before if row[0] == "2026-11-04"]
    assert untouched and [row for row in after if row[0] == "2026-11-04"] == untouched
    # Forgetting again finds nothing and changes nothing.
    again = project.invoke("forget", *account, check=0)
    assert "deleted: 0 staged events" in again.stdout and project.serving(site=True) == after
    assert again.returncode == 0 and "Nothing in the store matched this learner" in again.stderr
    assert "Nothing in the store matched" not in result.stderr


def test_forget_by_mbox_also_deletes_the_learners_quarantined_records(project):
    project.configure(extra_top="min_cell_size = 2\nmax_quarantine_share = 0.5")
    mine = [statement(learner="-", timestamp=f"2026-11-0{day}T09:00:00Z") for day in (2, 3)]
    mine.append(statement(learner="-", score=4))  # quarantined
    for item in mine:
        item["actor"] = {"objectType": "Agent", "name": NAME, "mbox": f"mailto:{ADDRESS}"}
    others = [statement(learner=f"u{i}") for i in range(4)] + [statement(learner="u9", score=-2)]
    project.write("a.ndjson", mine + others)
    project.invoke("run", now=NOW, check=0)
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(2,)]
    result = project.invoke("forget", "--mbox", ADDRESS, check=0)
    assert "deleted: 2 staged events, 1 quarantined record" in result.stdout
    assert staged_of(project, {"mbox": f"mailto:{ADDRESS}"}) == 0
    (raw,), = project.query("SELECT raw FROM quarantine")
    assert json.loads(raw)["actor"]["account"]["homePage"] == HOME  # the other learner's record stays
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(4,)]


def test_forget_waits_for_no_one_and_says_nothing_was_forgotten_while_a_run_holds_the_lock(project):
    project.write("a.ndjson", activity())
    project.invoke("run", now=NOW, check=0)
    with RunLock(str(project.state / "refresh.lock")):
        result = project.cli("forget", "--mbox", ADDRESS)
    assert result.returncode == 69
    assert "Another refresh holds the lock (held by" in result.stderr
    assert "nothing was forgotten — run lms-refresh forget again when it has finished" in result.stderr
    assert not LEAK.search(result.stderr)


def test_forget_refuses_what_cannot_name_exactly_one_learner_of_this_source(sqlite_project):
    project = sqlite_project
    nothing = project.invoke("forget")
    assert nothing.returncode == 2 and "Name the learner by exactly one identifier" in nothing.stderr
    two = project.invoke("forget", "--mbox", ADDRESS, "--openid", "https://id.example.edu/x")
    assert two.returncode == 2 and "got 2" in two.stderr
    half = project.invoke("forget", "--account-name", NAME)
    assert half.returncode == 2 and "--account-homepage and --account-name name one account together" in half.stderr
    moodle = project.invoke("forget", "--moodle-user-id", "5")
    assert moodle.returncode == 78 and "which names learners by an agent identifier" in moodle.stderr
    empty = project.invoke("forget", "--mbox", ADDRESS, check=0)
    assert "There is no store yet" in empty.stderr and not project.store.exists()
    for blank in ("mailto:", ""):  # names no one; the message's own "mailto:" is not the learner's to redact
        nobody = project.invoke("forget", "--mbox", blank)
        assert nobody.returncode == 78 and "(actor.mbox is not a mailto: IRI with an address)" in nobody.stderr
    odd = project.invoke("forget", "--openid", "not a uri, secret")
    assert odd.returncode == 78 and "actor.openid is not a URI" in odd.stderr and "secret" not in odd.stderr


def test_forget_a_moodle_user_by_id(tmp_path, moodle, moodle_reader):
    load_two_days(moodle)
    moodle.log("cm_completion", 101, 7, "2026-11-23T11:00:00+01:00", related=101, other={"relateduserid": 101})
    project = moodle_project(tmp_path / "p", moodle, moodle_reader)
    project.configure(extra_top="min_cell_size = 2\nmax_quarantine_share = 0.5")
    project.invoke("run", now="2026-11-25T04:15:00+01:00", check=0)
    assert project.serving() == EXPECTED_TWO_DAYS
    assert project.invoke("forget", "--mbox", ADDRESS).returncode == 78  # Moodle names learners by id
    # The quarantined row names the user only by the pseudonym their events are staged under.
    pseudonym = Pseudonymiser(read_key(str(project.state / "pseudonymisation.key")))(f"moodle:{SITE}|101")
    (raw,), = project.query("SELECT raw FROM quarantine")
    assert json.loads(raw)["relateduserid"] == json.loads(raw)["userid"] == f"pseudonym:{pseudonym}"
    assert project.query("SELECT COUNT(*) FROM staged_events WHERE actor = ?", (pseudonym,)) == [(3,)]
    result = project.invoke("forget", "--moodle-user-id", "101", check=0)
    assert "deleted: 3 staged events, 1 quarantined record" in result.stdout
    # The 23rd without learner 101 (a view, a quiz attempt, a passed completion): 102 and 103 remain.
    assert project.serving() == [("2026-11-23", course_iri(7), 2, 4, None, None, 0, 0, None, None, 1,
                                  None, 0, 0, None, None, None, None), EXPECTED_TWO_DAYS[1]]
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]


def test_forget_follows_the_mappers_identity_rule_an_mbox_and_its_sha1_are_one_learner(sqlite_project):
    """The pseudonym is the mapper's own: a learner sent as an mbox in one statement and as its
    mbox_sha1sum in another is one learner to forget, whichever form names them."""
    import hashlib

    project = sqlite_project
    project.configure(extra_top="min_cell_size = 2")
    as_mbox, as_sha1 = statement(learner="-"), statement(learner="-", timestamp="2026-11-03T09:00:00Z")
    as_mbox["actor"] = {"mbox": f"mailto:{ADDRESS}"}
    as_sha1["actor"] = {"mbox_sha1sum": hashlib.sha1(f"mailto:{ADDRESS}".encode()).hexdigest()}
    project.write("a.ndjson", [as_mbox, as_sha1] + [statement(learner=f"u{i}") for i in range(3)])
    project.invoke("run", now=NOW, check=0)
    assert staged_of(project, {"mbox": f"mailto:{ADDRESS}"}) == 2
    result = project.invoke("forget", "--mbox-sha1sum", as_sha1["actor"]["mbox_sha1sum"], check=0)
    assert "deleted: 2 staged events" in result.stdout
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(3,)]


def test_forget_writes_the_report_again_so_the_page_no_longer_shows_the_learners_course(sqlite_project):
    """The HTML report is made of the publication: forget must write it again with it, not leave the erased
    learner's course on the page until the next run (a weekend, or longer if runs fail)."""
    project = sqlite_project
    project.configure(extra_top="min_cell_size = 1")
    project.write("a.ndjson", [json.dumps(statement(learner=NAME, course="PRIV1", timestamp="2026-11-02T10:00:00Z")),
                               json.dumps(statement(learner="u1", course="BIO101", timestamp="2026-11-02T10:00:00Z"))])
    project.invoke("run", now=NOW, check=0)
    page = next(project.state.parent.rglob("report.html"))
    assert "PRIV1" in page.read_text()
    project.invoke("forget", "--account-homepage", HOME, "--account-name", NAME, now=NOW, check=0)
    text = page.read_text()
    assert "PRIV1" not in text and "BIO101" in text
    assert 'id="stale"' not in text  # its freshness is status's: the last run is recent, an erasure is no refresh
    typo = project.invoke("forget", "--account-homepage", HOME, "--account-name", "nobody", now=NOW, check=0)
    assert "Nothing in the store matched" in typo.stderr and 'id="stale"' not in page.read_text()


def test_forget_on_a_store_no_run_has_published_yet_exits_0_and_says_what_it_deleted(sqlite_project):
    """The first runs failed on bad input (65): the store keeps their quarantined records as evidence but holds no
    privacy settings, so nothing was ever published. Erasing the learner's records commits; there is no
    publication to bring up to date, which is no failure (it was 78, 'nothing was published', with the erasure
    committed and unsaid, and every later forget the same)."""
    project = sqlite_project
    bad = statement(learner=NAME, timestamp="2026-11-02T09:00:00Z", score=7)  # a score out of range
    project.write("a.ndjson", [json.dumps(bad), json.dumps(statement(learner="u1", timestamp="2026-11-02T09:00:00Z"))])
    failed = project.invoke("run", now=NOW)
    assert failed.returncode == 65, failed.stderr
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(1,)]
    result = project.invoke("forget", "--account-homepage", HOME, "--account-name", NAME, now=NOW, check=0)
    assert "deleted: 0 staged events, 1 quarantined record" in result.stdout, result.stderr
    assert project.query("SELECT COUNT(*) FROM quarantine") == [(0,)]
    again = project.invoke("forget", "--account-homepage", HOME, "--account-name", NAME, now=NOW, check=0)
    assert "Nothing in the store matched this learner" in again.stderr


def test_forget_on_a_store_gone_beside_its_key_is_refused_as_a_run_is(sqlite_project):
    """Moved away (or lost), the store would come back from its backup with the learner in it: an erasure that
    says 'deleted: 0' and exits 0 there would be believed."""
    project = sqlite_project
    project.write("a.ndjson", [json.dumps(statement(learner=NAME, timestamp="2026-11-02T09:00:00Z"))])
    project.invoke("run", now=NOW, check=0)
    project.store.rename(project.store.with_name("aside.sqlite"))
    result = project.invoke("forget", "--account-homepage", HOME, "--account-name", NAME, now=NOW)
    assert result.returncode == 78, result.stderr
    assert "is missing (or empty) but the pseudonymisation key" in result.stderr
    assert "restore the store from a backup" in result.stderr and "deleted:" not in result.stdout
    checked = project.invoke("check", now=NOW)  # as the next run would
    assert checked.returncode == 78 and "is missing (or empty) but the pseudonymisation key" in checked.stderr


def test_an_identifier_given_in_bytes_that_are_not_utf8_is_a_usage_error_in_one_sentence(sqlite_project):
    """Bytes that are not UTF-8 reach Python as lone surrogates, which the pseudonymiser could not encode: forget
    exited 1 with a UnicodeEncodeError traceback, its dry run too (found by the third hostile review)."""
    project = sqlite_project
    project.write("a.ndjson", [statement(learner=NAME)])
    project.invoke("run", now=NOW, check=0)
    for option in ("--account-name", "--mbox", "--openid"):
        value = b"J\xf6rg" if option == "--account-name" else b"j\xf6rg@example.edu"
        extra = [b"--account-homepage", HOME.encode()] if option == "--account-name" else []
        for dry in ([], [b"--dry-run"]):
            argv = [part.encode() for part in project.cli_args("forget")] + extra + [option.encode(), value] + dry
            result = subprocess.run(argv, capture_output=True, env=project.environment(), timeout=300)
            stderr = result.stderr.decode("utf-8", "replace")
            assert result.returncode == 2, (option, dry, stderr)
            assert f"Invalid value for '{option}': is not UTF-8 text" in stderr and "Traceback" not in stderr
    assert project.query("SELECT COUNT(*) FROM staged_events") == [(1,)]
