#!/usr/bin/env bash
# The README's test command: builds, then runs every test (C++ via CTest, CLI goldens, Python
# with the project's venv against this source tree).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
PYTHONPATH="$PWD/python" OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/python -q \
  -p no:cacheprovider
