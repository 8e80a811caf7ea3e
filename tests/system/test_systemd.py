"""End to end under a real systemd: build the .deb, boot Debian in systemd-nspawn, install, assert.

Runs once per Debian release (12 bookworm, 13 trixie). Needs root, network
access to Debian's archive, systemd-nspawn and mmdebstrap (tests/run.sh
installs them). The tests of one release share one booted container and run
in file order; the last one purges the package.
"""

import contextlib
import datetime as dt
import functools
import glob
import json
import os
import random
import re
import shutil
import subprocess
import tempfile

import pytest

import lms_refresh
from helpers.container import Container, build_in_fresh_root, host
from helpers.moodledb import EXPECTED_TWO_DAYS, READER_PASSWORD, SITE, load_two_days
from lms_refresh.demo.sample import _VERB_CHOICES, COURSES, generate, statement, write_daily_files
from lms_refresh.run.report_html import local_time
from lms_refresh.store.tables import SCHEMA_VERSION

pytestmark = pytest.mark.system
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = "lms-refresh.service"
CONFIG = """\
timezone = "Europe/Paris"
max_quarantine_share = 0.05
[window]
bootstrap_days = 30
safety_lag = "0s"
[source]
type = "xapi-ndjson"
path = "{path}"
"""


@pytest.fixture(scope="session")
def workdir():
    path = tempfile.mkdtemp(prefix="lmsr-system-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def documented_build_commands():
    """The README's build steps, as written: its install section's commands up to dpkg-buildpackage."""
    with open(os.path.join(REPO, "README.md")) as readme:
        section = readme.read().split("## Install on Debian 13 or 12", 1)[1]
    commands = []
    for line in section.splitlines():
        if line.startswith("    ") and not line.strip().startswith("#"):
            commands.append(line.split("  #")[0].strip())
            if "dpkg-buildpackage" in commands[-1]:
                return commands
    raise AssertionError("The README's install section has no dpkg-buildpackage command.")


def test_the_readme_builds_with_build_dep_first():
    commands = documented_build_commands()
    assert commands[0] == "apt-get build-dep ./", commands
    assert commands[-1].endswith("dpkg-buildpackage -us -uc -b"), commands


@pytest.fixture(scope="session")
def debs(workdir):
    """Build the package from the tracked files, as a clean clone would, on a fresh Debian 12 with only
    what `apt-get build-dep ./` installs (the README's steps): the .deb every release then installs."""
    source = os.path.join(workdir, "src", "lms-refresh")
    os.makedirs(source)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if os.path.isfile(os.path.join(REPO, name)):
            os.makedirs(os.path.join(source, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(REPO, name), os.path.join(source, name))
    build_in_fresh_root("bookworm", workdir, source, "\n".join(documented_build_commands()))
    out = os.path.join(workdir, "debs")
    os.makedirs(out)
    for built in glob.glob(os.path.join(workdir, "src", "lms-refresh_*")):
        shutil.move(built, out)
    return out


def test_package_builds_and_passes_lintian(debs):
    changes = glob.glob(os.path.join(debs, "*.changes"))[0]
    result = host("lintian", "--fail-on", "error,warning", changes, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^[EW]: ", result.stdout, re.M) is None, result.stdout


def test_the_package_ships_the_datasette_metadata_as_generated(debs, tmp_path):
    """/usr/share/lms-refresh/: the metadata and plugin of docs/datasette.md's server command, as the dictionary
    generates them (tests/operations/test_datasette_served.py serves the same files)."""
    from lms_refresh.store import datasette

    deb = glob.glob(os.path.join(debs, "*.deb"))[0]
    host("dpkg-deb", "-x", deb, str(tmp_path))
    shipped = tmp_path / "usr" / "share" / "lms-refresh"
    assert sorted(os.listdir(shipped)) == ["datasette-plugins", "datasette.yml"]
    assert (shipped / "datasette.yml").read_text() == datasette.render("serving")
    assert os.listdir(shipped / "datasette-plugins") == [datasette.PLUGIN_NAME]
    assert (shipped / "datasette-plugins" / datasette.PLUGIN_NAME).read_text() == datasette.PLUGIN


@pytest.fixture(scope="module", params=["bookworm", "trixie"])
def system(request, debs, workdir):
    data = os.path.join(workdir, f"xapi-{request.param}")
    os.makedirs(data)
    today = dt.date.today()
    # Nothing stored after now (until=): an export holds no statement synced in the future, and since
    # issue 20 class 1 one stored more than 2 days ahead is quarantined — counted against the run's
    # max_quarantine_share, which a small incremental run then exceeded (intermittent 65s, seen in whole runs).
    write_daily_files(data, generate(3, today - dt.timedelta(days=10), 10, learners=300, timezone="Europe/Paris",
                                     malformed_share=0, until=dt.datetime.now(dt.UTC)))
    os.chmod(data, 0o755)
    for name in os.listdir(data):
        os.chmod(os.path.join(data, name), 0o644)
    box = Container(request.param, workdir, {debs: ("/mnt/debs", True), data: ("/srv/xapi", False)})
    box.data = data
    try:
        box.create()
        box.boot()
        box.run("apt-get", "update", timeout=600)
        deb = os.path.basename(glob.glob(os.path.join(debs, "*.deb"))[0])
        box.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", f"/mnt/debs/{deb}", timeout=900)
        box.deb = f"/mnt/debs/{deb}"
        yield box
    finally:
        box.destroy()


@pytest.fixture(autouse=True)
def fresh_start_limit(request):
    """Each test starts with systemd's start-rate counter of the unit at zero: the tests share one booted
    machine per release, and five starts within StartLimitIntervalSec= (10 s by default) over the end of
    one test and the start of the next made a start fail with start-limit-hit (seen in whole runs), not
    with what the test meant. `reset-failed` resets that counter; the unit under test stays as shipped."""
    if "system" in request.fixturenames:
        request.getfixturevalue("system").run("systemctl", "reset-failed", UNIT, check=False)


def as_service_user(box, *args, check=True):
    """The supported manual command: the service user, the same state and lock."""
    return box.run("runuser", "-u", "lms-refresh", "--", "lms-refresh", *args, check=check)


def status(box):
    return json.loads(as_service_user(box, "status", "--json").stdout)


def configure(box, path="/srv/xapi", extra=""):
    box.run("tee", "/etc/lms-refresh/config.toml", input=CONFIG.format(path=path) + extra)


@contextlib.contextmanager
def held_lrs(box):
    """Configure the service for an LRS that holds the run's second request — inside its transaction, with the
    lock held — until released (or stopped). The LRS listens on the host's loopback, which the container shares
    (export directories are no way to block a run: only regular files are opened). The NDJSON configuration
    is put back afterwards."""
    from helpers.lrsserver import HeldLrs

    root = tempfile.mkdtemp(prefix="lmsr-held-")
    lrs = HeldLrs(root, [])
    password = "/etc/lms-refresh/held-password"
    box.run("tee", password, input=HeldLrs.PASSWORD + "\n")
    box.run("chown", "root:lms-refresh", password)
    box.run("chmod", "0640", password)
    box.run("tee", "/etc/lms-refresh/config.toml", input=(
        'timezone = "Europe/Paris"\n[window]\nbootstrap_days = 30\nsafety_lag = "0s"\n'
        '[source]\ntype = "xapi-lrs"\nendpoint = "' + lrs.source["endpoint"] + '"\nusername = "lms-refresh"\n'
        f'password_file = "{password}"\nrequest_attempts = 1\noverlap = "20d"\n'))
    try:
        yield lrs
    finally:
        lrs.stop()
        configure(box)
        box.run("rm", "-f", password)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def blocked_run(box):
    """Start the service on a `held_lrs` and return once the run waits on it, holding the lock."""
    with held_lrs(box) as lrs:
        box.run("systemctl", "start", "--no-block", UNIT)
        assert lrs.arrived.wait(120), "the run never reached the held request"
        yield lrs


@contextlib.contextmanager
def failing_run(system):
    """Run the service once over a source that is all malformed lines (exit 65); clean up after."""
    garbage = os.path.join(system.data, "garbage.ndjson")
    with open(garbage, "w") as handle:
        handle.write("{not json\n" * 100)
    os.chmod(garbage, 0o644)
    try:
        assert system.run("systemctl", "start", UNIT, check=False).returncode != 0
        # The run itself must be what failed (not a condition, a start limit or a stale status): say what
        # systemd recorded, with the unit's last lines, if not.
        shown = system.show(UNIT, "Result", "ExecMainCode", "ExecMainStatus", "InvocationID")
        assert shown["Result"] == "exit-code" and shown["ExecMainStatus"] == "65", (
            shown, system.run("journalctl", "-u", UNIT, "-n", "40", "--no-pager", check=False).stdout)
        yield
    finally:
        os.unlink(garbage)
        system.run("systemctl", "reset-failed", UNIT)


def test_units_verify_and_the_timer_fires_on_weekdays_at_0415(system):
    verify = system.run("systemd-analyze", "verify", f"/lib/systemd/system/{UNIT}",
                        "/lib/systemd/system/lms-refresh.timer", check=False)
    assert verify.returncode == 0 and verify.stderr.strip() == "" and verify.stdout.strip() == "", verify
    assert system.run("systemctl", "is-enabled", "lms-refresh.timer").stdout.strip() == "enabled"
    assert system.run("systemctl", "is-active", "lms-refresh.timer").stdout.strip() == "active"
    assert system.run("systemctl", "is-enabled", UNIT, check=False).stdout.strip() == "static"
    timers = system.run("systemctl", "list-timers", "lms-refresh.timer", "--no-pager").stdout
    assert "lms-refresh.timer" in timers and "lms-refresh.service" in timers
    next_elapse = system.show("lms-refresh.timer", "NextElapseUSecRealtime")["NextElapseUSecRealtime"]
    assert re.match(r"(Mon|Tue|Wed|Thu|Fri) \d{4}-\d\d-\d\d 04:15:00", next_elapse), next_elapse
    calendar = system.run("systemd-analyze", "calendar", "--iterations=12", "Mon..Fri *-*-* 04:15:00").stdout
    # "Iter. #2:" up to systemd 252, "Iteration #2:" later.
    elapses = re.findall(r"^\s*(?:Next elapse|Iter\S* #\d+):\s+(\w{3}) \S+ (\d\d:\d\d:\d\d)", calendar, re.M)
    assert len(elapses) == 12, calendar
    assert {day for day, _ in elapses} <= {"Mon", "Tue", "Wed", "Thu", "Fri"}
    assert {time for _, time in elapses} == {"04:15:00"}
    assert "OnCalendar=Mon..Fri *-*-* 04:15:00" in system.run("systemctl", "cat", "lms-refresh.timer").stdout
    # No run before the clock is synchronised: the calendar timer by systemd's own ordering, every start of the
    # service (the catch-up timer's at boot, a manual one) by the unit's.
    for unit in ("lms-refresh.timer", UNIT):
        assert "time-sync.target" in system.show(unit, "After")["After"].split(), unit


def test_unconfigured_package_is_skipped_not_failed(system):
    system.run("systemctl", "start", UNIT)
    assert system.show(UNIT, "Result", "ActiveState") == {"Result": "exec-condition", "ActiveState": "inactive"}
    assert system.run("systemctl", "is-failed", UNIT, check=False).stdout.strip() != "failed"
    # The condition's output reaches the journal on its own time (a loaded machine lags).
    system.wait_for(lambda: "has no [source] table yet" in system.run("journalctl", "-u", UNIT, "--no-pager").stdout,
                    "the skipped start's sentence in the journal", seconds=30)


def test_the_readmes_install_commands_run_as_written(system):
    script = readme_block("## Install on Debian 13 or 12", "cat >> /etc/lms-refresh/config.toml", "journalctl")
    assert "sudo" not in script and "editor" not in script, script
    # From the conffile as installed: the README appends its [source] to it.
    system.shell(f"dpkg-deb --fsys-tarfile {system.deb} | tar -xO ./etc/lms-refresh/config.toml "
                 "> /etc/lms-refresh/config.toml")
    system.run("ln", "-sfn", "/srv/xapi", "/srv/xapi-exports")
    try:
        result = system.shell("set -e\n" + script, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "ok  source:" in result.stdout or "ok" in result.stdout.split()[0], result.stdout
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        assert "lms-refresh.timer" in result.stdout
    finally:
        system.run("rm", "-f", "/srv/xapi-exports")
        # Back to a fresh install's state (this run's store is in time zone UTC; the tests below use Paris).
        system.shell("find /var/lib/lms-refresh /var/lib/lms-refresh-publication -mindepth 1 -delete")
        configure(system)


def test_start_runs_as_the_service_user_and_fills_the_store(system):
    configure(system)
    system.run("systemctl", "start", UNIT)
    assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
    listing = system.run("stat", "-c", "%U %n", "/var/lib/lms-refresh", "/var/lib/lms-refresh/metrics.sqlite",
                         "/var/lib/lms-refresh/pseudonymisation.key", "/var/lib/lms-refresh/refresh.lock").stdout
    assert [line.split()[0] for line in listing.splitlines()] == ["lms-refresh"] * 4
    report = status(system)
    assert report["last_run"]["outcome"] == "success" and report["last_run"]["rows_written"] > 10
    assert report["store"]["location"] == "/var/lib/lms-refresh/metrics.sqlite"
    assert_the_page_shows_the_last_run(system)
    root = system.run("lms-refresh", "run", check=False)  # as root: it becomes the state directory's owner
    assert root.returncode == 0, root.stderr
    assert [line.split()[0] for line in system.run("stat", "-c", "%U %n", *listing.split()[1::2]).stdout.splitlines()] \
        == ["lms-refresh"] * 4


def assert_the_page_shows_the_last_run(box, group="lms-refresh", mode="644"):
    """The unit wrote the HTML report beside the publication (its report writer once called fchown, which the
    unit's system call filter refuses: every run logged a PermissionError and wrote nothing), showing the last
    run's start and watermark, and neither the journal, status --check nor the textfile's note says otherwise."""
    invocation = box.show(UNIT, "InvocationID")["InvocationID"]
    log = box.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager").stdout
    assert "Could not write the HTML report" not in log, log
    page = "/var/lib/lms-refresh-publication/report.html"
    assert box.run("stat", "-c", "%U:%G %a", page).stdout.split() == [f"lms-refresh:{group}", mode]
    html = box.run("cat", page).stdout
    shown = status(box)
    zone = re.search(r'<dd id="timezone">([^<]+)</dd>', html).group(1)  # the page's times are in the configured zone
    assert f'<dd id="last-success">{local_time(shown["last_success"]["started_at"], zone)}</dd>' in html, html[:3000]
    assert f'<dd id="watermark">{local_time(shown["watermark"], zone)}</dd>' in html and 'id="fresh"' in html
    pages = box.run("find", "/var/lib/lms-refresh-publication/report-files", "-name", "*.html").stdout.split()
    assert pages, "the unit wrote no course page beside the report"
    assert box.run("test", "-e", "/var/lib/lms-refresh/report-failed", check=False).returncode == 1
    plugin = as_service_user(box, "status", "--check", check=False)
    assert plugin.returncode == 0 and plugin.stdout.startswith("LMS-REFRESH OK"), plugin.stdout


def test_publication_group_works_under_the_unit_as_the_readme_says(system):
    """publication.group under the shipped unit: chown is refused there (SystemCallFilter=~@privileged) and the
    group is not even mapped (PrivateUsers=yes), so the README's way is a setgid directory of the group made by
    a tmpfiles.d line; check says what the run will do, before and after, and reverting the key opens it again."""
    configure(system)
    system.run("systemctl", "start", UNIT)  # a store and a publication to narrow (the test may run alone)
    system.run("groupadd", "--system", "dashboards")
    system.run("useradd", "--system", "--no-create-home", "-G", "dashboards", "metabase")
    system.run("useradd", "--system", "--no-create-home", "outsider")
    directory, publication = "/var/lib/lms-refresh-publication", "/var/lib/lms-refresh-publication/serving.sqlite"
    read = ("import sqlite3, sys; db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True); "
            "print(db.execute('SELECT COUNT(*) FROM daily_metrics').fetchone()[0])")
    try:
        configure(system, extra='[publication]\ngroup = "dashboards"\n')
        check = as_service_user(system, "check", check=False)
        assert check.returncode == 78 and f"needs {directory} to be a setgid directory of group 'dashboards'" in \
            check.stderr, check
        assert system.run("systemctl", "start", UNIT, check=False).returncode != 0
        assert system.show(UNIT, "ExecMainStatus")["ExecMainStatus"] == "78"  # before the run, not after its commit
        system.run("systemctl", "reset-failed", UNIT, "lms-refresh-alert@lms-refresh.service.service", check=False)
        # The README's commands (the notes for the docs): the package's tmpfiles.d file with the group, in /etc.
        system.shell("sed 's|^d /var/lib/lms-refresh-publication .*|d /var/lib/lms-refresh-publication 2750 "
                     "lms-refresh dashboards -|' /usr/lib/tmpfiles.d/lms-refresh.conf "
                     "> /etc/tmpfiles.d/lms-refresh.conf && systemd-tmpfiles --create lms-refresh.conf")
        check = as_service_user(system, "check", check=False)
        assert check.returncode == 0 and f"a new file in {directory} gets that group" in check.stdout, check
        system.run("systemctl", "start", UNIT)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        assert system.run("stat", "-c", "%U:%G %a", directory, publication).stdout.split() == [
            "lms-refresh:dashboards", "2750", "lms-refresh:dashboards", "640"]
        assert_the_page_shows_the_last_run(system, group="dashboards", mode="640")
        member = system.run("runuser", "-u", "metabase", "--", "python3", "-c", read, publication, check=False)
        assert member.returncode == 0 and int(member.stdout) > 0, member
        assert system.run("runuser", "-u", "outsider", "--", "python3", "-c", read, publication,
                          check=False).returncode != 0
        # Reverted (the key and the tmpfiles.d line): the next run opens the publication to every account again.
        configure(system)
        system.run("rm", "/etc/tmpfiles.d/lms-refresh.conf")
        system.run("systemctl", "start", UNIT)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        assert system.run("stat", "-c", "%a", directory, publication).stdout.split() == ["755", "644"]
        outsider = system.run("runuser", "-u", "outsider", "--", "python3", "-c", read, publication, check=False)
        assert outsider.returncode == 0 and int(outsider.stdout) > 0, outsider
    finally:
        system.run("rm", "-f", "/etc/tmpfiles.d/lms-refresh.conf")
        system.run("systemd-tmpfiles", "--create", "lms-refresh.conf", check=False)
        system.run("userdel", "metabase", check=False)
        system.run("userdel", "outsider", check=False)
        system.run("groupdel", "dashboards", check=False)
        system.run("systemctl", "reset-failed", UNIT, check=False)
        configure(system)


def test_journal_has_structured_fields_once(system):
    # The first run that wrote rows (tests before this one started the unit again with nothing new to read, which
    # commits and writes no row): its invocation's records.
    finished = system.run("journalctl", "SYSLOG_IDENTIFIER=lms-refresh", "MESSAGE_ID=ef029f020e6c4148adce1996c67f5a7f",
                          "-o", "json", "--no-pager").stdout.splitlines()
    invocation = next(record["_SYSTEMD_INVOCATION_ID"] for record in map(json.loads, finished)
                      if int(record.get("ROWS_WRITTEN", "0")) > 10)
    lines = system.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "json", "--no-pager").stdout
    records = [json.loads(line) for line in lines.splitlines()]
    ours = [r for r in records if r.get("SYSLOG_IDENTIFIER") == "lms-refresh"]
    committed = [r for r in ours if r["MESSAGE"].startswith("Refresh committed")]
    assert len(committed) == 1
    fields = committed[0]
    assert fields["PRIORITY"] == "6" and fields["RUN_ID"] and int(fields["ROWS_WRITTEN"]) > 10
    assert fields["WINDOW_SINCE"] < fields["WINDOW_UNTIL"] and fields["OUTCOME"] == "success"
    assert fields["MESSAGE_ID"] == "ef029f020e6c4148adce1996c67f5a7f"  # run-finished
    [started] = [r for r in ours if r.get("MESSAGE_ID") == "efd465ddcc574f7ab9ffc02623a04297"]  # run-started
    assert started["RUN_ID"] == fields["RUN_ID"] and "OUTCOME" not in started and "STATEMENTS_READ" not in started
    successes = system.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "OUTCOME=success", "-o", "json",
                           "--no-pager").stdout.splitlines()
    assert len(successes) == 1  # one record per run, as the README's field query promises
    messages = [r["MESSAGE"] for r in ours]
    assert len(messages) == len(set(messages)), messages
    assert not [r for r in records if r.get("_TRANSPORT") == "stdout" and "Refresh committed" in r.get("MESSAGE", "")]


def test_overlap_manual_run_and_second_start_do_nothing(system):
    with blocked_run(system) as lrs:
        running = system.show(UNIT, "MainPID", "InvocationID")
        assert "Status: \"Reading" in system.run("systemctl", "status", UNIT, "--no-pager", check=False).stdout
        manual = as_service_user(system, "run", check=False)
        assert manual.returncode == 0 and "Another refresh holds the lock" in manual.stderr
        system.run("systemctl", "start", "--no-block", UNIT)
        assert system.show(UNIT, "MainPID", "InvocationID") == running
        lrs.release()
        system.wait_for(lambda: system.show(UNIT, "ActiveState")["ActiveState"] == "inactive", "the run to end")
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        assert system.show(UNIT, "InvocationID") == {"InvocationID": running["InvocationID"]}


RECEIVER = """
import http.server, sys
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(sys.argv[2], "ab") as out:
            out.write(body + b"\\n")
        self.send_response(200)
        self.end_headers()
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Hook).serve_forever()
"""


def free_port():
    import socket

    with socket.socket() as probe:  # the container shares the host's loopback
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def webhook_receiver(box, unit, hooks):
    """Start RECEIVER in the machine as `unit`, appending each POST to `hooks`; return its port once it listens."""
    port = free_port()
    box.run("systemd-run", f"--unit={unit}", "python3", "-c", RECEIVER, str(port), hooks)
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}))"
    box.wait_for(lambda: box.run("python3", "-c", connect, check=False).returncode == 0, "the webhook receiver")
    return port


