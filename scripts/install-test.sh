#!/usr/bin/env bash
# Installs laggard into a temporary prefix and proves the installed package works: builds the
# consumer in tests/install/consumer with find_package (laggard::core static, laggard::shared,
# and laggard::mpi / laggard::mpi_shared when built with MPI) and with pkg-config (shared and
# static), runs every build, runs the installed `laggard`, and checks that the shared library
# exports the API and hides the internals.
#   LAGGARD_BUILD_DIR=build (default): the build tree to install from (configured if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${LAGGARD_BUILD_DIR:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
targets=(laggard_core laggard_shared laggard_cli)
build_targets=$(cmake --build "$build" --target help)
if grep -q "laggard_mpi_shared" <<<"$build_targets"; then
  targets+=(laggard_mpi laggard_mpi_shared)
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

pc=$(find "$prefix" -name laggard.pc)
libdir=$(dirname "$(dirname "$pc")")
test -f "$prefix/include/laggard/laggard.hpp"
test -f "$libdir/liblaggard.a"
test -f "$libdir/liblaggard.so"
echo "install-test: installed into $prefix ($(cd "$prefix" && find . -type f | wc -l) files)"

# find_package(laggard): static and shared.
cmake -S tests/install/consumer -B "$tmp/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" -j"$(nproc)" >/dev/null
"$tmp/consumer/consumer_static"
"$tmp/consumer/consumer_shared"
ldd "$tmp/consumer/consumer_shared" | grep "$libdir/liblaggard.so" >/dev/null \
  || { echo "install-test: consumer_shared does not use the installed liblaggard.so" >&2; exit 1; }
with_mpi=no
if [ -f "$libdir/liblaggard_mpi.a" ]; then
  with_mpi=yes
  "$tmp/consumer/consumer_mpi"         # an MPI singleton: no mpirun needed
  "$tmp/consumer/consumer_mpi_shared"
fi

# pkg-config: shared (the default) and static.
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
test "$(pkg-config --modversion laggard)" = "$(sed -n 's/^project(laggard VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
cxx=${CXX:-c++}
# shellcheck disable=SC2046
"$cxx" -std=c++17 tests/install/consumer/main.cc $(pkg-config --cflags --libs laggard) \
  -Wl,-rpath,"$libdir" -o "$tmp/pc_shared"
"$tmp/pc_shared"
static_libs=$(pkg-config --libs --static laggard | sed 's/-llaggard\b/-l:liblaggard.a/')
# shellcheck disable=SC2086
"$cxx" -std=c++17 tests/install/consumer/main.cc $(pkg-config --cflags laggard) $static_libs \
  -o "$tmp/pc_static"
"$tmp/pc_static"
! ldd "$tmp/pc_static" | grep liblaggard >/dev/null \
  || { echo "install-test: pc_static links liblaggard.so" >&2; exit 1; }
if [ "$with_mpi" = yes ]; then
  # shellcheck disable=SC2046
  "$cxx" -std=c++17 tests/install/consumer/mpi_main.cc $(pkg-config --cflags --libs laggard-mpi) \
    -Wl,-rpath,"$libdir" -o "$tmp/pc_mpi"
  "$tmp/pc_mpi"
fi
# laggard::core itself never depends on MPI (the Python module links it).
! ldd "$libdir/liblaggard.so" | grep libmpi >/dev/null \
  || { echo "install-test: liblaggard.so depends on MPI" >&2; exit 1; }

# The installed command-line program.
"$prefix/bin/laggard" analyze "$root/examples/run-slow-forward" | grep "rank 3 .* in forward" >/dev/null \
  || { echo "install-test: the installed laggard did not name rank 3" >&2; exit 1; }

# Hidden visibility: the API is exported, the internals are not.
symbols=$(nm -D --defined-only -C "$libdir/liblaggard.so")
for api in "laggard::Analyzer::Analyzer" "laggard::RunAnalysis::add" "laggard::make_transport"; do
  grep -q "$api" <<<"$symbols" || { echo "install-test: $api is not exported" >&2; exit 1; }
done
for internal in "WindowAssembler" "ErrorCounter" "simdjson"; do
  if grep -q "$internal" <<<"$symbols"; then
    echo "install-test: internal symbols ($internal) are exported" >&2
    exit 1
  fi
done
echo "install-test: ok (find_package static+shared, pkg-config shared+static, MPI component:" \
  "$with_mpi, CLI, visibility)"
