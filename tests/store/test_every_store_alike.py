"""What every store must do identically: each test runs on SQLite and on PostgreSQL (the `project`
and `make_project` fixtures), through the CLI in this process (tests/helpers/inprocess.py).

What only one store has lives beside it: tests/store/test_postgresql_store.py (hosts, roles, dropped
connections), tests/store/test_state_problems.py and tests/store/test_sqlite_publication.py (a local file).
Stops and kills at every phase, on both stores: tests/refresh/test_faults_at_every_phase.py.
"""

import datetime as dt
import json

import lms_refresh
from helpers.exports import deliver
from helpers.project import Project
from helpers.reference import expected_serving
from helpers.statements import statement, voiding
from lms_refresh.demo.sample import generate, write_daily_files
from lms_refresh.store.sqlite_schema import SCHEMA_VERSION

NOW = "2026-11-03T04:15:00+01:00"  # a Tuesday, 04:15 in Paris
START = dt.date(2026, 10, 19)  # a Monday; the sample spans a DST change (25 Oct)
PARIS = "Europe/Paris"


def sample(project, days=14, learners=300, directory=None, **options):
    records = list(generate(11, START, days, learners=learners, timezone=PARIS, **options))
    write_daily_files(directory or project.source, records)
    return records


def at_0415(day):
    return f"{day.isoformat()}T04:15:00+{'02' if day < dt.date(2026, 10, 25) else '01'}:00"


# The run's results on each store (from tests/refresh/test_run_command.py).

def test_bootstrap_with_no_prior_state(project):
    assert not project.state.exists()
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp="2026-11-02T10:00:00Z") for i in range(12)])
    result = project.invoke("run", now=NOW, check=0)
    assert "FileNotFoundError" not in result.stderr
    assert (project.state / "pseudonymisation.key").stat().st_mode & 0o777 == 0o600
    assert project.serving()[0][:4] == ("2026-11-02", "https://lms.example.edu/course/BIO101", 12, 12)
    assert project.meta()["watermark"] == "2026-11-03T03:15:00.000000Z"


def test_same_window_twice_is_byte_identical(project):
    project.write("a.ndjson", [statement(learner=f"u{i % 15}", score=(i % 7) / 10, duration="PT1M3.5S",
                                         timestamp=f"2026-11-0{1 + i % 2}T1{i % 10}:00:00Z") for i in range(300)])
    project.invoke("backfill", "--since", "2026-10-30", "--until", "2026-11-03", now=NOW, check=0)
    first = project.dump()
    project.invoke("backfill", "--since", "2026-10-30", "--until", "2026-11-03", now=NOW, check=0)
    assert project.dump() == first
    assert len(project.serving()) == 2


def test_watermark_advances_only_on_success(project):
    project.configure(extra_top="max_quarantine_share = 0.05")
    project.write("a.ndjson", [statement(learner=f"u{i}", stored="2026-11-01T09:00:00Z") for i in range(20)])
    project.invoke("run", now="2026-11-01T12:00:00Z", check=0)
    before, watermark = project.dump(), project.meta()["watermark"]
    # A second window whose good statements are staged in batches before the bad file fails it.
    project.write("b.ndjson", [statement(learner=f"v{i}", timestamp="2026-11-02T09:00:00Z") for i in range(1500)])
    bad = project.write("c.ndjson", ['{"broken": '] * 200)
    result = project.invoke("run", now=NOW)
    assert result.returncode == 65
    assert "nothing was committed" in result.stderr
    assert project.dump() == before and project.meta()["watermark"] == watermark
    assert project.runs()[-1][1:3] == ("failed", 65)
    bad.unlink()
    project.invoke("run", now=NOW, check=0)
    assert project.runs()[-1][3] == watermark  # the same window again, from the old watermark
    assert [row[2] for row in project.serving()] == [1520]  # 20 from the first run + 1500


def test_exit_codes(project, tmp_path):
    project.write("a.ndjson", [statement()])
    assert project.invoke("run", now=NOW).returncode == 0
    again = project.invoke("run", now=NOW)
    assert again.returncode == 0 and "Nothing to do" in again.stderr
    usage = project.invoke("run", "--no-such-option")
    assert usage.returncode == 2 and "No such option: --no-such-option" in usage.stderr
    project.config.write_text(project.config.read_text() + "\n[stroe]\npath = 'x'\n")
    bad_config = project.invoke("run", now=NOW)
    assert bad_config.returncode == 78 and "unknown key 'stroe'" in bad_config.stderr
    project.configure()
    project.source.rename(tmp_path / "moved")
    missing = project.invoke("run", now="2026-11-04T04:15:00Z")
    assert missing.returncode == 69 and "does not exist" in missing.stderr


