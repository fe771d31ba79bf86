#!/usr/bin/env bash
# The README's test command: builds, then runs every test (C++ via CTest, CLI goldens, Python).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  PYTHONPATH="$PWD/python" OMP_NUM_THREADS=1 /usr/bin/python3 -m pytest tests/python -q -p no:cacheprovider
fi
