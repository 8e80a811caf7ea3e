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

One page is held at a time, so memory does not grow with the window. Nothing
the LRS does can hang a run or exhaust its memory: each request is bounded in
time and size (`lms_refresh.sources.lrs_http`), and a run follows at most
`max_pages` pages. What the LRS sends is never copied into a message.
"""

import datetime as dt
import hashlib
import json
import logging
import random
import time
import urllib.parse

from lms_refresh.errors import UnavailableError
from lms_refresh.instants import UTC, to_cursor
from lms_refresh.sources import DEVIATION, OK, RAW_KEPT, WARNING, BaseSource, Batch, Finding
from lms_refresh.sources.lrs_http import LrsClient
from lms_refresh.sources.records import Intake
from lms_refresh.sources.xapi_fields import InvalidStatement, parse_time, stored_cursor

logger = logging.getLogger(__name__)

CONSISTENT_THROUGH = "X-Experience-API-Consistent-Through"
# The newest `stored` a committed run quarantined as lying in the future (see `_future_page`).
FUTURE_STATE = "lrs.future_quarantined"
PAGE_SLACK = 4  # an LRS may round `limit` up a little; a page beyond 4 times it is refused


def _consistent_through(headers):
    """The instant an LRS's X-Experience-API-Consistent-Through header names (UTC), or None if it sends none or one
    that is not an ISO 8601 time."""
    value = headers.get(CONSISTENT_THROUGH)
    try:
        return parse_time(value, CONSISTENT_THROUGH).astimezone(UTC) if value else None
    except InvalidStatement:
        return None


def _stored(statement):
    """Return a statement's `stored` cursor, or None if it has none that can be read."""
    try:
        return stored_cursor(statement.get("stored")) if isinstance(statement, dict) else None
    except InvalidStatement:
        return None


