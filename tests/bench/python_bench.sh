#!/usr/bin/env bash
# Side-by-side figures for the Python package (docs/benchmarks.md, "Python
# workers"): 2 workers each, on this machine, alternating in every round:
#   torch MLP      lockstep.torch (1 server)  vs  PyTorch DDP (gloo), and
#                  lockstep.torch's summation mode (DistributedOptimizer)
#   torch ResNet-20 the same pair
#   MLP            lockstep.torch  vs  lockstep_worker (the Python path's cost)
#   Keras tutorial lockstep.keras  vs  MultiWorkerMirroredStrategy
# Prints each round's examples/s, then medians and the ratios of medians.
#
#   tests/bench/python_bench.sh [--rounds N] [--bin-dir DIR] [--only torch|keras]
#
# Needs a build (./deploy/local/build.sh) and the two environments of
# worker/python/venv.sh (made here if missing). Every process talks over
# 127.0.0.1 only.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="$root/build/bin"
rounds=3
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds=*) rounds="${1#*=}"; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --bin-dir=*) bin_dir="${1#*=}"; shift ;;
    --only=*) only="${1#*=}"; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
build="$(cd "$bin_dir/.." && pwd)"
torch_py="$("$root/worker/python/venv.sh" torch "$build/python-venvs/torch")"
keras_py="$("$root/worker/python/venv.sh" keras "$build/python-venvs/keras")"
export PYTHONPATH="$build/python" TF_CPP_MIN_LOG_LEVEL=3 PYTHONUNBUFFERED=1
launch="$bin_dir/lockstep_launch"

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
rate() { sed -n 's/.*examples_per_sec=\([0-9.]*\).*/\1/p' | head -1; }

lockstep_torch() {  # MODE MODEL BATCH STEPS (MODE: lockstep or summation)
  timeout 900 "$launch" --workers=2 -- "$torch_py" "$here/torch_sync_bench.py" \
    "$@" | rate
}
ddp_torch() {
  local port; port=$(free_port)
  local out; out=$(mktemp)
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 900 "$torch_py" "$here/torch_sync_bench.py" ddp "$@" > "$out.$r" 2>&1 &
  done
  wait
  rate < "$out.0"
  rm -f "$out" "$out".*
}
cpp_mlp() {  # BATCH EPOCHS: lockstep_worker's own figure
  local json; json=$(mktemp)
  timeout 900 "$launch" --workers=2 --layers=784,128,10 --optimizer=adam \
    --batch_size="$1" --epochs="$2" --summary_json="$json" \
    --data_dir=/usr/share/datasets/fashion-mnist >/dev/null
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_sec"])' "$json"
  rm -f "$json"
}
lockstep_keras() {
  timeout 900 "$launch" --workers=2 -- "$keras_py" "$here/keras_sync_bench.py" lockstep | rate
}
mwms_keras() {
  local p0 p1; p0=$(free_port); p1=$(free_port)
  local out; out=$(mktemp)
  for r in 0 1; do
    TF_CONFIG="{\"cluster\": {\"worker\": [\"127.0.0.1:$p0\", \"127.0.0.1:$p1\"]}, \"task\": {\"type\": \"worker\", \"index\": $r}}" \
      LOCKSTEP_PYTHON_DIR="$build/python" \
      timeout 900 "$keras_py" "$here/keras_sync_bench.py" mwms > "$out.$r" 2>&1 &
  done
  wait
  rate < "$out.0"
  rm -f "$out" "$out".*
}

declare -A figures
names=()
record() {  # NAME VALUE
  [[ -n "${figures[$1]:-}" ]] || names+=("$1")
  figures[$1]="${figures[$1]:-} $2"
  printf '  %-34s %10s examples/s\n' "$1" "$2"
}
for ((round = 1; round <= rounds; round++)); do
  echo "round $round of $rounds"
  if [[ "$only" != keras ]]; then
    record "torch mlp: lockstep" "$(lockstep_torch lockstep mlp 64 468)"
    record "torch mlp: lockstep summation" "$(lockstep_torch summation mlp 64 468)"
    record "torch mlp: DDP (gloo)" "$(ddp_torch mlp 64 468)"
    record "mlp: lockstep_worker" "$(cpp_mlp 64 1)"
    record "torch resnet20 b32: lockstep" "$(lockstep_torch lockstep resnet20 32 20 3)"
    record "torch resnet20 b32: DDP (gloo)" "$(ddp_torch resnet20 32 20 3)"
  fi
  if [[ "$only" != torch ]]; then
    record "keras mlp: lockstep" "$(lockstep_keras)"
    record "keras mlp: MultiWorkerMirrored" "$(mwms_keras)"
  fi
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "medians over $rounds rounds (examples/s, all workers):"
declare -A med
for n in "${names[@]}"; do
  med[$n]=$(echo "${figures[$n]}" | median)
  printf '  %-34s %10s\n' "$n" "${med[$n]}"
done
ratio() { [[ -n "${med[$1]:-}" && -n "${med[$2]:-}" ]] && awk -v a="${med[$1]}" -v b="${med[$2]}" -v l="$3" 'BEGIN {printf "  %-34s %8.2fx\n", l, a / b}'; return 0; }
echo "ratios of medians:"
ratio "torch mlp: lockstep" "torch mlp: DDP (gloo)" "torch mlp lockstep / DDP"
ratio "torch mlp: lockstep summation" "torch mlp: DDP (gloo)" "torch mlp summation / DDP"
ratio "torch resnet20 b32: lockstep" "torch resnet20 b32: DDP (gloo)" "resnet20 lockstep / DDP"
ratio "torch mlp: lockstep" "mlp: lockstep_worker" "torch mlp / lockstep_worker"
ratio "keras mlp: lockstep" "keras mlp: MultiWorkerMirrored" "keras lockstep / MWMS"
