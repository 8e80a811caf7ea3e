#!/bin/bash
# The whole test suite on a fresh Debian 12 or 13 machine (as root, or with sudo): installs what the
# tests need from Debian and runs pytest with Debian's own Python and libraries — the versions the .deb
# depends on. The tests run in tiers, fastest first (tests/conftest.py's `tier_of` says which test is in
# which; the development page names them):
#
#     bash tests/run.sh                  # every tier: `fast` first, and nothing else runs if it fails;
#                                        # then behaviour, servers and system together in one session
#     bash tests/run.sh --fast           # the fast tier only (no server, browser or root needed)
#     bash tests/run.sh --tier servers   # named tiers (comma-separated, or the option repeated)
#     bash tests/run.sh -k lock -x       # other arguments go to pytest, over every tier, in one session
#
# Each session installs only what its tiers need, just before it runs, and nothing that is there already.
# LMS_REFRESH_TIERS=fast,servers in the environment does what `--tier fast,servers` does (CI's Debian 12
# root runs the README's command as written with it). LMS_REFRESH_TIMES=FILE appends one line per session
# run, "<tiers> <seconds> <exit status>", for .ci/run's time budget.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
ALL_TIERS=(fast behaviour servers system)

TIERS=()
ARGS=()
add_tiers() { local name; IFS=, read -ra names <<<"$1"; for name in "${names[@]}"; do [ -n "$name" ] && TIERS+=("$name"); done; }
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) TIERS+=(fast) ;;
    --tier) [ $# -ge 2 ] || { echo "$0: --tier needs a name (${ALL_TIERS[*]})" >&2; exit 2; }; add_tiers "$2"; shift ;;
    --tier=*) add_tiers "${1#--tier=}" ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
[ "${#TIERS[@]}" -gt 0 ] || [ -z "${LMS_REFRESH_TIERS:-}" ] || add_tiers "$LMS_REFRESH_TIERS"
for name in "${TIERS[@]}"; do
  [[ " ${ALL_TIERS[*]} " == *" $name "* ]] || { echo "$0: no tier named '$name' (the tiers: ${ALL_TIERS[*]})" >&2; exit 2; }
done
# Pytest arguments alone select their own tests, over every tier.
[ "${#TIERS[@]}" -gt 0 ] || [ "${#ARGS[@]}" -gt 0 ] || TIERS=("${ALL_TIERS[@]}")
wants() { [[ " ${TIERS[*]} " == *" $1 "* ]]; }

