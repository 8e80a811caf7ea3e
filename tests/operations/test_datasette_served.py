"""Datasette out of the box: `lms-refresh demo` writes the metadata and the plugin beside its publication and prints
the `datasette serve` command; that command, run as printed with a real Datasette from PyPI
(tests/helpers/datasetteserver.py), serves the dictionary's canned queries with the rows sqlite3 gives on the
same file, its table pages show every title, description and column description of the data dictionary, and a
course IRI is text, not a link to the LMS. The files the demo writes are the ones the package ships."""

import contextlib
import datetime as dt
import json
import os
import re
import shlex
import sqlite3
import subprocess

import pytest

from helpers import docs, inprocess
from helpers.commands import cli_command
from helpers.datasetteserver import VENV, VERSION, DatasetteServer
from helpers.paths import REPO
from lms_refresh.store import datasette, dictionary

pytestmark = pytest.mark.datasette

ENVIRONMENT = {k: v for k, v in os.environ.items() if k not in (
    "STATE_DIRECTORY", "JOURNAL_STREAM", "INVOCATION_ID", "NOTIFY_SOCKET", "LMS_REFRESH_CONFIG")}


def escaped(text):
    """`text` as Datasette's templates (Jinja2 with markupsafe) escape it."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")
            .replace('"', "&#34;"))


def stamp(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's directory, the command it printed (its words), and its publication, refreshed again with a term
    around today's date so that every canned query has rows to give."""
    directory = tmp_path_factory.mktemp("datasette") / "demo"
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    result = inprocess.invoke(["--now", stamp(now), "demo", "--dir", str(directory), "--learners", "300",
                               "--days", "21"], ENVIRONMENT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    index = lines.index("Browse the publication with Datasette (pip install datasette==0.65.5; read-only, on this "
                        "machine only):")
    words = shlex.split(lines[index + 1])
    config = directory / "config.toml"
    today = now.date()
    with open(config, "a", encoding="utf-8") as handle:
        handle.write(f'\n[[terms]]\nname = "This term"\nfirst_day = {today - dt.timedelta(days=40)}\n'
                     f'last_day = {today + dt.timedelta(days=40)}\n')
    again = inprocess.invoke(["--config", str(config), "--now", stamp(now + dt.timedelta(seconds=1)), "run"],
                             ENVIRONMENT)
    assert again.returncode == 0, again.stderr
    return directory, words, directory / "state-publication"


@pytest.fixture(scope="module")
def served(demo):
    _, words, _ = demo
    assert words[:2] == ["datasette", "serve"]
    server = DatasetteServer(words[1:])
    yield server
    server.stop()


def test_the_demo_prints_a_read_only_command_naming_the_files_it_wrote_and_the_package_ships(demo):
    directory, words, publication = demo
    assert words == ["datasette", "serve", "-i", str(publication / "serving.sqlite"),
                     "--metadata", str(publication / "datasette.yml"),
                     "--plugins-dir", str(publication / "datasette-plugins")]
    # Written by the demo, kept by the run after it, and the very files of the package (database `serving`).
    shipped = os.path.join(REPO, "debian", "datasette")
    for written, packaged in (("datasette.yml", "datasette.yml"),
                              (f"datasette-plugins/{datasette.PLUGIN_NAME}",
                               f"datasette-plugins/{datasette.PLUGIN_NAME}")):
        with open(os.path.join(shipped, packaged), encoding="utf-8") as handle:
            assert (publication / written).read_text() == handle.read(), written
    assert sorted(os.listdir(publication / "datasette-plugins")) == [datasette.PLUGIN_NAME]


def test_datasette_reads_the_metadata_as_generated(served):
    assert served.get("/-/metadata.json").json() == datasette.metadata("serving")
    versions = served.get("/-/versions.json").json()
    assert versions["datasette"]["version"] == VERSION
    plugins = served.get("/-/plugins.json").json()
    assert [plugin["name"] for plugin in plugins] == [datasette.PLUGIN_NAME]


def test_each_canned_query_gives_the_rows_sqlite3_gives_on_the_publication(demo, served):
    _, _, publication = demo
    canned = datasette.metadata("serving")["databases"]["serving"]["queries"]
    assert [entry["sql"] for entry in canned.values()] == [query.sql for query in dictionary.QUERIES]
    with sqlite3.connect(f"file:{publication / 'serving.sqlite'}?mode=ro", uri=True) as db:
        for name, entry in canned.items():
            expected = [list(row) for row in db.execute(entry["sql"])]
            body = served.get(f"/serving/{name}.json", _shape="arrays").json()
            assert body["ok"] is True and body.get("truncated") is not True, (name, body)
            assert body["rows"] == expected, name
            assert expected, f"{name}: no rows on the demo's publication, so the comparison shows nothing"
            page = served.get(f"/serving/{name}").text
            assert escaped(entry["title"]) in page, name


def test_every_table_page_shows_the_dictionarys_title_descriptions_facets_and_newest_first(served):
    tables = datasette.metadata("serving")["databases"]["serving"]["tables"]
    assert set(tables) == {entry.name for entry in dictionary.TABLES if any(c.sqlite for c in entry.columns)}
    for name, settings in tables.items():
        page = served.get(f"/serving/{name}").text
        assert escaped(settings["title"]) in page, name
        assert escaped(settings["description"]) in page, name
        entry = dictionary.table(name)
        for column in entry.columns:
            shown = f"<dt>{column.name}</dt><dd>{escaped(datasette.column_description(column))}</dd>"
            assert shown in page, (name, column.name)
            assert datasette.label(column) in datasette.column_description(column)
        if "sort_desc" in settings:
            assert f"sorted by {settings['sort_desc']} descending" in page, name
        body = served.get(f"/serving/{name}.json").json()
        assert list(body["facet_results"]) == settings.get("facets", []), name
    # The dashboards' facets and order, by name: the newest day or period first.
    assert tables["daily_metrics"]["facets"] == ["course"] and tables["daily_metrics"]["sort_desc"] == "day"
    assert tables["weekly_metrics"]["facets"] == ["course", "period", "complete"]
    rows = served.get("/serving/weekly_metrics.json", _shape="arrays").json()["rows"]
    starts = [row[2] for row in rows]  # rowid, period, period_start, ...
    assert starts == sorted(starts, reverse=True) and len(set(starts)) > 1


def course_iris(publication):
    with sqlite3.connect(f"file:{publication / 'serving.sqlite'}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute("SELECT course FROM courses ORDER BY course")]


def test_a_course_iri_is_text_not_a_link_to_the_lms(demo, served):
    _, words, publication = demo
    iris = course_iris(publication)
    assert iris and all(iri.startswith("https://") for iri in iris)
    for path in ("/serving/daily_metrics", "/serving/weekly_metrics", "/serving/monthly_metrics",
                 "/serving/term_metrics", "/serving/weekly-active-learners-per-course"):
        page = served.get(path, _size="max").text
        for iri in iris:
            assert f'href="{escaped(iri)}"' not in page, (path, iri)
        # The IRI as text, or (a metrics table, whose `course` is a declared key to `courses`) a link to the course's
        # row inside Datasette, labelled by its name.
        assert any(f">{escaped(iri)}</td>" in page for iri in iris) or 'href="/serving/courses/' in page, path
    # ...which is the plugin's doing: without it, Datasette links them.
    bare = DatasetteServer(words[1:6])  # serve -i FILE --metadata FILE.yml
    try:
        page = bare.get("/serving/weekly-active-learners-per-course", _size="max").text
    finally:
        bare.stop()
    assert any(f'<a href="{escaped(iri)}">' in page for iri in iris)


def test_the_yaml_reads_back_as_the_metadata_whatever_the_dictionarys_text(tmp_path):
    """Datasette's YAML reader (PyYAML, in its virtualenv) reads what render() writes as metadata() is, for text
    a YAML writer gets wrong: quotes, backslashes, line breaks YAML knows and JSON does not, controls, a leading
    blank, words YAML 1.1 reads as booleans, SQL with tabs and blank lines."""
    hostile = ["say \"no\" \\ or 'yes'", "two\nlines\n", " leading blank\nand more", "tab\tand\u2028line\u2029sep",
               "nel\x85bom\ufeffdel\x7fnul\x00esc\x1b", "emoji 😀 and tag \U000e0001", "yes", "on", "~", "- item",
               "# not a comment", "key: value", "---", "...", "a\n\nb\n\n", "\n"]
    columns = [dictionary.Column(name, "TEXT", "text", text, text, dictionary.NEITHER, True, True, text)
               for name, text in zip(["on", "yes", "course", "period", "x y", "null", *[f"c{i}" for i in range(10)]],
                                     hostile, strict=True)]
    table = dictionary.Table("odd_table", "odd \"grain\"\n", "on", "\u2028".join(hostile), columns)
    queries = [dictionary.Query(text, text, None, f"SELECT 1\n\t-- {index}\n\nFROM x\n")
               for index, text in enumerate(hostile)]
    text = datasette.render("on", [table], queries)
    path = tmp_path / "metadata.yml"
    path.write_text(text, encoding="utf-8")
    read = subprocess.run([os.path.join(VENV, "bin", "python"), "-c",
                           "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1], "
                           "encoding='utf-8'))))", str(path)], capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == datasette.metadata("on", [table], queries)


def test_the_datasette_pages_demo_block_runs_as_written(tmp_path):
    """docs/datasette.md's demo block, with this tree's lms-refresh and the test's Datasette first on PATH; the
    Datasette it starts answers one request (--get) and exits instead of serving until stopped."""
    block = re.search(r"^<!-- runnable with datasette -->\n```sh\n(.*?)^```", docs.page("docs/datasette.md"),
                      re.M | re.S).group(1)
    assert "datasette serve" in block and "lms-refresh demo" in block
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "lms-refresh").write_text("#!/bin/sh\nexec " + shlex.join(cli_command()) + ' "$@"\n')
    (bin_ / "datasette").write_text(f'#!/bin/sh\nexec {shlex.quote(os.path.join(VENV, "bin", "datasette"))} "$@" '
                                    "--get /-/metadata.json\n")
    for script in bin_.iterdir():
        script.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    environment = dict(ENVIRONMENT, PATH=f"{bin_}:{ENVIRONMENT.get('PATH', '/usr/bin:/bin')}")
    result = subprocess.run(["bash", "-e", "-c", block], cwd=work, env=environment, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert json.loads(result.stdout.splitlines()[-1]) == datasette.metadata("serving")
    served = work / "demo" / "state-publication"
    assert sorted(os.listdir(served)) == ["datasette-plugins", "datasette.yml", "report-files", "report.html",
                                          "serving.sqlite"]


def test_with_a_declared_key_to_courses_a_course_links_to_its_row_by_name_and_urls_in_names_stay_text(tmp_path):
    """A publication whose metrics declare `course` a foreign key of `courses`: Datasette shows the course's name
    (the metadata's label_column) linking to the course's row in Datasette itself, the IRI beside it as text; a
    course name that is a URL (a source's text) is text too, escaped."""
    publication = tmp_path / "serving.sqlite"
    iri, hostile = "https://lms.example.edu/course/BIO101", 'https://evil.example/"><script>x</script>'
    with contextlib.closing(sqlite3.connect(publication)) as db:
        # The columns the metadata facets must exist: Datasette refuses the page otherwise.
        db.executescript("CREATE TABLE courses (course TEXT PRIMARY KEY, name TEXT, category TEXT);"
                         "CREATE TABLE daily_metrics (day TEXT, course TEXT REFERENCES courses (course), "
                         "active_learners INTEGER);")
        db.executemany("INSERT INTO courses VALUES (?, ?, NULL)", [(iri, "Biology"), (iri + "X", hostile)])
        db.executemany("INSERT INTO daily_metrics VALUES (?, ?, ?)",
                       [("2026-11-02", iri, 12), ("2026-11-02", None, 30)])
        db.commit()
    shipped = os.path.join(REPO, "debian", "datasette")
    server = DatasetteServer(["serve", "-i", str(publication), "--metadata", os.path.join(shipped, "datasette.yml"),
                              "--plugins-dir", os.path.join(shipped, "datasette-plugins")])
    try:
        daily = server.get("/serving/daily_metrics").text
        courses = server.get("/serving/courses").text
    finally:
        server.stop()
    row = "/serving/courses/" + iri.replace(":", "~3A").replace("/", "~2F").replace(".", "~2E")
    assert f'<a href="{row}">Biology</a>&nbsp;<em>{iri}</em>' in daily
    assert f'href="{iri}"' not in daily and f'href="{iri}"' not in courses
    assert f'<td class="col-name type-str">{escaped(hostile)}</td>' in courses
    assert "<script>x</script>" not in courses and 'href="https://evil.example/' not in courses
