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
#   or, to time other settings of the ResNet-50 job alone:
#     tests/gpu/device_check.sh --jobs DIR "4 bf16 --ps=4" "1 fp32" ...
#
# --bundle builds the tests below, lockstep_gpu_bench and the server, worker
# and launcher with -DLOCKSTEP_CUDA=ON (in $LOCKSTEP_GPU_BUILD_DIR, default
# build-gpu-check/) and copies them to DIR/bin, and every shared library they
# need to DIR/lib.tar.xz -- except the C/C++ runtime that every Linux has and
# CUDA's runtime, cuBLAS, NCCL and driver, which must match the GPU
# machine's own. The bundle must stay under 40 MiB.
#
# --run puts those libraries and the machine's CUDA libraries on
# LD_LIBRARY_PATH, prints nvidia-smi, and runs: the CUDA device and model
# tests, the layer tests (every layer's gradients against finite
# differences, on the CPU and on CUDA), the benchmark (extra arguments after
# DIR go to it), and then ResNet-50 (batch 128 per worker, synthetic 32x32
# images) through a real server with 1 and 4 workers on GPU 0 (and 4 with
# bf16 on the wire, with 4 server shards, with gloo all-reduce), whose whole
# synchronous step compares with the local step the benchmark measured, and
# a small CNN through NCCL all-reduce (one worker). With
# LOCKSTEP_SANITIZE_SECONDS=N set, it then runs the CUDA tests under
# compute-sanitizer's memcheck (out-of-bounds and misaligned accesses,
# leaks), N seconds for all of them. It exits non-zero if anything fails.
set -euo pipefail

readonly kMaxBundleBytes=$((40 * 1024 * 1024))
# The test executables, one per tests/ folder; of the unit tests, the
# device's, the layers', the all-reducers' and the kernels' suites.
readonly kTests=(lockstep_gpu_tests lockstep_unit_tests)
readonly kLayerSuites="*Conv2DTest.*:KerasWindowTest.*:*PoolingLayersTest.*"\
":*BatchNormalizationTest.*:*BasicLayersTest.*:*GraphModelTest.*"
readonly kUnitSuites="CpuDeviceTest.*:*GemmTest.*:DeviceFactoryTest.*"\
":ImageGeometryTest.*:ImageOpElementsTest.*:$kLayerSuites:*AllReduce*"\
":AllReducerFactoryTest.*:*LateRankTest.*:KernelsTest.*"\
":ParallelBarrierCheckTest.*:*ParallelBarrierTest.*"
readonly kTools=(lockstep_gpu_bench lockstep_server lockstep_worker
  lockstep_launch lockstep_bench)
readonly kBinaries=("${kTests[@]}" "${kTools[@]}")
root="$(cd "$(dirname "$0")/../.." && pwd)"

usage() {
  sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Libraries the bundle leaves to the GPU machine: the loader and C/C++
# runtime (every Linux has them, newer) and CUDA's runtime, cuBLAS, NCCL and
# driver (they must match the driver there; PyTorch's wheels carry them).
is_system_lib() {
  [[ "$1" =~ ^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libgcc_s\.so|libstdc\+\+\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libnvidia) ]]
}

bundle() {
  local dir="$1"
  local build="${LOCKSTEP_GPU_BUILD_DIR:-$root/build-gpu-check}"
  echo "== building ${kBinaries[*]} in $build"
  # ON, not AUTO: a bundle without the CUDA device or NCCL fails here, not
  # on the GPU machine.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLOCKSTEP_CUDA=ON -DLOCKSTEP_NCCL=ON >/dev/null
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
    echo "needs on the GPU machine: libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libnccl.so.2, the driver"
    (cd "$dir" && find bin lib -type f -printf '%10s  %p\n' | sort -k2)
  } >"$dir/MANIFEST.txt"
  # OpenBLAS alone is 35 MiB; compressed, the libraries take about a third.
  tar -C "$dir" -cf - lib | xz -6 -T0 >"$dir/lib.tar.xz"
  rm -rf "${dir:?}/lib"
  local bytes
  bytes=$(du -sb "$dir" | cut -f1)
  echo "== bundle $dir: $(grep -c '  lib/' "$dir/MANIFEST.txt") libraries," \
    "$((bytes / 1024 / 1024)) MiB"
  if ((bytes > kMaxBundleBytes)); then
    echo "error: the bundle is over 40 MiB" >&2
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
    for pattern in ("libcublas.so.*", "libcublasLt.so.*", "libcudart.so.*",
                    "libnccl.so.*"):
        for lib in glob.glob(os.path.join(base, "nvidia", "**", pattern),
                             recursive=True):
            dirs.add(os.path.dirname(lib))