# What the tiers of one session need, installed just before it runs: the fast tier's failure is reported
# before anything only the slower tiers need is even downloaded. `needs TIER...` installs what those tiers need
# beyond what every tier needs, and nothing that is there already.
needs() {
  local tiers=" $* " missing
  local packages=(
    # the engine and its tests, on the versions the .deb depends on
    python3 python3-venv python3-setuptools python3-click python3-systemd python3-requests python3-pytest
    python3-wheel  # the editable install below: Debian 12's setuptools builds no wheel without it
    python3-prometheus-client python3-hypothesis tzdata util-linux git
    python3-psycopg python3-mysqldb  # the database drivers: a configuration naming a database is checked for them
    python3-pytest-xdist  # the suite on several workers (below)
    groff-base  # lms-refresh(8) is checked with groff -man -ww -z
    sqlite3  # a dashboard's reading of the publication, as another user, with the sqlite3 CLI
  )
  if [[ $tiers == *" servers "* ]]; then
    packages+=(
      openssl  # a certificate for the LRS tests' HTTPS
      chromium  # the HTML report rendered in Debian's headless browser (tests/operations/test_report_chromium.py)
      postgresql  # a real PostgreSQL server for the PostgreSQL store and the Moodle source tests
      mariadb-server  # a real MariaDB server for the Moodle source on MySQL and MariaDB
    )
  fi
  if [[ $tiers == *" system "* ]]; then
    packages+=(
      # building and checking the .deb
      build-essential debhelper dh-python pybuild-plugin-pyproject python3-all lintian
      # booting Debian 12 and 13 with systemd as PID 1 for tests/system
      # (and pgrep, from procps, to find a booted container's systemd; minimal roots lack it)
      systemd-container mmdebstrap procps
    )
  fi
  # apt's lists are read again only when something is missing: a machine that has everything starts at once.
  # (dpkg-query exits 1 when one is not installed at all: what it prints is what counts.)
  missing=$({ dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' "${packages[@]}" 2>/dev/null || true; } |
    awk '$1 == "ii" { print $2 }' | sort | comm -13 - <(printf '%s\n' "${packages[@]}" | sort -u))
  if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  fi
  # A real LRS for the xAPI LRS source tests: Ralph, in a virtualenv of its own so
  # its dependencies never meet ours (tests/helpers/lrsserver.py starts it).
  if [[ $tiers == *" servers "* ]] && [ ! -x .venv-ralph/bin/ralph ]; then
    /usr/bin/python3 -m venv .venv-ralph
    .venv-ralph/bin/python -m pip install -q 'ralph-malph[cli,lrs]==5.1.0' requests  # its CLI imports requests
  fi
  if [[ $tiers == *" servers "* ]] && [ ! -x .venv-datasette/bin/datasette ]; then  # the shipped metadata, served
    /usr/bin/python3 -m venv .venv-datasette
    .venv-datasette/bin/python -m pip install -q 'datasette==0.65.5'
  fi
  # The linter (tests/repository/test_lint.py runs it over the tree), from PyPI (Debian 12 has no ruff package).
  # One exact version, so that every machine finds the same findings. And orjson, the fast JSON path
  # (lms_refresh/sources/json_decoding.py; Debian 12 has no python3-orjson), so that the tests parametrised over
  # both parsers (the `json_parser` fixture, marker `orjson`) run both: one exact version here too.
  local pypi=(ruff==0.17.6 orjson==3.13.0) requirement installed
  [ -x .venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages .venv
  # The package is installed editable from this clone: again only if the .venv has none or points elsewhere (a
  # moved clone). -I: this directory on sys.path would import the tree here whether it is installed or not.
  if [ ! -x .venv/bin/lms-refresh ] || [ "$(.venv/bin/python -I -c \
      'import lms_refresh, os; print(os.path.dirname(os.path.dirname(lms_refresh.__file__)))' 2>/dev/null)" != "$PWD" ]; then
    .venv/bin/python -m pip install -q --no-build-isolation --no-deps -e .
  fi
  installed=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | tr 'A-Z' 'a-z')
  for requirement in "${pypi[@]}"; do
    grep -qx "$requirement" <<<"$installed" || { .venv/bin/python -m pip install -q "${pypi[@]}"; break; }
  done
}
# What a session's tiers need is installed before it, so nothing may be skipped: a missing server (or any
# other skip) fails the test that needed it instead of hiding it (tests/conftest.py).
export LMS_REFRESH_REQUIRE_ALL=1

session() {  # label, pytest arguments: one pytest session, timed, its line appended to $LMS_REFRESH_TIMES
  local label=$1 start=$SECONDS rc=0
  shift
  .venv/bin/python -m pytest -p no:cacheprovider "$@" || rc=$?
  echo "tests/run.sh: $label: exit $rc after $((SECONDS - start)) s"
  [ -z "${LMS_REFRESH_TIMES:-}" ] || echo "$label $((SECONDS - start)) $rc" >>"$LMS_REFRESH_TIMES"
  return "$rc"
}
if [ "${#TIERS[@]}" -eq 0 ]; then
  # Three workers (pytest-xdist): most tests wait on a server, a subprocess or a booted machine more than
  # they compute, so three keep a 2-core machine busy. The system tests stay on one worker together (their
  # xdist_group, tests/conftest.py). `-n 0` among the arguments runs everything in this one process.
  needs "${ALL_TIERS[@]}"
  session pytest -n 3 --dist loadgroup "${ARGS[@]}"
  exit
fi
# The fast tier on its own, first: a mistake a unit test finds is reported in a few minutes, before any
# server starts or any machine boots, and nothing slower runs after it.
if wants fast; then
  needs fast
  session fast -n 2 --tier fast "${ARGS[@]}"
fi
REST=()
for name in behaviour servers system; do wants "$name" && REST+=("$name"); done
if [ "${#REST[@]}" -gt 0 ]; then
  # The other tiers in one session on three workers: the system tests (one worker, about ten minutes of
  # building and booting) start first, and the other workers take the behaviour and server tests meanwhile.
  label=$(IFS=,; echo "${REST[*]}")
  needs "${REST[@]}"
  session "$label" -n 3 --dist loadgroup --tier "$label" "${ARGS[@]}"
fi
