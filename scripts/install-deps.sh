#!/usr/bin/env bash
# Installs the Debian 12 packages laggard builds and tests with (run as root). Idempotent: only
# missing packages are installed. Nothing else is downloaded.
set -euo pipefail
packages=(
  cmake g++ make pkg-config
  libsimdjson-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-pytest python3-torch python3-numpy
  libopenmpi-dev openmpi-bin
  chromium
  clang python3-hypothesis
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root (sudo bash scripts/install-deps.sh)" >&2
  exit 2
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
