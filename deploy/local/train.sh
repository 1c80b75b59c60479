#!/usr/bin/env bash
# The main job: 1 parameter server + 2 workers train the tutorial's MLP
# (784-128-10, Adam, lr 0.001, batch 64 per worker, 5 epochs) on
# Fashion-MNIST over loopback. Extra arguments go to lockstep_launch and win
# over these defaults, e.g. ./deploy/local/train.sh --workers=4 --epochs=1
# With --tls the job runs over mutual TLS with throwaway certificates that
# deploy/tls/make_certs.sh makes (once) in build/tls.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${LOCKSTEP_BUILD_DIR:-$root/build}"
echo "Building Lockstep (first run: installs packages and compiles)..."
"$root/deploy/local/build.sh"
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
