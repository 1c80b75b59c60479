#!/usr/bin/env bash
# The GPU device check, in two steps, for a GPU machine that has the NVIDIA
# driver, the CUDA 13 runtime and cuBLAS (from the toolkit or from PyTorch's
# wheels) but not this project's Debian libraries (gRPC, Abseil, Protobuf,
# OpenBLAS, GoogleTest) and no network:
#
#   here, on a machine with the toolkit and the Debian libraries:
#     tests/gpu/device_check.sh --bundle DIR
#   then, on the GPU machine, from the repository root (DIR copied along):
#     tests/gpu/device_check.sh --run DIR
#
# --bundle builds cuda_device_test, cpu_device_test and lockstep_gpu_bench
# with -DLOCKSTEP_CUDA=ON (in $LOCKSTEP_GPU_BUILD_DIR, default
# build-gpu-check/) and copies them to DIR/bin, and every shared library they
# need to DIR/lib -- except the C/C++ runtime that every Linux has and the
# CUDA runtime, cuBLAS and driver, which must match the GPU machine's own.
# The bundle must stay under 60 MiB.
#
# --run puts DIR/lib and the machine's CUDA libraries on LD_LIBRARY_PATH,
# prints nvidia-smi, runs the tests (the GPU ones skip themselves where no GPU
# is visible) and then the benchmark. It exits non-zero if a test or the
# benchmark fails. Extra arguments after DIR go to the benchmark.
set -euo pipefail

readonly kMaxBundleBytes=$((60 * 1024 * 1024))
readonly kBinaries=(cuda_device_test cpu_device_test lockstep_gpu_bench)
root="$(cd "$(dirname "$0")/../.." && pwd)"

usage() {
  sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Libraries the bundle leaves to the GPU machine: the loader and C/C++
# runtime (every Linux has them, newer) and CUDA's runtime, cuBLAS and
# driver (they must match the driver there).
is_system_lib() {
  [[ "$1" =~ ^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libgcc_s\.so|libstdc\+\+\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnvidia) ]]
}

bundle() {
  local dir="$1"
  local build="${LOCKSTEP_GPU_BUILD_DIR:-$root/build-gpu-check}"
  echo "== building ${kBinaries[*]} in $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLOCKSTEP_CUDA=ON >/dev/null
  ninja -C "$build" -j"${LOCKSTEP_BUILD_JOBS:-$(nproc)}" "${kBinaries[@]}" \
    | tail -n 1
  if [[ -d "$dir" && ! -f "$dir/MANIFEST.txt" && -n "$(ls -A "$dir")" ]]; then
    echo "error: $dir exists and is not a bundle; not overwriting it" >&2
    exit 1
  fi
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/lib"
  local bin name path
  for bin in "${kBinaries[@]}"; do
    cp "$build/bin/$bin" "$dir/bin/"
    strip --strip-unneeded "$dir/bin/$bin"
    while read -r name path; do
      if ! is_system_lib "$name" && [[ ! -e "$dir/lib/$name" ]]; then
        cp -L "$path" "$dir/lib/$name"
      fi
    done < <(ldd "$build/bin/$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  done
  {
    echo "Lockstep GPU device check bundle"
    echo "source: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
      "(plus uncommitted changes, if any), built $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "CUDA: $(nvcc --version 2>/dev/null | tail -n 1 || echo unknown)"
    echo "needs on the GPU machine: libcudart.so.13, libcublas.so.13, libcublasLt.so.13, the driver"
    (cd "$dir" && find bin lib -type f -printf '%10s  %p\n' | sort -k2)
  } >"$dir/MANIFEST.txt"
  local bytes
  bytes=$(du -sb "$dir" | cut -f1)
  echo "== bundle $dir: $(find "$dir/lib" -type f | wc -l) libraries," \
    "$((bytes / 1024 / 1024)) MiB"
  if ((bytes > kMaxBundleBytes)); then
    echo "error: the bundle is over 60 MiB" >&2
    exit 1
  fi
}

# Directories holding the CUDA 13 runtime and cuBLAS on this machine: the
# toolkit's, and the nvidia-* wheels that PyTorch installs.
cuda_lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib \
    /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && echo "$d"
  done
  if command -v python3 >/dev/null; then
    python3 - <<'EOF' 2>/dev/null || true
import glob, os, site
bases = site.getsitepackages() + [site.getusersitepackages()]
dirs = set()
for base in bases:
    for pattern in ("libcublas.so.*", "libcublasLt.so.*", "libcudart.so.*"):
        for lib in glob.glob(os.path.join(base, "nvidia", "**", pattern),
                             recursive=True):
            dirs.add(os.path.dirname(lib))
print("\n".join(sorted(dirs)))
EOF
  fi
}

run() {
  local dir
  dir="$(cd "$1" && pwd)"
  shift
  local extra
  extra="$(cuda_lib_dirs | paste -sd: -)"
  export LD_LIBRARY_PATH="$dir/lib${extra:+:$extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "== bundle"
  head -n 2 "$dir/MANIFEST.txt" 2>/dev/null || true
  local bin missing=0
  for bin in "${kBinaries[@]}"; do
    if ldd "$dir/bin/$bin" | grep 'not found'; then missing=1; fi
  done
  if ((missing)); then
    echo "error: libraries above are missing; LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
    exit 1
  fi
  echo "== nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi || echo "(nvidia-smi failed)"
  else
    echo "(nvidia-smi not found: no NVIDIA driver here)"
  fi
  local failed=0
  for bin in cuda_device_test cpu_device_test; do
    echo "== $bin"
    # --gtest_brief prints failures only; the summary lines still say how
    # many tests passed and were skipped.
    if ! "$dir/bin/$bin" --gtest_brief=1; then
      echo "FAILED: $bin"
      failed=1
    fi
  done
  echo "== lockstep_gpu_bench"
  if ! "$dir/bin/lockstep_gpu_bench" "$@"; then
    echo "FAILED: lockstep_gpu_bench"
    failed=1
  fi
  if ((failed)); then
    echo "== device check: FAILED"
    exit 1
  fi
  echo "== device check: passed"
}

case "${1:-}" in
  --bundle) [[ $# -eq 2 ]] || usage; bundle "$2" ;;
  --run) [[ $# -ge 2 ]] || usage; run "${@:2}" ;;
  *) usage ;;
esac