def install_webhook_file(box, port):
    """Write the alert webhook's URL file, for the service user's group only (the token is a secret)."""
    box.run("install", "-m", "0640", "-g", "lms-refresh", "/dev/stdin", "/etc/lms-refresh/alert-webhook",
            input=f"http://127.0.0.1:{port}/hook/secret-token\n")


# KNOWN DEFECT, not found yet (first seen 2026-12-02): in a whole run of tests/system (the host's and the fresh
# Debian 12 root's, on 5b8eacf), on trixie only, a start of the unit in the next two tests ended with
# Result=resources before the run started (ExecMainCode 0) — after every bookworm test and the trixie tests
# before them passed. The same trixie tests in order, without the bookworm instance first, passed; every whole
# run since 0b477c2 has passed them (on the host: 0b477c2, 971d87d, a5fe43f). Only that failure is excused, and
# the machine's own journal lines about it become the xfail's reason (shown by `-rx`), so that the next
# occurrence says what systemd could not set up; any other failure of these tests fails.
def trixie_resources_defect(test):
    @functools.wraps(test)
    def guarded(*args, system, **kwargs):
        try:
            return test(*args, system=system, **kwargs)
        except Exception:
            journal = system.run("journalctl", "-b", "-n", "300", "--no-pager", check=False).stdout.splitlines()
            if system.suite == "trixie" and any(f"{UNIT}: Failed with result 'resources'" in line for line in journal):
                lines = [line for line in journal if UNIT in line or "systemd[1]" in line]
                pytest.xfail("KNOWN DEFECT Result=resources on trixie; the journal says:\n" + "\n".join(lines[-40:]))
            raise

    return guarded


