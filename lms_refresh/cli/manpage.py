"""Write the lms-refresh(8) and lms-refresh.toml(5) manual pages (roff) from the same sources as the program.

The commands and their options come from the click command tree, the
configuration keys (defaults, what they accept and one-line descriptions) from config.SCHEMA,
the exit statuses from errors.MEANINGS, the journal's MESSAGE_IDs from
logs.MESSAGE_IDS and the units from their files, so the page cannot drift
from the program. The package build runs:

    python3 -m lms_refresh.cli.manpage DATE systemd/ > lms-refresh.8
    python3 -m lms_refresh.cli.manpage --section 5 DATE > lms-refresh.toml.5
"""

import configparser
import json
import os
import sys

import click

from lms_refresh import __version__, logs
from lms_refresh.config.schema import (
    CATEGORY_KEYS,
    DEFAULT_CONFIG_PATH,
    DEFAULT_STATE_DIRECTORY,
    REQUIRED,
    SCHEMA,
    TERM_KEYS,
)
from lms_refresh.config.validators import at_least_a_second, parse_duration
from lms_refresh.errors import MEANINGS
from lms_refresh.ops.monitoring import PLUGIN_STATES

UNITS = ("lms-refresh.service", "lms-refresh.timer", "lms-refresh-alert@.service", "lms-refresh-catch-up.timer")

# What the program reads from its environment besides click's own envvars.
ENVIRONMENT = [
    ("STATE_DIRECTORY", "Set by systemd's StateDirectory=; the state directory, winning over state_directory."),
    ("CREDENTIALS_DIRECTORY", "Set by systemd's LoadCredential=; where bare credential names "
                              "(password_file, *_url_file) are looked up first."),
    ("LMS_REFRESH_CREDENTIALS", "Where bare credential names are looked up next (default "
                                "/etc/lms-refresh/credentials)."),
    ("JOURNAL_STREAM, INVOCATION_ID", "Set by systemd; when present, records go to the journal with "
                                      "structured fields instead of stderr."),
    ("NOTIFY_SOCKET", "Set by systemd; progress is sent as STATUS= (shown by systemctl status)."),
    ("HTTPS_PROXY, NO_PROXY", "Honoured by the xapi-lrs source (set them in a drop-in)."),
    ("LMS_REFRESH_JSON_PARSER", "stdlib: decode source JSON with Python's own json even where orjson is "
                                "installed (the results are the same; status and check say which is in use)."),
]

FILES = [
    (DEFAULT_CONFIG_PATH, "The configuration (a conffile; every key explained in comments)."),
    ("/etc/lms-refresh/credentials/", "Credentials named by a bare name in the configuration (password_file, "
                                      "*_url_file), each 0640 root:lms-refresh in a 0750 root:lms-refresh "
                                      "directory: read by the timer's run, the alert unit and manual commands "
                                      "alike, unless the unit loaded its own copy with LoadCredential=."),
    (DEFAULT_STATE_DIRECTORY, "The state directory, owned by the user lms-refresh."),
    (f"{DEFAULT_STATE_DIRECTORY}/refresh.lock", "The run lock (flock); it records the holder's PID and host."),
    (f"{DEFAULT_STATE_DIRECTORY}/metrics.sqlite", "The SQLite store; not for dashboards (it holds pseudonymised "
                                                  "events and the quarantine)."),
    (f"{DEFAULT_STATE_DIRECTORY}-publication/serving.sqlite", "The publication dashboards read (SQLite stores): "
                                                              "only the published metrics, replaced after each run."),
    (f"{DEFAULT_STATE_DIRECTORY}/pseudonymisation.key", "The secret key of the learners' pseudonyms; "
                                                        "back it up, and give every host of a shared store "
                                                        "the same one."),
    ("/usr/share/doc/lms-refresh/", "The README, the documentation (docs/: the administrator's guide, one page per "
                                    "source, the data dictionary, privacy, the references) and examples."),
]


