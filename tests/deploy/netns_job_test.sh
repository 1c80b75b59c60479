#!/usr/bin/env bash
# Beyond loopback: runs one job exactly as deploy/k8s/legacy starts it -- the
# pods of the ps and worker Indexed Jobs, each with the arguments, flag files
# and TF_CONFIG the manifests give it (rendered by manifests.py) -- with every
# pod in its own network namespace on a private bridge, reaching the others
# by the stable DNS names of the manifests (lockstep-ps-0.lockstep-ps, ...)
# resolved through a per-namespace /etc/hosts. So the servers really listen
# on all interfaces of their "pod", and the workers really cross a network.
#
#   tests/deploy/netns_job_test.sh [--bin-dir DIR]
#
# Only these overrides are appended to the workers' arguments, to make it a
# short CPU job: synthetic data, 20 steps, CPU device, short timeouts. Flags
# the binaries do not have yet (manifests.py's COMING_FLAGS) are left out.
# And gRPC resolves names with getaddrinfo (GRPC_DNS_RESOLVER=native), which
# answers from the hosts file at once, as a cluster's DNS would; gRPC's
# default c-ares resolver also asks a name server, and with none here it
# can spend seconds on timeouts.
#
# Needs root and `ip netns`; exits 77 (ctest: skipped) without them. All
# addresses are in 10.213.0.0/24 on a bridge inside a namespace this script
# creates; nothing is attached to the host's network, and nothing leaves the
# namespaces. Every process runs under `timeout`, and everything made here
# (processes, namespaces, /etc/netns/NAME, temporary files) is removed on
# exit, whatever the outcome.
set -euo pipefail

readonly kSubnet=10.213.0
readonly kProcessTimeout=120
readonly kWorkerOverrides=(--dataset=synthetic --max_steps=20 --device=cpu
  --progress=none --connect_timeout_s=30 --step_timeout_s=60)

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=netns_lib.sh
source "$here/netns_lib.sh"
parse_bin_dir_args "$@"

require_netns_and_binaries lockstep_server lockstep_worker
python=""
for p in "${LOCKSTEP_PYTHON:-}" python3 /usr/bin/python3; do
  if [[ -n "$p" ]] && "$p" -c 'import yaml' 2>/dev/null; then
    python="$p"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "error: no python3 with PyYAML (Debian package python3-yaml)" >&2
  exit 1
fi

