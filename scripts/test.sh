#!/usr/bin/env bash
# The README's test command: builds, then runs every test (C++ via CTest, CLI goldens, Python
# with the project's venv against this source tree).
#   --skip-long   leave out the long tests (CTest label `long`, pytest marker `long`: the 256-rank
#                 gather, the repetitions after the first of a repeated real-rank test, the runs
#                 under a loaded machine); scripts/long-tests.sh runs exactly those. CI passes it.
#   --jobs N      Python test processes (default 1). With 2 or more, two pytest runs at once: the
#                 tests that start real rank processes (marker `multiproc`) one after another in
#                 one, every other test in the other (pytest-xdist with N-1 workers where N > 2);
#                 their output is prefixed [ranks] and [other]. The real-rank tests mostly sleep,
#                 so the other run fills the idle core of a 2-core machine; two real-rank jobs at
#                 once would put six or more rank processes on it, beyond the load the detector
#                 is held to (tests/python/test_loaded_healthy.py: a job beside two busy processes).
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
short=""  # appended to each run's marker expression
if [ "$skip_long" = yes ]; then
  ctest_args=(-LE long)
  short=" and not long"
fi
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2 "${ctest_args[@]}"
pytest() {  # pytest MARK_EXPRESSION ARGS...
  local expr=$1
  shift
  PYTHONPATH="$PWD/python" OMP_NUM_THREADS=1 .venv/bin/python -u -m pytest tests/python -q \
    -p no:cacheprovider ${expr:+-m "$expr"} "$@" "${pytest_args[@]}"
}
if [ "$jobs" -le 1 ]; then
  pytest "${short# and }"
  exit
fi
other_args=()
if [ "$jobs" -gt 2 ]; then other_args=(-n $(( jobs - 1 )) --dist loadfile); fi
rc_ranks=0 rc_other=0
pytest "multiproc$short" > >(sed -u 's/^/[ranks] /') 2>&1 &
ranks_pid=$!
pytest "not multiproc$short" "${other_args[@]}" > >(sed -u 's/^/[other] /') 2>&1 || rc_other=$?
wait "$ranks_pid" || rc_ranks=$?
sleep 0.2  # the prefixing sed processes flush
echo "test: real-rank tests exit $rc_ranks, other tests exit $rc_other"
[ "$rc_ranks" -eq 0 ] && [ "$rc_other" -eq 0 ]
