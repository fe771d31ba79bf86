#!/usr/bin/env bash
# The GPU check in one command, for a machine with an NVIDIA GPU: the CUDA-event backend
# (laggard_cuda_check), the Python layer (python_check.py) and the profiler-trace reader
# (trace_check.py). Prints each check's output and a summary line per check; exit 0 when every
# check passed, 1 when one failed, 77 when every check was skipped (no GPU).
#
#   bash tests/gpu/run.sh                 # builds here with tests/gpu/pack.sh (needs the build
#                                         # dependencies of scripts/install-deps.sh), then runs
#   bash tests/gpu/run.sh PREBUILT        # runs binaries that tests/gpu/pack.sh put in PREBUILT
#                                         # (built on another machine for this one's Python)
#
# The Python checks use `python3` (PyTorch with CUDA); $LAGGARD_GPU_PYTHON chooses another.
# Where $OUT is set, each check's output is also written there (check-<name>.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${LAGGARD_GPU_PYTHON:-python3}
prebuilt=${1:-}
out=${OUT:-}

echo "gpu-check: $(date -u +%FT%TZ) on $(hostname)"
command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1

if [ -z "$prebuilt" ]; then
  # Build here, as tests/gpu/pack.sh does for another machine, for this machine's Python.
  prebuilt=build-gpu-pack
  bash tests/gpu/pack.sh "$prebuilt" "$py" >/dev/null || exit 1
fi
prebuilt=$(cd "$prebuilt" && pwd)
check=$prebuilt/laggard_cuda_check
cli=$prebuilt/laggard
# The extension module and the shared libraries it was built against (maybe not on this machine).
cp "$prebuilt"/_core.*.so python/laggard/ || exit 1
export LD_LIBRARY_PATH=$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

declare -A result
run_check() {  # name, command...
  local name=$1
  shift
  echo
  echo "=== $name: $*"
  local log=/dev/null
  [ -n "$out" ] && log=$out/check-$name.log
  local t0=$SECONDS
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  result[$name]="rc $rc ($((SECONDS - t0)) s)"
  echo "=== $name: rc $rc"
  return 0
}
run_check cuda_check "$check"
run_check python_check env PYTHONPATH=python PYTHONUNBUFFERED=1 "$py" tests/gpu/python_check.py
trace_out=$(mktemp -d)
run_check trace_check env PYTHONUNBUFFERED=1 "$py" tests/gpu/trace_check.py --laggard "$cli" \
  --out "$trace_out"

echo
status=77
for name in cuda_check python_check trace_check; do
  echo "gpu-check: $name ${result[$name]}"
  case ${result[$name]} in
    "rc 0 "*) [ $status -eq 77 ] && status=0 ;;
    "rc 77 "*) ;;
    *) status=1 ;;
  esac
done
echo "gpu-check: exit $status"
exit $status
