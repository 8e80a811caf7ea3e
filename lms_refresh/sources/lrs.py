"""xAPI statements from a Learning Record Store over HTTP (GET {endpoint}/statements).

What is assumed of the LRS, and what is not:

- It answers the xAPI 1.0.3 StatementResult (`statements`, `more`) to GET with
  `since`, `until`, `limit`, `ascending` and HTTP basic auth.
- `since`/`until` may filter on `stored` (the spec) or on `timestamp` (Ralph).
  Both are widened by `source.overlap`, and every statement is then kept only
  if its own `stored` lies in the window. A statement whose timestamp lies
  further than the overlap from its stored time is missed by an LRS that
  filters on timestamp; `lms-refresh check` says which field the LRS uses.
- Order is not relied on (Ralph reverses `ascending`): the whole window is
  staged and committed at once, and the watermark is the window's end, not
  the newest statement seen.
- `limit` may be capped and the last page may be empty: pages are followed
  through `more` (relative or absolute, but only to the endpoint's own
  scheme, host and port, so credentials never reach a third party) until the
  LRS sends none.
- `X-Experience-API-Consistent-Through` bounds the window when present.

One page is held at a time, so memory does not grow with the window.
"""

import datetime as dt
import email.utils
import hashlib
import json
import logging
import random
import time
import urllib.parse

from lms_refresh.credentials import read_secret
from lms_refresh.errors import ConfigError, UnavailableError
from lms_refresh.sources import Batch, TimeOrderedSource
from lms_refresh.sources.xapi import InvalidStatement, parse_time, stored_cursor
from lms_refresh.window import UTC, to_cursor

logger = logging.getLogger(__name__)

