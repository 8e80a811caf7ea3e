"""The SQLite publication: what dashboards read, as a dashboard's own OS account reads it."""

import contextlib
import datetime as dt
import os
import sqlite3
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from helpers.commands import reachable_cli
from helpers.exports import deliver
from helpers.project import Project
from helpers.publication import directory_entries, publication, read_publication
from helpers.statements import statement
from lms_refresh.demo.sample import generate, write_daily_files

KEY = "7a" * 32
NOW = "2026-11-20T04:15:00Z"
COURSE = "https://lms.example.edu/course/BIO101"


def noisy(project, publication=""):
    project.configure(extra_top="max_quarantine_share = 0.05", privacy='method = "cell-key"' + publication)
    project.state.mkdir(exist_ok=True)
    project.state.chmod(0o750)  # as systemd's StateDirectory= and the engine create it
    key = project.state / "pseudonymisation.key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)


def learners(count, day="2026-11-02", course="BIO101", verb="experienced"):
    return [statement(learner=f"learner-{i}@example.edu", course=course, verb=verb,
                      timestamp=f"{day}T10:00:00Z") for i in range(count)]


def test_the_publication_holds_the_published_rows_and_nothing_else(sqlite_project):
    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(14) + learners(3, verb="failed")
                         + learners(2, day="2026-11-04", course="TINY"))
    sqlite_project.invoke("run", now=NOW, check=0)
    path = publication(sqlite_project)
    tables, rows, about = read_publication(path)
    assert tables == {"daily_metrics", "weekly_metrics", "monthly_metrics", "term_metrics", "courses", "publication",
                      "site_daily_metrics", "site_weekly_metrics", "site_monthly_metrics", "site_term_metrics",
                      "freshness", "categories", "category_daily_metrics", "category_weekly_metrics",
                      "category_monthly_metrics", "category_term_metrics"}
    assert rows == sqlite_project.serving() and len(rows) == 1 and rows[0][7] is None  # 3 failed: withheld
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        for table in ("weekly_metrics", "monthly_metrics"):  # the store's serving views, copied
            assert db.execute(f"SELECT * FROM {table} ORDER BY period, course").fetchall() == sqlite_project.query(
                f"SELECT * FROM serving_{table} ORDER BY period, course")
        assert db.execute("SELECT period, period_start, period_end, course, suppressed, complete "
                          "FROM weekly_metrics ORDER BY period, course").fetchall() == [
            ("2026-W45", "2026-11-02", "2026-11-08", COURSE, 1, 1)]
        assert db.execute("SELECT period, period_start, period_end, suppressed, complete "
                          "FROM site_weekly_metrics").fetchall() == [("2026-W45", "2026-11-02", "2026-11-08", 1, 1)]
    assert about == (10, "cell-key", 3, 2.0, 0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    # no journal, no WAL, no temporary: the publication and the HTML report a run writes beside it
    assert directory_entries(path.parent) == ["report-files", "report.html", "serving.sqlite"]
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    actors = [row[0] for row in sqlite_project.query("SELECT DISTINCT actor FROM staged_events")]
    data = path.read_bytes()
    assert b"learner-" not in data and b"TINY" not in data
    assert not any(str(actor).encode() in data or actor.to_bytes(8, "big", signed=True) in data for actor in actors)


def tables_but_freshness(path):
    """{table: its rows in the file's order} of every table of the publication at `path` but `freshness`, and the
    file's schema."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        found = {name: db.execute(f"SELECT * FROM {name}").fetchall() for name in names  # as stored
                 if name not in ("freshness", "publication")}
        found["publication"] = db.execute("SELECT min_cell_size, method, max_noise FROM publication").fetchall()
        found["schema"] = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        return found


def test_identical_rows_give_a_byte_identical_publication(tmp_path):
    start = dt.date(2026, 10, 19)
    daily = Project(tmp_path / "daily")
    noisy(daily)
    # The exporter writes one file a day: a run sees the files of its day and before, none stored after it.
    exported = tmp_path / "exported"
    write_daily_files(exported, generate(11, start, 10, learners=200, timezone="Europe/Paris"))
    days = [start + dt.timedelta(days=n) for n in range(1, 13) if (start + dt.timedelta(days=n)).weekday() < 5]
    for day in days:
        deliver(exported, daily.source, day)
        daily.invoke("run", now=f"{day.isoformat()}T04:15:00+01:00", check=0)
    once = Project(tmp_path / "once")
    once.source.rmdir()
    once.source = daily.source
    noisy(once)
    last = f"{days[-1].isoformat()}T04:15:00+01:00"
    once.invoke("backfill", "--since", "2026-10-01", "--until", last, now=last, check=0)
    first = publication(once).read_bytes()
    # The same rows, table by table, in the same order; only the freshness differs (the daily runs' last success,
    # none for a backfill alone).
    assert tables_but_freshness(publication(daily)) == tables_but_freshness(publication(once))
    assert len(read_publication(publication(once))[1]) > 30
    # The same window again: the same rows, so the file is left as it is.
    before = publication(once).stat()
    once.invoke("backfill", "--since", "2026-10-01", "--until", last, now=last, check=0)
    assert publication(once).read_bytes() == first and publication(once).stat().st_ino == before.st_ino


def test_a_run_that_committed_but_did_not_publish_is_published_by_the_next_run(sqlite_project):
    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    sqlite_project.invoke("run", now=NOW, check=0)
    path = publication(sqlite_project)
    old = path.read_bytes()
    sqlite_project.write("b.ndjson", learners(15, day="2026-11-20"))
    sqlite_project.invoke("run", now="2026-11-21T04:15:00Z", check=0)
    new = path.read_bytes()
    assert new != old
    path.write_bytes(old)  # the state after a crash between the state's commit and the rename
    status = sqlite_project.invoke("status", check=0).stdout
    assert f"publication:  {path}, published " in status and "behind the store, the next run publishes it" in status
    result = sqlite_project.invoke("run", now="2026-11-21T04:15:00Z", check=0)  # nothing to read, still publishes
    # 19 days, the course's and the site's
    assert "Nothing to do" in result.stderr and f"Published 38 rows to {path}" in result.stderr
    assert path.read_bytes() == new
    assert "behind" not in sqlite_project.invoke("status", check=0).stdout


def test_a_publication_that_cannot_be_written_fails_after_the_commit_and_says_what_to_fix(sqlite_project, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    target = blocker / "serving.sqlite"
    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    sqlite_project.invoke("run", now=NOW, check=0)
    noisy(sqlite_project, f'\n[publication]\npath = "{target}"')
    sqlite_project.write("b.ndjson", learners(12, day="2026-11-19"))
    result = sqlite_project.invoke("run", now="2026-11-21T04:15:00Z")
    assert result.returncode == 78
    assert (f"Cannot write the publication {target}: {blocker} is not a directory; the store is committed"
            in result.stderr)
    assert sqlite_project.meta()["watermark"] == "2026-11-21T04:15:00.000000Z"  # the run itself committed
    noisy(sqlite_project)
    sqlite_project.invoke("run", now="2026-11-21T04:20:00Z", check=0)
    assert read_publication(publication(sqlite_project))[1] == sqlite_project.serving()


def test_check_refuses_a_publication_whose_directory_is_no_directory(sqlite_project, tmp_path):
    """The run above fails after its commit; `check` said "ok" to the same configuration."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    noisy(sqlite_project, f'\n[publication]\npath = "{blocker / "serving.sqlite"}"')
    result = sqlite_project.invoke("check", now=NOW)
    assert result.returncode == 78, result.stdout
    assert (f"The publication {blocker / 'serving.sqlite'} cannot be written: {blocker} is not a directory, so a "
            "run would commit the store and then fail (78) to publish it" in result.stderr)


def check_as_nobody(project, publication_directory, report_directory=None):
    """`check` as 'nobody', who owns the state directory, with the publication (and report) in those directories."""
    settings = f'\n[publication]\npath = "{publication_directory / "serving.sqlite"}"'
    if report_directory is not None:
        settings += f'\n[report]\npath = "{report_directory / "report.html"}"'
    noisy(project, settings)
    for path in (project.state, *project.state.iterdir()):
        os.chown(path, 65534, 65534)
    return subprocess.run(["runuser", "-u", "nobody", "--"] + reachable_cli(project.root.parent)
                          + ["--config", str(project.config), "--now", NOW, "check"],
                          capture_output=True, text=True, cwd=project.root.parent, timeout=120)


def test_check_refuses_a_publication_directory_the_service_user_cannot_write(world_readable_root):
    project = Project(world_readable_root / "p")
    (world_readable_root / "p").chmod(0o755)
    published = world_readable_root / "published"  # root's, 0755: 'nobody' may not write there
    published.mkdir(mode=0o755)
    result = check_as_nobody(project, published)
    assert result.returncode == 78, (result.stdout, result.stderr)
    assert (f"The publication {published / 'serving.sqlite'} cannot be written: {published} is not writable by "
            "'nobody', so a run would commit the store and then fail (78) to publish it; make that directory "
            "writable by the service user" in result.stderr)
    missing = published / "one" / "two"  # a run would have to create it in `published`
    result = check_as_nobody(project, missing)
    assert result.returncode == 78
    assert f"cannot be written: {published} is not writable by 'nobody'" in result.stderr
    os.chown(published, 65534, 65534)
    result = check_as_nobody(project, missing)
    assert result.returncode == 0, result.stderr
    assert (f"ok  publication {missing / 'serving.sqlite'}: its directory will be created in {published}, which "
            "is writable by 'nobody'") in result.stdout


def test_check_notes_a_report_directory_the_service_user_cannot_write(world_readable_root):
    """A run only warns that it wrote no report: `check` says so in a note and exits 0."""
    project = Project(world_readable_root / "p")
    (world_readable_root / "p").chmod(0o755)
    published, reports = world_readable_root / "published", world_readable_root / "reports"
    published.mkdir()
    reports.mkdir(mode=0o755)
    os.chown(published, 65534, 65534)
    result = check_as_nobody(project, published, reports)
    assert result.returncode == 0, result.stderr
    assert f"ok  publication {published / 'serving.sqlite'}: its directory is writable by 'nobody'" in result.stdout
    assert (f"note  report: warning: the report {reports / 'report.html'} cannot be written: {reports} is not "
            "writable by 'nobody', so each run would publish but warn that it wrote no report" in result.stdout)


def test_check_notes_a_report_files_directory_the_service_user_cannot_write(world_readable_root):
    """The report's course pages and CSVs go into report-files/ beside it: one made by root earlier, which the
    service user may not write, costs each run its report as a report directory it may not write does."""
    project = Project(world_readable_root / "p")
    (world_readable_root / "p").chmod(0o755)
    published = world_readable_root / "published"
    published.mkdir()
    os.chown(published, 65534, 65534)
    (published / "report-files").mkdir(mode=0o755)  # root's
    result = check_as_nobody(project, published, published)
    assert result.returncode == 0, result.stderr
    assert f"ok  report {published / 'report.html'}: its directory is writable by 'nobody'" in result.stdout
    assert (f"note  report: warning: the report's course pages and CSVs cannot be written: {published / 'report-files'}"
            " is not writable by 'nobody', so each run would publish but warn that it wrote no report" in result.stdout)
    os.chown(published / "report-files", 65534, 65534)
    result = check_as_nobody(project, published, published)
    assert result.returncode == 0 and "course pages and CSVs cannot be written" not in result.stdout, result.stdout


# -- a dashboard's own account ------------------------------------------------------------------------

@contextlib.contextmanager
def os_account(*groups):
    """A throwaway system account (and its groups), removed afterwards."""
    name = f"dash{uuid.uuid4().hex[:8]}"
    for group in groups:
        subprocess.run(["groupadd", "-f", group], check=True)
    extra = ["-G", ",".join(groups)] if groups else []
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", *extra, name],
                   check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def as_user(user, *command):
    return subprocess.run(["runuser", "-u", user, "--", *command], capture_output=True, text=True, timeout=60)


READ_WITH_PYTHON = ("import sqlite3, sys; db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True); "
                    "print(db.execute('SELECT COUNT(*), SUM(active_learners) FROM daily_metrics').fetchone())")


@pytest.fixture
def world_readable_root():
    """A directory other accounts can reach (pytest's own tmp_path is 0700)."""
    if os.geteuid() != 0:
        pytest.skip("creating a separate OS account for the dashboard needs root")
    root = Path(tempfile.mkdtemp(prefix="lms-publication-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=False)


def test_a_dashboard_account_reads_the_publication_and_nothing_of_the_state(world_readable_root):
    project = Project(world_readable_root / "p")
    noisy(project)
    project.write("a.ndjson", learners(12))
    project.invoke("run", now=NOW, check=0)
    path = publication(project)
    assert stat.S_IMODE(project.state.stat().st_mode) == 0o750
    with os_account() as dashboard:
        cli = as_user(dashboard, "sqlite3", "-readonly", str(path),
                      "SELECT day, 'site', suppressed FROM site_daily_metrics UNION ALL "
                      "SELECT day, course, suppressed FROM daily_metrics")
        assert (cli.returncode, cli.stdout, cli.stderr) == (0, f"2026-11-02|site|0\n2026-11-02|{COURSE}|0\n", "")
        python = as_user(dashboard, "/usr/bin/python3", "-c", READ_WITH_PYTHON, str(path))
        assert python.returncode == 0 and python.stdout.startswith("(1, "), python.stderr
        for private in (project.store, project.state / "pseudonymisation.key"):
            denied = as_user(dashboard, "/usr/bin/python3", "-c", READ_WITH_PYTHON, str(private))
            assert denied.returncode == 1 and "unable to open database file" in denied.stderr
            assert "Permission denied" in as_user(dashboard, "cat", str(private)).stderr
        # A reader keeps reading while the next run replaces the file.
        project.write("b.ndjson", learners(13, day="2026-11-20"))
        project.invoke("run", now="2026-11-21T04:15:00Z", check=0)
        again = as_user(dashboard, "sqlite3", "-readonly", str(path), "SELECT COUNT(*) FROM daily_metrics")
        assert again.stdout == "19\n"  # 19 days of the course, the site's in site_daily_metrics


def setgid_directory(path, group):
    """What the README's tmpfiles.d line for publication.group makes: 'd PATH 2750 <service user> GROUP -'."""
    import grp

    path.mkdir(exist_ok=True)
    os.chown(path, -1, grp.getgrnam(group).gr_gid)
    path.chmod(0o2750)


def test_publication_group_limits_the_readers_to_its_members(world_readable_root):
    group = f"dashg{uuid.uuid4().hex[:6]}"
    project = Project(world_readable_root / "p")
    noisy(project, f'\n[publication]\ngroup = "{group}"')
    project.write("a.ndjson", learners(12))
    with os_account(group) as member, os_account() as outsider:
        setgid_directory(publication(project).parent, group)
        project.invoke("run", now=NOW, check=0)
        path = publication(project)
        assert stat.S_IMODE(path.stat().st_mode) == 0o640 and stat.S_IMODE(path.parent.stat().st_mode) == 0o2750
        report = path.parent / "report.html"
        assert (stat.S_IMODE(report.stat().st_mode), report.stat().st_gid) == (0o640, path.stat().st_gid)
        read = as_user(member, "/usr/bin/python3", "-c", READ_WITH_PYTHON, str(path))
        assert read.returncode == 0 and read.stdout.startswith("(1, "), read.stderr
        refused = as_user(outsider, "sqlite3", "-readonly", str(path), "SELECT 1")
        assert refused.returncode != 0 and "unable to open database" in refused.stderr
    subprocess.run(["groupdel", group], check=False)


def test_an_unknown_publication_group_is_a_configuration_error(sqlite_project):
    noisy(sqlite_project, '\n[publication]\ngroup = "no-such-group-here"')
    sqlite_project.write("a.ndjson", learners(12))
    result = sqlite_project.invoke("run", now=NOW)
    assert result.returncode == 78
    assert "The group 'no-such-group-here' named by publication.group does not exist" in result.stderr


# -- failures after the commit (issue 20, class 4) ------------------------------------------------------

def publication_leftovers(project):
    kept = ("serving.sqlite", "report.html", "report-files")  # the publication and the HTML report beside it
    return [name for name in directory_entries(publication(project).parent) if name not in kept]


def check_line(project, now):
    result = project.invoke("status", "--check", now=now)
    return result.returncode, result.stdout.strip()


def test_a_publication_that_cannot_be_written_is_in_the_run_log_and_status_check_warns(sqlite_project, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    sqlite_project.invoke("run", now="2026-11-19T04:15:00Z", check=0)
    noisy(sqlite_project, f'\n[publication]\npath = "{blocker / "serving.sqlite"}"')
    sqlite_project.write("b.ndjson", learners(12, day="2026-11-19"))
    now = "2026-11-20T04:20:00Z"
    result = sqlite_project.invoke("run", now=now)
    assert result.returncode == 78 and "Traceback" not in result.stderr
    kind, outcome, code = sqlite_project.runs()[-1][:3]
    assert (kind, outcome, code) == ("run", "publish-failed", 78)
    row = sqlite_project.query("SELECT rows_written, message FROM runs")[-1]
    assert row[0] > 0 and row[1].startswith(f"Cannot write the publication {blocker / 'serving.sqlite'}: "
                                             f"{blocker} is not a directory; the store is committed")
    code, line = check_line(sqlite_project, now)
    assert code == 1 and line.startswith("LMS-REFRESH WARNING - the last run (run, started ") and \
        "failed with exit status 78: Cannot write the publication" in line
    noisy(sqlite_project)
    sqlite_project.invoke("run", now="2026-11-20T04:25:00Z", check=0)  # nothing to read: publishes
    assert read_publication(publication(sqlite_project))[1] == sqlite_project.serving()
    assert check_line(sqlite_project, "2026-11-20T04:25:00Z")[0] == 0


def test_an_unexpected_failure_while_publishing_says_the_store_is_committed(sqlite_project):
    from lms_refresh import faults

    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    result = sqlite_project.invoke("run", now=NOW,
                                   env={faults.ENVIRONMENT_VARIABLE: "replace-synced/serving.sqlite:raise"})
    assert result.returncode == 1
    assert ("Unexpected failure while publishing (InjectedFault: fault injected at replace-synced); the store is "
            "committed, and the next run publishes it.") in result.stderr
    assert "nothing was committed" not in result.stderr
    assert sqlite_project.runs()[-1][:3] == ("run", "publish-failed", 1) and len(sqlite_project.serving()) == 1
    assert not publication(sqlite_project).exists() and publication_leftovers(sqlite_project) == []
    sqlite_project.invoke("run", now=NOW, check=0)
    assert read_publication(publication(sqlite_project))[1] == sqlite_project.serving()


def test_an_io_error_while_publishing_names_the_device_not_the_permissions(sqlite_project):
    """EIO is not a permission to grant: the sentence sends the operator to the kernel's log and the device."""
    from lms_refresh import faults

    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    result = sqlite_project.invoke("run", now=NOW,
                                   env={faults.ENVIRONMENT_VARIABLE: "replace-written/serving.sqlite:eio"})
    path = publication(sqlite_project)
    assert result.returncode == 78
    assert (f"Cannot write the publication {path}: an input/output error (Input/output error (injected at "
            "replace-written)); the disk or the file system under it failed — see the kernel's log (journalctl -k) "
            "and check the device — the store is committed, and the next run publishes it.") in result.stderr
    assert "writable" not in result.stderr and "nothing was committed" not in result.stderr
    assert sqlite_project.runs()[-1][:3] == ("run", "publish-failed", 78)
    assert not path.exists() and publication_leftovers(sqlite_project) == []
    sqlite_project.invoke("run", now=NOW, check=0)
    assert read_publication(path)[1] == sqlite_project.serving()


def _sqlite_bug(kind):
    """A `_finish` (the publication's last statement) with a bug of ours of `kind`: SQLite refuses the statement."""
    def finish(execute, schema, settings, wanted):
        if kind == "ProgrammingError":  # two values bound to one placeholder
            execute(f"UPDATE {schema}.publication SET digest = ?", (wanted, wanted))
        elif kind == "IntegrityError":  # the courses' key twice
            execute(f"INSERT INTO {schema}.courses SELECT * FROM {schema}.courses UNION ALL SELECT * FROM "
                    f"{schema}.courses")
        else:  # OperationalError, SQLITE_ERROR: a table that is not there
            execute(f"INSERT INTO {schema}.no_such_table VALUES (1)")
    return finish


@pytest.mark.parametrize("kind", ["ProgrammingError", "IntegrityError", "OperationalError"])
def test_a_sqlite_error_of_ours_while_publishing_is_a_bug_with_its_traceback_not_a_failed_disk(
        sqlite_project, monkeypatch, kind):
    """Only a SQLite error that says the file or the device failed is told as the disk's: any other is a bug, which
    exits 1 (an unexpected failure) with its traceback for whoever fixes it, and sends no one to the kernel's log."""
    from lms_refresh.run import publication as module

    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    monkeypatch.setattr(module, "_finish", _sqlite_bug(kind))
    result = sqlite_project.invoke("run", now=NOW)
    assert result.returncode == 1, result.stderr
    assert f"Unexpected failure while publishing ({kind}: " in result.stderr
    assert "the store is committed, and the next run publishes it." in result.stderr
    assert "Traceback (most recent call last)" in result.stderr and f"sqlite3.{kind}: " in result.stderr
    assert "input/output" not in result.stderr and "journalctl -k" not in result.stderr
    assert "nothing was committed" not in result.stderr
    assert sqlite_project.runs()[-1][:3] == ("run", "publish-failed", 1) and len(sqlite_project.serving()) == 1
    assert not publication(sqlite_project).exists() and publication_leftovers(sqlite_project) == []


@pytest.mark.parametrize("name, code, sentence", [
    ("SQLITE_IOERR_WRITE", 78, "an input/output error (disk I/O error); the disk or the file system under it failed "
                               "— see the kernel's log (journalctl -k) and check the device — the store is committed, "
                               "and the next run publishes it."),
    ("SQLITE_FULL", 69, "the disk is full (database or disk is full); free some space — the store is committed, and "
                        "the next run publishes it."),
])
def test_a_sqlite_error_that_says_the_disk_failed_while_publishing_is_told_as_the_disks(
        sqlite_project, monkeypatch, name, code, sentence):
    """What SQLite says of the file (its result code, not its words) decides: an I/O error or a full disk."""
    from lms_refresh.run import publication as module

    def failing(execute, schema, settings, wanted):
        error = sqlite3.OperationalError("disk I/O error" if "IOERR" in name else "database or disk is full")
        error.sqlite_errorcode, error.sqlite_errorname = getattr(sqlite3, name), name
        raise error

    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    monkeypatch.setattr(module, "_finish", failing)
    result = sqlite_project.invoke("run", now=NOW)
    assert result.returncode == code, result.stderr
    assert f"Cannot write the publication {publication(sqlite_project)}: {sentence}" in result.stderr
    assert "Traceback" not in result.stderr and "Unexpected" not in result.stderr
    assert sqlite_project.runs()[-1][:3] == ("run", "publish-failed", code)
    assert not publication(sqlite_project).exists() and publication_leftovers(sqlite_project) == []


def test_an_unexpected_failure_after_the_commit_and_the_publication_does_not_say_nothing_was_committed(
        sqlite_project, tmp_path, monkeypatch):
    """Past the publication, the job still reports (the metrics textfile): an unexpected failure there exits 1
    with the one sentence the CLI writes for any unexpected failure — which must then say the work stands."""
    from lms_refresh.ops import job

    def broken(*args, **kwargs):
        raise KeyError("a bug in the textfile's body")

    noisy(sqlite_project)
    sqlite_project.config.write_text(sqlite_project.config.read_text() +
                                     f'[monitoring]\ntextfile = "{tmp_path / "lms_refresh.prom"}"\n')
    sqlite_project.write("a.ndjson", learners(12))
    monkeypatch.setattr(job, "metrics_text", broken)
    result = sqlite_project.invoke("run", now=NOW)
    assert result.returncode == 1, result.stderr
    assert ("Unexpected failure (KeyError: \"a bug in the textfile's body\"); its work was committed before it and "
            "stands; the next run goes on from there.") in result.stderr
    assert "nothing was committed" not in result.stderr
    assert sqlite_project.runs()[-1][:3] == ("run", "success", 0) and len(sqlite_project.serving()) == 1
    assert read_publication(publication(sqlite_project))[1] == sqlite_project.serving()
    monkeypatch.undo()
    failed = sqlite_project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-10", now=NOW,
                                   env={"LMS_REFRESH_FAULT": "before-commit:raise"})
    assert failed.returncode == 1 and "); nothing was committed." in failed.stderr, failed.stderr  # before it: true


def test_sigterm_while_the_run_publishes_lets_it_finish_and_exit_0(sqlite_project):
    from lms_refresh import faults

    noisy(sqlite_project)
    sqlite_project.write("a.ndjson", learners(12))
    sqlite_project.invoke("run", now=NOW, check=0)
    sqlite_project.write("b.ndjson", learners(13, day="2026-11-20"))
    for step in ("replace-written", "replace-renamed"):
        result = sqlite_project.cli("run", now="2026-11-21T04:15:00Z",
                                    env={faults.ENVIRONMENT_VARIABLE: f"{step}/serving.sqlite:term"})
        assert result.returncode == 0, result.stderr
        assert "SIGTERM after the run committed" in result.stderr and "rolled back" not in result.stderr
        assert read_publication(publication(sqlite_project))[1] == sqlite_project.serving()
        assert publication_leftovers(sqlite_project) == []
        assert sqlite_project.runs()[-1][:3] in (("run", "success", 0), ("run", "nothing-to-do", 0))
        publication(sqlite_project).unlink()  # the second step's run has something to publish


def test_sigterm_while_forget_republishes_keeps_the_erasure_and_says_so(sqlite_project):
    from lms_refresh import faults

    sqlite_project.configure()  # exact counts: one learner fewer changes the published row
    sqlite_project.write("a.ndjson", learners(12))
    sqlite_project.invoke("run", now=NOW, check=0)
    before = read_publication(publication(sqlite_project))[1]
    result = sqlite_project.cli("forget", "--account-homepage", "https://lms.example.edu", "--account-name",
                                "learner-0@example.edu",
                                env={faults.ENVIRONMENT_VARIABLE: "replace-synced/serving.sqlite:term"})
    assert result.returncode == 0, result.stderr
    assert "Forgot one learner: 1 staged event" in result.stderr
    assert "SIGTERM after the commit; the command finishes, and what it committed stands." in result.stderr
    assert "nothing was committed" not in result.stderr and "after the run committed" not in result.stderr
    after = read_publication(publication(sqlite_project))[1]
    assert after == sqlite_project.serving() and after != before and publication_leftovers(sqlite_project) == []
    assert sqlite_project.query("SELECT COUNT(DISTINCT actor) FROM staged_events") == [(11,)]


def test_a_changed_publication_group_applies_at_the_next_run_without_new_rows(sqlite_project):
    if os.geteuid() != 0:
        pytest.skip("giving a directory to a group of which the service user is no member needs root")
    import grp

    group = f"dashg{uuid.uuid4().hex[:6]}"
    subprocess.run(["groupadd", group], check=True)
    try:
        noisy(sqlite_project)
        sqlite_project.write("a.ndjson", learners(12))
        sqlite_project.invoke("run", now=NOW, check=0)
        path = publication(sqlite_project)
        rows = read_publication(path)[1]
        gid = grp.getgrnam(group).gr_gid
        noisy(sqlite_project, f'\n[publication]\ngroup = "{group}"')  # narrowed
        # The directory does not give new files the group (and no file's group is changed): refused before the run.
        refused = sqlite_project.invoke("run", now=NOW)
        assert refused.returncode == 78 and (
            f"publication.group = '{group}' needs {path.parent} to be a setgid directory of group '{group}'"
            in refused.stderr) and "nothing was done." in refused.stderr, refused.stderr
        assert "Nothing to do" not in refused.stderr and stat.S_IMODE(path.stat().st_mode) == 0o644
        check = sqlite_project.invoke("check", now=NOW)
        assert check.returncode == 78 and "a run would refuse to start (78) for the same reason." in check.stderr
        setgid_directory(path.parent, group)  # as the README's tmpfiles.d line makes it
        assert f"a new file in {path.parent} gets that group" in sqlite_project.invoke("check", now=NOW, check=0).stdout
        result = sqlite_project.invoke("run", now=NOW, check=0)
        assert "Nothing to do" in result.stderr and f"Published 2 rows to {path}" in result.stderr
        info, directory = path.stat(), path.parent.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o640, gid)
        assert (stat.S_IMODE(directory.st_mode), directory.st_gid) == (0o2750, gid)
        assert read_publication(path)[1] == rows and publication_leftovers(sqlite_project) == []
        assert "Published" not in sqlite_project.invoke("run", now=NOW, check=0).stderr  # now current
        noisy(sqlite_project)  # widened again: every account reads it, the directory no longer narrows it
        sqlite_project.invoke("run", now=NOW, check=0)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644 and stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    finally:
        subprocess.run(["groupdel", group], check=False)


@pytest.fixture
def no_chown(monkeypatch):
    """Every call that changes a file's owner or group fails as the unit's SystemCallFilter=~@privileged makes it
    fail (EPERM), whoever asks: the test runs as root, where they would otherwise succeed."""
    def refused(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    for name in ("chown", "fchown", "lchown"):
        monkeypatch.setattr(os, name, refused)
    import shutil

    monkeypatch.setattr(shutil, "chown", refused)


def test_every_file_a_run_writes_is_written_without_changing_an_owner_or_a_group(sqlite_project, no_chown):
    """The unit forbids chown and fchown: the report (which gave itself the publication's group, its own one
    included, with fchown), the publication, the textfile, the key and the store are all written all the same."""
    textfile = sqlite_project.root / "lms_refresh.prom"
    noisy(sqlite_project, f'\n[monitoring]\ntextfile = "{textfile}"')
    sqlite_project.write("a.ndjson", learners(12))
    result = sqlite_project.invoke("run", now=NOW, check=0)
    assert "Could not" not in result.stderr, result.stderr
    report = publication(sqlite_project).parent / "report.html"
    assert "LMS activity report" in report.read_text() and stat.S_IMODE(report.stat().st_mode) == 0o644
    assert "lms_refresh_report_failed 0.000000" in textfile.read_text()
    status = sqlite_project.invoke("status", "--check", now=NOW)
    assert status.returncode == 0 and status.stdout.startswith("LMS-REFRESH OK"), status.stdout


def test_a_report_that_cannot_be_written_shows_in_check_status_and_the_textfile(sqlite_project):
    textfile = sqlite_project.root / "lms_refresh.prom"
    noisy(sqlite_project, f'\n[monitoring]\ntextfile = "{textfile}"')
    sqlite_project.write("a.ndjson", learners(12))
    sqlite_project.invoke("run", now=NOW, check=0)
    report = publication(sqlite_project).parent / "report.html"
    sqlite_project.write("b.ndjson", learners(12, day="2026-11-21"))
    failing = {"LMS_REFRESH_FAULT": "replace-written/report.html:eio"}  # the device fails under the page only
    result = sqlite_project.invoke("run", now="2026-11-21T12:00:00Z", env=failing, check=0)
    assert f"Could not write the HTML report {report}" in result.stderr
    assert "lms_refresh_report_failed 1.000000" in textfile.read_text()
    plugin = sqlite_project.invoke("status", "--check", now="2026-11-21T12:05:00Z")
    assert plugin.returncode == 1 and plugin.stdout.startswith(
        f"LMS-REFRESH WARNING - the HTML report {report} could not be written (StateError: Cannot write the report "
        f"{report}: an input/output error"), plugin.stdout
    assert f"REPORT:       {report} was NOT written at 2026-11-21T12:00:00" in sqlite_project.invoke(
        "status", check=0).stdout
    check = sqlite_project.invoke("check", now="2026-11-21T12:05:00Z", check=0)
    assert f"the last run could not write the report {report} (StateError" in check.stdout, check.stdout
    sqlite_project.invoke("run", now="2026-11-21T13:00:00Z", check=0)  # writes it: the note goes
    assert "lms_refresh_report_failed 0.000000" in textfile.read_text()
    assert sqlite_project.invoke("status", "--check", now="2026-11-21T13:05:00Z").returncode == 0
    assert "the last run could not write the report" not in sqlite_project.invoke("check", check=0).stdout