def test_late_statement_recomputes_its_old_partition(project):
    project.configure(extra_top="min_cell_size = 1")
    project.write("a.ndjson", [statement(learner="u1", timestamp="2026-10-27T10:00:00Z")])
    project.invoke("run", now="2026-10-28T04:15:00Z", check=0)
    assert [r[:4] for r in project.serving()] == [("2026-10-27", "https://lms.example.edu/course/BIO101", 1, 1)]
    # Stored today, happened last week (offline mobile sync).
    project.write("b.ndjson",
                  [statement(learner="u2", timestamp="2026-10-27T11:00:00Z", stored="2026-11-02T20:00:00Z")])
    project.invoke("run", now=NOW, check=0)
    assert [r[:4] for r in project.serving()] == [("2026-10-27", "https://lms.example.edu/course/BIO101", 2, 2)]


def test_duplicates_and_repulled_windows_never_change_metrics(project):
    project.configure(extra_top="min_cell_size = 1", lookback='"3d"')
    same = statement(learner="u1", timestamp="2026-11-02T10:00:00Z")
    project.write("a.ndjson", [same, same, statement(learner="u2", timestamp="2026-11-02T11:00:00Z")])
    project.write("copy.ndjson", [same])
    project.invoke("run", now=NOW, check=0)
    first = project.dump()
    assert project.serving()[0][3] == 2
    project.invoke("run", now="2026-11-04T04:15:00+01:00", check=0)  # lookback re-reads the same statements
    assert project.dump() == first


def test_voided_statement_leaves_metrics_even_if_staged_earlier(project):
    project.configure(extra_top="min_cell_size = 1", lookback='"7d"')
    target = statement(learner="u1", timestamp="2026-11-01T10:00:00Z")
    project.write("a.ndjson", [target, statement(learner="u2", timestamp="2026-11-01T10:00:00Z")])
    project.invoke("run", now="2026-11-02T04:15:00Z", check=0)
    assert project.serving()[0][2:4] == (2, 2)
    project.write("b.ndjson", [voiding(target["id"], "2026-11-02T12:00:00Z")])
    project.invoke("run", now=NOW, check=0)
    assert project.serving()[0][2:4] == (1, 1)
    project.invoke("run", now="2026-11-04T04:15:00Z", check=0)  # the lookback re-reads the target: still voided
    assert project.serving()[0][2:4] == (1, 1)


def test_dst_days_are_one_local_day_of_23_or_25_hours(project):
    project.configure(extra_top="min_cell_size = 1")
    autumn = ["2026-10-25T00:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00",
              "2026-10-25T23:30:00+01:00"]  # the 25-hour day, both 02:30s included
    spring = ["2026-03-29T00:30:00+01:00", "2026-03-29T03:30:00+02:00", "2026-03-29T23:59:00+02:00"]
    project.write("a.ndjson", [statement(learner=f"u{i}", timestamp=t, stored="2026-10-30T10:00:00Z")
                               for i, t in enumerate(autumn + spring)])
    project.invoke("run", now=NOW, check=0)
    rows = project.serving()
    days = {row[0]: row[3] for row in rows if row[3] is not None}
    assert days == {"2026-10-25": 4, "2026-03-29": 3}
    # Every day between is published withheld (no existence signal): 29 March to 25 October.
    assert len(rows) == 211 and all(row[2:] == (None,) * 8 + (1,) + (None,) * 7 for row in rows if row[0] not in days)


def test_dry_run_writes_nothing(project):
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    result = project.invoke("run", "--dry-run", now=NOW, check=0)
    assert "would write: 1 metric row, 0 suppressed" in result.stdout
    assert "2026-11-02" in result.stdout
    assert not project.state.exists()
    project.invoke("run", now=NOW, check=0)
    dump = project.dump()
    project.write("b.ndjson", [statement(learner="x", timestamp="2026-11-03T10:00:00Z")])
    project.invoke("run", "--dry-run", now="2026-11-04T04:15:00Z", check=0)
    assert project.dump() == dump and project.meta()["watermark"] == "2026-11-03T03:15:00.000000Z"


def test_backfill_never_moves_the_watermark_backwards(project):
    project.write("a.ndjson", [statement()])
    project.invoke("run", now=NOW, check=0)
    watermark = project.meta()["watermark"]
    project.invoke("backfill", "--since", "2026-10-01", "--until", "2026-10-15", now=NOW, check=0)
    assert project.meta()["watermark"] == watermark
    project.invoke("backfill", "--since", "2026-11-01", "--until", "2026-11-03T12:00", now="2026-11-05T00:00:00Z",
                   check=0)
    assert project.meta()["watermark"] == "2026-11-03T11:00:00.000000Z"


# Whole-pipeline consistency (from tests/privacy/test_suppression_in_the_store.py).

def test_daily_runs_equal_one_backfill(tmp_path, make_project):
    daily = make_project(tmp_path / "daily")
    daily.configure(extra_top="max_quarantine_share = 0.05")  # early windows are small
    sample(daily, directory=tmp_path / "exported")
    run_days = [START + dt.timedelta(days=n) for n in range(1, 18)]
    for day in run_days:
        if day.weekday() < 5:  # the timer's Mon..Fri schedule
            deliver(tmp_path / "exported", daily.source, day)
            daily.invoke("run", now=at_0415(day), check=0)
    once = make_project(tmp_path / "once")
    once.source.rmdir()
    once.source = daily.source
    once.configure(extra_top="max_quarantine_share = 0.05")
    last = at_0415(max(d for d in run_days if d.weekday() < 5))
    once.invoke("backfill", "--since", "2026-10-01", "--until", last, now=last, check=0)
    assert daily.dump() == once.dump()
    assert len(daily.serving()) > 50


