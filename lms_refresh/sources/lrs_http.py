"""HTTP for the LRS source: one GET at a time, retried, bounded, and never quoting the server.

Every request is bounded whatever the server does:

- `timeout` per read and `response_deadline` for the whole response, from
  sending the request to its last byte (SIGALRM interrupts a read that a
  server trickling one byte every few seconds keeps alive);
- `max_response_bytes`, counted while the body streams in (decompressed, so
  a compressed bomb counts too) and abandoned beyond — never held whole;
- `read_deadline` over all requests of a run, retries and pauses included.

Messages (logs, the run log, Healthchecks pings) give the HTTP status and
its standard phrase, the configured URL and a reason in our own words; they
never copy a response body, a header value or an exception text that could
quote one.
"""

import contextlib
import datetime as dt
import email.utils
import http
import logging
import random
import signal
import threading
import time
import urllib.parse

from lms_refresh.credentials import read_secret
from lms_refresh.disclosure.redaction import url_origin
from lms_refresh.errors import ConfigError, UnavailableError
from lms_refresh.instants import UTC
from lms_refresh.sources import json_decoding

logger = logging.getLogger(__name__)

XAPI_VERSION = "1.0.3"
MAX_DELAY = 300  # seconds: the longest pause between attempts, Retry-After included
DEFAULT_PORTS = {"http": 80, "https": 443}
BODY_CHUNK = 16 << 10  # bytes read at a time (decompressed: at most ~1000 times that)
def origin(url):
    """Return (scheme, host, port) of a URL, with the scheme's default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range: no port this origin could match
        port = -1
    return scheme, (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def retry_after_seconds(value, now):
    """Given a Retry-After header (seconds or an HTTP date), return seconds to wait, or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max((moment - now).total_seconds(), 0)


class _Retryable(Exception):
    """One attempt failed in a way a later attempt may not meet again."""

    def __init__(self, reason, wait=None):
        super().__init__(reason)
        self.wait = wait


class _DeadlinePassed(BaseException):
    """One response took longer than its deadline.

    A BaseException, raised from the SIGALRM handler wherever the main thread
    is blocked, so that no `except Exception` inside requests or urllib3 keeps it.
    """


@contextlib.contextmanager
def response_deadline(seconds):
    """Raise _DeadlinePassed in the block once `seconds` have passed, however its reads trickle.

    SIGALRM interrupts a blocked read; signals reach only the main thread (where
    the engine runs), so elsewhere this does nothing and only the checks between
    chunks of a body apply.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise _DeadlinePassed()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def status_phrase(status):
    """The standard phrase of an HTTP status (never the one the server sent, which is its own text)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "a non-standard status"


