#!/usr/bin/env bash
# Builds the wheel (pip wheel ., with the project venv's scikit-build-core and pybind11: nothing is
# downloaded), installs it into a fresh venv with no compiler, CMake or build tool on PATH, and
# runs the Python tests against that installed package: python/ of this checkout is never on
# sys.path or PYTHONPATH, and the `laggard` command is the package's own.
#   LAGGARD_WHEEL_DIR: keep the wheel there (default: a temporary directory, removed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ ! -x .venv/bin/python ]; then
  echo "wheel-test: .venv is missing; run bash scripts/install-deps.sh" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dist=${LAGGARD_WHEEL_DIR:-$tmp/dist}

t0=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) .venv/bin/python -m pip wheel -q --no-build-isolation \
  --no-deps --disable-pip-version-check -w "$dist" . >"$tmp/wheel.log" 2>&1 ||
  { cat "$tmp/wheel.log" >&2; echo "wheel-test: pip wheel . failed" >&2; exit 1; }
wheels=("$dist"/laggard-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "wheel-test: expected one wheel in $dist: ${wheels[*]}" >&2; exit 1; }
wheel=${wheels[0]}
echo "wheel-test: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $(( $(date +%s) - t0 )) s"

# The fresh venv: PyTorch and the test suite's packages as install-deps.sh gives .venv.
venv=$tmp/venv
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check -c python/constraints.txt)
"${pip[@]}" torch==2.13.0
"${pip[@]}" -r python/requirements-test.txt
"$venv/bin/python" -m pip uninstall -y -q --disable-pip-version-check pynvml  # as install-deps.sh
# The wheel alone, with nothing but the venv on PATH: no compiler, no cmake, no index.
env -i HOME="$HOME" PATH="$venv/bin" "$venv/bin/python" -m pip install -q --no-index --no-deps \
  --disable-pip-version-check "$wheel"

# Run from a directory where python/ of the checkout is not importable.
cd "$tmp"
export PATH="$venv/bin:$PATH"
command -v laggard | grep -x "$venv/bin/laggard" >/dev/null ||
  { echo "wheel-test: \`laggard\` on PATH is not the venv's console script" >&2; exit 1; }
laggard --version
laggard analyze "$root/examples/run-slow-forward" | grep "rank 3 .* in forward" >/dev/null ||
  { echo "wheel-test: the installed laggard did not name rank 3" >&2; exit 1; }
echo "wheel-test: $(basename "$wheel") installed; Python tests against it:"
# What the installed layout can break: every test that runs in one process (the package's API,
# its module and program, the sinks), and real ranks through the package's own entry points (the
# demo via the console script, DDP over gloo, torchrun). The other multi-process tests run the
# same Python files of the same package on scripts/test.sh's source tree; here they would only
# run twice (LAGGARD_WHEEL_TEST_ALL=1 runs them all).
run_tests() {
  LAGGARD_TEST_INSTALLED=1 OMP_NUM_THREADS=1 "$venv/bin/python" -m pytest "$@" -q \
    -p no:cacheprovider
}
if [ "${LAGGARD_WHEEL_TEST_ALL:-0}" = 1 ]; then
  run_tests "$root/tests/python"
else
  run_tests "$root/tests/python" -m "not multiproc"
  run_tests "$root/tests/python/test_demo.py" "$root/tests/python/test_ddp.py"
fi