print("\n".join(sorted(dirs)))
EOF
  fi
}

# ResNet-50 through lockstep_launch: $4 workers on GPU 0 ($5 on the wire,
# launcher and worker flags after it: 1 server unless they say otherwise),
# batch 128 each, named $2 in $3; 2 warm-up steps (lazy module loading, cuBLAS handles, optimizer
# slots) then 20 timed ones. SGD, as lockstep_gpu_bench's local step, so
# that the two differ by the exchange (and the server's apply) only. Prints
# the median synchronous step from rank 0's --step_log, after the warm-ups.
resnet_job() {
  local dir="$1" name="$2" tmp="$3" workers="$4" wire="$5"
  local extra=("${@:6}")
  local batch=128 steps=20 warmup=2
  echo "-- resnet50, $workers worker(s) on GPU 0, batch $batch each, $wire on the wire${extra[*]:+, ${extra[*]}}"
  if ! timeout 240 "$dir/bin/lockstep_launch" --workers="$workers" --gpus=1 \
    --model=resnet50 --dataset=synthetic \
    --synthetic_examples=$((batch * workers * (steps + warmup))) \
    --batch_size="$batch" --epochs=1 --optimizer=sgd --device=cuda \
    --wire_dtype="$wire" --progress=none \
    --step_log="$tmp/resnet_$name.csv" --trace="$tmp/trace_$name.{rank}.json" \
    "${extra[@]}" >"$tmp/resnet_$name.log" 2>&1; then
    tail -n 30 "$tmp/resnet_$name.log"
    return 1
  fi
  python3 - "$tmp/resnet_$name.csv" "$batch" "$workers" "$wire" "$warmup" \
    "$tmp/trace_$name.0.json" "${extra[*]}" <<'EOF'
import collections, json, statistics, sys
batch, workers, wire, warmup = (int(sys.argv[2]), int(sys.argv[3]),
                                sys.argv[4], int(sys.argv[5]))
extra = sys.argv[7]
# Rank 0's phases (worker/train/step_observer.h), summed per step: pull, compute
# (forward and backward; the pushes run inside it), push (encoding and
# sending chunks as backprop finishes layers; with the push thread, only
# handing them to it) and wait (the rest of the exchange: the last chunks,
# the barrier, the server's apply, the replies).
per_step = collections.defaultdict(lambda: collections.defaultdict(float))
trace = json.load(open(sys.argv[6]))
for event in trace["traceEvents"] if isinstance(trace, dict) else trace:
    if event.get("ph") == "X" and "step" in event.get("args", {}):
        per_step[event["args"]["step"]][event["name"]] += event["dur"] / 1e3
timed = [per_step[s] for s in sorted(per_step) if s >= warmup]
phases = {name: statistics.median(p[name] for p in timed)
          for name in ("pull", "compute", "push", "wait")
          if any(name in p for p in timed)}
if phases:
    print("   rank 0's median phases, ms: " +
          ", ".join(f"{name} {ms:.1f}" for name, ms in phases.items()) +
          " (push runs inside compute)")
# step,seconds,loss: seconds since training began, at each step's end.
ends = [float(line.split(",")[1]) for line in open(sys.argv[1])
        if line[:1].isdigit()]
steps = [b - a for a, b in zip([0.0] + ends, ends)][warmup:]
step_ms = statistics.median(steps) * 1e3
# lockstep_gpu_bench's ms_per_step is a mean (its timed seconds over its
# steps): the mean is what to set against it.
mean_ms = statistics.mean(steps) * 1e3
rate = batch * workers / (step_ms / 1e3)
print(f"   median step {step_ms:.1f} ms (mean {mean_ms:.1f}) over "
      f"{len(steps)} steps after {warmup} warm-ups: {rate:.0f} images/s in "
      f"all, {rate / workers:.0f} per worker")
print("JSON_RESNET_JOB " + json.dumps({"workers": workers, "batch": batch,
      "wire_dtype": wire, "flags": extra, "optimizer": "sgd", "timed_steps": len(steps),
      "images_per_s": rate, "median_ms_per_step": step_ms,
      "mean_ms_per_step": mean_ms, "rank0_median_phase_ms": phases}))
EOF
}

