#!/usr/bin/env bash
# The README's first command: install what is missing (Debian packages; the venv .venv with
# PyTorch and the test suite's packages), build, and run the main job: `laggard demo` (4 local
# ranks train a small DDP model on the CPU, one is made slow, laggard finds it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
echo
./build/tools/laggard demo
