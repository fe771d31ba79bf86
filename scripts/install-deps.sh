#!/usr/bin/env bash
# Installs what laggard builds and tests with: the Debian 12 packages (as root; only missing ones
# are installed), then the project's Python environment .venv at the repository root (PyTorch,
# pinned by python/constraints.txt to the CPU build on this machine's disk, and the test suite's
# packages, python/requirements-test.txt). Idempotent and quick when everything is present.
# Nothing else is downloaded.
#   --system-only / --venv-only: one of the two parts (scripts/quickstart.sh builds the C++ side
#     while the venv installs)
#   LAGGARD_VENV_PYTHON=python3 (default): the interpreter the venv is made from.
set -euo pipefail
cd "$(dirname "$0")/.."
part=all
case ${1:-} in
  --system-only) part=system ;;
  --venv-only) part=venv ;;
  "") ;;
  *) echo "usage: bash scripts/install-deps.sh [--system-only | --venv-only]" >&2; exit 2 ;;
esac
packages=(
  cmake g++ make pkg-config
  ninja-build ccache  # scripts/build.sh and pip wheel build with Ninja; ccache shares their objects
  libsimdjson-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-venv
  libopenmpi-dev openmpi-bin
  chromium
  clang libclang-rt-14-dev python3-hypothesis
  strace  # tests/python/test_disk_faults.py: slow and hung disks injected into the real write()
  prometheus-node-exporter  # the tests start their own; with systemd, Debian also starts one on :9100
  postgresql  # tests/python/test_fleet.py starts its own server (initdb, pg_ctl) for the fleet store
  tmux  # tests/python/test_watch.py runs `laggard watch` in a real terminal (a tmux pane)
  prometheus  # promtool: tests/python/test_alerts.py checks and unit-tests deploy/prometheus's rules
)
system_packages() {
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
  elif [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing ${missing[*]}; run as root (sudo bash scripts/install-deps.sh)" >&2
    exit 2
  else
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}
if [ "$part" != venv ]; then system_packages; fi
if [ "$part" = system ]; then exit 0; fi

# The venv. torch first and alone, so that nothing else can pull another build of it; every
# install is constrained to the same pin.
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  py=${LAGGARD_VENV_PYTHON:-python3}
  echo "install-deps: creating $venv with $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  "$py" -m venv "$venv"
fi
# A stamp of the two lists skips pip when they have not changed since the last install.
stamp=$venv/.laggard-requirements
want=$(cat python/constraints.txt python/requirements-test.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check -c python/constraints.txt)
  "${pip[@]}" torch==2.13.0
  "${pip[@]}" -r python/requirements-test.txt
  echo "$want" >"$stamp"
fi
# nvidia-resiliency-ext requires the `pynvml` package, now a deprecated shim whose import hook
# (a .pth file) makes every `import torch` print a FutureWarning; the module itself, `pynvml`,
# comes from nvidia-ml-py (python/requirements-test.txt), so the shim goes.
if "$venv/bin/python" -m pip show -q pynvml >/dev/null 2>&1; then
  "$venv/bin/python" -m pip uninstall -y -q --disable-pip-version-check pynvml
fi
echo "install-deps: $venv: $("$venv/bin/python" -c 'import importlib.metadata as m, sys
print("Python %s, torch %s" % (sys.version.split()[0], m.version("torch")))')"
