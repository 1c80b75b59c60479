#!/usr/bin/env bash
# Installs what is missing, builds (warnings are errors) and runs the whole
# suite with ctest. The last line counts what ran:
#   "ctest: N passed, N failed, N skipped"
# Extra arguments go to ctest (e.g. -L python, -R Launcher).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
start=$(date +%s)
# The Python package's tests train PyTorch models: Debian's python3-torch.
./deploy/local/install_deps.sh python3-torch
./deploy/local/build.sh
build="${LOCKSTEP_BUILD_DIR:-$root/build}"
echo "Build done in $(( $(date +%s) - start )) s; running tests"
junit="$build/ctest-results.xml"
rm -f "$junit"
rc=0
ctest --test-dir "$build" --output-on-failure -j"${LOCKSTEP_TEST_JOBS:-2}" \
  --timeout 900 --output-junit "$junit" "$@" || rc=$?
echo "Suite done in $(( $(date +%s) - start )) s"
if [[ -f "$junit" ]]; then
  # ctest's JUnit report; a skipped test is neither passed nor failed here.
  python3 - "$junit" <<'PY' || true
import sys
import xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot()
tests, failed = int(suite.get("tests")), int(suite.get("failures"))
skipped = int(suite.get("skipped")) + int(suite.get("disabled", 0))
print(f"ctest: {tests - failed - skipped} passed, {failed} failed, "
      f"{skipped} skipped")
PY
fi
exit "$rc"
