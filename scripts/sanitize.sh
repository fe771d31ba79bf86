#!/usr/bin/env bash
# Builds the C++ tests with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan and runs
# them. With clang (Debian: clang libclang-rt-14-dev) the same build also holds the libFuzzer
# targets, the library instrumented for them as well (-fsanitize=fuzzer-no-link): scripts/fuzz.sh
# runs them from it with FUZZ_BUILD_DIR=build-asan, so one sanitizer build serves both. Without
# clang: g++, tests only.
#   --build-only   build, run nothing        --test-only   run the tests of the existing build
#   SANITIZE_JOBS=N (default: the number of cores): build jobs
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-asan
mode=all
case ${1:-} in
  --build-only) mode=build ;;
  --test-only) mode=test ;;
  "") ;;
  *) echo "usage: bash scripts/sanitize.sh [--build-only | --test-only]" >&2; exit 2 ;;
esac

if [ "$mode" != test ]; then
  # A new build directory: Ninja and clang where they are installed (an existing one keeps its
  # generator and compiler).
  fresh=()
  if [ ! -f "$build/CMakeCache.txt" ]; then
    if command -v ninja >/dev/null; then fresh=(-G Ninja); fi
    if command -v clang++ >/dev/null; then
      # -O1: the sanitizers' own advice (a usable speed, exact stacks); asserts stay on.
      fresh+=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
              -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1"
              -DLAGGARD_BUILD_FUZZERS=ON)
    fi
  fi
  cmake -S . -B "$build" "${fresh[@]}" -DCMAKE_BUILD_TYPE=Debug \
    -DLAGGARD_SANITIZE=address,undefined -DLAGGARD_BUILD_BENCH=OFF -DLAGGARD_BUILD_PYTHON=OFF \
    >/dev/null
  cmake --build "$build" -j"${SANITIZE_JOBS:-$(nproc)}"
fi
if [ "$mode" != build ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$build" --output-on-failure -j2
fi
