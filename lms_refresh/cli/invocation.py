"""What every command of one invocation shares: its `Invocation` (the configuration's path, the clock,
the stop policy), times typed on the command line, and the one path from an error to its exit code."""

import logging
import os

import click

from lms_refresh import errors
from lms_refresh.config import load_config
from lms_refresh.disclosure import redaction
from lms_refresh.instants import NotAnInstant, parse_user_time
from lms_refresh.logs import configure_logging
from lms_refresh.run import stopping
from lms_refresh.state_directory import become_owner, refuse_unreadable

logger = logging.getLogger("lms_refresh")


class Invocation:
    """What every command of one invocation shares: the configuration's path, the clock, the stop policy."""

    def __init__(self, config_path, now, stop=None):
        self.config_path = config_path
        self.now = now
        # The process's SIGTERM policy, installed by lms_refresh.cli.main (see run/stopping.py), read here
        # for whether the command's work was committed before its error.
        self.stop = stop or stopping.StopPolicy()

    def config(self, uses_state=True):
        """The validated configuration; as root, the process then becomes the state directory's owner, and
        any other user who may not read that directory is refused (78) before a command that `uses_state`
        begins."""
        config = load_config(self.config_path, os.environ)
        user = become_owner(config.state_directory, os.geteuid())
        if user is not None:
            logger.debug("Running as %s, the owner of the state directory %s.", user, config.state_directory)
        if uses_state:
            refuse_unreadable(config.state_directory, os.geteuid())
        return config


class UnicodeText(click.ParamType):
    """An option's text that must be Unicode (a learner's identifier, which the source wrote as UTF-8): bytes that
    are not UTF-8 reach Python as lone surrogates, which no identifier can hold, and are a usage error (2)."""

    name = "TEXT"

    def convert(self, value, param, ctx):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail("is not UTF-8 text: a learner's identifier is Unicode, as the source wrote it; give it in "
                      "UTF-8 (check the terminal's or the script's encoding).", param, ctx)
        return value


UNICODE_TEXT = UnicodeText()


class UserTime(click.ParamType):
    name = "DATE|DATETIME"

    def convert(self, value, param, ctx):
        return value  # parsed once the configured time zone is known


def user_time(text, config, option):
    """Given the text of `option` (or None), return its time in UTC; outside the range, a usage error (2)."""
    if text is None:
        return None
    try:
        return parse_user_time(text, config.timezone)
    except NotAnInstant as error:
        raise click.BadParameter(str(error), param_hint=f"'{option}'") from None


def failed(error, fields=None, *, committed=False):
    """Log the error that ended a command, with the journal `fields` of what failed; return its exit code.

    `committed`: the command's work was committed before the error (the process's StopPolicy knows), so an
    unexpected failure must not say that nothing was (a domain error's own sentence says what it means)."""
    ensure_logging()
    if isinstance(error, OSError):
        error = errors.from_os_error(error, error.filename or "a file") or error
    error = errors.from_thread_error(error, "a thread", "its work was committed before it and stands; the next run "
                                     "goes on from there." if committed else "nothing was committed.") or error
    code, message = errors.exit_status(error)
    fields = {**(fields or {}), "EXIT_STATUS": code}
    if isinstance(error, (errors.RefreshError, errors.Terminated)):
        cause = error.__cause__ if isinstance(error, errors.UnexpectedError) else None  # a bug: its traceback too
        logger.error("%s", message, exc_info=cause, extra={**fields, "ERROR_KIND": type(error).__name__})
    else:  # the last resort: one sentence first, then the details
        outcome = ("its work was committed before it and stands; the next run goes on from there" if committed
                   else "nothing was committed")
        logger.error("Unexpected failure (%s); %s.", message, outcome, exc_info=error, extra=fields)
    return code


def ensure_logging():
    if not logging.getLogger().handlers:
        configure_logging(0, os.environ, scrub=redaction.scrub_text)
