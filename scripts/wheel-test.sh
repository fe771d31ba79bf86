#!/usr/bin/env bash
# Builds the wheel (pip wheel ., with the project venv's scikit-build-core and pybind11: nothing is
# downloaded), installs it into a fresh venv with no compiler, CMake or build tool on PATH, and
# runs the Python tests that the installed layout can break against that installed package
# (LAGGARD_WHEEL_TEST_ALL=1: all of them): python/ of this checkout is never on sys.path or
# PYTHONPATH, and the `laggard` command is the package's own.
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
# The wheel's CMake build in a new directory beside build/ (same depth: with ccache, each source
# that scripts/build.sh compiled with the same flags comes from the cache), removed at exit.
wheel_build=$(mktemp -d "$root/build-wheel.XXXXXX")
trap 'rm -rf "$tmp" "$wheel_build"' EXIT
cached() { ccache --print-stats 2>/dev/null | awk '$1 ~ /^(direct|preprocessed)_cache_hit$/ {h += $2}
  $1 == "cache_miss" {m = $2} END {print h + 0, m + 0}'; }
read -r hits0 misses0 < <(cached)
# The compiler build/ was configured with, by the same name (scikit-build-core would take Python's
# own CXX, g++, which ccache counts as another compiler than c++).
build_env=(CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)")
built_with=$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' build/CMakeCache.txt 2>/dev/null || true)
if [ -n "$built_with" ] && [ -z "${CXX:-}" ]; then build_env+=(CXX="$built_with"); fi
env "${build_env[@]}" .venv/bin/python -m pip wheel -q --no-build-isolation \
  --no-deps --disable-pip-version-check -Cbuild-dir="$wheel_build" -w "$dist" . \
  >"$tmp/wheel.log" 2>&1 ||
  { cat "$tmp/wheel.log" >&2; echo "wheel-test: pip wheel . failed" >&2; exit 1; }
if command -v ccache >/dev/null; then
  read -r hits misses < <(cached)
  echo "wheel-test: ccache: $(( hits - hits0 )) compiles from the cache, $(( misses - misses0 )) compiled"
fi
wheels=("$dist"/laggard-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "wheel-test: expected one wheel in $dist: ${wheels[*]}" >&2; exit 1; }
wheel=${wheels[0]}
echo "wheel-test: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $(( $(date +%s) - t0 )) s"

# The fresh venv, made from the interpreter .venv was made from. PyTorch and the test suite's
# packages are .venv's own (a .pth file adds .venv's site-packages after the venv's, with the
# same pins: no second copy of PyTorch to install); .venv holds no laggard, so `import laggard`
# finds the wheel's package or nothing.
venv=$tmp/venv
"$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv "$venv"
if .venv/bin/python -c 'import laggard' 2>/dev/null; then
  echo "wheel-test: .venv has a laggard package installed; the test needs one without" >&2; exit 1
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
deps=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$deps')" >"$site/zz-laggard-test-deps.pth"
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
# What the installed layout can break: the package's metadata, version, py.typed, module and
# program and its console script (test_package.py), the module the wheel's own CMake build made
# (test_core.py), and real ranks through the package's own entry points (the demo through the
# console script, the C++ program and the package's laggard.demo; test_ddp.py: DDP over gloo,
# torchrun). The other tests run the same Python files of the same package on scripts/test.sh's
# source tree; here they would only run twice. LAGGARD_WHEEL_TEST_ALL=1 runs them all
# (scripts/long-tests.sh does).
run_tests() {
  LAGGARD_TEST_INSTALLED=1 OMP_NUM_THREADS=1 "$venv/bin/python" -m pytest "$@" -q \
    -p no:cacheprovider
}
if [ "${LAGGARD_WHEEL_TEST_ALL:-0}" = 1 ]; then
  run_tests "$root/tests/python"
else
  run_tests "$root"/tests/python/test_{package,core,ddp}.py \
    "$root/tests/python/test_demo.py::test_laggard_demo_through_the_cli" -m "not long"
fi
