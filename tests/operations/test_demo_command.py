"""`lms-refresh demo` as the README's first command runs it: its defaults (2000 learners, 21 days, seed 7)
and its embedded configuration, in this process (tests/helpers/inprocess.py). Its hint and its wording of the
days: tests/operations/test_first_steps.py."""

import datetime as dt
import json
import os
import re
import shutil
import sys

from helpers import inprocess
from helpers.reference import expected_serving, site_first

NOW = "2026-11-30T09:00:00+01:00"  # a Monday morning in Paris
UNTIL = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.UTC)


def clean_environment():
    return {k: v for k, v in os.environ.items()
            if k not in ("STATE_DIRECTORY", "JOURNAL_STREAM", "INVOCATION_ID", "NOTIFY_SOCKET", "LMS_REFRESH_CONFIG")}


def valid(line):
    """The sample's lines the engine must count: the malformed ones are cut short, lose their actor or
    get a score out of range (lms_refresh.demo.sample), and the reference counts only valid statements."""
    try:
        record = json.loads(line)
    except ValueError:
        return False
    score = record.get("result", {}).get("score", {}).get("scaled", 0)
    return "actor" in record and -1 <= score <= 1


def test_the_demo_on_its_defaults_refreshes_a_store_and_prints_its_metrics(tmp_path):
    directory = tmp_path / "demo"
    result = inprocess.invoke(["--now", NOW, "demo", "--dir", str(directory)], clean_environment())
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and " WARNING " not in result.stderr and " ERROR " not in result.stderr
    lines = [line for path in sorted((directory / "statements").iterdir()) for line in path.read_text().splitlines()]
    out = result.stdout.splitlines()
    assert out[0] == (f"Generated {len(lines)} xAPI statements in {directory / 'statements'}: 2000 learners active "
                      "on the 21 days 2026-11-09 .. 2026-11-29 (--days), about 1% synced days late (offline devices), "
                      "a few malformed on purpose.")

    # The counts it prints are the run's own, as `status` reads them back from the store.
    config = directory / "config.toml"
    status = inprocess.invoke(["--config", str(config), "--now", NOW, "status", "--json"], clean_environment())
    assert status.returncode == 0, status.stderr
    run = json.loads(status.stdout)["last_run"]
    assert run["outcome"] == "success" and run["exit_code"] == 0
    assert run["statements_read"] == len(lines) and 0 < run["quarantined"] == len(lines) - sum(map(valid, lines))
    assert out[1] == (f"Refreshed {directory / 'state' / 'metrics.sqlite'}: {run['statements_read']} statements "
                      f"read, {run['quarantined']} quarantined (the malformed ones), {run['voided']} voided.")
    assert out[2].startswith("A first run reads back bootstrap_days = 28 days (the sample's 21 plus a week), so it "
                             "rebuilt the 29 local days 2026-11-02 .. 2026-11-30, today included; ")

    # The table: the last 24 rows of the serving view, each within the noise of an independent recount.
    expected = {row[:2]: row for row in expected_serving([line for line in lines if valid(line)],
                                                         UNTIL - dt.timedelta(days=28), UNTIL, "Europe/Paris", 10)}
    header = out.index(next(line for line in out if line.startswith("day ")))
    assert out[header].split() == ["day", "course", "learners", "stmts", "attempts", "completed", "passed", "failed",
                                   "avg", "score", "hours", "suppr."]
    assert set(out[header + 1]) == {"-", " "}
    rows = out[header + 2:header + 2 + 24]
    assert out[header + 2 + 24] == ""
    footer = re.fullmatch(r"\(last 24 of the (\d+) published rows, the whole site's '\(site\)' included; "
                          r"'-' = withheld because fewer than 10 learners; every other count "
                          r"is perturbed by up to ±3 \(cell key method\), so columns need not add up\)",
                          out[header + 3 + 24])
    assert footer and int(footer.group(1)) == len(expected)
    shown = sorted(expected, key=site_first)[-24:]
    assert any(key[1] is None for key in shown)  # the site's row of each day, with the courses'
    for line, key in zip(rows, shown, strict=True):
        day, course, learners = line.split()[:3]
        assert (day, course) == (key[0], "(site)" if key[1] is None else key[1].rsplit("/", 1)[-1]), (line, key)
        truth = expected[key][2]
        assert (learners == "-") == (truth is None), (line, expected[key])
        assert learners == "-" or abs(int(learners) - truth) <= 3, (line, expected[key])
    assert any(line.split()[2] != "-" for line in rows)

    # ...and the hint is the command that reads it all back.
    assert out[-1] == f"Try: {sys.executable} -m lms_refresh --config {config} status"
    # ...after the path of the HTML report the run wrote beside the publication.
    publication = directory / "state-publication"
    report = publication / "report.html"
    assert out[-4] == f"The HTML report (open it in a browser): {report}" and report.stat().st_size > 0
    # ...and the Datasette command that serves the publication with the metadata it wrote beside it (served by a
    # real Datasette in tests/operations/test_datasette_served.py).
    assert out[-3:-1] == [
        "Browse the publication with Datasette (pip install datasette==0.65.5; read-only, on this machine only):",
        f"  datasette serve -i {publication / 'serving.sqlite'} --metadata {publication / 'datasette.yml'} "
        f"--plugins-dir {publication / 'datasette-plugins'}"]
    assert (publication / "datasette.yml").stat().st_size > 0
    assert len(out) == header + 8 + 24


