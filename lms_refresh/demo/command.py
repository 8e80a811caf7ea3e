"""`lms-refresh demo`: sample data → one real refresh into SQLite → a table of the metrics."""

import datetime as dt
import os
import shlex
import shutil
import tempfile
import zoneinfo

from lms_refresh import atomic
from lms_refresh.config import load_config
from lms_refresh.demo import READ_BACK_MARGIN
from lms_refresh.demo.sample import generate, write_daily_files
from lms_refresh.errors import ConfigError
from lms_refresh.logs import Progress
from lms_refresh.run.refresh import Refresh
from lms_refresh.run.request import Request
from lms_refresh.store import datasette, open_store
from lms_refresh.store.tables import SERVING_COLUMNS

TIMEZONE = "Europe/Paris"

CONFIG_TEMPLATE = """\
# Written by 'lms-refresh demo'.
timezone = "{timezone}"
min_cell_size = 10
state_directory = "{state}"

[window]
bootstrap_days = {bootstrap_days}
safety_lag = "0s"

[source]
type = "xapi-ndjson"
path = "{statements}"

# The sample's courses in course categories (the category tables: a faculty's learners each counted once).
[[categories]]
name = "Faculty of Science"
courses = ["*/course/CHEM*", "*/course/PHYS*", "*/course/MATH*"]

[[categories]]
name = "Life sciences"
parent = "Faculty of Science"
courses = ["*/course/BIO*"]

[[categories]]
name = "Faculty of Arts and Law"
courses = ["*/course/HIST*", "*/course/LAW*"]
"""


def command_hint(argv0, environ, executable):
    """Return how to run lms-refresh again from this shell: a name on PATH only if it is this program.

    The README's demo installs into a virtualenv that is not on PATH, so a bare
    `lms-refresh` would be "command not found" (or, worse, another version).
    """
    if os.path.basename(argv0) == "lms-refresh" and os.access(argv0, os.X_OK):
        program = os.path.abspath(argv0)
        on_path = shutil.which("lms-refresh", path=environ.get("PATH", os.defpath))
        if on_path and os.path.realpath(on_path) == os.path.realpath(program):
            return "lms-refresh"
        return shlex.quote(program)
    return f"{shlex.quote(executable)} -m lms_refresh"


def run_demo(directory, learners, days, *, seed, now, environ, echo, command="lms-refresh"):
    """Generate a sample under `directory` (or a temp dir), refresh it, and echo the metrics.

    `command` is how the user can run lms-refresh again (see command_hint).
    """
    # Absolute: the configuration it writes takes absolute paths only.
    directory = os.path.abspath(directory or tempfile.mkdtemp(prefix="lms-refresh-demo-"))
    _refuse_unless_empty(directory)
    statements = os.path.join(directory, "statements")
    state = os.path.join(directory, "state")
    end = now.astimezone(zoneinfo.ZoneInfo(TIMEZONE)).date()
    first, last = end - dt.timedelta(days=days), end - dt.timedelta(days=1)
    count = write_daily_files(statements, generate(seed, first, days, learners=learners, timezone=TIMEZONE, until=now))
    echo(f"Generated {count} xAPI statements in {statements}: {learners} learners active on the {days} days "
         f"{first} .. {last} (--days), about 1% synced days late (offline devices), a few malformed on purpose.")
    config_path = os.path.join(directory, "config.toml")
    text = CONFIG_TEMPLATE.format(timezone=TIMEZONE, state=state, bootstrap_days=days + READ_BACK_MARGIN,
                                  statements=statements)
    atomic.replace_bytes(config_path, text.encode(), mode=0o644)
    # The demo is a plain local run, not a service: ignore a $STATE_DIRECTORY from the caller.
    environment = {k: v for k, v in environ.items() if k != "STATE_DIRECTORY"}
    config = load_config(config_path, environment)
    report, error = Refresh(config, Request(), now, environment, os.geteuid(), Progress(environment)).run()
    if error is not None:
        raise error
    partitions = report.partitions
    echo(
        f"Refreshed {config.store.path}: {report.statements_read} statements read, "
        f"{report.quarantined} quarantined (the malformed ones), {report.voided} voided.\n"
        f"A first run reads back bootstrap_days = {config.window.bootstrap_days} days "
        f"(the sample's {days} plus a week), "
        f"so it rebuilt the {len(partitions)} local days {partitions[0]} .. {partitions[-1]}, today included; "
        f"{report.rows_written} cells (day x course) were counted, {report.suppressed} of them with "
        "suppressed values.\n"
    )
    store = open_store(config, environment, create=False, read_only=True)
    try:
        rows = store.serving_rows()
    finally:
        store.close()
    echo(format_table(rows[-24:]))
    noise = config.privacy.max_noise if config.privacy.method != "none" else 0
    shown = "last 24" if len(rows) > 24 else "all"
    echo(f"\n({shown} of the {len(rows)} published rows, the whole site's '{SITE_LABEL}' included; "
         f"'-' = withheld because fewer than {config.min_cell_size} learners"
         + (f"; every other count is perturbed by up to ±{noise} (cell key method), so columns need not add up)"
            if noise else ")"))
    if config.report.enabled:
        echo(f"The HTML report (open it in a browser): {config.report.path}")
    echo("Browse the publication with Datasette (pip install datasette==0.65.5; read-only, on this machine only):\n"
         f"  {datasette_command(config.publication.path)}")
    echo(f"Try: {command} --config {shlex.quote(config_path)} status")


