"""Write the lms-refresh(8) manual page (roff) from the click commands' own help.

    python3 -m lms_refresh.manpage > lms-refresh.8
"""

import sys

import click

from lms_refresh import __version__
from lms_refresh.errors import MEANINGS


def _escape(text):
    return text.replace("\\", "\\e").replace("-", "\\-").replace("\n.", "\n\\&.")


def render(group, date):
    """Return the manual page for `group` as roff text."""
    context = click.Context(group, info_name="lms-refresh")
    lines = [
        f'.TH LMS-REFRESH 8 "{date}" "lms-refresh {__version__}" "System Administration"',
        ".SH NAME", "lms-refresh \\- keep an LMS metrics store fresh",
        ".SH SYNOPSIS", ".B lms-refresh", "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]",
        ".SH DESCRIPTION", _escape(group.help or ""),
        "A systemd timer (lms\\-refresh.timer) starts lms\\-refresh.service on weekdays at 04:15.",
        ".SH OPTIONS",
    ]
    for param in group.get_params(context):
        record = param.get_help_record(context)
        if record:
            lines += [".TP", f"\\fB{_escape(record[0])}\\fR", _escape(record[1])]
    lines.append(".SH COMMANDS")
    for name in sorted(group.commands):
        command = group.commands[name]
        sub = click.Context(command, info_name=name, parent=context)
        lines += [".SS " + _escape(f"{name} {' '.join(command.collect_usage_pieces(sub))}"), _escape(command.help or "")]
        for param in command.get_params(sub):
            record = param.get_help_record(sub)
            if record:
                lines += [".TP", f"\\fB{_escape(record[0])}\\fR", _escape(record[1])]
    lines.append(".SH EXIT STATUS")
    for code, meaning in sorted(MEANINGS.items()):
        lines += [".TP", f"\\fB{code}\\fR", _escape(meaning)]
    lines += [
        ".SH FILES", ".TP", "/etc/lms\\-refresh/config.toml", "configuration",
        ".TP", "/var/lib/lms\\-refresh", "state: lock, SQLite store, pseudonymisation key",
        ".SH SEE ALSO", "systemctl(1), journalctl(1), systemd.timer(5)",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    from lms_refresh.cli import cli

    sys.stdout.write(render(cli, sys.argv[1] if len(sys.argv) > 1 else "2026-11-30"))
