// A Lockstep job of real processes for fault tests: one server on a
// loopback port the kernel picks at its first start and restarts reuse (so
// it can be restarted in place), with a checkpoint folder,
// and workers that dump their final weights. Not thread-safe.
#ifndef LOCKSTEP_TESTS_FAULT_JOB_H_
#define LOCKSTEP_TESTS_FAULT_JOB_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/integration/subprocess.h"

namespace lockstep {

class Job final {
 public:
  explicit Job(int workers);

  // Starts (or restarts) the server and waits until it listens.
  void StartServer(const std::vector<std::string>& flags);
  // Starts a standby of the server (--standby_of, its own port) and waits
  // until it listens; workers started later list it in --standby_servers.
  void StartStandby(const std::vector<std::string>& flags);
  // Starts rank `rank` in `slot` (default: the rank's own).
  void StartWorker(int rank, const std::vector<std::string>& flags,
                   int slot = -1);

  // Exit codes, -1 on a 120 s timeout (the process is then killed).
  int WaitWorker(int slot);
  int WaitServer();
  int WaitStandby();

  pid_t server() const { return servers_.back()->pid(); }
  int port() const { return port_; }
  int standby_port() const { return standby_port_; }
  std::string dir() const { return dir_; }
  pid_t worker(int slot) const { return workers_.at(slot)->pid(); }
  void Signal(pid_t pid, int sig) const;

  // Each waits on its condition with a 60 s deadline; false on timeout.
  bool WaitForVersion(int64_t version) const;
  bool WaitForServerLog(const std::string& text) const;
  bool WaitForWorkerLog(int slot, const std::string& text) const;
  bool WaitForCheckpointTmp() const;
  // Until the server has rank `rank`'s push of a step.
  bool WaitForPushFrom(int rank) const;
  // Until worker `slot` has its stop-signal handler installed.
  bool WaitForStopHandler(int slot) const;

  // The ranks the server counts as finished (left); empty when it does not
  // answer.
  std::vector<int> FinishedRanks() const;
  bool WaitForCheckpointFile() const;

  std::vector<std::string> CheckpointFiles() const;
  // The shard's checkpoint folder.
  std::string CheckpointDir() const { return dir_ + "/ckpt/shard-0-of-1"; }
  void CorruptByte(const std::string& path) const;
  void Truncate(const std::string& path) const;

  std::vector<float> Weights(int slot) const;
  std::string ServerOutput() const;  // Every server start, in order.
  std::string WorkerOutput(int slot) const;
  std::string StandbyOutput() const;

 private:
  // Polls `ready` until it holds or 60 s pass.
  template <typename Ready>
  static bool WaitFor(Ready ready);

  const int workers_count_;
  const std::string dir_;
  int port_ = 0;
  std::vector<std::unique_ptr<Subprocess>> servers_;
  std::unique_ptr<Subprocess> standby_;
  int standby_port_ = 0;
  std::map<int, std::unique_ptr<Subprocess>> workers_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_FAULT_JOB_H_