class LrsClient:
    """GET requests to one LRS with its credentials, retries and bounds (see the module doc)."""

    def __init__(self, settings, environ, sleep=time.sleep, *, jitter=random.random, clock=time.monotonic):
        import requests  # imported here: only this source needs it

        self.requests = requests
        self.endpoint = settings.endpoint if settings.endpoint.endswith("/") else settings.endpoint + "/"
        self.statements_url = urllib.parse.urljoin(self.endpoint, "statements")
        self.username = settings.username
        self.password_file = settings.password_file
        self.ca_bundle = settings.ca_bundle
        self.timeout = settings.timeout
        self.attempts = settings.request_attempts
        self.delay = settings.request_delay
        self.response_deadline = settings.response_deadline
        self.max_bytes = settings.max_response_bytes
        self.read_deadline = settings.read_deadline
        self.environ = environ
        self.sleep, self.jitter, self.clock = sleep, jitter, clock
        self._began = None  # when this run's first request started: read_deadline counts from there
        self._session = None

    def session(self):
        if self._session is None:
            password = read_secret(self.password_file, self.environ)
            session = self.requests.Session()
            session.auth = (self.username, password)
            session.headers.update({"X-Experience-API-Version": XAPI_VERSION, "Accept": "application/json"})
            self._session = session
        return self._session

    def close(self):
        if self._session is not None:
            self._session.close()

    def follow(self, more):
        """Return the absolute URL of a `more` link, refusing one that leaves the endpoint's origin."""
        try:
            target = urllib.parse.urljoin(self.statements_url, more)
        except ValueError:  # e.g. a broken IPv6 address
            raise UnavailableError(f"The LRS at {self.statements_url} sent a 'more' link that is not a URL; "
                                   "nothing was committed.") from None
        if origin(target) != origin(self.endpoint):
            raise ConfigError(
                f"The LRS at {self.statements_url} sent a 'more' link to {url_origin(target)}, another "
                "scheme, host or port than source.endpoint; it was not followed, so the credentials were not "
                "sent there. If that is the LRS's own address, set source.endpoint to it."
            )
        parts = urllib.parse.urlsplit(target)
        if "@" in parts.netloc:  # user:password@ in a link: our own credentials go in the header, never theirs
            target = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
        return target

    def remaining(self):
        """Seconds left of this run's read_deadline, which starts with its first request."""
        if self._began is None:
            self._began = self.clock()
        return self.read_deadline - (self.clock() - self._began)

    def _out_of_time(self):
        return UnavailableError(
            f"Reading the LRS at {self.statements_url} did not finish within source.read_deadline "
            f"({self.read_deadline} s); nothing was committed. The LRS is too slow or its paging does not end; "
            "if the window is simply large, raise source.read_deadline or backfill it in smaller windows."
        )

    def get(self, url, params=None):
        """GET one page; return (parsed JSON, headers). Retries what may pass; raises the domain errors.

        Messages name the configured statements URL, never a URL the LRS sent.
        """
        where = self.statements_url
        reason = ""
        for attempt in range(1, self.attempts + 1):
            left = self.remaining()
            if left <= 0:
                raise self._out_of_time()
            try:
                return self._attempt(url, params, where, deadline=min(self.response_deadline, left))
            except _Retryable as failure:
                reason = str(failure)
                if attempt == self.attempts:
                    break
                backoff = self.delay * 2 ** (attempt - 1) * (0.5 + self.jitter() / 2)
                wait = min(failure.wait if failure.wait is not None else backoff, MAX_DELAY)
                if wait >= self.remaining():
                    raise self._out_of_time() from None
                logger.warning("The LRS at %s: %s; attempt %d of %d, retrying in %.1f s.",
                               where, reason, attempt, self.attempts, wait)
                self.sleep(wait)
        raise UnavailableError(
            f"The LRS at {where} could not be read after {self.attempts} attempt(s) ({reason}); "
            "nothing was committed."
        )

    def _attempt(self, url, params, where, *, deadline):
        """One GET whose response must arrive whole within `deadline` seconds and `max_response_bytes`."""
        requests = self.requests
        deadline_at = self.clock() + deadline
        try:
            with response_deadline(deadline):
                # verify= on each request: requests lets $REQUESTS_CA_BUNDLE override a Session's own.
                response = self.session().get(url, params=params, timeout=self.timeout, allow_redirects=False,
                                              verify=self.ca_bundle or True, stream=True)
                try:
                    self._refuse_status(response, where)
                    body = self._body(response, where, deadline_at)
                finally:
                    response.close()
        except _DeadlinePassed:
            raise _Retryable(f"no complete answer within {deadline:g} s (source.response_deadline)") from None
        except requests.exceptions.SSLError as error:
            raise ConfigError(
                f"TLS verification of the LRS at {where} failed ({error.__class__.__name__}); "
                "set source.ca_bundle to the CA that signed its certificate."
            ) from None
        except requests.exceptions.Timeout:
            raise _Retryable(f"no answer within {self.timeout} s") from None
        except requests.exceptions.ConnectionError as error:
            raise _Retryable(f"cannot connect ({_root_cause(error)})") from None
        except requests.exceptions.RequestException as error:  # a body that broke off or cannot be decoded
            raise _Retryable(f"the answer broke off ({type(error).__name__})") from None
        try:
            payload = json_decoding.decode_document(body)
        except json_decoding.TooDeep:
            raise _Retryable("the answer was JSON nested too deeply to read") from None
        except json_decoding.NotJSON:
            raise _Retryable("the answer was not JSON") from None
        del body
        if not isinstance(payload, dict) or not isinstance(payload.get("statements"), list):
            raise _Retryable("the answer was not an xAPI StatementResult")
        return payload, response.headers

    def _refuse_status(self, response, where):
        """Raise the domain error of a status other than 200, from the status alone (never the body)."""
        status = response.status_code
        if status == 200:
            return
        if status in (401, 403):
            raise ConfigError(
                f"The LRS at {where} refused the credentials of user {self.username!r} (HTTP {status}); "
                f"check source.username and the password in {self.password_file}."
            )
        if status == 429 or status >= 500:
            wait = retry_after_seconds(response.headers.get("Retry-After"), dt.datetime.now(UTC))
            raise _Retryable(f"HTTP {status}", wait)
        if 300 <= status < 400:
            raise ConfigError(
                f"The LRS at {where} redirects to {url_origin(response.headers.get('Location', ''))} "
                f"(HTTP {status}); redirects are not followed with credentials — set source.endpoint to the final "
                "address."
            )
        raise ConfigError(
            f"The LRS at {where} answered HTTP {status} ({status_phrase(status)}); check source.endpoint (it must "
            "be the xAPI base URL, the one ending before /statements). Its answer is not copied here; "
            "the LRS's own log says more."
        )

    def _body(self, response, where, deadline_at):
        """Return the body, read in chunks and counted: one larger than max_response_bytes is abandoned."""
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise self._too_large(where)
        chunks, size = [], 0
        for chunk in response.iter_content(BODY_CHUNK):
            size += len(chunk)
            if size > self.max_bytes:
                raise self._too_large(where)
            if self.clock() > deadline_at:  # where SIGALRM cannot help (not the main thread)
                raise _DeadlinePassed()
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, where):
        return UnavailableError(
            f"The LRS at {where} sent a response larger than source.max_response_bytes ({self.max_bytes} bytes); "
            "it was abandoned unread and nothing was committed. Lower source.page_size, or raise "
            "source.max_response_bytes if the LRS's pages are that large."
        )


def _root_cause(error):
    """The innermost reason of a requests ConnectionError, in words we chose.

    An operating-system error's description ("Connection refused") or the
    exception's class name ("BadStatusLine") — never the exception's text,
    which may quote what the server sent (a malformed status line, say).
    """
    cause, seen = error, set()
    while id(cause) not in seen:
        seen.add(id(cause))
        inner = cause.__cause__ or getattr(cause, "reason", None) \
            or next((a for a in cause.args if isinstance(a, BaseException)), None)
        if not isinstance(inner, BaseException):
            break
        cause = inner
    for candidate in (cause, cause.__context__):  # urllib3 raises its own error while handling the OS's
        if isinstance(candidate, OSError) and candidate.strerror:
            return candidate.strerror
    return type(cause).__name__
