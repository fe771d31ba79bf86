#!/usr/bin/env bash
# Builds laggard's libFuzzer targets (fuzz/) with clang, AddressSanitizer and UBSan in a build
# directory of their own, and runs each for SECONDS (default 20) on its seed corpus
# (fuzz/corpus/<target>/, read only; new inputs go to the build directory). Exit status 1 when a
# target finds a crash, a leak, a hang or a broken property: its input is saved as
# BUILD/artifacts/<target>-crash-..., and the end of its log is printed.
# python_api_fuzzer (fuzz/python/api_fuzzer.py) is the Python API under atheris, with the
# project venv's Python and the _core module scripts/build.sh builds into python/laggard.
#
#   bash scripts/fuzz.sh [SECONDS]
#   FUZZ_BUILD_DIR=DIR (default: build-fuzz in the repository; CI: build-asan, which
#     scripts/sanitize.sh configures with the fuzz targets when clang is there)
#   FUZZ_JOBS=N (build jobs, 2)
#   FUZZ_TARGETS="sample_line_fuzzer ..." (default: all)
#   FUZZ_PARALLEL=N (default 1): targets run N at a time, each a single process of its own (so
#     each still gets SECONDS of a core when N is at most the number of cores; CI: 2)
#
# Needs clang and its runtime libraries (Debian 12: clang libclang-rt-14-dev), and atheris in
# .venv (python/requirements-test.txt) for the Python target.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
all="sample_line_fuzzer rank_file_fuzzer run_dir_fuzzer compare_vectors_fuzzer trace_dir_fuzzer python_api_fuzzer"
targets=${FUZZ_TARGETS:-$all}
native=${targets//python_api_fuzzer/}
py=$root/.venv/bin/python

if [ -n "${native// /}" ] && ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi

# A build directory configured with the fuzz targets already (scripts/sanitize.sh's build-asan,
# with clang) is built as it is; any other is configured here.
fuzzers_on=no
if grep -qx "LAGGARD_BUILD_FUZZERS:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then fuzzers_on=yes; fi
if [ -n "${native// /}" ] && [ "$fuzzers_on" = no ]; then
  mkdir -p "$build"
  cmake -S "$root" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
    -DLAGGARD_BUILD_FUZZERS=ON -DLAGGARD_BUILD_TESTS=OFF -DLAGGARD_BUILD_BENCH=OFF \
    -DLAGGARD_BUILD_PYTHON=OFF -DLAGGARD_WITH_MPI=OFF -DLAGGARD_INSTALL=OFF \
    >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 2; }
fi
if [ -n "${native// /}" ]; then
  # shellcheck disable=SC2086  # native is a list
  cmake --build "$build" -j"${FUZZ_JOBS:-2}" --target $native
fi
case " $targets " in
  *" python_api_fuzzer "*)
    if ! "$py" -c "import atheris" 2>/dev/null; then
      echo "fuzz.sh: python_api_fuzzer needs atheris in $py (bash scripts/install-deps.sh)" >&2
      exit 2
    fi
    if ! compgen -G "$root/python/laggard/_core*.so" >/dev/null; then
      echo "fuzz.sh: python_api_fuzzer needs laggard._core (bash scripts/build.sh)" >&2
      exit 2
    fi ;;
esac

mkdir -p "$build/artifacts"
# One target: its run, then its stats or its failure (a status file says which).
fuzz_one() {
  local t=$1 corpus="$build/corpus/$1" log="$build/$1.log" run per_input
  mkdir -p "$corpus"
  rm -f "$build/$t.failed"
  echo "fuzz.sh: $t for ${seconds} s"
  if [ "$t" = python_api_fuzzer ]; then
    run=(env PYTHONPATH="$root/python" OMP_NUM_THREADS=1 "$py" "$root/fuzz/python/api_fuzzer.py")
  else
    run=("$build/fuzz/$t")
  fi
  # Memory: 1 GB of RSS at most, and no single allocation above 256 MB (an axis of 10^8 ticks,
  # a buffer sized from a bad value): a 64 KiB input needs far less, so a run that grows past
  # these is a finding (each seeded bug took gigabytes).
  # A trace input may inflate 1000-fold (64 KiB to 64 MiB of events): reading that takes seconds
  # under the sanitizers, linear in the text, so its target gets a longer limit per input.
  per_input=10
  if [ "$t" = trace_dir_fuzzer ]; then per_input=60; fi
  if "${run[@]}" -max_total_time="$seconds" -timeout="$per_input" -rss_limit_mb=1024 -malloc_limit_mb=256 \
      -max_len=65536 \
      -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 \
      "$corpus" "$root/fuzz/corpus/$t" >"$log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" | sed "s/^/  $t: /" || true
  else
    { echo "fuzz.sh: $t FAILED; the end of $log:"; tail -n 40 "$log"; } >&2
    touch "$build/$t.failed"
  fi
}
parallel=${FUZZ_PARALLEL:-1}
for t in $targets; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
failed=()
for t in $targets; do
  if [ -e "$build/$t.failed" ]; then failed+=("$t"); fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: failed: ${failed[*]} (inputs in $build/artifacts)" >&2
  exit 1
fi
echo "fuzz.sh: ${targets// /, }: no finding in ${seconds} s each"
