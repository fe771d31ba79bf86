#!/usr/bin/env bash
# Configures and builds laggard into build/ (Release, tests, benchmarks, Python module).
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLAGGARD_BUILD_PYTHON=ON \
  -DPython3_EXECUTABLE="$py" "$@" >/dev/null
cmake --build build -j"$(nproc)"
