#!/usr/bin/env bash
# A simulated cluster on one machine, for studying synchronization over a
# network slower than loopback: every host is a network namespace with one
# interface (eth0) whose veth peer sits on a bridge, and `tc` limits each
# host's bandwidth in both directions (full duplex, as the cost model of
# docs/study.md assumes) and, where the kernel has sch_netem, adds latency.
#
#   deploy/sim/cluster.sh up [--hosts=8] [--rate=1gbit] [--delay=0.2ms] [--cc=reno]
#                            [--name=lss]
#   deploy/sim/cluster.sh run [--name=lss] [--timeout=600] HOST CMD [ARGS...]
#   deploy/sim/cluster.sh rate [--name=lss] HOST RATE
#   deploy/sim/cluster.sh status [--name=lss]
#   deploy/sim/cluster.sh down [--name=lss]
#
# HOST is h0..h(N-1) (or just the index); host i has address 10.214.0.(i+1).
# `run` replaces itself with CMD inside the host's namespace (same pid, so a
# caller's signals reach CMD); --timeout=0 leaves the bound to the caller,
# as lockstep_bench does (its deadlines kill what it starts). `rate` sets
# one host's bandwidth, both directions, to RATE (tc's form, e.g. 20mbit)
# while the cluster runs: a slow link for one host. `status`
# prints the cluster's settings as KEY=VALUE lines, among them
# delay_applied=0 when the kernel has no netem and latency was not added.
#
# --cc is every host's TCP congestion control: reno (the default), cubic,
# bbr, another the kernel lets a namespace pick (its
# net.ipv4.tcp_allowed_congestion_control), or "default" for the kernel's
# own, whatever it is. Fixed rather than inherited, because it moves the
# figures: on one machine whose default was bbr, a PS exchange with several
# shards ran up to 1.4x slower under bbr than under reno on the same links
# (docs/study.md, "The check").
#
# Needs root, `ip` and `tc` (Debian package iproute2). Addresses exist only
# inside namespaces this script creates; the bridge has its own namespace
# and no address, nothing is attached to the host's network, and no traffic
# leaves the namespaces. `up` first removes a cluster of the same name, so
# both `up` and `down` can be repeated; every step runs under `timeout`.
set -euo pipefail

readonly kSubnet=10.214.0
readonly kStateDir=/run/lockstep-sim
readonly kStepTimeout=10   # Seconds for any one ip/tc command.
readonly kMaxHosts=32

usage() {
  sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
# Every ip/tc call is bounded: a wedged netlink call must not hang a study.
t() { timeout -k 2 "$kStepTimeout" "$@"; }

[[ $# -ge 1 ]] || usage
command=$1
shift
name=lss hosts=8 rate=1gbit delay=0.2ms cc=reno run_timeout=600
while [[ $# -gt 0 && "$1" == --* ]]; do
  case "$1" in
    --name=*) name="${1#*=}" ;;
    --hosts=*) hosts="${1#*=}" ;;
    --rate=*) rate="${1#*=}" ;;
    --delay=*) delay="${1#*=}" ;;
    --cc=*) cc="${1#*=}" ;;
    --timeout=*) run_timeout="${1#*=}" ;;
    --help | -h) usage ;;
    --) shift; break ;;
    *) die "unknown flag $1" ;;
  esac
  shift
done
# Short names keep interface and namespace names within the kernel's limits.
[[ "$name" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name must be 1-8 of [a-z0-9]"
if ! [[ "$hosts" =~ ^[0-9]+$ ]] || ((hosts < 1 || hosts > kMaxHosts)); then
  die "--hosts must be 1..$kMaxHosts"
fi
[[ "$rate" =~ ^[0-9.]+[kmg]?bit$ ]] || die "--rate takes tc's form, e.g. 1gbit"
[[ "$delay" =~ ^[0-9.]+(us|ms)$ || "$delay" == 0 ]] ||
  die "--delay takes e.g. 0.2ms (or 0)"
[[ "$run_timeout" =~ ^[0-9]+$ ]] || die "--timeout is whole seconds"
[[ "$cc" =~ ^[a-z0-9_]+$ ]] || die "--cc takes a congestion control's name, e.g. reno"
state="$kStateDir/$name.env"

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces and tc)"
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    die "needs ip and tc (Debian package iproute2)"
  fi
}