def test_serving_table_matches_an_independent_reference(tmp_path, make_project):
    project = make_project(tmp_path / "ref")
    records = sample(project, days=10, learners=400, malformed_share=0.0)
    now = "2026-10-30T04:15:00+01:00"
    project.invoke("run", now=now, check=0)
    since = dt.datetime(2026, 10, 30, 3, 15, tzinfo=dt.UTC) - dt.timedelta(days=30)
    until = dt.datetime(2026, 10, 30, 3, 15, tzinfo=dt.UTC)
    expected = expected_serving([line for _, line in records], since, until, PARIS, 10)
    actual = project.serving(site=True)
    assert [row[:2] for row in actual] == [row[:2] for row in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got[:8] == want[:8] and got[10] == want[10], (got, want)
        assert (got[8] is None) == (want[8] is None) and abs((got[8] or 0) - (want[8] or 0)) < 1e-6
        assert (got[9] is None) == (want[9] is None) and abs((got[9] or 0) - (want[9] or 0)) < 1e-3
    assert any(row[2] is None for row in actual) and any(row[5] is not None for row in actual)


def test_both_stores_give_identical_serving_tables(tmp_path, postgres_server):
    """SQLite and PostgreSQL, fed the same files on the same days, publish byte-identical tables (from
    tests/store/test_postgresql_store.py): the strongest check that the two stores' metric SQL agree."""
    lite, pg = Project(tmp_path / "lite"), Project(tmp_path / "pg", postgres_server)
    pg.source.rmdir()
    pg.source = lite.source
    pg.configure(extra_top="max_quarantine_share = 0.05")
    lite.configure(extra_top="max_quarantine_share = 0.05")
    write_daily_files(tmp_path / "exported",
                      generate(5, dt.date(2026, 10, 19), 12, learners=300, timezone="Europe/Paris"))
    for now in ("2026-10-26T04:15:00+01:00", "2026-10-29T04:15:00+01:00", "2026-11-02T04:15:00+01:00"):
        deliver(tmp_path / "exported", lite.source, dt.date.fromisoformat(now[:10]))
        lite.invoke("run", now=now, check=0)
        pg.invoke("run", now=now, check=0)
    assert len(lite.serving()) > 40
    assert lite.dump() == pg.dump()


# Upgrades (from tests/store/test_postgresql_store.py).

def test_an_older_store_is_upgraded_by_the_next_run(project):
    from lms_refresh.config import load_config
    from lms_refresh.store import open_store

    config = load_config(str(project.config), {})
    project.state.mkdir()
    store = open_store(config, {}, create=True, migrate=False)
    store.migrate(target=1)  # what the previous version of lms-refresh created
    store.set_meta("watermark", "2026-11-01T00:00:00.000000Z")
    store.close()
    # status reads and does not upgrade; it says the next run will, and that is no error (exit 0)
    before = project.invoke("status")
    assert before.returncode == 0, before.stdout + before.stderr
    assert "the next run upgrades it to schema" in before.stdout, before.stdout
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(12)])
    project.invoke("run", now=NOW, check=0)
    report = json.loads(project.invoke("status", "--json", check=0).stdout)
    assert report["store"]["schema_version"] == SCHEMA_VERSION
    assert report["last_run"]["window_since"] == "2026-11-01T00:00:00.000000Z"  # the old watermark was kept
    assert report["last_run"]["version"] == lms_refresh.__version__


def test_both_drivers_keep_the_declared_driver_contract():
    """store/driver.py declares what SqlStore needs of a driver; both define all of it, with the
    declared parameters (names and kinds), and SqlStore itself calls no other driver method."""
    import inspect

    from lms_refresh.store.base import SqlStore
    from lms_refresh.store.driver import Driver
    from lms_refresh.store.postgres import PostgresStore
    from lms_refresh.store.sqlite import SqliteStore

    declared = {name: inspect.signature(member) for name, member in vars(Driver).items()
                if inspect.isfunction(member) and not name.startswith("_")}
    assert len(declared) == 14
    for driver in (SqliteStore, PostgresStore):
        for name, signature in declared.items():
            method = getattr(driver, name)
            found = [(p.name, p.kind) for p in inspect.signature(method).parameters.values()]
            assert found == [(p.name, p.kind) for p in signature.parameters.values()], (driver.__name__, name)
        assert isinstance(driver.schema_target, int) and driver.dialect is not None
    # What base.SqlStore calls on self is its own or declared: no undeclared driver method.
    source = inspect.getsource(SqlStore)
    called = set(__import__("re").findall(r"self\.(\w+)\(", source))
    assert called - set(dir(SqlStore)) - set(declared) == set()
