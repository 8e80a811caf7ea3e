"""The run log (`runs`) as the stores share it: every run, backfill, rebuild and watermark set
leaves one row; status, monitoring, the clock check and the alert read it back.
"""

from lms_refresh.disclosure import redaction
from lms_refresh.store.tables import TABLES, column_names

RUN_FIELDS = column_names("runs")
REFRESH_KINDS = ("run", "backfill", "rebuild")  # the run log's kinds that are refreshes (not "watermark-set")


class RunLog:
    """A mixin of base.SqlStore: it needs `execute` and `run_order`."""

    def record_run(self, run):
        placeholders = ", ".join("?" for _ in RUN_FIELDS)
        # A message may quote what it failed on; the run log keeps no e-mail address.
        run = dict(run, message=redaction.scrub_text(run["message"]))
        self.execute(f"INSERT INTO runs ({', '.join(RUN_FIELDS)}) VALUES ({placeholders})",
                     [run[field] for field in RUN_FIELDS])

    def last_runs(self):
        """Return (last refresh, last successful refresh) as dicts, or None for each. A watermark set by
        hand is in the run log but is no run: it neither hides a failure nor stands in for a success.
        Freshness comes only from refreshes that read up to their own now (`run`, `rebuild`), never
        from a backfill of an old window."""
        refreshes = f"kind IN ({', '.join(repr(kind) for kind in REFRESH_KINDS)})"
        return self._last_run(refreshes), self._last_run("exit_code = 0 AND kind IN ('run', 'rebuild')")

    def unresolved_failure(self):
        """Return the last failed refresh that no later success has made good, as a dict, or None. A failed
        backfill or rebuild is made good by a later success of its own kind; any failure by a later refresh
        that read up to its own now (`run`, `rebuild`). A successful backfill of some window says nothing of
        the scheduled run that failed: the data is still as that failure left it."""
        order = self.run_order
        refreshes = f"kind IN ({', '.join(repr(kind) for kind in REFRESH_KINDS)})"
        later = (f"NOT EXISTS (SELECT 1 FROM runs AS later WHERE later.{order} > runs.{order} "
                 "AND later.exit_code = 0 AND (later.kind IN ('run', 'rebuild') OR later.kind = runs.kind))")
        return self._last_run(f"{refreshes} AND exit_code <> 0 AND {later}")

    def last_entry(self):
        """Return the run log's last row of any kind (a watermark set by hand too) as a dict, or None."""
        return self._last_run("TRUE")

    def _last_run(self, condition):
        fields = RUN_FIELDS if self.behind is None else _fields_at(self.behind[0])
        row = self.execute(f"SELECT {', '.join(fields)} FROM runs WHERE {condition} "
                           f"ORDER BY {self.run_order} DESC LIMIT 1").fetchone()
        if row is None:
            return None
        # Rows written by an earlier version went through an earlier rule: today's applies to what is read.
        run = dict(_MISSING, **dict(zip(fields, row, strict=True)))
        return dict(run, message=redaction.scrub_text(run["message"]))

    def freshness(self):
        """Return (data_as_of_utc, last_success) of the freshness row, (None, None) without one."""
        row = self.execute("SELECT data_as_of_utc, last_success FROM freshness WHERE id = 1").fetchone()
        return tuple(row) if row is not None else (None, None)

    def write_freshness(self, published_at, data_as_of, data_as_of_utc, last_success, timezone):
        """Replace the freshness row (run/freshness.py says what each value is)."""
        self.execute("INSERT INTO freshness (id, published_at, data_as_of, data_as_of_utc, last_success, timezone) "
                     "VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET published_at = excluded.published_at, "
                     "data_as_of = excluded.data_as_of, data_as_of_utc = excluded.data_as_of_utc, "
                     "last_success = excluded.last_success, timezone = excluded.timezone",
                     (published_at, data_as_of, data_as_of_utc, last_success, timezone))


_RUNS = next(table for table in TABLES if table.name == "runs")
_MISSING = {column.name: "" for column in _RUNS.columns}  # a column added later: TEXT with default '' so far


def _fields_at(version):
    """The run log's columns in a store of schema `version` (one read before the next run upgrades it)."""
    return tuple(column.name for column in _RUNS.columns_at(version))
