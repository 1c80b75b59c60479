# Sourced by the deploy tests that build hosts out of network namespaces
# (netns_job_test.sh, ssh_launch_test.sh): their arguments, the skip rule,
# and the bridge and hosts they attach. The sourcing script keeps its own
# bookkeeping: `prefix` (a name prefix unique to this run), `work` (its
# temporary folder) and the array `namespaces`, which its cleanup deletes.

readonly kSkip=77

# Sets bin_dir from LOCKSTEP_BIN_DIR or --bin-dir (default build/bin of
# the repository at `root`); any other argument is an error (exit 2).
parse_bin_dir_args() {
  bin_dir="${LOCKSTEP_BIN_DIR:-$root/build/bin}"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --bin-dir) bin_dir="$2"; shift 2 ;;
      --bin-dir=*) bin_dir="${1#*=}"; shift ;;
      *) echo "error: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  bin_dir="$(cd "$bin_dir" && pwd)"
}

skip() {
  echo "SKIP: $*"
  exit "$kSkip"
}

# Skips (77) without root or the `ip` command; fails (1) when one of the
# named binaries is not built in bin_dir.
require_netns_and_binaries() {
  [[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
  command -v ip >/dev/null 2>&1 ||
    skip "no 'ip' command (Debian package iproute2)"
  local b
  for b in "$@"; do
    if [[ ! -x "$bin_dir/$b" ]]; then
      echo "error: $bin_dir/$b not found; build first" >&2
      exit 1
    fi
  done
}

# The bridge lives in a namespace of its own ($prefix-br), not in the
# host's; skips when namespaces cannot be made here.
make_bridge_namespace() {
  bridge_ns="$prefix-br"
  if ! ip netns add "$bridge_ns" 2>"$work/err"; then
    skip "'ip netns add' is not permitted here: $(cat "$work/err")"
  fi
  namespaces+=("$bridge_ns")
  ip -n "$bridge_ns" link add br0 type bridge
  ip -n "$bridge_ns" link set br0 up
}

# add_host_namespace NS I ADDRESS: a namespace with loopback up and eth0
# at ADDRESS/24, its veth peer v$I on the bridge.
add_host_namespace() {
  local ns="$1" i="$2" address="$3"
  ip netns add "$ns"
  namespaces+=("$ns")
  ip link add eth0 netns "$ns" type veth peer name "v$i" netns "$bridge_ns"
  ip -n "$bridge_ns" link set "v$i" master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
}