@trixie_resources_defect
def test_a_failed_run_alerts_through_on_failure_and_a_success_does_not(system):
    port = webhook_receiver(system, "hook-receiver", "/run/hook.jsonl")
    install_webhook_file(system, port)
    configure(system, extra='[alerts]\nwebhook_url_file = "/etc/lms-refresh/alert-webhook"\n')
    alert_unit = "lms-refresh-alert@lms-refresh.service.service"
    try:
        before = system.show(alert_unit, "InvocationID")  # (an earlier test's failure may have started it)
        system.run("systemctl", "start", UNIT)
        assert system.show(alert_unit, "InvocationID") == before  # not started by a success
        with failing_run(system):
            system.wait_for(lambda: system.run("test", "-s", "/run/hook.jsonl", check=False).returncode == 0,
                            "the alert to arrive")
        [alert] = [json.loads(line) for line in system.run("cat", "/run/hook.jsonl").stdout.splitlines()]
        journal = system.run("journalctl", "-u", alert_unit, "--no-pager", "-o", "cat").stdout
        shown = system.show(UNIT, "ExecMainStatus", "Result", "InvocationID")
        assert alert["unit"] == UNIT and alert["exit_status"] == 65 and alert["result"] == "exit-code", (
            json.dumps(alert), journal, shown)
        assert "bad input" in alert["meaning"] and "malformed" in alert["message"]
        assert any("malformed" in line for line in alert["journal"]) and alert["window"]["until"]
        assert "secret-token" not in json.dumps(alert)
        assert system.show(alert_unit, "Result")["Result"] == "success"
    finally:
        system.run("systemctl", "stop", "hook-receiver", check=False)
        configure(system)


