"""Daily export files delivered as an exporter would: a replay of past days sees only what was stored by then."""

import os


def deliver(exported, source, day):
    """Move the daily export files (`*-YYYY-MM-DD.ndjson`, write_daily_files) of `day` and before from `exported` to
    `source`: a test that replays runs on past days shows each run only what was stored by then, as an exporter
    would (a line stored beyond the run's time plus 2 days is quarantined as in the future)."""
    for name in sorted(os.listdir(exported)):
        if name.endswith(".ndjson") and name[-17:-7] <= day.isoformat():
            os.replace(os.path.join(exported, name), os.path.join(source, name))
