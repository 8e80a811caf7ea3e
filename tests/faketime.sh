#!/bin/bash
# The part of the suite that reads the wall clock, under Debian's faketime on the dates where a
# calendar bug would show — each in Europe/Paris and in America/New_York:
#   the last Sunday of March and the first Sunday of November of 2027 at 01:59:30 local (Paris
#   springs forward at 02:00 on the first, New York falls back at 02:00 on the second: the clock
#   crosses the change while the tests run), 2028-02-29 00:30 (a leap day; in Paris still the 28th
#   in UTC), 2026-12-31 23:58 (ISO week 2026-W53; the year ends during the run), 2027-01-01 00:30
#   (still 2026 in UTC in Paris) and Monday 2027-03-29 04:15 (the timer's time, the first weekday
#   run after Paris's change). Fails if any of the 12 fails; prints one line per run.
#
#     bash tests/faketime.sh [pytest arguments]     # after tests/run.sh (it uses its .venv)
#
# Which tests: those that read the wall clock — that run the CLI without --now (its window, the
# staleness status reports, the demo's days come from the clock) or date their data from it (the
# LRS tests: Ralph stores at the clock's time) — and the monitoring tests (the schedule's last run
# before a given time, DST included). Every other test pins its dates (--now, a fixed sample
# start) and gives the same result on any date; a whole-suite run under faketime on 2028-02-29
# 04:15 Paris (2026-12-01) passed but for the pool test named below.
#
# faketime's library is preloaded into pytest and so into every child: the CLI, the PostgreSQL
# server and Ralph all see the same shifted clock (faketime turns the date into one offset from
# the real time, shared by every process), as on a machine whose clock says that date. The
# monotonic clock is shifted too: FAKETIME_DONT_FAKE_MONOTONIC=1 (--exclude-monotonic) makes
# Python 3.11's time.sleep fail with EINVAL under libfaketime 0.9.10, and nothing here compares
# monotonic times across processes. -m (the multi-threaded library): the test process has threads.
# apt never runs under it (a Release file dated "in the past" would be refused).
#
# Run time: see .ci/run's header (its faketime step).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
if ! command -v faketime >/dev/null; then
  $SUDO apt-get install -y -qq --no-install-recommends faketime >/dev/null 2>&1 ||
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends faketime >/dev/null; }
fi
[ -x .venv/bin/python ] || { echo "$0: run 'bash tests/run.sh' first (it installs what the tests need into .venv)." >&2; exit 2; }

# The wall clock's readers; kept short: each runs 12 times. Not tests/refresh/test_stop_signals.py: its pool test
# (multiprocessing internals, not the calendar) hung under the single-threaded libfaketime (no -m).
TESTS=(
  tests/sources/test_lrs_against_ralph.py tests/operations/test_alerts_pings_textfile.py tests/privacy/test_threshold_row.py
  tests/operations/test_first_steps.py::test_the_demo_hint_is_a_command_that_works
  tests/operations/test_first_steps.py::test_the_docs_quote_the_lock_message_as_the_program_prints_it
  tests/operations/test_command_line.py::test_status_before_and_after_a_run tests/operations/test_command_line.py::test_errors_go_to_the_journal_with_error_priority
  tests/store/test_sqlite_publication.py::test_a_run_that_committed_but_did_not_publish_is_published_by_the_next_run
  tests/operations/test_alert_config.py::test_a_misspelt_key_fails_the_run_but_still_alerts
  tests/operations/test_demo_command.py::test_a_demo_directory_that_has_statements_already_is_refused_with_a_sentence
  tests/sources/test_moodle_against_postgresql.py::test_backfill_reads_by_time_and_leaves_the_id_watermark
  # Its own Ralph with TLS is no calendar matter, and slow to start (80 s on a loaded machine); once,
  # on 2028-02-29 in New York under a load of 20, it answered a POST with 500: the history file two
  # Ralphs shared then (tests/helpers/lrsserver.py gives each its own now).
  --deselect tests/sources/test_lrs_against_ralph.py::test_tls_is_verified_and_a_ca_bundle_makes_a_private_certificate_trusted
)

