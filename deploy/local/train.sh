#!/usr/bin/env bash
# The main job: 1 parameter server + 2 workers train the tutorial's MLP
# (784-128-10, Adam, lr 0.001, batch 64 per worker, 5 epochs) on
# Fashion-MNIST over loopback, through lockstep_launch.
#
# usage: deploy/local/train.sh [-h|--help] [FLAG...]
#
# Each FLAG goes to the process that takes it and wins over these
# defaults: a launcher flag (--workers=4, --ps=2, --metrics_port_base=9100,
# --trace_dir=DIR) to lockstep_launch, a worker flag (--epochs=1) to every
# worker, a flag only the server takes (--checkpoint_dir=DIR) to every
# server; --server_flag=--NAME=VALUE and --worker_flag=--NAME=VALUE send
# one to one side. An unknown flag stops it before anything starts.
# With --tls the job runs over mutual TLS with throwaway certificates that
# deploy/tls/make_certs.sh makes (once) in build/tls.
# The first run installs missing packages and compiles the four binaries
# it runs (a few minutes; a count of compiled steps shows progress).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LOCKSTEP_BUILD_DIR:-$root/build}"
for arg in "$@"; do
  [[ "$arg" == "--" ]] && break
  if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    if [[ -x "$build/bin/lockstep_launch" ]]; then
      echo
      "$build/bin/lockstep_launch" --help
    else
      echo
      echo "lockstep_launch --help lists the launcher's flags once built."
    fi
    exit 0
  fi
done
echo "Building Lockstep (first run: installs packages and compiles)..."
# Only the packages and the four binaries the job runs (lockstep_ctl: the
# status command the launcher prints).
"$root/deploy/local/build.sh" --build-only lockstep_server lockstep_worker \
  lockstep_launch lockstep_ctl
for arg in "$@"; do
  if [[ "$arg" == "--tls" ]]; then
    "$root/deploy/tls/make_certs.sh" "$build/tls"
    break
  fi
done
exec "$build/bin/lockstep_launch" \
  --workers=2 --ps=1 \
  --layers=784,128,10 --optimizer=adam --lr=0.001 --batch_size=64 \
  --epochs=5 --data_dir=/usr/share/datasets/fashion-mnist \
  "$@"