def test_a_demo_directory_that_has_statements_already_is_refused_with_a_sentence(tmp_path):
    (tmp_path / "statements").mkdir()
    result = inprocess.invoke(["demo", "--dir", str(tmp_path)], clean_environment())
    assert result.returncode == 78, result.stderr
    assert (f"--dir {tmp_path} is not empty (it holds statements): the demo writes its own config.toml, statements "
            "and state there; pick an empty directory, or one that does not exist.") in result.stderr
    assert "Traceback" not in result.stderr and list((tmp_path / "statements").iterdir()) == []


def test_a_demo_into_a_projects_directory_leaves_its_configuration_and_store_alone(tmp_path):
    """`demo --dir` on a directory that holds a project's config.toml and state replaced the configuration and
    refreshed the project's store from the demo's files, moving its watermark past what its source had not sent."""
    first = inprocess.invoke(["demo", "--dir", str(tmp_path), "--days", "2", "--learners", "12"],
                             clean_environment())
    assert first.returncode == 0, first.stderr
    shutil.rmtree(tmp_path / "statements")  # a project's exports lie elsewhere: config.toml and state/ are here
    (tmp_path / "config.toml").write_text((tmp_path / "config.toml").read_text() + "# the operator's own\n")
    config, store = (tmp_path / "config.toml").read_bytes(), (tmp_path / "state" / "metrics.sqlite").read_bytes()
    again = inprocess.invoke(["demo", "--dir", str(tmp_path), "--days", "2", "--learners", "12"],
                             clean_environment())
    assert again.returncode == 78, again.stderr
    assert f"--dir {tmp_path} is not empty (it holds config.toml, state, state-publication)" in again.stderr
    assert (tmp_path / "config.toml").read_bytes() == config
    assert (tmp_path / "state" / "metrics.sqlite").read_bytes() == store
    forged = f"{tmp_path}/d\nERROR forged"
    result = inprocess.invoke(["demo", "--dir", forged], clean_environment())
    assert result.returncode == 78 and result.stderr.count("\n") == 1, result.stderr
    assert f"--dir must not contain control or format characters: {forged!r}." in result.stderr
    assert not os.path.exists(forged)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert inprocess.invoke(["demo", "--dir", str(empty), "--days", "2", "--learners", "12"],
                            clean_environment()).returncode == 0


def test_demo_arguments_out_of_range_are_refused_before_anything_is_generated(tmp_path):
    """One sentence and exit 2 for every value the demo's own configuration would refuse (or that would not
    be a demo): the bounds are the configuration's (window.bootstrap_days), less the week the demo adds."""
    import subprocess

    from helpers.commands import cli_command
    from lms_refresh.config.schema import SCHEMA
    from lms_refresh.demo import DAYS, READ_BACK_MARGIN

    assert DAYS[1] + READ_BACK_MARGIN == SCHEMA["window"]["bootstrap_days"].check.high == 3660
    for option, value, bounds in (("--days", 800000, "1<=x<=3653"), ("--days", 3654, "1<=x<=3653"),
                                  ("--days", 0, "1<=x<=3653"), ("--days", -5, "1<=x<=3653"),
                                  ("--learners", 0, "1<=x<=100000"), ("--learners", 10 ** 9, "1<=x<=100000")):
        directory = tmp_path / f"{option}{value}"
        result = subprocess.run(cli_command() + ["--now", NOW, "demo", "--dir", str(directory), option, str(value)],
                                capture_output=True, text=True, env=clean_environment(), timeout=60)
        assert result.returncode == 2, (option, value, result.stderr)
        assert f"Error: Invalid value for '{option}': {value} is not in the range {bounds}." in result.stderr
        assert "Traceback" not in result.stderr and not directory.exists()


def test_the_longest_demo_runs_on_its_own_configuration(tmp_path):
    """--days at its bound gives a configuration the demo accepts: no 'refuses its own configuration'."""
    from lms_refresh.demo import DAYS

    directory = tmp_path / "long"
    result = inprocess.invoke(["--now", NOW, "demo", "--dir", str(directory), "--days", str(DAYS[1]),
                               "--learners", "1"], clean_environment())
    assert result.returncode == 0, result.stderr
    assert "bootstrap_days = 3660" in (directory / "config.toml").read_text()
    assert "rebuilt the 3661 local days 2016-11-22 .. 2026-11-30, today included" in result.stdout
