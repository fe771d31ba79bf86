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
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLAGGARD_BUILD_PYTHON=ON \
  -DPython3_EXECUTABLE="$py" "$@" >/dev/null
cmake --build build -j"$(nproc)"
