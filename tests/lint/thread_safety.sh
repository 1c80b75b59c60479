#!/usr/bin/env bash
# Checks the project's own C++ (libraries and binaries, not the tests nor
# the CUDA device) with clang's thread-safety analysis, -Wthread-safety
# -Werror, and the usual warnings: every translation unit is parsed and
# analysed with -fsyntax-only in a build directory of its own, so nothing
# is compiled to code and the GCC build is left alone.
#
# usage: tests/lint/thread_safety.sh [BUILD_DIR]   (default: build-thread-safety)
#
# Installs clang with apt-get when it is missing. Exit 0: clean; 1: a
# warning or an error (printed); 77: no clang and no way to install it.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-thread-safety}"
start=$(date +%s)

if ! command -v clang++ >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "skip: no clang++, and not root and no sudo to install clang" >&2
    exit 77
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get update -qq; then
    echo "skip: no clang++, and apt cannot reach its archive" >&2
    exit 77
  fi
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends clang
fi

# LOCKSTEP_WERROR adds -Werror, and the warnings target adds
# -Wthread-safety whenever the compiler is clang (CMakeLists.txt).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DLOCKSTEP_WERROR=ON -DLOCKSTEP_CUDA=OFF -DLOCKSTEP_BUILD_TESTS=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log" >&2
  exit 1
}
rm -f "$build.configure.log"

# The sources include generated headers (the protobuf and gRPC code): make
# those, and only those.
mapfile -t generated < <(ninja -C "$build" -t targets all |
  sed -n 's/^\([^:]*\.h\): CUSTOM_COMMAND$/\1/p')
if [[ ${#generated[@]} -gt 0 ]]; then
  ninja -C "$build" "${generated[@]}" >/dev/null
fi

# Each of our sources' compile command, with -fsyntax-only for its output:
# one shell command a line for xargs.
python3 - "$root" "$build" >"$build/thread_safety_commands.txt" <<'PY'
import json
import os
import shlex
import sys

root, build = sys.argv[1], sys.argv[2]
for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
    source = os.path.realpath(entry["file"])
    if not source.startswith(root + os.sep) or source.startswith(
            os.path.realpath(build) + os.sep):
        continue  # Generated code is not ours to check.
    args = shlex.split(entry["command"])
    out = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT"):
            skip = True
            continue
        if arg in ("-c", "-MD"):
            continue
        out.append(arg)
    out.append("-fsyntax-only")
    print("cd %s && %s" % (shlex.quote(entry["directory"]),
                           " ".join(shlex.quote(a) for a in out)))
PY
count=$(wc -l <"$build/thread_safety_commands.txt")
jobs="${LOCKSTEP_LINT_JOBS:-$(nproc)}"
log="$build/thread_safety.log"
rc=0
# Every unit is checked even after a failure, so one run lists them all.
tr '\n' '\0' <"$build/thread_safety_commands.txt" |
  xargs -0 -P "$jobs" -n 1 bash -c \
    'out=$(eval "$1" 2>&1) || rc=1; [[ -z "$out" ]] || printf "%s\n" "$out"
     exit "${rc:-0}"' unit >"$log" 2>&1 || rc=$?
if [[ $rc -ne 0 ]] || grep -q "warning:\|error:" "$log"; then
  cat "$log"
  echo "thread safety: FAILED ($count units, $(( $(date +%s) - start )) s)"
  exit 1
fi
echo "thread safety: $count units clean under clang -Wthread-safety -Werror" \
  "($(( $(date +%s) - start )) s)"
