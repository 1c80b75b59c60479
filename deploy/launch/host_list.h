// Where lockstep_launch places a job across hosts: the --hosts list
// ("h1:2,h2") parsed into hosts and slots, each worker rank and server shard
// given a host, and the addresses and flags that follow from the placement.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_HOST_LIST_H_
#define LOCKSTEP_DEPLOY_LAUNCH_HOST_LIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lockstep {

// One entry of a host list: what ssh is given ("user@name" or a bare name
// or address) and how many workers it takes.
struct HostSlots {
  std::string host;
  int slots = 1;
  bool slots_given = false;  // Written as HOST:N, not defaulted.
};

// Parses "h1:2,user@h2,10.0.0.3:4" (slots after the last ':', default 1;
// an IPv6 address in brackets, "[fd00::1]:2"). INVALID_ARGUMENT, saying
// which entry, for an empty list or entry, or slots that are not a
// positive number.
absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view list);

// The address other processes reach `host` at: the ssh target without a
// "user@" part, an IPv6 address in brackets ("[fd00::1]").
std::string HostAddress(absl::string_view host);

// A job placed across hosts, every process started there over ssh
// (remote_spawn.h). Default-constructed: everything runs on this machine.
struct HostPlan {
  std::vector<std::string> worker_hosts;  // Indexed by rank.
  std::vector<std::string> server_hosts;  // Indexed by shard.
  // Shard i listens on every interface of its host at server_port + i.
  int server_port = 50051;
  // Given to ssh before the host, e.g. {"-F", "ssh_config"}.
  std::vector<std::string> ssh_args;
  // The folder each remote process starts in: the launcher's own.
  std::string dir;
  // How long a remote process gets between SIGTERM and SIGKILL when the
  // launcher stops it or goes away (the launcher's --grace_period).
  absl::Duration grace = absl::Seconds(10);

  bool active() const { return !worker_hosts.empty(); }
  // The ssh target of a shard or a rank; empty (this machine) when the
  // plan is not active.
  std::string ServerHost(int shard) const {
    return active() ? server_hosts[shard] : std::string();
  }
  std::string WorkerHost(int rank) const {
    return active() ? worker_hosts[rank] : std::string();
  }
};

// Places `workers` ranks on `hosts` in order, filling each host's slots
// before the next (rank 0 on the first host), and `ps` shards round-robin
// on `server_hosts`, or on `hosts` when that is empty. INVALID_ARGUMENT
// when the slots are fewer than the workers, or when a loopback host
// (localhost, 127.x.x.x, ::1) is listed with others, which could not reach
// it.
absl::StatusOr<HostPlan> PlaceOnHosts(
    const std::vector<HostSlots>& hosts,
    const std::vector<HostSlots>& server_hosts, int workers, int ps);

// Where worker `rank` of `workers` sits among the workers of its host,
// torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE.
struct LocalRank {
  int rank = 0;     // Its index among them, in rank order.
  int workers = 1;  // How many workers run there.
};

// Worker `rank`'s LocalRank: on this machine (plan not active) the job's
// rank and size; across hosts among the ranks placed on the same machine
// (the same address whatever the user@, every loopback name one machine).
LocalRank LocalRankOf(const HostPlan& plan, int workers, int rank);

// Where shard `shard` listens and how the launcher learns it is up: on
// this machine "--listen=127.0.0.1:0" and `port_file`; across hosts every
// interface at its fixed port, with --insecure unless `tls` (plaintext off
// loopback needs it).
std::vector<std::string> ServerListenFlags(const HostPlan& plan, int shard,
                                           const std::string& port_file,
                                           bool tls);

// The flags a lockstep_worker on another host needs beyond the local ones:
// --allreduce_host (its own address, where the other ranks reach it) and,
// unless `tls`, --insecure. None when the plan is not active.
std::vector<std::string> RemoteWorkerFlags(const HostPlan& plan, int rank,
                                           bool tls);

// " (ssh to HOST)" for a process started on `host`; empty for this machine.
std::string HostNote(const std::string& host);

// How the launcher reports shards that did not come up in time: "no port
// file from " (this machine) or "no connection accepted by " (across hosts),
// before their names.
const char* NotListeningYet(const HostPlan& plan);

// "ADDRESS:PORT" of shard `shard` listening on `port`: 127.0.0.1 on this
// machine, its host's address across hosts.
std::string ServerAddress(const HostPlan& plan, int shard, int port);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_HOST_LIST_H_
