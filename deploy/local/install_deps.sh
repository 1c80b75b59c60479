#!/usr/bin/env bash
# Installs the Debian 12 packages Lockstep needs to build, test and train,
# and any named as arguments (python3-torch, for the Python package's tests
# and the benchmarks), but only when
# something is missing, so a second run costs a dpkg query.
# --build-only leaves out what only the tests, the benchmarks and the Python
# package need: enough to build and run the binaries (deploy/local/train.sh).
#
# usage: deploy/local/install_deps.sh [--build-only] [EXTRA_PACKAGE...]
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libopenblas-dev zlib1g-dev libgloo-dev
  nlohmann-json3-dev
  dataset-fashion-mnist
  openssl
)
if [[ "${1:-}" == "--build-only" ]]; then
  shift
else
  packages+=(python3-venv python3-yaml iproute2 python3-matplotlib
             python3-dev pybind11-dev python3-numpy)
fi
packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "Installing missing Debian packages: ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "error: not root and no sudo; install these packages: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
