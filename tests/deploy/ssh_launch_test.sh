#!/usr/bin/env bash
# A launch across hosts over ssh: lockstep_launch --hosts in one network
# namespace starts the server on host A and the workers on hosts B and C,
# each a namespace of its own on a private bridge running Debian's sshd on
# its own address, with a throwaway host key and a key authorized for this
# test only. Four runs:
#   1. a short job trains: exit 0, rank 0's accuracy line and 20 steps in
#      its summary, the job's traffic on the hosts' interfaces;
#   2. a long job is stopped with SIGTERM to the launcher mid-training: the
#      launcher exits 143, and no lockstep process is left on any host;
#   3. the same killed with SIGKILL: nothing is left on any host either
#      (within the 5 s grace period, waited for up to 20 s);
#   4. a worker that fails at once (no data on its host) ends the job: the
#      launcher exits with its code 2 and stops the server on host A.
#
#   tests/deploy/ssh_launch_test.sh [--bin-dir DIR]
#
# Needs root and `ip netns`; exits 77 (ctest: skipped) without them. sshd
# and ssh-keygen come from Debian's openssh-server and openssh-client,
# installed with apt-get when missing. All addresses are in 10.214.0.0/24 on
# a bridge inside a namespace made here; nothing is attached to the host's
# network. The sshd instances use their own sshd_config (no PAM, key login
# only, root allowed by key, listening only on their namespace's address)
# and are stopped by pid; everything made here (processes, namespaces,
# keys, /run/sshd if it was made) is removed on exit, whatever the outcome.
set -euo pipefail

readonly kSubnet=10.214.0
readonly kTimeout=120
readonly kWorkerArgs=(--dataset=synthetic --device=cpu --connect_timeout_s=30
  --step_timeout_s=60)

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=netns_lib.sh
source "$here/netns_lib.sh"
parse_bin_dir_args "$@"

require_netns_and_binaries lockstep_launch lockstep_server lockstep_worker
if [[ ! -x /usr/sbin/sshd ]] || ! command -v ssh-keygen >/dev/null 2>&1; then
  echo "== installing openssh-server and openssh-client with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends openssh-server \
    openssh-client >/dev/null
fi

