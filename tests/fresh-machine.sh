#!/bin/bash
# The README's promise on a fresh machine: a minimal Debian root (mmdebstrap minbase, plus
# git and ca-certificates only), this repository's HEAD cloned into /root/lms-refresh, and
# the README's first two commands run there exactly as written — the demo, then the test
# command with the system tests (which boot containers of their own, so the root is entered
# with unshare + pivot_root rather than chroot). Prints timings and pass counts; exits
# non-zero if anything fails. Run as root on Debian 12 or 13:
#
#     bash tests/fresh-machine.sh [bookworm|trixie] [autopkgtest]     # default: bookworm
#
# With `autopkgtest`, the same fresh root runs what Debian's QA runs instead: the package is
# built there by the README's steps (apt-get build-dep ./, dpkg-buildpackage -us -uc -b),
# `debian/rules clean` must leave the clone as git checked it out, and autopkgtest's null
# runner runs debian/tests (smoke, and suite against the installed package) on that .deb.
# 35 minutes on a 2-core machine loaded by other jobs (2026-12-01, bookworm: root 7, build 5, smoke 1,
# suite 16); 20 minutes at a load average of 9 (2026-12-01); .ci/run runs it for bookworm.
#
# Only committed work is tested (it clones HEAD). The root gets nothing from this host but
# what reaching Debian's archive and the Python package index needs: the apt mirrors and
# network options, local CA certificates and pip's network settings.
set -euo pipefail
SUITE=${1:-bookworm}
MODE=${2:-readme}
case "$SUITE/$MODE" in bookworm/readme|trixie/readme|bookworm/autopkgtest|trixie/autopkgtest) ;;
  *) echo "usage: $0 [bookworm|trixie] [autopkgtest]" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "$0 must run as root (mmdebstrap, unshare, pivot_root)." >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=$(git -C "$REPO" rev-parse HEAD)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8
for tool in mmdebstrap unshare git; do
  command -v "$tool" >/dev/null || { echo "$0 needs $tool (apt-get install mmdebstrap util-linux git)." >&2; exit 2; }
done

if [ "$MODE" = readme ]; then
  # The README's first two commands, from the README itself so that this cannot drift from it.
  mapfile -t COMMANDS < <(awk '/^    [^ #]/ { sub(/^    /, ""); print; if (++n == 2) exit }' "$REPO/README.md")
  [ "${#COMMANDS[@]}" -eq 2 ] || { echo "README.md does not start with two indented commands." >&2; exit 2; }
