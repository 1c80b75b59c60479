#!/usr/bin/env bash
# How long a worker sits idle after its parameter server comes back: one
# server and one worker (a tiny MLP, 20 ms a step) on loopback; the server
# is killed, stays down DOWN seconds, and is started again on the same port
# (with a fresh checkpoint folder, every 5 versions). Prints, per run, the
# seconds from the restart to the new server's first checkpoint: the
# worker's reconnection and registration, then 5 steps (about 0.1 s).
# WORKER (default: this build's lockstep_worker) lets another build's worker
# run against the same server, for a side-by-side comparison.
#
# usage: tests/bench/restart_resume_bench.sh [ROUNDS=2] [DOWN seconds...=2 10 25]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${LOCKSTEP_BUILD_DIR:-$root/build}/bin"
worker="${WORKER:-$bin/lockstep_worker}"
rounds="${1:-2}"
if [[ $# -gt 1 ]]; then downs=("${@:2}"); else downs=(2 10 25); fi
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

start_server() {  # port checkpoint_dir every log
  "$bin/lockstep_server" --listen="127.0.0.1:$1" --workers=1 \
    --checkpoint_dir="$2" --checkpoint_every_steps="$3" >"$4" 2>&1 &
  pids+=($!)
}

for ((r = 0; r < rounds; r++)); do
  for down in "${downs[@]}"; do
    run="$tmp/r$r-$down"
    mkdir -p "$run"
    start_server 0 "$run/first" 1000000 "$run/s1.log"
    first=${pids[-1]}
    port=""
    for _ in $(seq 200); do
      port="$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$run/s1.log")"
      [[ -n "$port" ]] && break
      sleep 0.05
    done
    [[ -n "$port" ]] || { cat "$run/s1.log"; exit 1; }
    "$worker" --servers="127.0.0.1:$port" --workers=1 --rank=0 \
      --dataset=synthetic --synthetic_examples=640000 --layers=8,4 \
      --batch_size=8 --epochs=100 --straggle=0:20 --progress=none \
      --rejoin_timeout_s=120 >"$run/w.log" 2>&1 &
    pids+=($!)
    sleep 2
    kill -9 "$first"
    wait "$first" 2>/dev/null || true
    sleep "$down"
    start_server "$port" "$run/second" 5 "$run/s2.log"
    t0=$(date +%s.%N)
    for _ in $(seq 1200); do  # At most 60 s.
      grep -q "checkpoint of version" "$run/s2.log" && break
      sleep 0.05
    done
    t1=$(date +%s.%N)
    if grep -q "checkpoint of version" "$run/s2.log"; then
      printf 'down %3d s: training again %.2f s after the restart\n' \
        "$down" "$(echo "$t1 - $t0" | bc)"
    else
      printf 'down %3d s: not training again 60 s after the restart\n' "$down"
    fi
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
  done
done