def _escape(text):
    """Return `text` safe as roff input: backslashes, hyphens, leading control characters, non-ASCII."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def _paragraphs(text):
    """Return roff lines for help text: blank-line-separated paragraphs, each reflowed."""
    lines = []
    for number, paragraph in enumerate(p for p in (text or "").strip().split("\n\n") if p.strip()):
        if number:
            lines.append(".IP" if lines and lines[0] == ".IP" else ".PP")
        lines.append(_escape(" ".join(paragraph.split())))
    return lines


def _item(term, description):
    return [".TP", f"\\fB{_escape(term)}\\fR"] + (_paragraphs(description) or ["\\&"])


def _options(command, context, with_help=False):
    lines = []
    for param in command.get_params(context):
        if param.name == "help" and not with_help:
            continue  # every command has it; said once, under OPTIONS
        record = param.get_help_record(context)
        if record:
            lines += _item(record[0], record[1])
    return lines


def _commands(group, context, prefix=""):
    """Yield roff lines for every command of `group`, recursing into sub-groups (e.g. `watermark set`)."""
    for name in sorted(group.commands):
        command = group.commands[name]
        if command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=context)
        if isinstance(command, click.Group):
            yield from _commands(command, sub, prefix + name + " ")
            continue
        usage = " ".join(command.collect_usage_pieces(sub))
        yield ".SS " + _escape(f"{prefix}{name} {usage}".strip())
        yield from _paragraphs(command.help)
        yield from _options(command, sub)


def format_default(key):
    """Return a SCHEMA Key's default as it would be written in the TOML file, or a word for none."""
    if key.default is REQUIRED:
        return "required"
    if key.default is None:
        return "unset"
    if key.check in (parse_duration, at_least_a_second):
        return json.dumps(format_duration(key.default))
    return json.dumps(key.default)


def format_duration(seconds):
    """Return seconds as the configuration's duration syntax ("90s", "5m", "1h30m", "2d")."""
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)


def _configuration(schema):
    lines = [
        ".SH CONFIGURATION",
        _escape(f"A TOML file, {DEFAULT_CONFIG_PATH} unless --config or $LMS_REFRESH_CONFIG names another. "
                "Unknown keys, wrong types and impossible values are refused with one sentence naming the file "
                "and the key (exit status 78). Durations are \"90s\", \"5m\", \"1h30m\", \"2d\" or a number "
                "of seconds. Each key is shown with its default and what it accepts."),
    ]
    # [[terms]], [[categories]]: arrays of tables
    for section, keys in [*schema.items(), ("[terms]", TERM_KEYS), ("[categories]", CATEGORY_KEYS)]:
        lines.append(".SS " + (_escape(f"[{section}]") if section else "Top level"))
        for name, key in keys.items():
            lines += _item(f"{name} = {format_default(key)}", f"{key.description} Accepts {key.check.accepts}.")
    return lines


def read_units(directory):
    """Return [(unit name, Description=, [(setting, value) worth showing])] from the unit files in `directory`."""
    units = []
    for name in UNITS:
        parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
        parser.optionxform = str
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            parser.read_file(handle)
        shown = [(section, setting)
                 for section, setting in (("Timer", "OnCalendar"), ("Service", "ExecStart"), ("Unit", "OnFailure"))
                 if parser.has_option(section, setting)]
        units.append((name, parser.get("Unit", "Description"),
                      [(setting, parser.get(section, setting)) for section, setting in shown]))
    return units