# Everything created is recorded here first, so cleanup removes exactly it.
prefix="lsk$$"
work="$(mktemp -d "${TMPDIR:-/tmp}/lockstep-netns.XXXXXX")"
namespaces=()
pids=()
made_etc_netns=0
[[ -d /etc/netns ]] || made_etc_netns=1
cleanup() {
  local rc=$?
  local pid ns
  # TERM first (timeout passes it on), then KILL for whatever still runs
  # after 5 s: `timeout` itself and the binary it started.
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  local tries=0
  while ((tries < 50)); do
    local alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
    tries=$((tries + 1))
  done
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      pkill -KILL -P "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  for ns in "${namespaces[@]}"; do
    ip netns delete "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  if ((made_etc_netns)); then rmdir /etc/netns 2>/dev/null || true; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

make_bridge_namespace

# What each pod runs, as the manifests say.
PYTHONDONTWRITEBYTECODE=1 "$python" "$here/manifests.py" render \
  --repo "$root" --bin-dir "$bin_dir" --out "$work/render"
mapfile -t pods <"$work/render/pods"
if [[ ${#pods[@]} -lt 2 ]]; then
  echo "error: the manifests rendered fewer than 2 pods" >&2
  exit 1
fi

hosts="$work/hosts"
echo "127.0.0.1 localhost" >"$hosts"
i=0
for line in "${pods[@]}"; do
  read -r name dns _ <<<"$line"
  i=$((i + 1))
  echo "$kSubnet.$i $dns" >>"$hosts"
done

# One namespace a pod: eth0 with its address, the other end on br0.
i=0
for line in "${pods[@]}"; do
  read -r name _ _ <<<"$line"
  i=$((i + 1))
  ns="$prefix-$i"
  add_host_namespace "$ns" "$i" "$kSubnet.$i"
  # `ip netns exec` bind-mounts /etc/netns/NAME/* over /etc/*: the pods'
  # names come from this hosts file (standing in for the cluster DNS), and
  # any other lookup goes to the namespace's own loopback, where no name
  # server listens, so no query leaves the namespace.
  mkdir -p "/etc/netns/$ns"
  cp "$hosts" "/etc/netns/$ns/hosts"
  echo "nameserver 127.0.0.1" >"/etc/netns/$ns/resolv.conf"
done
echo "== pods (namespace, address, DNS name, binary)"
i=0
for line in "${pods[@]}"; do
  read -r name dns binary <<<"$line"
  i=$((i + 1))
  echo "$prefix-$i $kSubnet.$i $dns $binary"
done

start_pod() {  # index name binary
  local i="$1" name="$2" binary="$3"
  local args=()
  mapfile -t args <"$work/render/$name.args"
  if [[ "$binary" == lockstep_worker ]]; then
    args+=("${kWorkerOverrides[@]}" "--summary_json=$work/$name.json")
  else
    # Where the manifests ask for checkpoints, the pod's volume becomes a
    # folder of this run, not the host's /var/lib (the last flag wins).
    local flagfiles
    flagfiles=$(sed -n 's/^--flagfile=//p' "$work/render/$name.args" | tr ',' ' ')
    # shellcheck disable=SC2086
    if cat "$work/render/$name.args" $flagfiles | grep -q -- '^--checkpoint_dir='; then
      args+=("--checkpoint_dir=$work/$name.checkpoints")
      keeps_checkpoints["$name"]=1
    fi
  fi
  echo "== $name: TF_CONFIG=$(cat "$work/render/$name.tf_config")"
  echo "   $binary ${args[*]}"
  timeout -k 5 "$kProcessTimeout" ip netns exec "$prefix-$i" \
    env GRPC_DNS_RESOLVER=native \
    TF_CONFIG="$(cat "$work/render/$name.tf_config")" \
    "$bin_dir/$binary" "${args[@]}" >"$work/$name.log" 2>&1 &
  pids+=($!)
  pod_pid["$name"]=$!
}

declare -A pod_pid keeps_checkpoints
# Servers first (as the ps Job would usually be scheduled), then workers; the
# workers wait for the servers either way.
for kind in lockstep_server lockstep_worker; do
  i=0
  for line in "${pods[@]}"; do
    read -r name _ binary <<<"$line"
    i=$((i + 1))
    [[ "$binary" == "$kind" ]] && start_pod "$i" "$name" "$binary"
  done
done

failed=0
for line in "${pods[@]}"; do
  read -r name _ binary <<<"$line"
  rc=0
  wait "${pod_pid[$name]}" || rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "== $name exited 0"
  else
    why=""
    if [[ $rc -eq 124 ]]; then
      why=" (timed out after ${kProcessTimeout} s)"
    elif [[ $rc -gt 128 ]]; then
      why=" (killed by signal $((rc - 128)))"
    fi
    echo "== $name FAILED with exit code $rc$why"
    failed=1
  fi
  sed 's/^/   | /' "$work/$name.log" | tail -n 15
done

# The job's traffic crossed the bridge: bytes each pod's eth0 received.
i=0
for line in "${pods[@]}"; do
  read -r name _ binary <<<"$line"
  i=$((i + 1))
  rx=$(ip netns exec "$prefix-$i" cat /sys/class/net/eth0/statistics/rx_bytes)
  echo "== $name eth0 received $rx bytes"
  # 20 steps of a 101,770-parameter model: megabytes, not handshakes.
  if [[ $failed -eq 0 && $rx -lt 1000000 ]]; then
    echo "FAIL: $name received under 1 MB over its interface"
    failed=1
  fi
done

for line in "${pods[@]}"; do
  read -r name _ binary <<<"$line"
  [[ "$binary" == lockstep_worker ]] || continue
  if [[ $failed -eq 0 ]] && ! grep -q '"steps": *20\b' "$work/$name.json"; then
    echo "FAIL: $name's summary does not say 20 steps: $(cat "$work/$name.json")"
    failed=1
  fi
done

# Where the manifests ask for checkpoints, a server writes one when the job
# ends.
for name in "${!keeps_checkpoints[@]}"; do
  if [[ $failed -eq 0 && -z "$(find "$work/$name.checkpoints" -type f \
    -name 'ckpt-*' -print -quit 2>/dev/null)" ]]; then
    echo "FAIL: $name wrote no checkpoint into $work/$name.checkpoints:"
    { find "$work/$name.checkpoints" 2>&1 || true; } | sed 's/^/   | /'
    failed=1
  fi
done

if [[ $failed -ne 0 ]]; then
  echo "netns_job_test: FAILED"
  exit 1
fi
echo "netns_job_test: ${#pods[@]} pods in ${#pods[@]} network namespaces, all exited 0"
