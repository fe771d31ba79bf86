#!/usr/bin/env bash
# Regenerates the screenshots in docs/img/ from the example runs (run by hand after changing the
# report; look at the PNGs before committing them).
# Usage: bash tests/html/screenshot.sh [LAGGARD_BINARY]    (default: build/tools/laggard)
set -euo pipefail
cd "$(dirname "$0")/../.."
laggard=$(realpath "${1:-build/tools/laggard}")
source tests/html/browser.sh
[ -n "$LAGGARD_BROWSER" ] || { echo "chromium not found (apt-get install chromium)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p docs/img
"$laggard" report examples/run-slow-forward -o "$tmp/report.html" -q >/dev/null
browser_run --virtual-time-budget=5000 --window-size=1280,1900 --screenshot="$PWD/docs/img/report.png" "file://$tmp/report.html"
"$laggard" compare tests/data/cmp-base tests/data/cmp-rank5-backward -q --html "$tmp/compare.html" >/dev/null
browser_run --virtual-time-budget=5000 --window-size=1280,2000 --screenshot="$PWD/docs/img/compare.png" "file://$tmp/compare.html"
ls -l docs/img/report.png docs/img/compare.png
