#!/usr/bin/env bash
# Renders laggard's HTML reports in headless Chromium and checks what a person would see.
# Usage: check_report.sh LAGGARD_BINARY SOURCE_DIR OUT_DIR      (exit 77: no browser, skipped)
set -euo pipefail
laggard=$(realpath "$1")
src=$2
out=$(mkdir -p "$3" && realpath "$3")
here=$(dirname "$(realpath "$0")")
source "$here/browser.sh"
if [ -z "$LAGGARD_BROWSER" ]; then
  echo "chromium not found: skipped (scripts/install-deps.sh installs it)"
  exit 77
fi
cd "$src"

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# check FILE EXPECTED... : load FILE, require the ready mark, no JS error, and each EXPECTED
# (a fixed string) in the rendered DOM.
check() {
  local file=$1 dom
  shift
  dom="$file.dom.html"
  if ! browser_run --virtual-time-budget=5000 --dump-dom "file://$file" >"$dom" 2>"$file.browser.log"; then
    fail "$file: chromium failed: $(tail -3 "$file.browser.log")"
    return
  fi
  grep -q 'data-ready="1"' "$dom" || fail "$file: the page's script did not finish (no data-ready)"
  grep -q 'data-error=' "$dom" && fail "$file: JavaScript error: $(grep -o 'JavaScript error[^<]*' "$dom" | head -3)"
  grep -q '<div id="js-errors"></div>' "$dom" || fail "$file: the error box is not empty"
  local want
  for want in "$@"; do
    grep -qF -- "$want" "$dom" || fail "$file: does not show '$want'"
  done
  echo "checked $file ($(wc -c <"$file") bytes)"
}

# A run whose host names hold markup: it must show as text, never become elements.
"$laggard" report tests/data/run-html-escape -o "$out/escape.html" -q >/dev/null
check "$out/escape.html" \
  '<tr><td class="n">1</td><td>&lt;script&gt;alert("x")&lt;/script&gt;</td><td>dp</td><td>forward</td>' \
  'rank 1 · &lt;script&gt;alert("x")&lt;/script&gt;' \
  "o'brien &amp; co" \
  'rank 1 forward since step 60'
if grep -q '<script>alert' "$out/escape.html.dom.html"; then fail "escape.html: a host name became a script element"; fi

# The example run: rank 3's forward is the confirmed straggler, from step 100.
"$laggard" report examples/run-slow-forward -o "$out/report.html" -q >/dev/null
check "$out/report.html" \
  '<tr><td class="n">3</td><td>node-1</td><td>dp</td><td>forward</td>' \
  'job slower since step 100' \
  'rank 3 · node-1' \
  'class="heatmap"'

# A comparison: the median rank's communication regressed, because rank 5's backward did.
"$laggard" compare tests/data/cmp-base tests/data/cmp-rank5-backward -q --html "$out/compare.html" >/dev/null
check "$out/compare.html" \
  '<tr class="origin" data-stage="communication">' \
  "rank 5's backward regressed" \
  '<tr><td class="n">5</td><td>backward</td>'
"$laggard" compare tests/data/cmp-base tests/data/cmp-slow-backward -q --html "$out/compare-backward.html" >/dev/null
check "$out/compare-backward.html" \
  '<tr class="origin" data-stage="backward">' \
  '<tr class="victim" data-stage="optimizer">'

# The screenshot step: what a person sees, as a PNG.
browser_run --virtual-time-budget=5000 --window-size=1280,2200 --screenshot="$out/report.png" \
  "file://$out/report.html" >/dev/null 2>"$out/screenshot.log" || fail "screenshot failed: $(tail -3 "$out/screenshot.log")"
if [ -f "$out/report.png" ] && [ "$(head -c 8 "$out/report.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] \
   && [ "$(wc -c <"$out/report.png")" -gt 20000 ]; then
  echo "screenshot $out/report.png ($(wc -c <"$out/report.png") bytes)"
else
  fail "no usable screenshot at $out/report.png"
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all browser checks passed"