# The small CNN trained by one worker on GPU 0 with NCCL all-reduce (one
# rank: NCCL refuses two ranks on one GPU) through lockstep_launch: NCCL's
# communicator of one, its all-reduce polled on its stream, and the step's
# kernels on the same thread (a single rank needs no rendezvous, so the
# server only starts and ends the job).
nccl_job() {
  local dir="$1" tmp="$2"
  echo "-- cnn, 1 worker on GPU 0, NCCL all-reduce, 20 steps"
  if ! timeout 120 "$dir/bin/lockstep_launch" --workers=1 --gpus=1 \
    --model=cnn --dataset=synthetic --synthetic_examples=640 \
    --batch_size=32 --epochs=1 --device=cuda --sync=allreduce \
    --allreduce=nccl --progress=none --summary_json="$tmp/nccl.json" \
    >"$tmp/nccl.log" 2>&1; then
    tail -n 30 "$tmp/nccl.log"
    return 1
  fi
  python3 - "$tmp/nccl.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"   {s['steps']} steps, {s['examples_per_sec']:.0f} images/s")
EOF
}

# The CUDA tests again under compute-sanitizer's memcheck, $2 seconds for
# all of them (memcheck slows kernels tenfold or more, so the models test
# keeps to its small models). A memcheck error fails the check; running
# out of time is reported, not failed.
sanitize() {
  local dir="$1" seconds="$2"
  if [[ ! "$seconds" =~ ^[0-9]+$ ]]; then
    echo "FAILED: LOCKSTEP_SANITIZE_SECONDS must be a number of seconds, got \"$seconds\""
    return 1
  fi
  local tool candidate
  tool="$(command -v compute-sanitizer || true)"
  for candidate in /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [[ -z "$tool" && -x "$candidate" ]]; then tool="$candidate"; fi
  done
  if [[ -z "$tool" ]]; then
    echo "(compute-sanitizer not found: not run)"
    return 0
  fi
  local deadline=$((SECONDS + seconds)) left rc failed=0 run
  # Each run: a test binary and, after it, a gtest filter. Left out: the
  # test that asks cudaMalloc for 2^52 bytes on purpose (memcheck reports
  # the refusal as an API error), ResNet-50 (minutes under memcheck), and
  # image_op_elements_test (no CUDA call, which memcheck counts as an error).
  local runs=("lockstep_gpu_tests *-*ErrorsCarryTheCallFileAndLine:*resnet50"
    "lockstep_unit_tests $kLayerSuites")
  local bin filter
  for run in "${runs[@]}"; do
    read -r bin filter <<<"$run"
    left=$((deadline - SECONDS))
    if ((left <= 0)); then
      echo "(memcheck: out of time before $bin)"
      break
    fi
    echo "-- memcheck $run"
    rc=0
    timeout -k 10 "$left" "$tool" --tool memcheck --leak-check full \
      --error-exitcode 99 --print-limit 20 "$dir/bin/$bin" --gtest_brief=1 \
      ${filter:+"--gtest_filter=$filter"} >"$tmp/memcheck.log" 2>&1 || rc=$?
    { grep -v '^FAILED_PRECONDITION' "$tmp/memcheck.log" || true; } | tail -n 40
    if ((rc == 124)); then
      echo "(memcheck: $bin ran out of time)"
    elif ((rc != 0)); then
      echo "FAILED: memcheck $run (exit $rc)"
      failed=1
    fi
  done
  return "$failed"
}

# Unpacks the bundle's libraries and puts them and the machine's CUDA
# libraries on LD_LIBRARY_PATH; sets the globals dir (the bundle) and tmp.
prepare() {
  dir="$(cd "$1" && pwd)"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  xz -dc "$dir/lib.tar.xz" | tar -C "$tmp" -xf -
  local extra
  extra="$(cuda_lib_dirs | paste -sd: -)"
  export LD_LIBRARY_PATH="$tmp/lib${extra:+:$extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
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
}

