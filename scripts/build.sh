#!/usr/bin/env bash
# Configures and builds laggard into build/ (Release, tests, benchmarks, and the Python module
# for the project's venv, .venv, which scripts/install-deps.sh makes).
#   bash scripts/build.sh [--no-python] [CMAKE_ARGS...]
#   --no-python: everything but the Python module, without the venv (scripts/quickstart.sh builds
#     this while the venv installs; the next build.sh adds the module)
#   LAGGARD_BUILD_PYTHON_EXE=.venv/bin/python (default): the interpreter the module is built for.
set -euo pipefail
cd "$(dirname "$0")/.."
python=(-DLAGGARD_BUILD_PYTHON=ON)
if [ "${1:-}" = --no-python ]; then
  shift
  python=(-DLAGGARD_BUILD_PYTHON=OFF)
else
  py=${LAGGARD_BUILD_PYTHON_EXE:-$PWD/.venv/bin/python}
  if [ ! -x "$py" ]; then
    echo "build: $py is missing; run bash scripts/install-deps.sh (scripts/quickstart.sh runs it)" >&2
    exit 2
  fi
  python+=(-DPython3_EXECUTABLE="$py")
  # The venv's pybind11, which `pip wheel .` builds the module with too (else the system's).
  if dir=$("$py" -m pybind11 --cmakedir 2>/dev/null); then python+=(-Dpybind11_DIR="$dir"); fi
fi
# Ninja where it is installed (and build/ is new): it is what `pip wheel .` builds with, so that
# with ccache the wheel's build (scripts/wheel-test.sh) reuses this one's objects.
generator=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${python[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)"