XAPI_VERSION = "1.0.3"
CONSISTENT_THROUGH = "X-Experience-API-Consistent-Through"
MAX_DELAY = 300  # seconds: the longest pause between attempts, Retry-After included
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url):
    """Return (scheme, host, port) of a URL, with the scheme's default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme)


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


class LrsSource(TimeOrderedSource):
    name = "xapi-lrs"

    def __init__(self, settings, mapper, environ, sleep=time.sleep, jitter=random.random):
        import requests  # imported here: only this source needs it

        self.requests = requests
        self.endpoint = settings["endpoint"] if settings["endpoint"].endswith("/") else settings["endpoint"] + "/"
        self.statements_url = urllib.parse.urljoin(self.endpoint, "statements")
        self.username = settings["username"]
        self.password_file = settings["password_file"]
        self.ca_bundle = settings["ca_bundle"]
        self.page_size = settings["page_size"]
        self.overlap = dt.timedelta(seconds=settings["overlap"])
        self.timeout = settings["timeout"]
        self.attempts = settings["request_attempts"]
        self.delay = settings["request_delay"]
        self.mapper = mapper
        self.environ = environ
        self.sleep, self.jitter = sleep, jitter
        self._session = None
        self._probed, self._consistent = False, None

    def describe(self):
        return f"the LRS at {self.statements_url}"

    # -- HTTP ----------------------------------------------------------------

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
        target = urllib.parse.urljoin(self.statements_url, more)
        if origin(target) != origin(self.endpoint):
            scheme, host, port = origin(target)
            raise ConfigError(
                f"The LRS at {self.statements_url} sent a 'more' link to {scheme}://{host}:{port}, another "
                "scheme, host or port than source.endpoint; it was not followed, so the credentials were not "
                "sent there. If that is the LRS's own address, set source.endpoint to it."
            )
        return target

    def get(self, url, params=None):
        """GET one page; return (parsed JSON, headers). Retries what may pass; raises the domain errors."""
        where = url.split("?")[0]
        reason = ""
        for attempt in range(1, self.attempts + 1):
            try:
                return self._attempt(url, params, where)
            except _Retryable as failure:
                reason = str(failure)
                if attempt == self.attempts:
                    break
                backoff = self.delay * 2 ** (attempt - 1) * (0.5 + self.jitter() / 2)
                wait = min(failure.wait if failure.wait is not None else backoff, MAX_DELAY)
                logger.warning("The LRS at %s: %s; attempt %d of %d, retrying in %.1f s.",
                               where, reason, attempt, self.attempts, wait)
                self.sleep(wait)
        raise UnavailableError(
            f"The LRS at {where} could not be read after {self.attempts} attempt(s) ({reason}); "
            "nothing was committed."
        )

    def _attempt(self, url, params, where):
        requests = self.requests
        try:
            # verify= on each request: requests lets $REQUESTS_CA_BUNDLE override a Session's own.
            response = self.session().get(url, params=params, timeout=self.timeout, allow_redirects=False,
                                          verify=self.ca_bundle or True)
        except requests.exceptions.SSLError as error:
            raise ConfigError(
                f"TLS verification of the LRS at {where} failed ({error.__class__.__name__}); "
                "set source.ca_bundle to the CA that signed its certificate."
            )
        except requests.exceptions.Timeout:
            raise _Retryable(f"no answer within {self.timeout} s")
        except requests.exceptions.ConnectionError as error:
            raise _Retryable(f"cannot connect ({_root_cause(error)})")
        status = response.status_code
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
                f"The LRS at {where} redirects to {response.headers.get('Location', '?')} (HTTP {status}); "
                "redirects are not followed with credentials — set source.endpoint to the final address."
            )
        if status != 200:
            raise ConfigError(
                f"The LRS at {where} answered HTTP {status} ({response.text[:200].strip()}); "
                "check source.endpoint (it must be the xAPI base URL, the one ending before /statements)."
            )
        try:
            payload = response.json()
        except ValueError:
            raise _Retryable("the answer was not JSON")
        if not isinstance(payload, dict) or not isinstance(payload.get("statements"), list):
            raise _Retryable("the answer was not an xAPI StatementResult")
        return payload, response.headers

    # -- windows -------------------------------------------------------------

    def complete_through(self, now):
        """Ask the LRS (one small request) how far it is consistent; None if it does not say."""
        if self._probed:
            return self._consistent
        _, headers = self.get(self.statements_url, {"limit": 1})
        self._probed = True
        value = headers.get(CONSISTENT_THROUGH)
        if value:
            try:
                self._consistent = parse_time(value, CONSISTENT_THROUGH).astimezone(UTC)
            except InvalidStatement:
                logger.warning("The LRS sent an unreadable %s header %r; ignored.", CONSISTENT_THROUGH, value)
        return self._consistent

    def query(self, window):
        """The GET parameters for a window: since/until widened by the overlap (see the module doc)."""
        return {
            # Both ends widened; since is exclusive in the spec, hence the extra second.
            "since": to_cursor(window.since - self.overlap - dt.timedelta(seconds=1)),
            "until": to_cursor(window.until + self.overlap),
            "limit": self.page_size,
            "ascending": "true",
        }

    def batches(self, window, index):
        """Yield one Batch per page of the statements whose `stored` lies in the window."""
        since, until = window.since_cursor, window.until_cursor
        url, params = self.statements_url, self.query(window)
        seen, page, outside = set(), 0, 0
        while True:
            page += 1
            payload, _ = self.get(url, params)
            batch, skipped = self._map_page(payload["statements"], since, until, page)
            outside += skipped
            yield batch
            more = payload.get("more")
            if not more:
                break
            if not isinstance(more, str):
                raise UnavailableError(f"The LRS at {self.statements_url} sent a 'more' that is not a URL: {more!r}.")
            url, params = self.follow(more), None
            # 8 bytes a page, not the URL: loops are caught, memory stays small.
            digest = hashlib.blake2b(url.encode(), digest_size=8).digest()
            if digest in seen:
                raise UnavailableError(
                    f"The LRS at {self.statements_url} sent the same 'more' link twice (page {page}); "
                    "its paging loops, so the window cannot be read to the end."
                )
            seen.add(digest)
        logger.debug("Read %d page(s) from %s; %d statement(s) outside the window were skipped.",
                     page, self.statements_url, outside)

    def _map_page(self, statements, since, until, page):
        batch, skipped, mapper = Batch(), 0, self.mapper
        for number, statement in enumerate(statements, 1):
            cursor = None
            try:
                cursor = stored_cursor(statement.get("stored")) if isinstance(statement, dict) else None
            except InvalidStatement:
                pass
            if cursor is not None and not since <= cursor < until:
                skipped += 1  # widened query or an LRS that filters on another field
                continue
            batch.read += 1
            try:
                kind, row = mapper.map(statement, cursor)
            except InvalidStatement as error:
                statement_id = statement.get("id") if isinstance(statement, dict) else None
                # By id where there is one: the same statement may come on another page next
                # time, and the quarantine keeps one record per origin and content.
                where = f"id {statement_id}" if isinstance(statement_id, str) else f"page {page} #{number}"
                batch.quarantined.append((f"{self.statements_url} {where}", str(error),
                                          json.dumps(statement)[:100_000]))
                continue
            (batch.voids if kind == "void" else batch.events).append(row)
        batch.names = mapper.take_new_names()
        return batch, skipped

    # -- check ---------------------------------------------------------------

    def check(self):
        """Reach the LRS with the credentials and report how it deviates from the spec; write nothing."""
        payload, headers = self.get(self.statements_url, {"limit": self.page_size, "ascending": "true"})
        statements = [s for s in payload["statements"] if isinstance(s, dict)]
        lines = [f"LRS {self.statements_url}: reachable, credentials of {self.username!r} accepted"]
        if headers.get(CONSISTENT_THROUGH):
            lines.append(f"LRS sends {CONSISTENT_THROUGH} ({headers[CONSISTENT_THROUGH]}); it bounds the window")
        else:
            lines.append(f"deviation: no {CONSISTENT_THROUGH} header; the safety lag alone bounds the window")
        more = payload.get("more")
        if more and len(statements) < self.page_size:
            lines.append(f"deviation: caps limit at {len(statements)} per page (asked for {self.page_size}); "
                         "pages are followed through 'more'")
        if more:
            kind = "relative" if not urllib.parse.urlsplit(more).scheme else "absolute"
            lines.append(f"LRS 'more' links are {kind}; only the endpoint's own origin is followed")
        timed = []
        for statement in statements:
            try:
                timed.append((parse_time(statement.get("stored"), "stored"),
                              parse_time(statement.get("timestamp") or statement.get("stored"), "timestamp"),
                              statement))
            except InvalidStatement:
                continue
        lines += self._check_order(timed) + self._check_filter(timed)
        return lines

    def _check_order(self, timed):
        stored = [entry[0] for entry in timed]
        if len(set(stored)) < 2:
            return ["could not tell the LRS's order (fewer than two statements)"]
        if stored == sorted(stored):
            return ["LRS returns ascending=true oldest first, as the spec says"]
        if stored == sorted(stored, reverse=True):
            return ["deviation: ascending=true returns newest first (reversed); order is not relied on"]
        return ["deviation: ascending=true returns statements in no stored order; order is not relied on"]

    def _check_filter(self, timed):
        """Tell whether since/until filter on `stored` or on `timestamp`, from a statement where they differ."""
        lines = []
        late = max((stored - timestamp for stored, timestamp, _ in timed), default=dt.timedelta(0))
        if late > self.overlap:
            lines.append(f"warning: a statement was stored {late} after its timestamp, more than source.overlap "
                         f"({self.overlap}); on an LRS that filters on timestamp, such statements are missed")
        probe = next((entry for entry in timed if abs(entry[0] - entry[1]) > dt.timedelta(seconds=2)), None)
        if probe is None:
            return lines + ["could not tell which field since/until filter on (no statement in the first page "
                            "has a timestamp apart from its stored time)"]
        stored, timestamp, statement = probe

        def returns(moment):
            around = {"since": to_cursor(moment - dt.timedelta(milliseconds=1)),
                      "until": to_cursor(moment + dt.timedelta(milliseconds=1)), "limit": self.page_size}
            url, params = self.statements_url, around
            for _ in range(50):  # a few pages at most: the range is two milliseconds wide
                payload, _ = self.get(url, params)
                if any(isinstance(s, dict) and s.get("id") == statement.get("id") for s in payload["statements"]):
                    return True
                if not payload.get("more"):
                    return False
                url, params = self.follow(payload["more"]), None
            return False

        if returns(stored):
            return lines + ["LRS filters since/until on stored, as the spec says"]
        if returns(timestamp):
            return lines + [f"deviation: since/until filter on timestamp, not stored; statements stored more than "
                            f"source.overlap ({self.overlap}) after their timestamp are missed"]
        return lines + ["deviation: since/until filter on neither stored nor timestamp as far as a probe can tell"]


def _root_cause(error):
    """The innermost reason of a requests ConnectionError, short (no URL with a query string)."""
    cause = error
    while cause.__cause__ is not None or (cause.args and isinstance(cause.args[0], BaseException)):
        cause = cause.__cause__ if cause.__cause__ is not None else cause.args[0]
    reason = getattr(cause, "reason", None) or cause
    return str(reason).split(": ", 1)[-1][:200]
