// How the benchmarks read a simulated cluster's status (deploy/sim/cluster.sh
// up prints it as KEY=VALUE lines).
#include "tests/bench/bench_hosts.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// What `cluster.sh up` prints: the study reads its hosts, whether netem
// added the delay, and the congestion control the hosts were given.
TEST(SimClusterStatusTest, ReadsTheHostsAndSettings) {
  const std::string status =
      "name=lss\nhosts=2\nrate=1gbit\ndelay_applied=0\ncc=reno\n"
      "h0=10.214.0.1\nh1=10.214.0.2\n";
  EXPECT_EQ(SimStatusValue(status, "cc"), "reno");
  EXPECT_EQ(SimStatusValue(status, "delay_applied"), "0");
  EXPECT_EQ(SimStatusValue(status, "h1"), "10.214.0.2");
  EXPECT_EQ(SimStatusValue(status, "c"), "");  // A prefix is not the key.
  EXPECT_EQ(SimStatusValue(status, "netem"), "");
  absl::StatusOr<std::vector<BenchHost>> hosts =
      SimHosts("cluster.sh", "lss", status);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 2u);
  EXPECT_EQ((*hosts)[1].address, "10.214.0.2");
}

}  // namespace
}  // namespace lockstep
