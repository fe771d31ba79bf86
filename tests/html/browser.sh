# Headless Chromium, sourced by check_report.sh and screenshot.sh: find the browser and run it
# with nothing that reaches the network (no sync, no component updates, no QUIC, a fresh profile).
LAGGARD_BROWSER=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)

# browser_run ARGS... : one headless run in a throwaway profile.
browser_run() {
  local profile rc=0
  profile=$(mktemp -d)
  timeout 120 "$LAGGARD_BROWSER" --headless --no-sandbox --disable-gpu --disable-quic \
    --no-first-run --disable-background-networking --disable-component-update --disable-sync \
    --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$profile" "$@" || rc=$?
  rm -rf "$profile"
  return $rc
}