else
  # Debian's QA: build as the README says, check the clean target, then autopkgtest's null runner on
  # the .deb (-B: test that .deb, do not build again). autopkgtest exits 0 only if every test passed.
  COMMANDS=(
    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends autopkgtest dpkg-dev >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq ./ >/dev/null && { dpkg-buildpackage -us -uc -b >/tmp/build.log 2>&1 || { tail -n 40 /tmp/build.log; exit 1; }; } && debian/rules clean >/dev/null && left=\$(git status --porcelain --ignored) && { [ -z \"\$left\" ] || { echo \"debian/rules clean left: \$left\"; exit 1; }; }"
    "autopkgtest -B ../lms-refresh_*_all.deb ./ -- null"
  )
fi

WORK=$(mktemp -d /var/tmp/lmsr-fresh-XXXXXX)
R="$WORK/root"
NS=""
cleanup() {
  status=$?
  # Ending unshare's process kills everything in the namespace (--kill-child) and so
  # drops its mounts; only then is the root plain files that rm may remove. SIGKILL: with
  # --fork, util-linux's unshare ignores SIGTERM while it waits for its child.
  if [ -n "$NS" ] && kill -0 "$NS" 2>/dev/null; then kill -KILL "$NS"; wait "$NS" || true; fi
  rm -rf --one-file-system "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
SECONDS=0
step() { printf '%-10s %5s s  %s\n' "$1" "$2" "$3"; }

# Host settings, reduced to reaching the registries. Apt: the Debian mirrors of the host's
# sources for this suite, and apt.conf.d files that set Acquire:: options and belong to no
# package (those a package ships are Debian's defaults, which the root has already).
HOST_SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
mapfile -t MIRRORS < <(
  for f in /etc/apt/sources.list.d/*.sources; do [ -e "$f" ] && cat "$f" && echo; done | awk -v host="$HOST_SUITE" -v suite="$SUITE" '
    function flush() { if (uris != "" && suites ~ ("(^| )" host "($| |-)")) {
        n = split(suites, s, " ")
        for (i = 1; i <= n; i++) if (s[i] ~ ("^" host)) { sub(host, suite, s[i]); print "deb " uris " " s[i] " " comps } }
      uris = suites = comps = "" }
    /^[ \t]*$/ { flush(); next }
    /^URIs:/ { uris = $2 } /^Suites:/ { $1 = ""; suites = substr($0, 2) } /^Components:/ { $1 = ""; comps = substr($0, 2) }
    END { flush() }'
  [ -e /etc/apt/sources.list ] && awk -v host="$HOST_SUITE" -v suite="$SUITE" \
    '$1 == "deb" && $3 ~ ("^" host) { sub(host, suite, $3); print }' /etc/apt/sources.list)
APTOPTS=()
for f in /etc/apt/apt.conf.d/*; do
  if grep -q 'Acquire::' "$f" && ! dpkg -S "$f" >/dev/null 2>&1 && [[ $(basename "$f") != docker-* ]]; then
    APTOPTS+=(--aptopt="$f")
  fi
done

START=$SECONDS
# LMS_REFRESH_FRESH_CACHE=DIR (.ci/run sets it): the roots of one suite start from one minbase root made once
# into DIR and copied, and share DIR's copy of apt's downloaded packages, so a second root of a suite in the same
# CI run neither bootstraps nor downloads again. Each root is still a fresh copy that nothing else has touched.
CACHE=${LMS_REFRESH_FRESH_CACHE:-}
APT_CACHE=""
bootstrap() { mmdebstrap --quiet --variant=minbase --include=git,ca-certificates "${APTOPTS[@]}" "$SUITE" "$1" "${MIRRORS[@]}"; }
if [ -n "$CACHE" ]; then
  mkdir -p "$CACHE"
  if [ ! -d "$CACHE/$SUITE-base" ]; then
    rm -rf --one-file-system "$CACHE/$SUITE-base.new"
    bootstrap "$CACHE/$SUITE-base.new"
    mv "$CACHE/$SUITE-base.new" "$CACHE/$SUITE-base"
  fi
  cp -a "$CACHE/$SUITE-base" "$R"
  APT_CACHE="$CACHE/$SUITE-apt"
  mkdir -p "$APT_CACHE/partial"
else
  bootstrap "$R"
fi
cp /etc/hosts "$R/etc/hosts"
echo fresh >"$R/etc/hostname"
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/"
  chroot "$R" update-ca-certificates >/dev/null
fi
# pip: network keys only (index URLs over HTTP(S), certificates that exist inside, timeouts),
# from the host's configuration files and PIP_* variables, into the root's /etc/pip.conf.
ROOT="$R" /usr/bin/python3 - <<'EOF'
import configparser, os
keys = {"index-url", "extra-index-url", "trusted-host", "proxy", "cert", "client-cert", "timeout",
        "default-timeout", "retries"}
found = {}
parser = configparser.ConfigParser()
parser.read(["/etc/xdg/pip/pip.conf", "/etc/pip.conf", os.path.expanduser("~/.pip/pip.conf"),
             os.path.expanduser("~/.config/pip/pip.conf")])
for section in ("global", "install"):
    if parser.has_section(section):
        found.update(parser.items(section))
found.update({k[4:].lower().replace("_", "-"): v for k, v in os.environ.items() if k.startswith("PIP_")})
root = os.environ["ROOT"]
kept = {}
for key, value in found.items():
    key = "timeout" if key == "default-timeout" else key
    if key not in keys:
        continue
    if key in ("index-url", "extra-index-url"):
        value = " ".join(url for url in value.split() if url.startswith(("http://", "https://")))
    elif key in ("cert", "client-cert") and not os.path.exists(root + value):
        value = ""
    if value:
        kept[key] = value
if kept:
    with open(os.path.join(root, "etc/pip.conf"), "w") as conf:
        conf.write("[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(kept.items())))
EOF
git clone --quiet --no-checkout "$REPO" "$R/root/lms-refresh"
git -C "$R/root/lms-refresh" checkout --quiet --detach "$COMMIT"
chmod 0700 "$R/root" "$R/root/lms-refresh"
ROOT_TIME=$((SECONDS - START))

# Inside: run each command as written from the clone, with a clean environment, and report.
INNER='
cd /root/lms-refresh
failed=0
for i in 1 2; do
  command=${!i}
  echo ">>> $command"
  start=$SECONDS
  rc=0; bash -c "$command" || rc=$?
  echo "<<< command $i: exit $rc after $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || failed=1
done
exit $failed'
LOG="$WORK/output.log"
START=$SECONDS
# In the background, so that a signal to this script reaches the trap (and so unshare) at once.
unshare --mount --pid --uts --ipc --fork --kill-child --propagation private bash -c '
  R=$1; APT_CACHE=$2; shift 2
  mount --bind "$R" "$R"
  [ -z "$APT_CACHE" ] || mount --bind "$APT_CACHE" "$R/var/cache/apt/archives"
  mount -t proc proc "$R/proc"
  mount --rbind /sys "$R/sys"
  mount --rbind /dev "$R/dev"
  mount -t tmpfs shm "$R/dev/shm"; mount -t tmpfs tmpfs "$R/run"
  hostname fresh
  cd "$R" && pivot_root . . && umount -l . || exit 125
  # This shell stays PID 1 of the namespace, waiting for the command and reaping orphans.
  env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb ${LMS_REFRESH_TIERS:+LMS_REFRESH_TIERS=$LMS_REFRESH_TIERS} \
    bash -c "$1" fresh "$2" "$3"
  rc=$?
  exit $rc' namespace "$R" "$APT_CACHE" "$INNER" "${COMMANDS[@]}" >"$LOG" 2>&1 </dev/null &
NS=$!
tail -n +1 -f --pid="$NS" "$LOG" &
RC=0; wait "$NS" || RC=$?
NS=""
wait  # for tail

echo
echo "== fresh $SUITE root, commit ${COMMIT:0:12}"
step root "$ROOT_TIME" "mmdebstrap minbase + git + ca-certificates, clone into /root/lms-refresh (0700)"
for i in 1 2; do
  line=$(grep "^<<< command $i: " "$LOG" || echo "<<< command $i: exit ? after ? s")
  step "command $i" "$(echo "$line" | sed -n 's/.* after \([0-9?]*\) s$/\1/p')" \
    "exit $(echo "$line" | sed -n 's/.*: exit \([0-9?]*\) .*/\1/p'): ${COMMANDS[$((i - 1))]:0:60}"
done
# pytest's last line: between rules of = in full, bare under -q (the autopkgtest suite's).
# (tests/run.sh runs the fast tier and then the others: a line for each session.)
echo "tests: $(grep -E '^(=+ )?[0-9]+ (passed|failed|error).* in [0-9.]+s' "$LOG" | tr -d '=' | sed 's/^ *//;s/ *$//' | paste -sd ';' - | sed 's/;/; /g')"
step total "$SECONDS" "$([ "$RC" -eq 0 ] && echo PASS || echo FAIL)"
exit "$RC"