class LrsSource(LrsClient, BaseSource):
    name = "xapi-lrs"

    def __init__(self, settings, mapper, environ, *, sleep=time.sleep, jitter=random.random, clock=time.monotonic):
        super().__init__(settings, environ, sleep, jitter=jitter, clock=clock)
        self.page_size = settings.page_size
        self.overlap = dt.timedelta(seconds=settings.overlap)
        self.max_pages = settings.max_pages
        self.mapper = mapper
        self._probed, self._consistent = False, None
        self._settled = None  # FUTURE_STATE as the last committed run left it

    def describe(self):
        return f"the LRS at {self.statements_url}"

    # -- windows -------------------------------------------------------------

    def complete_through(self, now):
        """Ask the LRS (one small request) how far it is consistent; None if it does not say."""
        if self._probed:
            return self._consistent
        _, headers = self.get(self.statements_url, {"limit": 1})
        self._probed = True
        self._consistent = _consistent_through(headers)
        if self._consistent is None and headers.get(CONSISTENT_THROUGH):
            logger.warning("The LRS sent a %s header that is not an ISO 8601 time; ignored.", CONSISTENT_THROUGH)
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

    def restore(self, lookup):
        """Take up how far statements stored in the future were quarantined (FUTURE_STATE)."""
        self._settled = lookup([FUTURE_STATE]).get(FUTURE_STATE)

    def _settled_range(self):
        """What earlier runs quarantined as stored in the future: (the run's limit, FUTURE_STATE], or None."""
        latest = self.mapper.latest
        return (latest, self._settled) if latest is not None and self._settled and self._settled > latest else None

    def batches(self, window):
        """Yield one Batch per page of the statements whose `stored` lies in the window, then one of those
        stored in the future (`_future_page`)."""
        yield from self._window_pages(window)
        yield self._future_page()

    def _future_page(self):
        """Return a Batch quarantining the statements stored after this run's future limit (the LRS's
        clock was wrong) that no committed run quarantined yet: one page a run, asked after the newest
        already quarantined, so a page never counts twice; the rest come with the next runs. Without
        this, an LRS that filters on `stored` never sends them, and they would wait unread until the
        year their clock names. Their newest cursor is committed with the run (FUTURE_STATE)."""
        latest = self.mapper.latest
        if latest is None:
            return Batch()
        # After the newest quarantined so far, this run's window pages included (an LRS that ignores `since` and
        # `until` sent them there already): each is counted once.
        newest = self._newest_future
        after = max(latest, newest or latest)
        payload, _ = self.get(self.statements_url, {"since": after, "limit": self.page_size, "ascending": "true"})
        statements = payload["statements"][:PAGE_SLACK * self.page_size]
        intake = self._intake(latest, latest, page="future",  # an empty window: the window's pages read it
                              settled=(latest, newest) if newest and newest > latest else None)
        batch = intake.map_all(enumerate(statements, 1))
        self._seen_future(intake.newest_future)
        if payload.get("more") and intake.newest_future:
            logger.warning("The LRS at %s holds more statements stored in the future than one page; the next "
                           "runs quarantine them, a page each.", self.statements_url)
        batch.state = {FUTURE_STATE: self._newest_future} if self._newest_future else {}
        return batch

    def _seen_future(self, cursor):
        if cursor is not None and (self._newest_future is None or cursor > self._newest_future):
            self._newest_future = cursor

    def _window_pages(self, window):
        since, until = window.since_cursor, window.until_cursor
        self._newest_future = self._settled
        url, params = self.statements_url, self.query(window)
        seen, page, outside = set(), 0, 0
        while True:
            page += 1
            payload, _ = self.get(url, params)
            if len(payload["statements"]) > PAGE_SLACK * self.page_size:
                # Asked for `limit`; far more (say, a million tiny records in a few megabytes) would each
                # become a quarantined record held in memory at once.
                raise UnavailableError(
                    f"The LRS at {self.statements_url} sent {len(payload['statements'])} statements on page {page}, "
                    f"more than {PAGE_SLACK} x source.page_size ({self.page_size}) it was asked for; nothing was "
                    "committed. It does not honour 'limit'."
                )
            batch, skipped = self._map_page(payload["statements"], since, until, page=page)
            outside += skipped
            yield batch
            more = payload.get("more")
            if not more:
                break
            if not isinstance(more, str):
                raise UnavailableError(f"The LRS at {self.statements_url} sent a 'more' that is not a URL "
                                       f"(a JSON {type(more).__name__}, page {page}); nothing was committed.")
            if page >= self.max_pages:
                raise UnavailableError(
                    f"The LRS at {self.statements_url} still sent a 'more' link after {page} pages "
                    "(source.max_pages); its paging may never end, so nothing was committed. If the window "
                    "really holds that many pages, raise source.max_pages or backfill it in smaller windows."
                )
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

    def _map_page(self, statements, since, until, *, page):
        intake = self._intake(since, until, page=page)
        batch = intake.map_all(enumerate(statements, 1))
        self._seen_future(intake.newest_future)  # an LRS filtering on timestamp sends them with the window
        return batch, intake.skipped

    def _intake(self, since, until, *, page, settled=None):
        def where(number, statement):
            statement_id = statement.get("id") if isinstance(statement, dict) else None
            # By id where there is one: the same statement may come on another page next
            # time, and the quarantine keeps one record per origin and content.
            where = f"id {statement_id}" if isinstance(statement_id, str) else f"page {page} #{number}"
            return f"{self.statements_url} {where}", json.dumps(statement)[:RAW_KEPT]

        # Outside the window: the query was widened, or the LRS filters on another field. Stored in the
        # future: quarantined, unless an earlier run did (see `_future_page`).
        return Intake(self.mapper, where, since, until=until, peek=_stored, future=self.mapper.latest,
                      settled=settled or self._settled_range())

    # -- check ---------------------------------------------------------------

    def preflight(self):
        """Reach the LRS with the credentials and say how it deviates from the spec (Findings); write nothing."""
        payload, headers = self.get(self.statements_url, {"limit": self.page_size, "ascending": "true"})
        statements = [s for s in payload["statements"] if isinstance(s, dict)]
        findings = [Finding(OK, f"LRS {self.statements_url}: reachable, credentials of {self.username!r} accepted")]
        consistent = _consistent_through(headers)
        if consistent is not None:  # the time as read, never the header's text (the LRS wrote it)
            findings.append(Finding(OK, f"LRS sends {CONSISTENT_THROUGH} ({to_cursor(consistent)}); "
                                        "it bounds the window"))
        elif headers.get(CONSISTENT_THROUGH):
            findings.append(Finding(DEVIATION, f"the LRS's {CONSISTENT_THROUGH} header is not an ISO 8601 time; a run "
                                               "ignores it, and the safety lag alone bounds the window"))
        else:
            findings.append(Finding(DEVIATION, f"no {CONSISTENT_THROUGH} header; "
                                               "the safety lag alone bounds the window"))
        more = payload.get("more")
        if more and len(statements) < self.page_size:
            findings.append(Finding(DEVIATION, f"caps limit at {len(statements)} per page "
                                               f"(asked for {self.page_size}); pages are followed through 'more'"))
        if more:
            kind = "relative" if not urllib.parse.urlsplit(more).scheme else "absolute"
            findings.append(Finding(OK, f"LRS 'more' links are {kind}; only the endpoint's own origin is followed"))
        timed = []
        for statement in statements:
            try:
                timed.append((parse_time(statement.get("stored"), "stored"),
                              parse_time(statement.get("timestamp") or statement.get("stored"), "timestamp"),
                              statement))
            except InvalidStatement:
                continue
        findings += self._check_order(timed) + self._check_filter(timed)
        return findings

    def _check_order(self, timed):
        stored = [entry[0] for entry in timed]
        if len(set(stored)) < 2:
            return [Finding(OK, "could not tell the LRS's order (fewer than two statements)")]
        if stored == sorted(stored):
            return [Finding(OK, "LRS returns ascending=true oldest first, as the spec says")]
        if stored == sorted(stored, reverse=True):
            return [Finding(DEVIATION, "ascending=true returns newest first (reversed); order is not relied on")]
        return [Finding(DEVIATION, "ascending=true returns statements in no stored order; order is not relied on")]

    def _check_filter(self, timed):
        """Tell whether since/until filter on `stored` or on `timestamp`, from a statement where they differ."""
        findings = []
        late = max((stored - timestamp for stored, timestamp, _ in timed), default=dt.timedelta(0))
        if late > self.overlap:
            findings.append(Finding(WARNING, f"a statement was stored {late} after its timestamp, more than "
                                          f"source.overlap ({self.overlap}); on an LRS that filters on timestamp, "
                                          "such statements are missed"))
        probe = next((entry for entry in timed if abs(entry[0] - entry[1]) > dt.timedelta(seconds=2)), None)
        if probe is None:
            return findings + [Finding(OK, "could not tell which field since/until filter on (no statement in the "
                                        "first page has a timestamp apart from its stored time)")]
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
            return findings + [Finding(OK, "LRS filters since/until on stored, as the spec says")]
        if returns(timestamp):
            return findings + [Finding(DEVIATION, f"since/until filter on timestamp, not stored; statements "
                                                  f"stored more than source.overlap ({self.overlap}) after their "
                                                  "timestamp are missed")]
        return findings + [Finding(DEVIATION, "since/until filter on neither stored nor timestamp as far as a "
                                              "probe can tell")]

