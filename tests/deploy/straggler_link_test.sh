#!/usr/bin/env bash
# Issue 39's third straggler injection, the network: a job of 3 workers on
# the simulated cluster (deploy/sim/cluster.sh, a network namespace per
# host, links shaped by tc at 1 Gbit/s) whose rank 1 sits on a host cut to
# 20 Mbit/s both ways (`cluster.sh rate`). Shard 0 must name rank 1, and
# the network as the phase that makes it slow, and no other rank: its
# worker's own phases (input, compute, push) do not explain its lateness.
# The other two injections (compute, input) are checked on loopback by
# OpsIntegrationTest.StragglersAreNamedWithTheirSlowPhase. On the way, the
# cluster's hosts must run the congestion control it fixes (--cc).
#
#   tests/deploy/straggler_link_test.sh [--bin-dir DIR]
#
# Needs root, `ip` and `tc`; exits 77 (ctest: skipped) without them. The
# cluster has a name of its own and is removed on exit, whatever the
# outcome; every process runs under `timeout` and is ended by its pid.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=netns_lib.sh
source "$here/netns_lib.sh"
parse_bin_dir_args "$@"
require_netns_and_binaries lockstep_server lockstep_worker
command -v tc >/dev/null 2>&1 || skip "no 'tc' command (Debian package iproute2)"

readonly kTimeout=120
cluster="$root/deploy/sim/cluster.sh"
name="lsg$(($$ % 100000))"
work="$(mktemp -d "${TMPDIR:-/tmp}/lockstep-straggler.XXXXXX")"
pids=()
fail() {
  echo "FAIL: $*"
  exit 1
}
cleanup() {
  local rc=$? pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  bash "$cluster" down --name="$name" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

if ! bash "$cluster" up --name="$name" --hosts=4 --rate=1gbit \
  >"$work/up.log" 2>&1; then
  cat "$work/up.log"
  grep -q "Operation not permitted\|not supported" "$work/up.log" &&
    skip "network namespaces or tc are not available here"
  exit 1
fi
# The cluster fixes its hosts' congestion control (reno unless --cc says
# otherwise) instead of inheriting the machine's, and refuses one a
# namespace may not pick before it makes anything.
for host in 0 1 2 3; do
  got=$(ip netns exec "$name-h$host" sysctl -n net.ipv4.tcp_congestion_control)
  [[ "$got" == reno ]] || fail "host h$host runs $got, not reno"
done
bash "$cluster" status --name="$name" | grep -qx "cc=reno" ||
  fail "status does not say cc=reno"
refused="lsb$(($$ % 100000))"
if bash "$cluster" up --name="$refused" --hosts=1 --cc=nosuchcc \
  >"$work/badcc.log" 2>&1; then
  fail "up accepted --cc=nosuchcc"
fi
grep -q "may pick only" "$work/badcc.log" ||
  fail "up --cc=nosuchcc did not say why: $(cat "$work/badcc.log")"
if ip netns list | grep -q "^$refused-"; then
  fail "a refused up left namespaces behind"
fi
bash "$cluster" rate --name="$name" h2 20mbit

run() { bash "$cluster" run --name="$name" --timeout="$kTimeout" "$@"; }
run h0 "$bin_dir/lockstep_server" --listen=10.214.0.1:7070 --insecure --workers=3 \
  >"$work/server.log" 2>&1 &
pids+=($!)
for rank in 0 1 2; do
  run "h$((rank + 1))" "$bin_dir/lockstep_worker" --servers=10.214.0.1:7070 \
    --workers=3 --rank="$rank" --dataset=synthetic --max_steps=40 \
    --device=cpu --progress=none --connect_timeout_s=30 --insecure \
    >"$work/worker$rank.log" 2>&1 &
  pids+=($!)
done
status=0
for i in 0 1 2 3; do
  if ! wait "${pids[$i]}"; then
    echo "FAIL: process $i (0: the server, then ranks 0-2) did not exit 0"
    status=1
  fi
done
pids=()
cat "$work/server.log"
if ((status)); then
  tail -n 5 "$work"/worker*.log
  exit 1
fi
if ! grep -Eq "straggler: rank 1 is .*: network, " "$work/server.log"; then
  echo "FAIL: the server did not name rank 1's network"
  exit 1
fi
if grep -Eq "straggler: rank [02] is" "$work/server.log"; then
  echo "FAIL: the server named a rank whose link is not slow"
  exit 1
fi
echo "PASS: rank 1's slow link named: network"