YEAR=2027
march31=$(date -u -d "$YEAR-03-31" +%w)             # 0 = Sunday
last_sunday_of_march=$(date -u -d "$YEAR-03-31 -$march31 days" +%F)
november1=$(date -u -d "$YEAR-11-01" +%w)
first_sunday_of_november=$(date -u -d "$YEAR-11-01 +$(((7 - november1) % 7)) days" +%F)
MOMENTS=(
  "$last_sunday_of_march 01:59:30"
  "$first_sunday_of_november 01:59:30"
  "2028-02-29 00:30:00"
  "2026-12-31 23:58:00"
  "2027-01-01 00:30:00"
  "2027-03-29 04:15:00"
)
[ "$(date -u -d "${MOMENTS[5]%% *}" +%A)" = Monday ] || { echo "$0: ${MOMENTS[5]} is not a Monday" >&2; exit 2; }

LOGS=$(mktemp -d /tmp/lmsr-faketime-XXXXXX)
chmod 0755 "$LOGS"  # the tests' other users must reach their files below it
trap 'rm -rf "$LOGS"' EXIT
SECONDS=0

one() {  # zone, moment, pytest arguments: one run; writes its log, its exit status and its line
  local zone=$1 moment=$2 name rc=0 start=$SECONDS shown summary
  shift 2
  name="$LOGS/$(echo "$zone $moment" | tr -c 'A-Za-z0-9\n' _)"
  mkdir "$name"
  # The local time in that zone (date -d, as faketime reads it; New York's 01:59:30 on the day it
  # falls back is the first one, EDT), shown with its zone.
  shown=$(TZ=$zone date -d "$moment" '+%F %T %Z')
  TZ=$zone LMS_REFRESH_REQUIRE_ALL=1 faketime -m "$moment" \
    .venv/bin/python -m pytest -p no:cacheprovider -q -m "not system" --basetemp "$name/tmp" "$@" "${TESTS[@]}" \
    >"$name/log" 2>&1 || rc=$?
  # (No summary at all, e.g. a test named here that no longer exists: the run still gets its line, as a failure.)
  summary=$({ grep -E '(passed|failed|error).* in [0-9.]+s' "$name/log" || echo "no pytest summary"; } | tail -n1 |
    tr -d '=' | sed 's/^ *//;s/ *$//')
  printf '%-17s %-24s %4s s  %s  %s\n' "$zone" "$shown" "$((SECONDS - start))" \
    "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (exit $rc)")" "$summary" >"$name/line"
  echo "$rc" >"$name/rc"
}

# Four runs at a time (LMS_REFRESH_FAKETIME_JOBS), each with its own PostgreSQL and Ralph on free ports under its
# own --basetemp: a run spends most of its time waiting on those servers and on the CLI's subprocesses (one run,
# 90 s of wall time, used 19 s of CPU in its own processes), so four keep two cores busy where two left them idle.
JOBS=${LMS_REFRESH_FAKETIME_JOBS:-4}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "$0: LMS_REFRESH_FAKETIME_JOBS must be a whole number of runs, not '$JOBS'" >&2; exit 2; }
for zone in Europe/Paris America/New_York; do
  for moment in "${MOMENTS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    one "$zone" "$moment" "$@" &
  done
done
wait
failed=0
for name in "$LOGS"/*/; do
  cat "$name/line"
  if [ "$(cat "$name/rc")" -ne 0 ]; then
    failed=1
    grep -E '^(FAILED|ERROR) ' "$name/log" || tail -n 30 "$name/log"
  fi
done
echo "faketime: 12 runs in $SECONDS s: $([ "$failed" -eq 0 ] && echo PASS || echo FAIL)"
exit "$failed"