@trixie_resources_defect
def test_a_configuration_error_still_alerts_and_an_unreadable_one_is_logged_at_err(system):
    port = webhook_receiver(system, "hook-receiver-config", "/run/hook-config.jsonl")
    install_webhook_file(system, port)
    alerts = '[alerts]\nwebhook_url_file = "/etc/lms-refresh/alert-webhook"\n'
    alert_unit = "lms-refresh-alert@lms-refresh.service.service"
    try:
        # The operator's most likely mistake: a misspelt key. The run exits 78; the alert still goes out.
        system.run("tee", "/etc/lms-refresh/config.toml",
                   input="min_cel_size = 5\n" + CONFIG.format(path="/srv/xapi") + alerts)
        assert system.run("systemctl", "start", UNIT, check=False).returncode != 0
        assert system.show(UNIT, "ExecMainStatus")["ExecMainStatus"] == "78"
        system.wait_for(lambda: system.run("test", "-s", "/run/hook-config.jsonl", check=False).returncode == 0,
                        "the alert to arrive")
        [alert] = [json.loads(line) for line in system.run("cat", "/run/hook-config.jsonl").stdout.splitlines()]
        assert alert["unit"] == UNIT and alert["exit_status"] == 78 and "configuration" in alert["meaning"], alert
        assert "unknown key 'min_cel_size'" in alert["message"] and alert["window"] is None, alert
        assert "secret-token" not in json.dumps(alert)
        system.wait_for(lambda: system.show(alert_unit, "ActiveState")["ActiveState"] == "inactive", "the alert unit")
        assert system.show(alert_unit, "Result")["Result"] == "success"
        failed = [json.loads(line) for line in system.run(
            "journalctl", "-u", UNIT, "-o", "json", "--no-pager", "SYSLOG_IDENTIFIER=lms-refresh", "OUTCOME=failure",
        ).stdout.splitlines()]
        assert failed and failed[-1]["MESSAGE_ID"] == "97a39074609440c38ab504596ee0bcba"  # run-failed
        assert failed[-1]["EXIT_STATUS"] == "78" and failed[-1]["PRIORITY"] == "3"
        system.run("systemctl", "reset-failed", UNIT)

        # Not even [alerts] can be read: nobody can be told, but the journal says so at priority err.
        system.run("tee", "/etc/lms-refresh/config.toml", input="this is = not toml\n" + alerts)
        assert system.run("systemctl", "start", UNIT, check=False).returncode != 0

        def logged():
            return system.run("journalctl", "-u", alert_unit, "-p", "err", "-o", "json", "--no-pager",
                              "SYSLOG_IDENTIFIER=lms-refresh").stdout.splitlines()

        system.wait_for(lambda: any("nobody was alerted" in json.loads(line)["MESSAGE"] for line in logged()),
                        "the alert unit's error record")
        [record] = [json.loads(line) for line in logged() if "nobody was alerted" in json.loads(line)["MESSAGE"]]
        assert record["PRIORITY"] == "3" and "exit status 78" in record["MESSAGE"], record
        assert "/etc/lms-refresh/config.toml is not valid TOML" in record["MESSAGE"], record
        system.wait_for(lambda: system.show(alert_unit, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the alert unit")
        assert system.show(alert_unit, "Result")["Result"] == "exit-code"
        assert len(system.run("cat", "/run/hook-config.jsonl").stdout.splitlines()) == 1  # nothing was posted
    finally:
        system.run("systemctl", "stop", "hook-receiver-config", check=False)
        system.run("systemctl", "reset-failed", UNIT, alert_unit, check=False)
        configure(system)


def test_the_alert_for_a_failure_before_the_run_log_does_not_carry_the_previous_failures_window(system):
    """A run fails with a row in the run log (65, malformed data); the next fails before the run log (the key
    is not writable: 78, no row). The second alert reads the same store, whose last row is the first failure's:
    it must carry neither that row's window nor its message, but the second failure's own sentence."""
    hooks = "/run/hook-before-log.jsonl"
    port = webhook_receiver(system, "hook-receiver-before-log", hooks)
    install_webhook_file(system, port)
    configure(system, extra='[alerts]\nwebhook_url_file = "/etc/lms-refresh/alert-webhook"\n')
    alert_unit = "lms-refresh-alert@lms-refresh.service.service"
    key, mode = "/var/lib/lms-refresh/pseudonymisation.key", None

    def alerts(count):
        system.wait_for(lambda: len(system.run("cat", hooks, check=False).stdout.splitlines()) >= count,
                        f"alert {count} to arrive")
        system.wait_for(lambda: system.show(alert_unit, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the alert unit")
        return [json.loads(line) for line in system.run("cat", hooks).stdout.splitlines()]

    try:
        system.run("systemctl", "start", UNIT)  # a store and a key to fail against (the test may run alone)
        with failing_run(system):
            [first] = alerts(1)
        assert first["exit_status"] == 65 and "malformed" in first["message"], first
        assert first["window"] and first["window"]["until"], first
        row = status(system)["last_run"]
        assert row["exit_code"] == 65 and row["window_until"] == first["window"]["until"], row

        mode = system.run("stat", "-c", "%a", key).stdout.strip()
        system.run("chmod", "0400", key)  # readable (the alert reads the store), not writable: the run refuses it
        assert system.run("systemctl", "start", UNIT, check=False).returncode != 0
        assert system.show(UNIT, "ExecMainStatus")["ExecMainStatus"] == "78"
        assert status(system)["last_run"] == row  # the failure left no row: the last one is still the first's
        first_again, second = alerts(2)
        assert first_again == first
        journal = system.run("journalctl", "-u", alert_unit, "--no-pager", "-o", "cat").stdout
        assert second["exit_status"] == 78 and "configuration" in second["meaning"], (second, journal)
        assert second["window"] is None, second
        assert "malformed" not in second["message"] and row["message"] not in second["message"], second
        assert f"{key} belongs to user 'lms-refresh' and is not writable by 'lms-refresh'" in second["message"], second
        assert "secret-token" not in json.dumps(second)
        assert system.show(alert_unit, "Result")["Result"] == "success"
    finally:
        if mode:
            system.run("chmod", mode, key, check=False)
        system.run("systemctl", "stop", "hook-receiver-before-log", check=False)
        system.run("systemctl", "reset-failed", UNIT, alert_unit, check=False)
        configure(system)


def test_bad_data_fails_with_65_and_changes_nothing(system):
    before = status(system)
    with failing_run(system):
        assert system.show(UNIT, "Result", "ExecMainStatus", "NRestarts") == {
            "Result": "exit-code", "ExecMainStatus": "65", "NRestarts": "0"}
        after = status(system)
        assert after["watermark"] == before["watermark"] and after["last_success"] == before["last_success"]
        assert after["last_run"]["exit_code"] == 65


def test_unreachable_source_is_retried_then_exits_69(system):
    configure(system, "/srv/late", extra='[retry]\nattempts = 3\ndelay = "3s"\n')
    try:
        start_by_a_timer(system)  # a timer's start retries; a manual systemctl start does not (tested below)
        system.wait_for(lambda: "Retrying in 3 s (attempt 2 of 3)" in
                        system.run("journalctl", "-u", UNIT, "--no-pager").stdout, "a retry")
        assert "attempt 2 of 3" in system.show(UNIT, "StatusText")["StatusText"]
        system.run("mkdir", "/srv/late")  # the share comes back: the next attempt succeeds
        system.wait_for(lambda: system.show(UNIT, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the run to end")
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        configure(system, "/srv/missing", extra='[retry]\nattempts = 2\ndelay = "1s"\n')
        start_by_a_timer(system)
        system.wait_for(lambda: system.show(UNIT, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the run to end")
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "exit-code", "ExecMainStatus": "69"}
        invocation = system.show(UNIT, "InvocationID")["InvocationID"]
        assert "Retrying in 1 s (attempt 2 of 2)" in system.run(
            "journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager").stdout
    finally:
        configure(system)
        system.run("rm", "-f", TEST_TIMER)
        system.run("systemctl", "daemon-reload")
        system.run("rm", "-rf", "/srv/late")
        system.run("systemctl", "reset-failed", UNIT, check=False)


def test_stop_rolls_back_with_143_and_the_next_start_converges(system):
    before = status(system)
    with blocked_run(system):
        system.run("systemctl", "stop", UNIT)
        assert system.show(UNIT, "ExecMainStatus")["ExecMainStatus"] == "143"
        after = status(system)
        assert after["watermark"] == before["watermark"] and after["last_run"]["exit_code"] == 143
    system.run("systemctl", "reset-failed", UNIT, check=False)
    system.run("systemctl", "start", UNIT)
    assert status(system)["last_run"]["outcome"] == "success"


@pytest.mark.parametrize("unit", [UNIT, "lms-refresh-alert@lms-refresh.service.service"])
def test_exposure_is_at_most_2(system, unit):
    report = system.run("systemd-analyze", "security", unit, "--no-pager", check=False).stdout
    exposure = float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", report).group(1))
    print(f"\n{system.suite}: systemd-analyze security {unit}: exposure {exposure}")
    assert exposure <= 2.0, report


def test_the_alert_mails_through_debians_default_mta_by_msmtp_as_check_says(system):
    """exim4 (Debian's default mail transfer agent) queues mail through a set-user-ID root program, which no unit
    with a system call filter can run (it implies NoNewPrivileges=): check says so and names msmtp, which hands
    the mail to exim4's SMTP port with no privilege; so configured, the hardened alert unit's mail arrives."""
    system.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "exim4-daemon-light", "msmtp",
               timeout=900)
    system.run("useradd", "--create-home", "ops")
    configure(system, extra='[alerts]\nmail_to = "ops@localhost"\n')
    alert_unit = "lms-refresh-alert@lms-refresh.service.service"
    try:
        check = as_service_user(system, "check")
        assert "warning: the alert mail would fail under the alert unit: /usr/sbin/exim4 is set-user-ID" in \
            check.stdout and "msmtp" in check.stdout, check.stdout
        # SMTP wants whole addresses (exim4 refuses an unqualified one from the network, localhost included).
        system.run("tee", "/etc/msmtprc",
                   input="account default\nhost localhost\nport 25\nfrom lms-refresh@localhost\n")
        configure(system, extra='[alerts]\nmail_to = "ops@localhost"\nsendmail = "/usr/bin/msmtp"\n')
        assert "alert mail" not in as_service_user(system, "check").stdout
        system.run("systemctl", "start", UNIT)  # a store to fail against (the test may run alone)
        with failing_run(system):
            try:
                system.wait_for(lambda: "[lms-refresh] lms-refresh.service failed" in system.run(
                    "cat", "/var/mail/ops", check=False).stdout, "the alert mail in the mailbox", seconds=180)
            except AssertionError as error:
                journal = system.run("journalctl", "-u", alert_unit, "--no-pager", "-o", "cat", check=False).stdout
                mainlog = system.run("tail", "-20", "/var/log/exim4/mainlog", check=False).stdout
                raise AssertionError((str(error), journal[-3000:], mainlog)) from error
        system.wait_for(lambda: system.show(alert_unit, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the alert unit")
        journal = system.run("journalctl", "-u", alert_unit, "--no-pager", "-o", "cat").stdout
        assert system.show(alert_unit, "Result")["Result"] == "success", journal
        assert "exit 65" in system.run("cat", "/var/mail/ops").stdout
    finally:
        system.run("systemctl", "reset-failed", UNIT, alert_unit, check=False)
        configure(system)


def test_parallel_parsing_works_under_the_hardened_unit(system):
    """16 MiB or more of NDJSON is parsed by forked workers that lower their own priority:
    that must work under the unit's seccomp filter and MemoryDenyWriteExecute=."""
    rng = random.Random(9)
    folder = os.path.join(system.data, "big")
    os.mkdir(folder)
    os.chmod(folder, 0o755)
    count, size = 0, 0
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    with open(os.path.join(folder, "export.ndjson"), "w") as handle:
        while size < 20 << 20:
            moment = start + dt.timedelta(seconds=rng.randrange(2 * 86400))
            line = json.dumps(statement(rng, rng.randrange(3000), rng.choice(COURSES)[0], moment=moment, stored=moment,
                                        verb=rng.choice(_VERB_CHOICES))) + "\n"
            handle.write(line)
            count, size = count + 1, size + len(line)
    os.chmod(os.path.join(folder, "export.ndjson"), 0o644)
    try:
        configure(system, "/srv/xapi/big", extra='[store]\npath = "/var/lib/lms-refresh/big.sqlite"\n')
        system.run("systemctl", "start", UNIT)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        run = status(system)["last_run"]
        assert run["outcome"] == "success" and run["statements_read"] == count and run["staged"] == count
    finally:
        shutil.rmtree(folder)
        configure(system)
        system.run("systemctl", "reset-failed", UNIT, check=False)


def test_the_textfile_needs_a_read_write_path_and_is_then_written(system):
    """ProtectSystem=strict leaves node_exporter's directory read-only to the service: the run still
    succeeds and its warning names the missing drop-in line; with that line the textfile is written."""
    textfile = "/var/lib/prometheus/node-exporter/lms_refresh.prom"
    drop_in = "/etc/systemd/system/lms-refresh.service.d/textfile.conf"
    system.run("install", "-d", "-o", "lms-refresh", "-m", "0755", os.path.dirname(textfile))
    configure(system, extra=f'[monitoring]\ntextfile = "{textfile}"\n')
    try:
        system.run("systemctl", "start", UNIT)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        invocation = system.show(UNIT, "InvocationID")["InvocationID"]
        log = system.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager").stdout
        assert f"Could not write the metrics textfile {textfile}" in log
        assert "add 'ReadWritePaths=/var/lib/prometheus/node-exporter' to a drop-in" in log
        assert system.run("test", "-e", textfile, check=False).returncode != 0

        system.run("mkdir", "-p", os.path.dirname(drop_in))
        system.run("tee", drop_in, input="[Service]\nReadWritePaths=/var/lib/prometheus/node-exporter\n")
        system.run("systemctl", "daemon-reload")
        system.run("systemctl", "start", UNIT)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        assert "lms_refresh_last_exit_code 0.000000" in system.run("cat", textfile).stdout
        assert system.run("stat", "-c", "%U %a", textfile).stdout.split() == ["lms-refresh", "644"]
    finally:
        system.run("rm", "-rf", drop_in, "/var/lib/prometheus")
        system.run("systemctl", "daemon-reload")
        system.run("systemctl", "reset-failed", UNIT, check=False)
        configure(system)


SOURCES_DROP_IN = "/etc/systemd/system/lms-refresh.service.d/sources.conf"


def secret(box, name, value):
    """A root-only file in /etc/lms-refresh that the unit passes on with LoadCredential=."""
    path = f"/etc/lms-refresh/{name}"
    box.run("tee", path, input=value + "\n")
    box.run("chmod", "0600", path)


def serving_rows(box, store):
    """The courses' rows of the store's serving view (the site's, course NULL, are the recount's business)."""
    script = ("import json, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
              "print(json.dumps(db.execute('SELECT * FROM serving_daily_metrics WHERE course IS NOT NULL "
              "ORDER BY day, course').fetchall()))")
    return [tuple(row) for row in json.loads(box.run("python3", "-c", script, store).stdout)]


def test_lrs_and_moodle_sources_run_under_the_hardened_unit(system, ralph, moodle):
    """Real network sources from inside the sandbox: passwords through LoadCredential=, TLS-capable
    HTTP and the PostgreSQL driver under MemoryDenyWriteExecute= and the system call filter."""
    statements = [json.loads(line) for _, line in generate(
        5, dt.date.today() - dt.timedelta(days=5), 4, learners=60, timezone="Europe/Paris", malformed_share=0,
        until=dt.datetime.now(dt.UTC))]
    ralph.post(statements)
    load_two_days(moodle)
    secret(system, "lrs-password", ralph.PASSWORD)
    secret(system, "moodle-password", READER_PASSWORD)
    system.run("mkdir", "-p", os.path.dirname(SOURCES_DROP_IN))
    system.run("tee", SOURCES_DROP_IN, input="[Service]\nLoadCredential=lrs-password:/etc/lms-refresh/lrs-password\n"
                                             "LoadCredential=moodle-password:/etc/lms-refresh/moodle-password\n")
    system.run("systemctl", "daemon-reload")
    try:
        system.run("tee", "/etc/lms-refresh/config.toml", input=(
            'timezone = "Europe/Paris"\n[window]\nbootstrap_days = 30\nsafety_lag = "0s"\n'
            f'[source]\ntype = "xapi-lrs"\nendpoint = "{ralph.endpoint}"\nusername = "{ralph.USER}"\n'
            'password_file = "lrs-password"\noverlap = "30d"\n'
            '[store]\npath = "/var/lib/lms-refresh/lrs.sqlite"\n'))
        system.run("systemctl", "start", UNIT)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        run = status(system)["last_run"]
        assert run["outcome"] == "success" and run["statements_read"] == len(statements) and run["rows_written"] > 0

        reach = (dt.date.today() - dt.date(2026, 11, 23)).days + 30  # load_two_days's rows, whatever today is
        system.run("tee", "/etc/lms-refresh/config.toml", input=(
            f'timezone = "Europe/Paris"\nmin_cell_size = 2\n[window]\nbootstrap_days = {reach}\n'
            f'[source]\ntype = "moodle"\nurl = "{moodle.url}"\npassword_file = "moodle-password"\n'
            f'site_url = "{SITE}"\n[store]\npath = "/var/lib/lms-refresh/moodle.sqlite"\n'
            '[privacy]\nmethod = "none"\n'))  # exact counts, to compare with the hand-computed ones
        system.run("systemctl", "start", UNIT)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        assert status(system)["watermark"] == "18" and status(system)["cursor_kind"] == "log-id"
        assert serving_rows(system, "/var/lib/lms-refresh/moodle.sqlite") == EXPECTED_TWO_DAYS
    finally:
        system.run("rm", "-f", SOURCES_DROP_IN, "/etc/lms-refresh/lrs-password", "/etc/lms-refresh/moodle-password")
        system.run("systemctl", "daemon-reload")
        system.run("systemctl", "reset-failed", UNIT, check=False)
        configure(system)


# -- issue 21: the administrator's path, round 2 ---------------------------------------------------

def readme_block(heading, first, last, page="README.md"):
    """The commands in section `heading` of `page` (README.md or a page under docs/): the indented code block
    from the line that starts with `first` to the line `last` (or the first that starts with it), as one shell
    script, run as written (dedented by the first line's indentation: a block inside a list item is indented
    more)."""
    with open(os.path.join(REPO, page)) as readme:
        lines = readme.read().split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    ") and line.strip().startswith(first))
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = [line[indent:] for line in lines[start:]]
    exact = [i for i, line in enumerate(block) if line.strip() == last]
    end = exact[0] if exact else next(i for i, line in enumerate(block) if line.strip().startswith(last))
    return "\n".join(block[:end + 1]) + "\n"


TEST_TIMER = "/etc/systemd/system/lmsr-test.timer"


def start_by_a_timer(box):
    """Start lms-refresh.service as a timer does (systemd sets $TRIGGER_UNIT), without waiting for 04:15."""
    box.run("tee", TEST_TIMER, input="[Timer]\nOnActiveSec=1s\nAccuracySec=1s\nUnit=lms-refresh.service\n")
    box.run("systemctl", "daemon-reload")
    before = box.show(UNIT, "InvocationID")["InvocationID"]
    box.run("systemctl", "restart", "lmsr-test.timer")
    box.wait_for(lambda: box.show(UNIT, "InvocationID")["InvocationID"] not in ("", before), "the timer's start")


def test_a_misspelt_table_fails_with_78_and_alerts_instead_of_being_skipped(system):
    # The conffile as shipped, with a misspelt [sources] table appended.
    packaged = system.shell(f"dpkg-deb --fsys-tarfile {system.deb} | tar -xO ./etc/lms-refresh/config.toml").stdout
    assert "[store]" in packaged and "\n[source]" not in packaged
    system.run("tee", "/etc/lms-refresh/config.toml",
               input=packaged + '[sources]\ntype = "xapi-ndjson"\npath = "/srv/xapi"\n')
    alert_unit = "lms-refresh-alert@lms-refresh.service.service"
    before = system.show(alert_unit, "InvocationID")["InvocationID"]
    try:
        assert system.run("systemctl", "start", UNIT, check=False).returncode != 0
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "exit-code", "ExecMainStatus": "78"}
        system.wait_for(lambda: system.show(alert_unit, "InvocationID")["InvocationID"] not in ("", before),
                        "the failure alert unit")
        log = system.run("journalctl", "-u", UNIT, "-o", "cat", "--no-pager", "OUTCOME=failure").stdout
        assert "unknown key 'sources'" in log, log
    finally:
        system.run("systemctl", "reset-failed", UNIT, alert_unit, check=False)
        configure(system)


def test_a_manual_start_fails_fast_and_a_stop_during_the_timers_retry_wait_pages_nobody(system):
    alert_unit = "lms-refresh-alert@lms-refresh.service.service"
    configure(system, "/srv/missing", extra='[retry]\nattempts = 3\ndelay = "10m"\n')
    try:
        assert system.run("systemctl", "start", UNIT, check=False, timeout=120).returncode != 0  # not 20 minutes
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "exit-code", "ExecMainStatus": "69"}
        invocation = system.show(UNIT, "InvocationID")["InvocationID"]
        log = system.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager").stdout
        assert "Started by hand (systemctl start), not by a timer" in log and "Retrying" not in log, log
        system.run("systemctl", "reset-failed", UNIT, alert_unit, check=False)
        system.wait_for(lambda: system.show(alert_unit, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the alert of the manual start")
        alerted = system.show(alert_unit, "InvocationID")["InvocationID"]

        start_by_a_timer(system)  # the timer's start retries, and says so
        system.wait_for(lambda: "Retrying in 600 s (attempt 2 of 3)" in
                        system.run("journalctl", "-u", UNIT, "--no-pager").stdout, "a retry")
        system.run("systemctl", "stop", UNIT)  # the operator's stop during the wait
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "143"}
        assert system.run("systemctl", "is-failed", UNIT, check=False).stdout.strip() != "failed"
        assert system.show(alert_unit, "InvocationID")["InvocationID"] == alerted  # nobody paged

        # Once a timer has started the unit, systemd passes its TRIGGER_UNIT on to every later start, by hand too:
        # a manual start after the timer's still fails fast.
        assert system.run("systemctl", "start", UNIT, check=False, timeout=120).returncode != 0
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "exit-code", "ExecMainStatus": "69"}
        invocation = system.show(UNIT, "InvocationID")["InvocationID"]
        log = system.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager").stdout
        assert "Started by hand (systemctl start), not by a timer" in log and "Retrying" not in log, log
    finally:
        system.run("rm", "-f", TEST_TIMER, "/var/lib/lms-refresh/run-in-progress")
        system.run("systemctl", "daemon-reload")
        system.run("systemctl", "reset-failed", UNIT, alert_unit, check=False)
        configure(system)


def test_freshness_comes_from_runs_not_from_a_backfill_of_an_old_window(system):
    configure(system)  # its own configuration: run alone, nothing earlier in the module has written one
    system.run("systemctl", "start", UNIT)
    fresh = json.loads(as_service_user(system, "status", "--json").stdout)["last_success"]
    as_service_user(system, "backfill", "--since", "2026-01-01", "--until", "2026-01-02")
    after = json.loads(as_service_user(system, "status", "--json").stdout)
    assert after["last_run"]["kind"] == "backfill" and after["last_run"]["exit_code"] == 0
    assert after["last_success"]["started_at"] == fresh["started_at"] and after["last_success"]["kind"] == "run"


def test_a_reboot_during_a_run_is_caught_up_once_at_the_next_boot(system):
    with blocked_run(system) as lrs:
        assert system.run("test", "-e", "/var/lib/lms-refresh/run-in-progress", check=False).returncode == 0

        def put_back_the_export_files():  # while the machine is down
            with open(os.path.join(system.root, "etc/lms-refresh/config.toml"), "w") as handle:
                handle.write(CONFIG.format(path="/srv/xapi"))
            lrs.stop()

        system.reboot(between=put_back_the_export_files)

        def caught_up():
            return system.run("journalctl", "-b", "-u", UNIT, "MESSAGE_ID=ef029f020e6c4148adce1996c67f5a7f",
                              "--no-pager", "-o", "cat").stdout.strip() and \
                system.show(UNIT, "ActiveState")["ActiveState"] == "inactive"

        system.wait_for(caught_up, "the catch-up run at boot", seconds=240)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        this_boot = system.run("journalctl", "-b", "-u", UNIT, "-o", "json", "--no-pager").stdout.splitlines()
        records = [json.loads(line) for line in this_boot]
        committed = [r for r in records if r.get("MESSAGE_ID") == "ef029f020e6c4148adce1996c67f5a7f"]
        assert len(committed) == 1, [r.get("MESSAGE") for r in records]  # once
        assert any("did not finish: the machine was shut down or crashed" in r.get("MESSAGE", "") for r in records)
        assert system.run("test", "-e", "/var/lib/lms-refresh/run-in-progress", check=False).returncode == 1
        report = status(system)
        assert report["interrupted"] is None and report["last_interruption"]["started_at"], report
        assert "caught up by the run started" in as_service_user(system, "status").stdout
        timer = system.show("lms-refresh-catch-up.timer", "ConditionResult")
        assert timer["ConditionResult"] == "yes", timer


def test_postgresql_store_credentials_work_for_every_command_as_root_the_service_user_and_nrpe(
        system, postgres_server):
    database = postgres_server.new_database()
    postgres_server.admin("DO $$ BEGIN CREATE ROLE metabase; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    publication = "/var/lib/lms-refresh-publication/serving.sqlite"
    assert system.run("test", "-e", publication, check=False).returncode == 0  # the SQLite runs' publication
    port = webhook_receiver(system, "hook-receiver-pg", "/run/hook-pg.jsonl")
    system.run("tee", "/etc/lms-refresh/config.toml", input=CONFIG.format(path="/srv/xapi") + (
        f'[store]\ntype = "postgresql"\nurl = "{postgres_server.url(database)}"\npassword_file = "store-password"\n'
        '[alerts]\nwebhook_url_file = "alert-webhook"\n'))
    alert_unit = "lms-refresh-alert@lms-refresh.service.service"
    try:
        script = readme_block("# PostgreSQL store", "install -d", "lms-refresh status --check",
                              page="docs/admin/postgresql.md")
        result = system.run("env", f"STORE_PASSWORD={postgres_server.PASSWORD}", "sh", "-ec", script, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "LMS-REFRESH OK" in result.stdout and "metabase may now read" in result.stdout, result.stdout
        assert system.run("stat", "-c", "%a %U:%G", "/etc/lms-refresh/credentials",
                          "/etc/lms-refresh/credentials/store-password").stdout.split() == [
            "750", "root:lms-refresh", "640", "root:lms-refresh"]
        assert system.run("test", "-e", publication, check=False).returncode == 1  # not left behind, stale
        log = system.run("journalctl", "-u", UNIT, "-o", "cat", "--no-pager").stdout
        assert f"Removed the SQLite publication {publication}" in log

        for user in (["runuser", "-u", "lms-refresh", "--"], []):  # as the service user, then as root
            for args in (["check"], ["status"], ["run", "--dry-run"],
                         ["backfill", "--since", "2026-01-01", "--until", "2026-01-02"], ["grant-reader", "metabase"]):
                done = system.run(*user, "lms-refresh", *args, check=False)
                assert done.returncode == 0, (user, args, done.stdout, done.stderr)
            check = system.run(*user, "lms-refresh", "status", "--check", check=False)
            assert check.returncode == 0 and check.stdout.startswith("LMS-REFRESH OK"), check

        system.run("useradd", "--system", "nagios")  # NRPE's user, through the README's sudo rule
        nrpe = readme_block("# Alerts and monitoring", "printf '%s\\n' 'nagios", "chmod 0440",
                            page="docs/admin/alerts-and-monitoring.md")
        system.shell("set -e\n" + nrpe)
        plugin = system.run("runuser", "-u", "nagios", "--", "/usr/bin/sudo", "-n", "-u", "lms-refresh",
                            "/usr/bin/lms-refresh", "status", "--check", check=False)
        assert plugin.returncode == 0 and plugin.stdout.startswith("LMS-REFRESH OK"), plugin

        # The alert unit reads the same credentials: the webhook URL, and the store for the failed run's window.
        system.run("install", "-m", "0640", "-o", "root", "-g", "lms-refresh", "/dev/stdin",
                   "/etc/lms-refresh/credentials/alert-webhook", input=f"http://127.0.0.1:{port}/hook/pg-token\n")
        with failing_run(system):
            system.wait_for(lambda: system.run("test", "-s", "/run/hook-pg.jsonl", check=False).returncode == 0,
                            "the alert to arrive")
        [alert] = [json.loads(line) for line in system.run("cat", "/run/hook-pg.jsonl").stdout.splitlines()]
        assert alert["exit_status"] == 65 and alert["window"] and alert["window"]["until"], alert
        assert "pg-token" not in json.dumps(alert)
    finally:
        system.run("systemctl", "stop", "hook-receiver-pg", check=False)
        system.run("rm", "-rf", "/etc/lms-refresh/credentials", "/etc/sudoers.d/lms-refresh-nrpe")
        system.run("userdel", "nagios", check=False)
        system.run("systemctl", "reset-failed", UNIT, alert_unit, check=False)
        configure(system)


def test_reinstall_keeps_state_and_purge_removes_it(system):
    watermark = status(system)["watermark"]
    system.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--reinstall", system.deb)
    assert status(system)["watermark"] == watermark
    assert "[source]" in system.run("cat", "/etc/lms-refresh/config.toml").stdout
    # Persistent=true's stamp, written when the timer elapses (which cannot be waited for here).
    stamp = "/var/lib/systemd/timers/stamp-lms-refresh.timer"
    system.run("touch", stamp)
    # The README's secrets, as it has the administrator create them (root:lms-refresh 0640 in a 0750 directory),
    # and a file of the administrator's own beside them (the alert test's webhook URL, group lms-refresh).
    system.shell("install -d -m 0750 -g lms-refresh /etc/lms-refresh/credentials && "
                 "echo secret | install -m 0640 -g lms-refresh /dev/stdin /etc/lms-refresh/credentials/store-password"
                 " && echo http://h/x | install -m 0640 -g lms-refresh /dev/stdin /etc/lms-refresh/alert-webhook")
    purge = system.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "lms-refresh")
    # The .deb was built on Debian 12: on 13 (merged /usr) units under /lib made dpkg warn here. The only warning
    # left is dpkg's for the administrator's own file, which it rightly keeps.
    warnings = [line for line in (purge.stdout + purge.stderr).splitlines() if "warning" in line.lower()]
    assert all("directory '/etc/lms-refresh' not empty so not removed" in line for line in warnings), warnings
    assert system.run("test", "-e", stamp, check=False).returncode == 1
    assert system.run("test", "-e", "/var/lib/lms-refresh", check=False).returncode == 1
    assert system.run("getent", "passwd", "lms-refresh", check=False).returncode == 2
    assert system.run("test", "-e", "/etc/lms-refresh/config.toml", check=False).returncode == 1
    # The secrets the package's instructions created are gone; what is left belongs to no group a new system
    # group can be given (the deleted group's number went to the next one created, which could read them).
    assert system.run("test", "-e", "/etc/lms-refresh/credentials", check=False).returncode == 1
    system.run("groupadd", "--system", "reused")
    try:
        assert system.run("stat", "-c", "%U:%G %a", "/etc/lms-refresh/alert-webhook").stdout.split() == [
            "root:root", "640"]
        reused = system.run("getent", "group", "reused").stdout.split(":")[2]
        assert system.run("find", "/etc", "-gid", reused).stdout == ""
    finally:
        system.run("groupdel", "reused")
        system.run("rm", "-rf", "/etc/lms-refresh")


OLD_COMMIT = "fc5aa84"  # 0.1.0 before statement mapping version 2 (a store of it records no mapping version)
OLD_SCHEMA_VERSION = 2  # the schema version of a store 0.1.0 wrote (its lms_refresh/store/schema.py: two migrations)


@pytest.fixture(scope="session")
def old_debs(workdir):
    """The previous release, 0.1.0, built from an earlier commit in a temporary worktree."""
    source = os.path.join(workdir, "old", "lms-refresh")
    os.makedirs(os.path.dirname(source))
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", source, OLD_COMMIT], check=True,
                   capture_output=True)
    try:
        build_in_fresh_root("bookworm", workdir, source,
                            "apt-get build-dep ./\nDEB_BUILD_OPTIONS=nocheck dpkg-buildpackage -us -uc -b")
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", source], capture_output=True)
    out = os.path.join(workdir, "old-debs")
    os.makedirs(out)
    for built in glob.glob(os.path.join(workdir, "old", "lms-refresh_*")):
        shutil.move(built, out)
    return out


def test_an_upgrade_from_the_previous_release_keeps_the_timers_run_succeeding(system, old_debs):
    [old] = glob.glob(os.path.join(old_debs, "lms-refresh_0.1.0_all.deb"))
    shutil.copy(old, os.path.join(system.root, "var", "tmp", "lms-refresh-old.deb"))  # /tmp is a tmpfs inside
    system.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "/var/tmp/lms-refresh-old.deb",
               timeout=900)
    configure(system)
    system.run("systemctl", "start", UNIT)
    assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
    before = status(system)
    # The administrator's configuration is kept (dpkg would ask; the answer is "keep yours").
    upgrade = system.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y",
                         "-o", "Dpkg::Options::=--force-confold", system.deb, timeout=900)
    installed = system.run("dpkg-query", "-W", "-f=${Version}", "lms-refresh").stdout
    assert installed == lms_refresh.__version__, upgrade.stdout
    news = system.run("sh", "-c", "zcat /usr/share/doc/lms-refresh/NEWS.Debian.gz").stdout
    assert "mapping version 2" in news and "rebuild --since" in news, news
    assert "lms-refresh grant-reader ROLE" in news, news  # this version's entry: the new views need a grant
    assert system.run("systemctl", "is-enabled", "lms-refresh.timer").stdout.strip() == "enabled"
    assert system.run("systemctl", "is-active", "lms-refresh.timer").stdout.strip() == "active"
    assert system.run("systemctl", "is-enabled", "lms-refresh-catch-up.timer").stdout.strip() == "enabled"
    # Between the upgrade and the next run nothing is wrong (docs/admin/upgrade.md, step 3): on the older store,
    # check and status exit 0 and say that the next run upgrades it, and the monitoring plugin stays OK.
    upgrades = f"the next run upgrades it from schema version {OLD_SCHEMA_VERSION} to {SCHEMA_VERSION}"
    check = as_service_user(system, "check", check=False)
    assert check.returncode == 0 and f"ok  store: {upgrades}" in check.stdout, check.stdout + check.stderr
    shown = as_service_user(system, "status", check=False)
    assert shown.returncode == 0 and (f"schema v{OLD_SCHEMA_VERSION}); the next run upgrades it to schema "
                                      f"v{SCHEMA_VERSION}") in shown.stdout, shown.stdout + shown.stderr
    assert status(system)["store"]["upgrade"] == {"from": OLD_SCHEMA_VERSION, "to": SCHEMA_VERSION}
    plugin = as_service_user(system, "status", "--check", check=False)
    assert plugin.returncode == 0 and plugin.stdout.startswith("LMS-REFRESH OK - ") and (
        f"the next run upgrades the store from schema version {OLD_SCHEMA_VERSION} to {SCHEMA_VERSION}"
        in plugin.stdout), plugin.stdout + plugin.stderr
    try:
        start_by_a_timer(system)  # the first scheduled run after the upgrade
        system.wait_for(lambda: system.show(UNIT, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the run after the upgrade", seconds=300)
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
        invocation = system.show(UNIT, "InvocationID")["InvocationID"]
        log = system.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager").stdout
        assert "Upgrading the store from statement mapping version 1 to 2" in log, log
        assert "found every statement the store was built from" in log, log
        after = status(system)
        assert after["last_run"]["outcome"] == "success" and after["last_run"]["version"] == lms_refresh.__version__
        assert after["last_run"]["rows_written"] >= before["last_run"]["rows_written"] > 0
        # The store migrated to this version's schema: the publication holds weeks and months of the old days.
        count = ("import sqlite3; db = sqlite3.connect('file:/var/lib/lms-refresh-publication/serving.sqlite?mode=ro', "
                 "uri=True); print(*(db.execute(f'SELECT COUNT(*) FROM {t}').fetchone()[0] for t in "
                 "('weekly_metrics', 'monthly_metrics')))")
        weeks, months = map(int, system.run("python3", "-c", count).stdout.split())
        assert weeks > 0 and months > 0, (weeks, months)
        # The upgrade procedure (docs/admin/upgrade.md), as written.
        script = readme_block("## The procedure", "zcat /usr/share/doc/lms-refresh/NEWS.Debian.gz",
                              "lms-refresh rebuild --since 2026-09-01", page="docs/admin/upgrade.md")
        notes = system.shell("set -e\n" + script, check=False)
        assert notes.returncode == 0, notes.stdout + notes.stderr
        start_by_a_timer(system)
        system.wait_for(lambda: system.show(UNIT, "ActiveState")["ActiveState"] in ("inactive", "failed"),
                        "the next run")
        assert system.show(UNIT, "Result", "ExecMainStatus") == {"Result": "success", "ExecMainStatus": "0"}
    finally:
        system.run("rm", "-f", TEST_TIMER, "/var/tmp/lms-refresh-old.deb")
        system.run("systemctl", "daemon-reload")
        system.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "lms-refresh", check=False)
