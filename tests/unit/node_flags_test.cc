// Tests for torchrun's sizing flags in lockstep_launch (--nproc_per_node,
// --nnodes): the worker count and slots they mean, and every refusal with
// its exact reason.
#include "deploy/launch/node_flags.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "deploy/launch/host_list.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

NodeFlags Flags(std::optional<int> workers, std::string nproc_per_node,
                std::string nnodes) {
  NodeFlags flags;
  flags.workers = workers;
  flags.nproc_per_node = std::move(nproc_per_node);
  flags.nnodes = std::move(nnodes);
  return flags;
}

// The message of ApplyNodeFlags' refusal; fails the test if it accepted.
std::string Refusal(const NodeFlags& flags,
                    std::vector<HostSlots>* hosts = nullptr) {
  absl::StatusOr<int> workers = ApplyNodeFlags(flags, 2, hosts);
  EXPECT_EQ(workers.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(workers.status().message());
}

TEST(NodeFlagsTest, WithoutThemWorkersOrItsDefault) {
  EXPECT_EQ(*ApplyNodeFlags(Flags(std::nullopt, "", ""), 2, nullptr), 2);
  EXPECT_EQ(*ApplyNodeFlags(Flags(5, "", ""), 2, nullptr), 5);
  std::vector<HostSlots> hosts = {{"h1", 3, true}, {"h2", 1, false}};
  EXPECT_EQ(*ApplyNodeFlags(Flags(4, "", ""), 2, &hosts), 4);
  EXPECT_EQ(hosts[0].slots, 3);  // Untouched.
  EXPECT_EQ(hosts[1].slots, 1);
}

TEST(NodeFlagsTest, NprocPerNodeIsWorkersOnOneHost) {
  EXPECT_EQ(*ApplyNodeFlags(Flags(std::nullopt, "4", ""), 2, nullptr), 4);
  EXPECT_EQ(*ApplyNodeFlags(Flags(4, "4", "1"), 2, nullptr), 4);
  EXPECT_EQ(*ApplyNodeFlags(Flags(std::nullopt, "3", "1:1"), 2, nullptr), 3);
}

TEST(NodeFlagsTest, NprocPerNodeAcrossHostsFillsEachHost) {
  std::vector<HostSlots> hosts = {
      {"h1", 1, false}, {"u@h2", 2, true}, {"h3", 1, false}};
  absl::StatusOr<int> workers =
      ApplyNodeFlags(Flags(std::nullopt, "2", "3"), 2, &hosts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(*workers, 6);
  for (const HostSlots& host : hosts) EXPECT_EQ(host.slots, 2) << host.host;
  // The placement then puts ranks 0-1 on h1, 2-3 on h2, 4-5 on h3.
  absl::StatusOr<HostPlan> plan = PlaceOnHosts(hosts, {}, *workers, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->worker_hosts,
            (std::vector<std::string>{"h1", "h1", "u@h2", "u@h2", "h3", "h3"}));
  EXPECT_EQ(LocalRankOf(*plan, 6, 3).rank, 1);
  EXPECT_EQ(LocalRankOf(*plan, 6, 3).workers, 2);
}

TEST(NodeFlagsTest, RefusesWorkersThatDisagree) {
  EXPECT_EQ(Refusal(Flags(3, "2", "")),
            "--workers=3 and --nproc_per_node=2 disagree: 2 per host on 1 "
            "host(s) is 2 workers; give one of the two");
  std::vector<HostSlots> hosts = {{"h1", 1, false}, {"h2", 1, false}};
  EXPECT_EQ(Refusal(Flags(2, "2", ""), &hosts),
            "--workers=2 and --nproc_per_node=2 disagree: 2 per host on 2 "
            "host(s) is 4 workers; give one of the two");
}

TEST(NodeFlagsTest, RefusesNprocPerNodeThatIsNotANumber) {
  for (const char* value : {"0", "-1", "gpu", "auto", "cpu", "2x"}) {
    EXPECT_EQ(Refusal(Flags(std::nullopt, value, "")),
              std::string("--nproc_per_node=") + value +
                  ": give a positive number of workers per host (the "
                  "launcher does not count the hosts' devices, so torchrun's "
                  "auto, gpu and cpu are not taken)");
  }
}

TEST(NodeFlagsTest, RefusesWrittenSlotsThatDisagree) {
  std::vector<HostSlots> hosts = {{"h1", 2, true}, {"h2", 4, true}};
  EXPECT_EQ(Refusal(Flags(std::nullopt, "2", ""), &hosts),
            "--nproc_per_node=2 puts 2 worker(s) on each host, but --hosts "
            "gives h2 4 slot(s): leave the slots out or make them agree");
  // A written :1 is a slot count too, not the default.
  hosts = {{"h1", 1, true}};
  EXPECT_EQ(Refusal(Flags(std::nullopt, "2", ""), &hosts),
            "--nproc_per_node=2 puts 2 worker(s) on each host, but --hosts "
            "gives h1 1 slot(s): leave the slots out or make them agree");
}

TEST(NodeFlagsTest, RefusesNnodesOtherThanTheHosts) {
  EXPECT_EQ(Refusal(Flags(std::nullopt, "", "2")),
            "--nnodes=2: without --hosts the job runs on this machine alone "
            "(1 node); give the 2 hosts as --hosts=HOST,...");
  std::vector<HostSlots> hosts = {{"h1", 1, false}, {"h2", 1, false}};
  EXPECT_EQ(Refusal(Flags(std::nullopt, "2", "3"), &hosts),
            "--nnodes=3, but --hosts lists 2 host(s); a node is a --hosts "
            "entry, and the launcher starts the processes of all of them");
  EXPECT_EQ(*ApplyNodeFlags(Flags(std::nullopt, "", "2:2"), 2, &hosts), 2);
}

TEST(NodeFlagsTest, NodeRankIsZeroOrRefused) {
  NodeFlags zero = Flags(std::nullopt, "3", "");
  zero.node_rank = "0";
  EXPECT_EQ(*ApplyNodeFlags(zero, 2, nullptr), 3);
  NodeFlags one = zero;
  one.node_rank = "1";
  EXPECT_EQ(Refusal(one),
            "--node_rank=1: lockstep_launch starts the processes of every "
            "host itself (over ssh, from --hosts), where torchrun runs once "
            "per node; run it once, on one machine, as node 0 (leave "
            "--node_rank out or give 0)");
  for (const char* value : {"-1", "x", "0x1"}) {
    NodeFlags bad = zero;
    bad.node_rank = value;
    EXPECT_EQ(Refusal(bad), std::string("--node_rank=") + value +
                                ": not a node index (0, the only node a "
                                "lockstep_launch is)");
  }
}

TEST(NodeFlagsTest, RefusesNnodesThatIsNotOneNumber) {
  EXPECT_EQ(Refusal(Flags(std::nullopt, "", "1:4")),
            "--nnodes=1:4: an elastic range; a Lockstep job runs on the fixed "
            "hosts of --hosts: give their number");
  for (const char* value : {"0", "two", "1:", ":1", "1:1:1"}) {
    EXPECT_EQ(
        Refusal(Flags(std::nullopt, "", value)),
        std::string("--nnodes=") + value + ": not a positive number of hosts");
  }
}

}  // namespace
}  // namespace lockstep
