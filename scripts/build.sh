#!/usr/bin/env bash
# Configures and builds laggard into build/ (Release, tests, benchmarks, and the Python module
# for the project's venv, .venv, which scripts/install-deps.sh makes).
#   LAGGARD_BUILD_PYTHON_EXE=.venv/bin/python (default): the interpreter the module is built for.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${LAGGARD_BUILD_PYTHON_EXE:-$PWD/.venv/bin/python}
if [ ! -x "$py" ]; then
  echo "build: $py is missing; run bash scripts/install-deps.sh (scripts/quickstart.sh runs it)" >&2
  exit 2
fi
# Ninja where it is installed (and build/ is new): it is what `pip wheel .` builds with, so that
# with ccache the wheel's build (scripts/wheel-test.sh) reuses this one's objects.
generator=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
# The venv's pybind11, which `pip wheel .` builds the module with too (else the system's).
pybind11=()
if dir=$("$py" -m pybind11 --cmakedir 2>/dev/null); then pybind11=(-Dpybind11_DIR="$dir"); fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLAGGARD_BUILD_PYTHON=ON \
  -DPython3_EXECUTABLE="$py" "${pybind11[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)"
