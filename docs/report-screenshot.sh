#!/bin/sh
# Regenerate docs/report.png, the README's picture of the HTML report: the demo's report (its fixed seed, so
# the same data every time) rendered by Debian's headless chromium. Run from the source tree:
#     sh docs/report-screenshot.sh [LMS-REFRESH]
set -eu
program="${1:-lms-refresh}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$program" demo --dir "$work/demo" --days 21 --learners 300 >/dev/null
chromium --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars --window-size=1100,900 \
  --user-data-dir="$work/profile" --screenshot="$work/report.png" "file://$work/demo/state-publication/report.html" \
  >/dev/null 2>&1
cp "$work/report.png" docs/report.png
echo "Wrote docs/report.png"