run() {
  prepare "$1"
  shift
  echo "== nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi || echo "(nvidia-smi failed)"
  else
    echo "(nvidia-smi not found: no NVIDIA driver here)"
  fi
  # With a GPU listed, a CUDA test or the benchmark that cannot get one
  # fails instead of skipping (tests/unit/gpu_required.h).
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    export LOCKSTEP_REQUIRE_GPU=1
    echo "(nvidia-smi lists a GPU: LOCKSTEP_REQUIRE_GPU=1, CUDA tests may not skip)"
  fi
  local failed=0
  local filter
  for bin in "${kTests[@]}"; do
    filter="*"
    [[ $bin == lockstep_unit_tests ]] && filter="$kUnitSuites"
    echo "== $bin"
    # --gtest_brief prints failures only; the summary lines still say how
    # many tests passed and were skipped.
    if ! "$dir/bin/$bin" --gtest_brief=1 --gtest_filter="$filter"; then
      echo "FAILED: $bin"
      failed=1
    fi
  done
  echo "== lockstep_gpu_bench"
  if ! "$dir/bin/lockstep_gpu_bench" "$@"; then
    echo "FAILED: lockstep_gpu_bench"
    failed=1
  fi
  # The server's loops on this machine's cores (and AVX-512, if it has
  # it: kernels_test above compares that variant too).
  echo "== lockstep_bench server"
  if ! "$dir/bin/lockstep_bench" server --reps=5; then
    echo "FAILED: lockstep_bench server"
    failed=1
  fi
  echo "== ResNet-50 through a real server (compare the local step above)"
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "(no GPU here: the ResNet-50 jobs need one; not run)"
  else
    if ! nccl_job "$dir" "$tmp"; then
      echo "FAILED: NCCL all-reduce job"
      failed=1
    fi
    # fp32 with 1 and 4 workers; 4 workers with bf16 on the wire (half the
    # bytes each way); 4 workers and 4 server shards (each shard a quarter
    # of the bytes); 4 workers with gloo all-reduce instead of the server.
    # Together: how much of the step the exchange is, and whose it is.
    if ! resnet_jobs "1 fp32" "4 fp32" "4 bf16" "4 fp32 --ps=4" \
      "4 fp32 --sync=allreduce --allreduce=gloo"; then
      failed=1
    fi
  fi
  if [[ -n "${LOCKSTEP_SANITIZE_SECONDS:-}" ]]; then
    echo "== compute-sanitizer memcheck, ${LOCKSTEP_SANITIZE_SECONDS} s in all"
    if ! sanitize "$dir" "$LOCKSTEP_SANITIZE_SECONDS"; then
      failed=1
    fi
  fi
  if ((failed)); then
    echo "== device check: FAILED"
    exit 1
  fi
  echo "== device check: passed"
}

# Only the ResNet-50 jobs named, each "WORKERS WIRE_DTYPE [FLAGS...]" (the
# flags go to lockstep_launch and on to the workers), to try settings.
run_jobs() {
  prepare "$1"
  shift
  resnet_jobs "$@"
}

# The ResNet-50 jobs named as run_jobs takes them, one after another;
# non-zero if any failed.
resnet_jobs() {
  local job n=0 workers wire rest flags failed=0
  for job in "$@"; do
    read -r workers wire rest <<<"$job"
    read -ra flags <<<"$rest"
    n=$((n + 1))
    if ! resnet_job "$dir" "$n" "$tmp" "$workers" "$wire" "${flags[@]}"; then
      echo "FAILED: resnet50 with $workers worker(s), $wire $rest"
      failed=1
    fi
  done
  return "$failed"
}

case "${1:-}" in
  --bundle) [[ $# -eq 2 ]] || usage; bundle "$2" ;;
  --run) [[ $# -ge 2 ]] || usage; run "${@:2}" ;;
  --jobs) [[ $# -ge 3 ]] || usage; run_jobs "${@:2}" ;;
  *) usage ;;
esac
