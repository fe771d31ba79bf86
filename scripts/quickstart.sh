#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
echo
./build/tools/laggard analyze examples/run-slow-forward