prefix="lss$$"
work="$(mktemp -d "${TMPDIR:-/tmp}/lockstep-ssh.XXXXXX")"
namespaces=()
sshd_pids=()
job_pids=()
made_run_sshd=0
# Every process left in our namespaces after the job pids and sshd are gone
# was started by this test (through sshd), so it may be killed by pid.
kill_namespace_processes() {
  local ns pid
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null || true
    done
  done
}
cleanup() {
  local rc=$?
  local pid
  for pid in "${job_pids[@]}" "${sshd_pids[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  kill_namespace_processes
  local ns
  for ns in "${namespaces[@]}"; do
    ip netns delete "$ns" 2>/dev/null || true
  done
  if ((made_run_sshd)); then rmdir /run/sshd 2>/dev/null || true; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

make_bridge_namespace

# Hosts a (server), b and c (workers), and l, where the launcher runs.
declare -A address=([a]="$kSubnet.1" [b]="$kSubnet.2" [c]="$kSubnet.3"
  [l]="$kSubnet.10")
i=0
for h in a b c l; do
  i=$((i + 1))
  add_host_namespace "$prefix-$h" "$i" "${address[$h]}"
done

# Keys made for this run only: the hosts' key, and the client's, which is
# the only one the sshd instances accept.
ssh-keygen -q -t ed25519 -N '' -C lockstep-test-host -f "$work/host_key"
ssh-keygen -q -t ed25519 -N '' -C lockstep-test-client -f "$work/client_key"
cp "$work/client_key.pub" "$work/authorized_keys"
if [[ ! -d /run/sshd ]]; then  # sshd's privilege separation folder.
  mkdir -p /run/sshd
  made_run_sshd=1
fi
for h in a b c; do
  cat >"$work/sshd_$h.conf" <<EOF
ListenAddress ${address[$h]}:22
HostKey $work/host_key
PidFile $work/sshd_$h.pid
AuthorizedKeysFile $work/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
LogLevel ERROR
EOF
  ip netns exec "$prefix-$h" /usr/sbin/sshd -D -e -f "$work/sshd_$h.conf" \
    >"$work/sshd_$h.log" 2>&1 &
  sshd_pids+=($!)
done
cat >"$work/ssh_config" <<EOF
Host *
  User root
  IdentityFile $work/client_key
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  ConnectTimeout 10
  LogLevel ERROR
EOF

# Each sshd answers a login from the launcher's host (bounded: 100 tries).
for h in a b c; do
  tries=0
  until ip netns exec "$prefix-l" ssh -F "$work/ssh_config" \
    -o BatchMode=yes "${address[$h]}" true 2>"$work/ssh_err"; do
    tries=$((tries + 1))
    if ((tries >= 100)); then
      cat "$work/sshd_$h.log" "$work/ssh_err"
      fail "no ssh login to host $h (${address[$h]})"
    fi
    sleep 0.1
  done
done
echo "== sshd on ${address[a]} (a), ${address[b]} (b), ${address[c]} (c)"

# lockstep processes in host `h`'s namespace, one "PID NAME" a line.
lockstep_processes() {
  local pid comm
  for pid in $(ip netns pids "$prefix-$1"); do
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
    [[ "$comm" == lockstep_* ]] && echo "$pid $comm"
  done
  return 0
}

# Fails when any lockstep process is left on a host.
expect_no_lockstep_processes() {
  local h left
  for h in a b c l; do
    left="$(lockstep_processes "$h")"
    [[ -z "$left" ]] || fail "$1: left on host $h: $left"
  done
}

# Starts the launcher on host l in the background, output in $work/$1.log.
start_launch() {
  local name="$1"
  shift
  (cd "$work" && exec timeout -k 5 "$kTimeout" ip netns exec "$prefix-l" \
    "$bin_dir/lockstep_launch" \
    --hosts="${address[b]},${address[c]}" --ps_hosts="${address[a]}" \
    --workers=2 --ps=1 --ssh_args="-F $work/ssh_config" --grace_period=5 \
    "$@" >"$work/$name.log" 2>&1) &
  job_pids+=($!)
  launch_pid=$!
}

show_log() {
  sed 's/^/   | /' "$work/$1.log" | tail -n "${2:-25}"
}

# 1. A short job trains.
start_launch train --summary_json="$work/train.json" "${kWorkerArgs[@]}" \
  --max_steps=20
rc=0
wait "$launch_pid" || rc=$?
show_log train
[[ $rc -eq 0 ]] || fail "the launch across hosts exited $rc, not 0"
grep -q "^\[launch\] ps0: pid [0-9]*, listening on ${address[a]}:50051$" \
  "$work/train.log" || fail "ps0 did not listen on host a's address"
for r in 0 1; do
  h=$([[ $r -eq 0 ]] && echo b || echo c)
  grep -q "^\[launch\] worker$r: pid [0-9]* (ssh to ${address[$h]}), servers ${address[a]}:50051," \
    "$work/train.log" || fail "worker$r was not started on host $h"
done
grep -q '^\[worker0\] Trained 20 steps - ' "$work/train.log" ||
  fail "worker0 did not say it trained 20 steps"
grep -q '^\[worker0\] Test accuracy [0-9.]* - test loss [0-9.]*$' \
  "$work/train.log" || fail "no accuracy line from worker0"
grep -q '"steps": *20\b' "$work/train.json" ||
  fail "rank 0's summary does not say 20 steps: $(cat "$work/train.json")"
for h in a b c; do
  rx=$(ip netns exec "$prefix-$h" cat /sys/class/net/eth0/statistics/rx_bytes)
  echo "== host $h eth0 received $rx bytes"
  # 20 steps of a 101,770-parameter model: megabytes, not handshakes.
  ((rx >= 1000000)) || fail "host $h received under 1 MB over its interface"
done
expect_no_lockstep_processes "after the finished job"
echo "== 1. the job across hosts a, b, c trained and exited 0"

# Starts a long job as $1, waits until rank 0 reports progress, and sets
# `running` to the pids of the lockstep process on each host and `launcher`
# to the launcher's.
start_long_job() {
  start_launch "$1" "${kWorkerArgs[@]}" --epochs=1000 --progress=bar
  local tries=0 h found
  until grep -qs '\[worker0\] .*loss' "$work/$1.log"; do
    tries=$((tries + 1))
    if ((tries >= 600)) || ! kill -0 "$launch_pid" 2>/dev/null; then
      show_log "$1"
      fail "$1: worker0 never reported training progress"
    fi
    sleep 0.1
  done
  running=()
  for h in a b c; do
    mapfile -t found < <(lockstep_processes "$h")
    [[ ${#found[@]} -eq 1 ]] ||
      fail "$1: expected one lockstep process on host $h, found: ${found[*]:-none}"
    running+=("${found[0]%% *}")
    echo "== $1: host $h runs ${found[0]}"
  done
  launcher=$(lockstep_processes l)
  [[ "$launcher" == *" lockstep_launch" ]] || fail "$1: no launcher on host l"
  launcher="${launcher%% *}"
}

# 2. SIGTERM to the launcher mid-training stops every remote process.
start_long_job stop
kill -TERM "$launcher"
rc=0
wait "$launch_pid" || rc=$?
show_log stop 15
[[ $rc -eq 143 ]] || fail "the stopped launcher exited $rc, not 143"
grep -q '^\[launch\] received signal 15 (Terminated); stopping all processes$' \
  "$work/stop.log" || fail "the launcher did not report the stop signal"
for pid in "${running[@]}"; do
  if kill -0 "$pid" 2>/dev/null; then
    fail "process $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) still runs"
  fi
done
expect_no_lockstep_processes "after SIGTERM to the launcher"
echo "== 2. SIGTERM to the launcher: exit 143, nothing left on a, b, c"

# 3. Even a launcher killed outright leaves nothing: its ssh children die
# with it (PR_SET_PDEATHSIG), and each host's wrapper, seeing its stdin
# end, stops its process (SIGKILL after the 5 s grace period at most).
start_long_job killed
kill -KILL "$launcher"
rc=0
wait "$launch_pid" || rc=$?
[[ $rc -eq 137 ]] || fail "the killed launcher exited $rc, not 137"
for pid in "${running[@]}"; do
  tries=0
  while kill -0 "$pid" 2>/dev/null && ((tries < 200)); do
    sleep 0.1
    tries=$((tries + 1))
  done
done
expect_no_lockstep_processes "after SIGKILL to the launcher"
echo "== 3. SIGKILL to the launcher: nothing left on a, b, c"

# 4. A worker that fails ends the job, its server on host a included. The
# data folder is missing on the hosts: a failure only the remote worker
# meets (the launcher refuses a bad flag before anything starts).
start_launch failing "${kWorkerArgs[@]}" --max_steps=20 --dataset=idx \
  --data_dir=/nonexistent/lockstep-data
rc=0
wait "$launch_pid" || rc=$?
show_log failing 10
[[ $rc -eq 2 ]] || fail "the launch with a failing worker exited $rc, not 2"
grep -q '^\[launch\] worker[01] (pid [0-9]*) exited with code 2; stopping all processes$' \
  "$work/failing.log" || fail "the launcher did not report the failed worker"
expect_no_lockstep_processes "after a worker failed"
echo "== 4. a failing worker: exit 2, nothing left on a, b, c"

echo "ssh_launch_test: the job ran across 3 hosts over ssh and stopped on SIGTERM, SIGKILL and a failure, nothing left behind"