def datasette_command(publication):
    """Write the Datasette metadata and plugin beside `publication` (the SQLite file dashboards read); return the
    command that serves it read-only (-i: immutable) on 127.0.0.1 with them."""
    folder = os.path.dirname(publication)
    database = os.path.splitext(os.path.basename(publication))[0]
    metadata = os.path.join(folder, "datasette.yml")
    plugins = os.path.join(folder, "datasette-plugins")
    atomic.replace_bytes(metadata, datasette.render(database).encode(), mode=0o644)
    os.makedirs(plugins, mode=0o755, exist_ok=True)
    atomic.replace_bytes(os.path.join(plugins, datasette.PLUGIN_NAME), datasette.PLUGIN.encode(), mode=0o644)
    return shlex.join(["datasette", "serve", "-i", publication, "--metadata", metadata, "--plugins-dir", plugins])


def _refuse_unless_empty(directory):
    """Raise ConfigError unless `directory` is missing or empty: the demo writes config.toml there and refreshes
    into state/ beside it, so a project's directory (or /etc/lms-refresh) would have its configuration replaced
    and its store's watermark moved past records its own source has not delivered yet."""
    if not directory.isprintable():  # shown in every sentence, and written into the configuration, which refuses it
        raise ConfigError(f"--dir must not contain control or format characters: {directory[:100]!r}.")
    try:
        entries = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    except OSError as error:
        raise ConfigError(f"Cannot read --dir {directory} ({error.strerror}); pick an empty directory.") from None
    if entries:
        shown = ", ".join(name if name.isprintable() else repr(name) for name in entries[:3])
        raise ConfigError(f"--dir {directory} is not empty (it holds {shown}{', ...' if len(entries) > 3 else ''}): "
                          "the demo writes its own config.toml, statements and state there; pick an empty directory, "
                          "or one that does not exist.")


SITE_LABEL = "(site)"  # the whole site's rows (course NULL), above each day's courses


def format_table(rows):
    """Return the serving rows as an aligned text table."""
    headers = ["day", "course", "learners", "stmts", "attempts", "completed", "passed", "failed",
               "avg score", "hours", "suppr."]
    body = []
    for row in rows:
        values = dict(zip(SERVING_COLUMNS, row, strict=True))
        course = values["course"]
        cells = [values["day"], SITE_LABEL if course is None else course.rsplit("/", 1)[-1]]
        for key in ("active_learners", "statements", "attempts", "completions", "passed", "failed"):
            cells.append("-" if values[key] is None else str(values[key]))
        score, seconds = values["avg_scaled_score"], values["total_duration_seconds"]
        cells.append("-" if score is None else f"{score:.2f}")
        cells.append("-" if seconds is None else f"{seconds / 3600:.1f}")
        cells.append("yes" if values["suppressed"] else "")
        body.append(cells)
    widths = [max(len(str(line[i])) for line in [headers] + body) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                 for r in body)
    return "\n".join(lines)
