#!/bin/bash
# The whole test suite on a fresh Debian 12 or 13 machine (as root, or with sudo):
# installs what the tests need from Debian and runs pytest with Debian's own
# Python and libraries — the versions the .deb depends on.
# Extra arguments go to pytest, e.g. `bash tests/run.sh -k lock -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
PACKAGES=(
  # the engine and its tests, on the versions the .deb depends on
  python3 python3-venv python3-setuptools python3-click python3-systemd python3-requests python3-pytest
  python3-prometheus-client python3-hypothesis tzdata util-linux git
  python3-pytest-xdist  # the suite on 3 workers (below)
  # the LRS tests: Ralph's own virtualenv, and a certificate for HTTPS
  openssl
  groff-base  # lms-refresh(8) is checked with groff -man -ww -z
  sqlite3  # a dashboard's reading of the publication, as another user, with the sqlite3 CLI
  chromium  # the HTML report rendered in Debian's headless browser (tests/operations/test_report_chromium.py)
  # a real PostgreSQL server for the PostgreSQL store and the Moodle source tests
  postgresql python3-psycopg
  # building and checking the .deb
  build-essential debhelper dh-python pybuild-plugin-pyproject python3-all lintian
  # booting Debian 12 and 13 with systemd as PID 1 for tests/system
  # (and pgrep, from procps, to find a booted container's systemd; minimal roots lack it)
  systemd-container mmdebstrap procps
)
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
# A real LRS for the xAPI LRS source tests: Ralph, in a virtualenv of its own so
# its dependencies never meet ours (tests/helpers/lrsserver.py starts it).
if [ ! -x .venv-ralph/bin/ralph ]; then
  /usr/bin/python3 -m venv .venv-ralph
  .venv-ralph/bin/python -m pip install -q 'ralph-malph[cli,lrs]==5.1.0' requests  # its CLI imports requests
fi
/usr/bin/python3 -m venv --system-site-packages .venv
.venv/bin/python -m pip install -q --no-build-isolation --no-deps -e .
# The linter (tests/repository/test_lint.py runs it over the tree), from PyPI (Debian 12 has no ruff package).
# One exact version, so that every machine finds the same findings. And orjson, the fast JSON path
# (lms_refresh/sources/json_decoding.py; Debian 12 has no python3-orjson), so that the tests parametrised over
# both parsers (the `json_parser` fixture, marker `orjson`) run both: one exact version here too.
.venv/bin/python -m pip install -q ruff==0.17.6 orjson==3.13.0
# Everything is installed above, so nothing may be skipped: a missing server (or any other skip) fails
# the test that needed it instead of hiding it (tests/conftest.py).
export LMS_REFRESH_REQUIRE_ALL=1
# Three workers (pytest-xdist): most tests wait on a server, a subprocess or a booted machine more than
# they compute, so three keep a 2-core machine busy. The system tests stay on one worker together (their
# xdist_group, tests/conftest.py). `-n 0` among the arguments runs everything in this one process.
exec .venv/bin/python -m pytest -p no:cacheprovider -n 3 --dist loadgroup "$@"
