#!/usr/bin/env bash
# The README's first command: install what is missing (Debian packages; the venv .venv with
# PyTorch and the test suite's packages), build, and run the main job: `laggard demo` (4 local
# ranks train a small DDP model on the CPU, one is made slow, laggard finds it).
# The venv's installs (mostly downloads) run while the C++ side builds; the Python module is
# built once the venv is there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --system-only
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash scripts/install-deps.sh --venv-only >"$log" 2>&1 &
venv=$!
if ! bash scripts/build.sh --no-python; then
  wait "$venv" || true
  cat "$log"
  exit 1
fi
if ! wait "$venv"; then
  cat "$log" >&2
  echo "quickstart: installing the venv failed" >&2
  exit 1
fi
cat "$log"
bash scripts/build.sh
echo
./build/tools/laggard demo
