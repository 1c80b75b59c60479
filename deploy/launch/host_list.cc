#include "deploy/launch/host_list.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace lockstep {
namespace {

// One entry, "host", "host:N" or "[v6]:N", already trimmed and non-empty.
absl::StatusOr<HostSlots> ParseEntry(absl::string_view entry) {
  HostSlots out;
  absl::string_view host = entry;
  absl::string_view slots;
  const size_t close = entry.rfind(']');
  const size_t colon = entry.rfind(':');
  if (colon != absl::string_view::npos &&
      (close == absl::string_view::npos ? entry.find(':') == colon
                                        : colon > close)) {
    host = entry.substr(0, colon);
    slots = entry.substr(colon + 1);
    if (!absl::SimpleAtoi(slots, &out.slots) || out.slots < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("host \"", entry, "\": slots \"", slots,
                       "\" are not a positive number"));
    }
    out.slots_given = true;
  }
  if (host.empty() || absl::EndsWith(host, "@")) {
    return absl::InvalidArgumentError(
        absl::StrCat("host \"", entry, "\" names no host"));
  }
  // ssh takes an IPv6 address without its brackets.
  std::string target(host);
  const size_t at = target.find('@');
  const size_t open = at == std::string::npos ? 0 : at + 1;
  if (open < target.size() && target[open] == '[' && target.back() == ']') {
    target = absl::StrCat(target.substr(0, open),
                          target.substr(open + 1, target.size() - open - 2));
  }
  out.host = std::move(target);
  return out;
}

// Whether `host` names this machine's loopback, which other hosts cannot
// reach.
bool IsLoopbackHost(absl::string_view host) {
  const std::string address = HostAddress(host);
  return absl::EqualsIgnoreCase(address, "localhost") ||
         absl::StartsWith(address, "127.") || address == "[::1]";
}

// A loopback host among others, if any: the others could not reach it.
absl::Status CheckReachable(const std::vector<HostSlots>& hosts,
                            const std::vector<HostSlots>& server_hosts) {
  size_t loopback = 0;
  std::string named;
  for (const std::vector<HostSlots>* list : {&hosts, &server_hosts}) {
    for (const HostSlots& host : *list) {
      if (!IsLoopbackHost(host.host)) continue;
      ++loopback;
      named = host.host;
    }
  }
  if (loopback == 0 || loopback == hosts.size() + server_hosts.size()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", named,
      "\" is this machine's loopback, which the other hosts cannot reach: "
      "give its name or address"));
}

}  // namespace

absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view list) {
  std::vector<HostSlots> hosts;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty entry in the host list \"", list, "\""));
    }
    absl::StatusOr<HostSlots> host = ParseEntry(entry);
    if (!host.ok()) return host.status();
    hosts.push_back(*std::move(host));
  }
  return hosts;
}

std::string HostAddress(absl::string_view host) {
  const size_t at = host.find('@');
  if (at != absl::string_view::npos) host.remove_prefix(at + 1);
  if (host.find(':') != absl::string_view::npos) {
    return absl::StrCat("[", host, "]");
  }
  return std::string(host);
}

absl::StatusOr<HostPlan> PlaceOnHosts(
    const std::vector<HostSlots>& hosts,
    const std::vector<HostSlots>& server_hosts, int workers, int ps) {
  if (absl::Status status = CheckReachable(hosts, server_hosts); !status.ok()) {
    return status;
  }
  HostPlan plan;
  for (const HostSlots& host : hosts) {
    for (int s = 0; s < host.slots &&
                    plan.worker_hosts.size() < static_cast<size_t>(workers);
         ++s) {
      plan.worker_hosts.push_back(host.host);
    }
  }
  if (hosts.empty() ||
      plan.worker_hosts.size() < static_cast<size_t>(workers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        workers, " workers, but the hosts have ", plan.worker_hosts.size(),
        " slot(s): give more hosts, or slots as HOST:N"));
  }
  const std::vector<HostSlots>& shards =
      server_hosts.empty() ? hosts : server_hosts;
  for (int i = 0; i < ps; ++i) {
    plan.server_hosts.push_back(shards[i % shards.size()].host);
  }
  return plan;
}

LocalRank LocalRankOf(const HostPlan& plan, int workers, int rank) {
  if (!plan.active()) return LocalRank{rank, workers};
  // Loopback names are one machine; others are told apart by address.
  auto machine = [](const std::string& host) {
    return IsLoopbackHost(host) ? std::string("loopback") : HostAddress(host);
  };
  const std::string mine = machine(plan.worker_hosts[rank]);
  LocalRank local{0, 0};
  for (int r = 0; r < workers; ++r) {
    if (machine(plan.worker_hosts[r]) != mine) continue;
    if (r < rank) ++local.rank;
    ++local.workers;
  }
  return local;
}

std::vector<std::string> ServerListenFlags(const HostPlan& plan, int shard,
                                           const std::string& port_file,
                                           bool tls) {
  if (!plan.active()) {
    return {"--listen=127.0.0.1:0", absl::StrCat("--port_file=", port_file)};
  }
  std::vector<std::string> flags = {
      absl::StrCat("--listen=0.0.0.0:", plan.server_port + shard)};
  if (!tls) flags.push_back("--insecure");
  return flags;
}

std::vector<std::string> RemoteWorkerFlags(const HostPlan& plan, int rank,
                                           bool tls) {
  if (!plan.active()) return {};
  std::vector<std::string> flags = {
      absl::StrCat("--allreduce_host=", HostAddress(plan.worker_hosts[rank]))};
  if (!tls) flags.push_back("--insecure");
  return flags;
}

std::string ServerAddress(const HostPlan& plan, int shard, int port) {
  if (!plan.active()) return absl::StrCat("127.0.0.1:", port);
  return absl::StrCat(HostAddress(plan.server_hosts[shard]), ":", port);
}

std::string HostNote(const std::string& host) {
  return host.empty() ? std::string() : absl::StrCat(" (ssh to ", host, ")");
}

const char* NotListeningYet(const HostPlan& plan) {
  return plan.active() ? "no connection accepted by " : "no port file from ";
}

}  // namespace lockstep
