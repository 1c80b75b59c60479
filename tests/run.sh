#!/usr/bin/env bash
# Installs what is missing, builds (warnings are errors) and runs the whole
# suite with ctest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
start=$(date +%s)
./deploy/local/build.sh
echo "Build done in $(( $(date +%s) - start )) s; running tests"
ctest --test-dir "${LOCKSTEP_BUILD_DIR:-$root/build}" --output-on-failure \
  -j"${LOCKSTEP_TEST_JOBS:-2}" --timeout 600
echo "Suite done in $(( $(date +%s) - start )) s"
