#!/usr/bin/env bash
# Installs what is missing and builds Lockstep (Release) into build/.
# Re-running on an up-to-date tree takes seconds.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
"$root/deploy/local/install_deps.sh"
build="${LOCKSTEP_BUILD_DIR:-$root/build}"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLOCKSTEP_WERROR=ON >/dev/null
fi
jobs="${LOCKSTEP_BUILD_JOBS:-$(nproc)}"
if ! out=$(cmake --build "$build" -j"$jobs" 2>&1); then
  echo "$out" >&2
  echo "error: build failed" >&2
  exit 1
fi
