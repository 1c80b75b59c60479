#!/usr/bin/env bash
# CPU images/s of Lockstep's ResNets next to PyTorch's, measured side by
# side: alternating runs of one Lockstep worker (with its server, through
# lockstep_launch) and the PyTorch program tests/bench/torch_resnet.py, one
# thread each, same topology, batch and 32x32x3 synthetic images; each
# counts batch / its median step after 2 warm-up steps (Lockstep's step
# includes the exchange with its server). Both sides are pinned to one and
# the same core (taskset, CPU=N, default 0): Lockstep's server, which runs
# Adam and would otherwise overlap the worker's backprop on a second core,
# shares the worker's, as PyTorch's optimizer shares its one thread.
# Prints every run and the medians. Installs Debian's python3-torch when it
# is missing.
#
# The environment's OPENBLAS_CORETYPE, printed with the medians, decides
# Lockstep's Gemm kernels (not PyTorch's convolutions, which use oneDNN):
# Haswell's AVX2 kernels make a ResNet-20 step 1.3-1.4x slower than the
# AVX-512 ones OpenBLAS 0.3.21 picks by itself on an AVX-512 Zen CPU
# (Cooperlake).
#
# usage: tests/bench/resnet_cpu_bench.sh [MODEL=resnet20] [BATCH=32] [STEPS=10] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${LOCKSTEP_BUILD_DIR:-$root/build}/bin"
model="${1:-resnet20}" batch="${2:-32}" steps="${3:-10}" rounds="${4:-3}"
cpu="${CPU:-0}"
"$root/deploy/local/install_deps.sh" python3-torch util-linux  # taskset
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ours=() theirs=()
for ((r = 0; r < rounds; r++)); do
  timeout 1200 taskset -c "$cpu" "$bin/lockstep_launch" --workers=1 --model="$model" \
    --dataset=synthetic --synthetic_examples=$((batch * (steps + 2))) \
    --batch_size="$batch" --epochs=1 --optimizer=adam --progress=none \
    --step_log="$tmp/steps.csv" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  # As torch_resnet.py counts: batch / the median step after 2 warm-ups
  # (step_log holds seconds since training began at the end of each step).
  ours+=("$(python3 - "$tmp/steps.csv" "$batch" <<'EOF'
import statistics, sys
ends = [float(line.split(",")[1]) for line in open(sys.argv[1])
        if line[:1].isdigit()]
steps = [b - a for a, b in zip([0.0] + ends, ends)][2:]
print(f"{int(sys.argv[2]) / statistics.median(steps):.1f}")
EOF
)")
  theirs+=("$(timeout 1200 taskset -c "$cpu" /usr/bin/python3 "$root/tests/bench/torch_resnet.py" "$model" "$batch" "$steps" | sed 's/.*images_per_sec=//')")
  echo "round $r: lockstep ${ours[-1]} images/s, pytorch ${theirs[-1]} images/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
m_ours=$(median "${ours[@]}") m_theirs=$(median "${theirs[@]}")
echo "median: lockstep $m_ours images/s, pytorch $m_theirs images/s, ratio $(python3 -c "print(round($m_ours / $m_theirs, 2))") ($model, batch $batch, 1 thread, both on CPU $cpu, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, load $(cut -d' ' -f1-3 /proc/loadavg))"
