#!/usr/bin/env bash
# The README's test command: builds, then runs every test (C++ via CTest, CLI goldens, Python
# with the project's venv against this source tree).
#   --skip-long   leave out the long tests (CTest label `long`, pytest marker `long`: the 256-rank
#                 gather, the repetitions after the first of a repeated real-rank test, the runs
#                 under a loaded machine); scripts/long-tests.sh runs exactly those. CI passes it.
#   --jobs N      Python test processes (pytest-xdist, a test file per process; default 1). The
#                 real-rank tests mostly sleep, so 2 on a 2-core machine fill the idle cores.
#   -- ARGS...    more arguments for pytest (CI: --durations=25, the slowest tests' times)
set -euo pipefail
cd "$(dirname "$0")/.."
skip_long=no
jobs=1
while [ $# -gt 0 ]; do
  case $1 in
    --skip-long) skip_long=yes ;;
    --jobs) jobs=$2; shift ;;
    --) shift; break ;;
    *) echo "usage: bash scripts/test.sh [--skip-long] [--jobs N] [-- PYTEST_ARGS...]" >&2; exit 2 ;;
  esac
  shift
done
ctest_args=()
pytest_args=("$@")
if [ "$skip_long" = yes ]; then
  ctest_args=(-LE long)
  pytest_args+=(-m "not long")
fi
if [ "$jobs" -gt 1 ]; then
  pytest_args+=(-n "$jobs" --dist loadfile)
fi
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2 "${ctest_args[@]}"
PYTHONPATH="$PWD/python" OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/python -q \
  -p no:cacheprovider "${pytest_args[@]}"