def render(group, date, units):
    """Return the manual page for `group` as roff text; `units` as read_units() returns them."""
    # The group's own context_settings (its -h), as the command line gets them from click's make_context.
    context = click.Context(group, info_name="lms-refresh", **group.context_settings)
    lines = [
        f'.TH LMS\\-REFRESH 8 "{date}" "lms\\-refresh {_escape(__version__)}" "System Administration"',
        ".nh", ".ad l",  # paths, keys and options must not be hyphenated or stretched
        ".SH NAME", "lms\\-refresh \\- keep an LMS metrics store fresh",
        ".SH SYNOPSIS", ".B lms\\-refresh", "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]",
        ".SH DESCRIPTION", *_paragraphs(group.help),
        ".PP",
        _escape("A systemd timer starts lms-refresh.service on weekdays at 04:15; each run takes a lock, pulls "
                "the activity that arrived since the last successful run, recomputes the affected daily metrics, "
                "withholds values derived from too few learners and commits once. Manual commands run as the "
                "service user: run as root, a command becomes the owner of the state directory before it opens "
                "anything. Bare credential names are read from $CREDENTIALS_DIRECTORY, else "
                "/etc/lms-refresh/credentials (0640 root:lms-refresh), by every command alike."),
        ".SH OPTIONS", *_options(group, context, with_help=True),
        ".SH COMMANDS", *_commands(group, context),
        *_configuration(SCHEMA),
        ".SH EXIT STATUS",
    ]
    for code, meaning in sorted(MEANINGS.items()):
        lines += _item(str(code), meaning)
    lines += [".PP", _escape("status --check follows the monitoring-plugin convention instead: "
                             + ", ".join(f"{code} {state}" for code, state in sorted(PLUGIN_STATES.items()))
                             + ", and prints one line with performance data.")]
    lines.append(".SH ENVIRONMENT")
    envvars = {}
    for path, command in [("", group), *_all_commands(group)]:
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar and not param.hidden:
                envvars.setdefault(param.envvar, f"The default of {path}{'/'.join(param.opts)}.")
    for name, text in [*sorted(envvars.items()), *ENVIRONMENT]:
        lines += _item(name, text)
    lines.append(".SH FILES")
    for path, text in FILES:
        lines += _item(path, text)
    lines.append(".SH SYSTEMD UNITS")
    for name, description, settings in units:
        lines += _item(name, description + "." + "".join(f" {setting}={value}" for setting, value in settings))
    lines += [".SH JOURNAL", _escape(
        "Under systemd every record carries SYSLOG_IDENTIFIER=lms-refresh and structured fields (RUN_ID, "
        "RUN_KIND, WINDOW_SINCE, WINDOW_UNTIL, OUTCOME, STATEMENTS_READ, ROWS_WRITTEN, EXIT_STATUS, ...): "
        "journalctl -u lms-refresh.service -o verbose shows them, and e.g. journalctl -u lms-refresh.service "
        "OUTCOME=failure selects on them. Each kind of record has a stable MESSAGE_ID:")]
    for name, message_id in logs.MESSAGE_IDS.items():
        lines += _item(message_id.hex, name + (f" (OUTCOME={logs.OUTCOMES[name]})" if name in logs.OUTCOMES else ""))
    lines += [".SH SEE ALSO", "lms\\-refresh.toml(5), systemctl(1), journalctl(1), systemd.timer(5), systemd.exec(5)",
              ".PP", _escape("/usr/share/doc/lms-refresh/docs/README.md: the guides, the data dictionary and the "
                             "privacy page.")]
    return "\n".join(lines) + "\n"


def render_configuration(date):
    """Return lms-refresh.toml(5), the configuration file's page, as roff text."""
    lines = [
        f'.TH LMS\\-REFRESH.TOML 5 "{date}" "lms\\-refresh {_escape(__version__)}" "File Formats"',
        ".nh", ".ad l",
        ".SH NAME", "lms\\-refresh.toml \\- configuration of lms\\-refresh",
        ".SH SYNOPSIS", _escape(DEFAULT_CONFIG_PATH),
        ".SH DESCRIPTION",
        _escape("The configuration lms-refresh(8) reads: every command, the timer's run and the alert unit alike. "
                "The packaged file has every key, commented, with its default; a [source] table must be "
                "uncommented and filled in before the timer's runs do anything (until then they are skipped). "
                "Check a change with: lms-refresh check"),
        ".PP", *_configuration(SCHEMA)[1:],
        ".SH FILES", *_item(DEFAULT_CONFIG_PATH, "The configuration (a conffile)."),
        ".SH SEE ALSO", "lms\\-refresh(8)",
        ".PP", _escape("/usr/share/doc/lms-refresh/docs/reference/configuration.md: the same keys as a table."),
    ]
    return "\n".join(lines) + "\n"


def _all_commands(group, prefix=""):
    """Yield (command path and a space, command) for every command below `group`."""
    for name, command in sorted(group.commands.items()):
        yield f"{prefix}{name} ", command
        if isinstance(command, click.Group):
            yield from _all_commands(command, f"{prefix}{name} ")


if __name__ == "__main__":
    from lms_refresh.cli import cli

    if sys.argv[1:2] == ["--section"]:  # --section 5 [DATE]: the configuration's page
        sys.stdout.write(render_configuration(sys.argv[3] if len(sys.argv) > 3 else "2026-11-30"))
        sys.exit(0)

    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the source tree
    sys.stdout.write(render(cli, sys.argv[1] if len(sys.argv) > 1 else "2026-11-30",
                            read_units(sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "systemd"))))
