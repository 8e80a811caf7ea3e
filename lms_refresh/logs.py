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
import uuid

IDENTIFIER = "lms-refresh"

# Each kind of record carries a stable MESSAGE_ID, as systemd's catalog does,
# so that `journalctl MESSAGE_ID=...` finds every record of one kind whatever
# its wording. Defined here once and listed in docs/admin/logging.md; never change one
# (operators' queries and alerting rules name them), only add new ones.
MESSAGE_IDS = {
    "run-started": uuid.UUID("efd465ddcc574f7ab9ffc02623a04297"),
    "run-finished": uuid.UUID("ef029f020e6c4148adce1996c67f5a7f"),
    "dry-run-finished": uuid.UUID("800c926172c54c92b352a20bfd1ec5b0"),
    "nothing-to-do": uuid.UUID("83520f58c27a443dbdf0f9036483b214"),
    "lock-held": uuid.UUID("b649cc9685904c2eaf43dd052d4dfd5e"),
    "run-failed": uuid.UUID("97a39074609440c38ab504596ee0bcba"),
    "quarantine": uuid.UUID("b3843518ef384384abafe5a62103e6d1"),
    "run-retrying": uuid.UUID("67a108c5bbbe401a85f618ee60ff0bdc"),
    "alert-sent": uuid.UUID("a2c2a192e29d40cfa63f198179e1d4dc"),
    "alert-undelivered": uuid.UUID("ed00050407274a8d954481184885fb94"),
    "privacy-weakened": uuid.UUID("c92f555a5f47480b930015504f258a3e"),
    "bad-input-accepted": uuid.UUID("a40ac6baf67a43cfa862ac26d463fef0"),
}
RUN_STARTED = "run-started"
RUN_FINISHED = "run-finished"
DRY_RUN_FINISHED = "dry-run-finished"
NOTHING_TO_DO = "nothing-to-do"
LOCK_HELD = "lock-held"
RUN_FAILED = "run-failed"
QUARANTINE = "quarantine"
RUN_RETRYING = "run-retrying"
ALERT_SENT = "alert-sent"
ALERT_UNDELIVERED = "alert-undelivered"
PRIVACY_WEAKENED = "privacy-weakened"
BAD_INPUT_ACCEPTED = "bad-input-accepted"

# The OUTCOME field of the records that end a run (`journalctl OUTCOME=failure`).
OUTCOMES = {RUN_FINISHED: "success", DRY_RUN_FINISHED: "dry-run", NOTHING_TO_DO: "nothing-to-do",
            LOCK_HELD: "lock-held", RUN_FAILED: "failure"}


def fields(kind, **more):
    """Return the journal fields of a record of `kind` (a MESSAGE_IDS name): its MESSAGE_ID, OUTCOME, `more`."""
    record = {"MESSAGE_ID": MESSAGE_IDS[kind].hex}
    if kind in OUTCOMES:
        record["OUTCOME"] = OUTCOMES[kind]
    record.update(more)
    return record


def run_fields(kind, report, **more):
    """Return the journal fields of a run's record of `kind`, from its Report (or None if it never began).

    Only records that end a run carry counters: the start record has read
    nothing yet, and a query for STATEMENTS_READ must not count it.
    """
    record = fields(kind)
    if report is not None:
        record.update(RUN_ID=report.run_id, RUN_KIND=report.kind)
        if report.window is not None:
            record.update(WINDOW_SINCE=report.window.since_cursor, WINDOW_UNTIL=report.window.until_cursor)
        if kind in (RUN_FINISHED, DRY_RUN_FINISHED, RUN_FAILED, QUARANTINE):
            record.update(
                STATEMENTS_READ=report.statements_read, ROWS_STAGED=report.staged, VOIDED=report.voided,
                QUARANTINED=report.quarantined, PARTITIONS=len(report.partitions),
                ROWS_WRITTEN=report.rows_written, SUPPRESSED=report.suppressed,
            )
        if kind == LOCK_HELD:
            record["LOCK_HOLDER"] = report.lock_holder
    record.update(more)
    return record


def under_systemd(environ):
    return bool(environ.get("JOURNAL_STREAM") or environ.get("INVOCATION_ID"))


class Scrubbed(logging.Filter):
    """Pass every record's text through `scrub` (lms_refresh.disclosure.redaction.scrub_text) before a handler sees it.

    The journal handler sends a record's attributes as fields too (MSG, ARGS,
    EXC_INFO, EXCEPTION_TEXT, the uppercase extra= fields), so the record itself
    is rewritten: its message formatted and scrubbed, no arguments, the
    traceback as scrubbed text. Records are a few per file and per run, never
    one per statement, so the cost is a regular expression over a line.
    """

    def __init__(self, scrub):
        super().__init__()
        self.scrub = scrub

    def filter(self, record):
        record.msg, record.args = self.scrub(record.getMessage()), ()
        if record.exc_info:
            record.exc_text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        for name, value in list(vars(record).items()):
            if name.isupper() and isinstance(value, str):
                setattr(record, name, self.scrub(value))
        return True


def configure_logging(verbosity, environ, stream=None, *, scrub=None):
    """Set up the root logger once. verbosity: -1 quiet, 0 normal, 1+ verbose; `scrub(text)` redacts
    every record (see Scrubbed)."""
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
    if scrub is not None:
        handler.addFilter(Scrubbed(scrub))
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

    def __init__(self, environ, stream=None, interval=1.0, *, clock=time.monotonic, scrub=str):
        self.environ = environ
        self.scrub = scrub  # lms_refresh.disclosure.redaction.scrub_text, as for log records
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
        text = self.scrub(text)
        sd_notify(f"STATUS={text}", self.environ)
        if self.tty:
            self.stream.write(f"\r\033[K{text}")
            self.stream.flush()

    def done(self):
        if self.tty and self.last is not None:
            self.stream.write("\r\033[K")
            self.stream.flush()
        sd_notify("STATUS=", self.environ)


def counted(number, noun, plural=None):
    """Return "1 partition", "2 partitions": `number` with `noun` in agreement (`plural` if not noun + "s")."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
