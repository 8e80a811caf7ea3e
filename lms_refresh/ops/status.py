"""`status`: a read-only view of the state, the store, the lock and the publication."""

import dataclasses
import os

from lms_refresh.disclosure import policy
from lms_refresh.ops import interruption
from lms_refresh.run import after_commit, publication
from lms_refresh.run.lock import probe
from lms_refresh.sources import json_decoding
from lms_refresh.state_directory import LOCK_NAME, refuse_a_file
from lms_refresh.store import open_store, store_exists
from lms_refresh.window import TIME


def collect_status(config, environ):
    """Given a Config, return a JSON-ready dict describing watermark, runs, lock and store."""
    refuse_a_file(config.state_directory)
    lock_path = os.path.join(config.state_directory, LOCK_NAME)
    holder = probe(lock_path)
    status = {
        "config": config.origin,
        "state_directory": config.state_directory,
        "lock": {"path": lock_path, "held": holder is not None, "holder": holder},
        "store": {"type": config.store.type, "location": config.store_location,
                  "exists": store_exists(config, environ), "size_bytes": 0},
        "watermark": None, "cursor_kind": None, "last_run": None, "last_success": None, "watermark_set": None,
        "quarantined_records": 0,
        # a run that did not finish (shutdown, crash, stop) and is not caught up yet; the last one caught up
        "interrupted": interruption.pending(config.state_directory) if holder is None else None,
        "last_interruption": interruption.last(config.state_directory),
        "json_parser": json_decoding.describe(),  # what a run of this installation decodes source JSON with
        "json_parser_setting": json_decoding.setting_problem(json_decoding.REQUESTED),  # None: nothing wrong
    }
    if status["store"]["exists"]:
        store = open_store(config, environ, create=False, read_only=True, behind_ok=True)
        try:
            with store.errors():
                meta = store.meta()
                status["store"]["size_bytes"] = store.size_bytes()
                status["store"]["schema_version"] = store.schema_version()
                if store.behind is not None:  # after an upgrade of the package, before its first run
                    status["store"]["upgrade"] = {"from": store.behind[0], "to": store.behind[1]}
                status["watermark"] = meta.get("watermark")
                if status["watermark"] is not None:
                    status["cursor_kind"] = meta.get("cursor_kind", TIME.name)
                status["last_run"], status["last_success"] = store.last_runs()
                status["unresolved_failure"] = store.unresolved_failure()
                entry = store.last_entry()
                status["watermark_set"] = entry if entry and entry["kind"] == "watermark-set" else None
                status["quarantined_records"] = store.quarantine_count()
                # The settings in force, from the store's typed row: none before the first run stores them, and
                # none read from a store the next run upgrades (its tables are those of its own version).
                settings = policy.in_force(store, missing_ok=True) if store.behind is None else None
                status["privacy"] = dataclasses.asdict(settings) if settings else None
                missing_views = store.missing_views() if store.behind is None else []
        finally:
            store.close()
        if status.get("privacy"):
            status["publication"] = publication.describe(config, environ, missing_views)
    if config.store.type == "sqlite" and config.report.enabled:
        # The HTML report the last run (or forget) could not write: None once one wrote it.
        status["report"] = {"path": config.report.path, "failure": after_commit.report_failure(config)}
    return status


def _watermark_text(status):
    if status["watermark"] is None:
        return "none (the next run bootstraps)"
    if status["cursor_kind"] == TIME.name:
        return status["watermark"]
    return f"{status['watermark']} ({status['cursor_kind']})"


def _privacy_lines(status):
    privacy, publication = status.get("privacy"), status.get("publication")
    if not privacy:
        return []
    noise = ("off: exact counts" if privacy["method"] == "none"
             else f"cell key, counts within +-{privacy['max_noise']}, variance {privacy['variance']}")
    lines = [f"privacy:      min_cell_size {privacy['min_cell_size']} in force; noise {noise}"
             + ("; zeros withheld" if privacy["withhold_zeros"] else "")]
    if publication and publication.get("missing"):
        verb = "are" if len(publication.get("missing_views", ())) > 1 else "is"
        lines.append(f"publication:  {publication['location']} {verb} MISSING (dropped?): dashboards read nothing; "
                     "the next run re-creates it")
    elif publication:
        when = publication["published_at"]
        lines.append(f"publication:  {publication['location']}"
                     + (f", published {when}" if when
                        else (" (not published yet)" if not publication["current"] else ""))
                     + ("" if publication["current"] else "; behind the store, the next run publishes it"))
    return lines


def format_status(status):
    """Return the human-readable status text."""
    lock = status["lock"]
    store = status["store"]
    lines = [
        f"config:       {status['config']}",
        f"state:        {status['state_directory']}",
        f"store:        {store['type']} {store['location']}"
        + (f" ({store['size_bytes']:,} bytes, schema v{store.get('schema_version')})" if store["exists"]
           else " (not created yet)")
        + (f"; the next run upgrades it to schema v{store['upgrade']['to']}" if store.get("upgrade") else ""),
        f"watermark:    {_watermark_text(status)}",
        f"lock:         {'held by ' + lock['holder'] if lock['held'] else 'free'}",
    ]
    if status.get("json_parser"):
        lines.append(f"json parser:  {status['json_parser']}")
    if status.get("json_parser_setting"):
        lines.append(f"json parser:  warning: {json_decoding.ENVIRONMENT_VARIABLE} {status['json_parser_setting']}")
    if status.get("interrupted") is not None:
        lines.append(f"INTERRUPTED:  the run started {status['interrupted'].get('started_at', '?')} did not finish "
                     "(a shutdown, a crash or a stop); the next boot (lms-refresh-catch-up.timer) or run catches it up")
    if status.get("last_interruption"):
        last = status["last_interruption"]
        lines.append(f"interrupted:  the run started {last.get('started_at', '?')} did not finish; caught up by the "
                     f"run started {last.get('noticed_at', '?')}")
    for label, run in (("last run", status["last_run"]), ("last success", status["last_success"])):
        if run is None:
            lines.append(f"{label + ':':<14}never")
            continue
        lines.append(
            f"{label + ':':<14}{run['outcome']} (exit {run['exit_code']}) {run['kind']} "
            f"started {run['started_at']} finished {run['finished_at']}"
        )
        lines.append(
            f"{'':<14}window {run['window_since']} .. {run['window_until']}; read {run['statements_read']}, "
            f"rows written {run['rows_written']}, quarantined {run['quarantined']}, suppressed {run['suppressed']}"
        )
        if run["message"]:
            lines.append(f"{'':<14}{run['message']}")
    last = status["last_run"]
    if last is not None and last["kind"] == "backfill" and last["exit_code"] == 0:
        # Said here, not on the HTML report: the page's readers need the data's freshness, not how it was written.
        lines.append(f"{'':<14}the last run was a backfill, which refreshes no new data: the freshness is that of "
                     "the last successful refresh (a run or a rebuild)")
    if status.get("watermark_set"):
        moved = status["watermark_set"]
        lines.append(f"{'set by hand:':<14}watermark from {moved['window_since']} to {moved['window_until']} at "
                     f"{moved['started_at']} (watermark set; not a run)")
    lines.append(f"quarantine:   {status['quarantined_records']} record(s) kept")
    lines.extend(_privacy_lines(status))
    failure = (status.get("report") or {}).get("failure")
    if failure:
        lines.append(f"REPORT:       {failure.get('path')} was NOT written at {failure.get('at')}: "
                     f"{failure.get('message')}")
    if status.get("stale"):
        lines.append(f"STALE:        {status['stale']}")
    return "\n".join(lines)