# Namespaces of this cluster that exist now, whatever the state file says.
our_namespaces() {
  t ip netns list 2>/dev/null | awk '{print $1}' |
    grep -E "^$name-(br|h[0-9]+)$" || true
}

# The processes running in namespace $1, one pid a line.
ns_pids() { t ip netns pids "$1" 2>/dev/null || true; }

down() {
  local ns tries pids=()
  for ns in $(our_namespaces); do
    # Only processes inside our own namespaces: ours by construction.
    mapfile -t pids < <(ns_pids "$ns")
    if ((${#pids[@]} > 0)); then kill "${pids[@]}" 2>/dev/null || true; fi
  done
  for ns in $(our_namespaces); do
    # Up to 2 s to exit after TERM, then KILL.
    for ((tries = 0; tries < 20; tries++)); do
      mapfile -t pids < <(ns_pids "$ns")
      ((${#pids[@]} > 0)) || break
      sleep 0.1
    done
    if ((${#pids[@]} > 0)); then kill -KILL "${pids[@]}" 2>/dev/null || true; fi
    t ip netns delete "$ns" 2>/dev/null || true
  done
  rm -f "$state"
}

# Limits one direction of a link: egress of `dev` in `ns` to the rate, with
# netem's delay under it when asked for and available.
shape() {
  local ns=$1 dev=$2 with_delay=$3
  # r2q keeps HTB's quantum sane at Gbit rates (it warns otherwise).
  t tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 1 r2q 1000
  # HTB's default burst (one packet) needs a timer per packet, which a busy
  # 2-core machine serves late (830 Mbit/s of 1 Gbit/s measured under
  # load); 16 KB (11 packets, 0.13 ms at 1 Gbit/s) keeps TCP at the rate
  # less its headers (iperf3 --bidir: 953 Mbit/s each way) and lets a short
  # message beat the rate by 16 KB at most.
  t tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" \
    ceil "$rate" burst 16k cburst 16k
  if [[ "$with_delay" == 1 ]]; then
    t tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: netem \
      delay "$delay" limit 100000
  fi
}

# A failure half-way through `up` removes what was made.
undo_on_failure() {
  local status=$?
  ((status == 0)) || down
  exit "$status"
}

# The congestion control `up` gives every host: --cc, checked against what a
# namespace may pick before anything is made.
chosen_cc() {
  if [[ "$cc" == default ]]; then
    cat /proc/sys/net/ipv4/tcp_congestion_control
    return
  fi
  local allowed
  allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
  [[ " $allowed " == *" $cc "* ]] ||
    die "--cc=$cc: a network namespace may pick only: $allowed" \
      "(net.ipv4.tcp_allowed_congestion_control), or --cc=default"
  echo "$cc"
}

up() {
  local host_cc
  host_cc=$(chosen_cc)
  down
  mkdir -p "$kStateDir"
  trap undo_on_failure EXIT
  local br="$name-br" i ns with_delay=0 delay_applied=0
  t ip netns add "$br"
  t ip -n "$br" link add br0 type bridge
  t ip -n "$br" link set br0 up
  if [[ "$delay" != 0 && ! "$delay" =~ ^0+(\.0+)?(us|ms)$ ]]; then
    # Probe netem once on a throwaway veth: some kernels lack sch_netem.
    t ip -n "$br" link add probe0 type veth peer name probe1
    if t tc -n "$br" qdisc add dev probe0 root netem delay "$delay" \
      2>/dev/null; then
      with_delay=1
      delay_applied=1
    else
      echo "cluster.sh: WARNING: this kernel has no sch_netem; links get" \
        "the rate limit but no added delay (--delay=$delay ignored)" >&2
    fi
    t ip -n "$br" link delete probe0
  fi
  for ((i = 0; i < hosts; i++)); do
    ns="$name-h$i"
    t ip netns add "$ns"
    t ip link add eth0 netns "$ns" type veth peer name "v$i" netns "$br"
    t ip -n "$br" link set "v$i" master br0 up
    t ip -n "$ns" link set lo up
    t ip netns exec "$ns" sysctl -qw \
      "net.ipv4.tcp_congestion_control=$host_cc"
    t ip -n "$ns" addr add "$kSubnet.$((i + 1))/24" dev eth0
    t ip -n "$ns" link set eth0 up
    # Host i's sending side, in its namespace; its receiving side is the
    # bridge port's sending side. The delay goes on the sender only, so a
    # round trip gets it twice, as on a real link.
    shape "$ns" eth0 "$with_delay"
    shape "$br" "v$i" 0
  done
  {
    echo "name=$name"
    echo "hosts=$hosts"
    echo "subnet=$kSubnet.0/24"
    echo "rate=$rate"
    echo "delay=$delay"
    echo "delay_applied=$delay_applied"
    echo "cc=$host_cc"
    for ((i = 0; i < hosts; i++)); do echo "h$i=$kSubnet.$((i + 1))"; done
  } >"$state"
  trap - EXIT
  cat "$state"
}

run() {
  [[ $# -ge 2 ]] || die "run needs HOST and a command"
  local host=${1#h}
  shift
  [[ "$host" =~ ^[0-9]+$ ]] || die "HOST is h0..h(N-1)"
  [[ -f "$state" ]] || die "no cluster \"$name\"; run: $0 up --name=$name"
  local ns="$name-h$host"
  t ip netns list | awk '{print $1}' | grep -qx "$ns" ||
    die "cluster \"$name\" has no host h$host"
  # No proxy settings: gRPC would otherwise route through a proxy that no
  # namespace can reach. Names resolve through getaddrinfo (hosts file).
  local env_args=(env -u http_proxy -u https_proxy -u HTTP_PROXY
    -u HTTPS_PROXY -u grpc_proxy -u all_proxy -u ALL_PROXY
    GRPC_DNS_RESOLVER=native)
  if ((run_timeout > 0)); then
    exec timeout -k 5 "$run_timeout" ip netns exec "$ns" "${env_args[@]}" "$@"
  fi
  exec ip netns exec "$ns" "${env_args[@]}" "$@"
}

# One host's two directions, as `shape` made them, at another rate.
set_rate() {
  [[ $# -eq 2 ]] || die "rate needs HOST and RATE"
  local host=${1#h} new=$2
  [[ "$host" =~ ^[0-9]+$ ]] || die "HOST is h0..h(N-1)"
  [[ "$new" =~ ^[0-9.]+[kmg]?bit$ ]] || die "RATE takes tc's form, e.g. 20mbit"
  [[ -f "$state" ]] || die "no cluster \"$name\"; run: $0 up --name=$name"
  local ns="$name-h$host" dev ns_of
  t ip netns list | awk '{print $1}' | grep -qx "$ns" ||
    die "cluster \"$name\" has no host h$host"
  for ns_of in "$ns eth0" "$name-br v$host"; do
    read -r ns dev <<<"$ns_of"
    t tc -n "$ns" class change dev "$dev" parent 1: classid 1:1 htb \
      rate "$new" ceil "$new" burst 16k cburst 16k
  done
}

case "$command" in
  up) need_root; up ;;
  rate) need_root; set_rate "$@" ;;
  down) need_root; down ;;
  run) need_root; run "$@" ;;
  status)
    [[ -f "$state" ]] || die "no cluster \"$name\""
    cat "$state"
    ;;
  *) usage ;;
esac
