#!/usr/bin/env bash
# The long tests, which CI (.ci/run) leaves out and scripts/test.sh runs with the rest: builds,
# then runs the CTest tests labelled `long` (the 256-rank MPI gather), the Python tests marked
# `long` (the repetitions after the first of each repeated real-rank test, the healthy runs on a
# loaded machine), one at a time, and the whole Python suite against the installed wheel
# (LAGGARD_WHEEL_TEST_ALL=1 bash scripts/wheel-test.sh). About an hour on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -L long
PYTHONPATH="$PWD/python" OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/python -q \
  -p no:cacheprovider -m long
LAGGARD_WHEEL_TEST_ALL=1 bash scripts/wheel-test.sh
