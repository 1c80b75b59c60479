#!/usr/bin/env bash
# Installs what is missing and builds Lockstep (Release) into build/: the
# named targets (e.g. lockstep_worker), or everything when none is named.
# While it compiles it prints ninja's "[done/total]" count every 15 s; the
# full output is in build/build.log, and shown when the build fails.
# Re-running on an up-to-date tree takes seconds. --build-only installs only
# the packages the binaries need (install_deps.sh --build-only); a later run
# without it installs the rest and configures again, so that what they
# enable (the Python package) is built.
#
# usage: deploy/local/build.sh [--build-only] [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
deps=()
if [[ "${1:-}" == "--build-only" ]]; then
  deps=(--build-only)
  shift
fi
"$root/deploy/local/install_deps.sh" "${deps[@]}"
build="${LOCKSTEP_BUILD_DIR:-$root/build}"
# Packages installed since the last configure may enable more of the build.
if [[ ! -f "$build/build.ninja" || /var/lib/dpkg/status -nt "$build/build.ninja" ]]; then
  echo "Configuring the build in $build..."
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLOCKSTEP_WERROR=ON >/dev/null
  touch "$build/build.ninja"
fi
jobs="${LOCKSTEP_BUILD_JOBS:-$(nproc)}"
targets=()
[[ $# -gt 0 ]] && targets=(--target "$@")

# Reads ninja's output and prints its latest "[done/total]" count, the
# first at once and then at most one every 15 s.
progress() {
  local last=-15 line
  while IFS= read -r line; do
    if [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]] && ((SECONDS - last >= 15)); then
      last=$SECONDS
      echo "  compiled ${BASH_REMATCH[1]} of ${BASH_REMATCH[2]} steps"
    fi
  done
}

log="$build/build.log"
set +e
cmake --build "$build" -j"$jobs" "${targets[@]}" 2>&1 | tee "$log" | progress
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
  cat "$log" >&2
  echo "error: build failed (output above and in $log)" >&2
  exit 1
fi
