"""Logging, configured once, and progress reporting.

Under systemd (JOURNAL_STREAM or INVOCATION_ID set) records go to the
journal only, with structured uppercase fields; stderr would be captured by
journald too and every line would appear twice. Elsewhere, a human format
on stderr.
"""

import logging
import socket
import sys
import time

IDENTIFIER = "lms-refresh"


def under_systemd(environ):
    return bool(environ.get("JOURNAL_STREAM") or environ.get("INVOCATION_ID"))


def configure_logging(verbosity, environ, stream=None):
    """Set up the root logger once. verbosity: -1 quiet, 0 normal, 1+ verbose."""
    level = logging.WARNING if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(level)
    handler = None
    warning = None
    if under_systemd(environ):
        try:
            handler = journal_handler()
            handler.setFormatter(logging.Formatter("%(message)s"))
        except ImportError:
            warning = "python3-systemd is not installed; logging to stderr instead of the journal"
    if handler is None:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    root.addHandler(handler)
    if warning:
        logging.getLogger(__name__).warning(warning)


def journal_handler():
    """Return a handler that sends records to the journal with structured fields."""
    from systemd.journal import JournalHandler

    return JournalHandler(SYSLOG_IDENTIFIER=IDENTIFIER)


def sd_notify(message, environ):
    """Send `message` to systemd's notification socket, if there is one (no-op elsewhere)."""
    address = environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode(), address)
    except OSError:
        pass  # progress is a courtesy; it must never fail a run


class Progress:
    """Report progress as systemd STATUS= and, on a terminal, one updating line."""

    def __init__(self, environ, stream=None, interval=1.0, clock=time.monotonic):
        self.environ = environ
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() and not under_systemd(environ)
        self.interval = interval
        self.clock = clock
        self.last = None

    def __call__(self, text, force=False):
        now = self.clock()
        if not force and self.last is not None and now - self.last < self.interval:
            return
        self.last = now
        sd_notify(f"STATUS={text}", self.environ)
        if self.tty:
            self.stream.write(f"\r\033[K{text}")
            self.stream.flush()

    def done(self):
        if self.tty and self.last is not None:
            self.stream.write("\r\033[K")
            self.stream.flush()
        sd_notify("STATUS=", self.environ)

