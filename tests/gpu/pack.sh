#!/usr/bin/env bash
# Builds what tests/gpu/run.sh runs, on a build machine (no GPU needed), for a GPU machine that
# lacks the build dependencies: laggard_cuda_check, the `laggard` program and the extension
# module for the GPU machine's Python, with the shared libraries they need that a bare machine
# may not have (simdjson). The GPU machine then runs `bash tests/gpu/run.sh DIR`.
#
#   bash tests/gpu/pack.sh DIR [PYTHON]   # PYTHON: an interpreter of the GPU machine's Python
#                                         # version (default python3), for the module's ABI
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:?usage: bash tests/gpu/pack.sh DIR [PYTHON]}
py=$(command -v "${2:-python3}")
pyexe=$("$py" -c 'import sys; print(sys.executable)')
# pybind11 from the interpreter's packages where it has them (else CMake's own search)
pbdir=$("$pyexe" -m pybind11 --cmakedir 2>/dev/null || true)
# One build tree per Python version: CMake keeps the interpreter it first found in its cache.
build=build-gpu-py$("$pyexe" -c 'import sys; print("%d%d" % sys.version_info[:2])')
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLAGGARD_BUILD_GPU_CHECK=ON \
  -DLAGGARD_BUILD_PYTHON=ON -DLAGGARD_BUILD_TESTS=OFF -DLAGGARD_BUILD_BENCH=OFF \
  -DLAGGARD_WITH_MPI=OFF -DLAGGARD_INSTALL=OFF -DPython3_EXECUTABLE="$pyexe" \
  ${pbdir:+-Dpybind11_DIR="$pbdir"} >/dev/null
cmake --build "$build" -j"$(nproc)" --target laggard_cuda_check _core laggard_cli
mkdir -p "$dir/lib"
cp "$build"/tests/gpu/laggard_cuda_check "$build"/tools/laggard "$dir/"
suffix=$("$pyexe" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
cp "python/laggard/_core$suffix" "$dir/"
# Shared libraries outside the C and C++ runtimes and zlib (which every Linux machine has).
for f in "$dir/laggard_cuda_check" "$dir/laggard" "$dir/_core$suffix"; do
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libz|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$dir/lib/"; done
ls -l "$dir" "$dir/lib"
