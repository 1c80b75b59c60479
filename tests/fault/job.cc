#include "tests/fault/job.h"

#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep.grpc.pb.h"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BIN_DIR;
const absl::Duration kProcessDeadline = absl::Seconds(120);

}  // namespace

template <typename Ready>
bool Job::WaitFor(Ready ready) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    if (ready()) return true;
    absl::SleepFor(absl::Milliseconds(10));  // Polls; bounded above.
  }
  return false;
}

Job::Job(int workers) : workers_count_(workers), dir_(MakeTempDir()) {}

void Job::StartServer(const std::vector<std::string>& flags) {
  // A restart: the previous server must be gone, since its listening
  // socket holds the port until the process has died (servers do not share
  // ports), and kill() returns before that.
  if (!servers_.empty()) servers_.back()->Wait(kProcessDeadline);
  const std::string port_file =
      absl::StrCat(dir_, "/port", servers_.size());
  // Test hooks live in their own binary; everything else runs the real one.
  const bool hooks = std::any_of(flags.begin(), flags.end(), [](auto& f) {
    return absl::StartsWith(f, "--testing_");
  });
  std::vector<std::string> argv = {
      kBin + (hooks ? "/lockstep_server_testing" : "/lockstep_server"),
      absl::StrCat("--listen=127.0.0.1:", port_),
      absl::StrCat("--workers=", workers_count_),
      "--checkpoint_dir=" + dir_ + "/ckpt",
      "--port_file=" + port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  servers_.push_back(std::make_unique<Subprocess>(Subprocess::Start(argv)));
  Subprocess* server = servers_.back().get();
  WaitFor([&] {
    return !ReadFile(port_file).empty() ||
           server->Wait(absl::ZeroDuration()).has_value();
  });
  // The first server takes a port the kernel picks; restarts reuse it.
  if (port_ == 0) {
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)),
                         &port)) {
      port_ = port;
    } else {
      ADD_FAILURE() << "the server did not start:\n" << ServerOutput();
    }
  }
}

void Job::StartStandby(const std::vector<std::string>& flags) {
  const std::string port_file = dir_ + "/standby.port";
  std::vector<std::string> argv = {
      kBin + "/lockstep_server", "--listen=127.0.0.1:0",
      absl::StrCat("--workers=", workers_count_),
      absl::StrCat("--standby_of=127.0.0.1:", port_),
      "--checkpoint_dir=" + dir_ + "/ckpt", "--port_file=" + port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  standby_ = std::make_unique<Subprocess>(Subprocess::Start(argv));
  WaitFor([&] {
    return !ReadFile(port_file).empty() ||
           standby_->Wait(absl::ZeroDuration()).has_value();
  });
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)),
                        &standby_port_)) {
    ADD_FAILURE() << "the standby did not start:\n" << StandbyOutput();
  }
}

int Job::WaitStandby() {
  std::optional<int> code = standby_->Wait(kProcessDeadline);
  if (!code.has_value()) standby_->Kill();
  return code.value_or(-1);
}

std::string Job::StandbyOutput() const {
  return standby_ == nullptr ? "" : standby_->Output();
}

void Job::StartWorker(int rank, const std::vector<std::string>& flags,
                      int slot) {
  if (slot < 0) slot = rank;
  std::vector<std::string> argv = {
      kBin + "/lockstep_worker",
      absl::StrCat("--servers=127.0.0.1:", port_),
      absl::StrCat("--workers=", workers_count_),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--dump_weights=", dir_, "/w", slot)};
  if (standby_port_ != 0) {
    argv.push_back(absl::StrCat("--standby_servers=127.0.0.1:", standby_port_));
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  workers_[slot] = std::make_unique<Subprocess>(Subprocess::Start(argv));
}

int Job::WaitWorker(int slot) {
  Subprocess& p = *workers_.at(slot);
  std::optional<int> code = p.Wait(kProcessDeadline);
  if (!code.has_value()) p.Kill();
  return code.value_or(-1);
}

int Job::WaitServer() {
  Subprocess& p = *servers_.back();
  std::optional<int> code = p.Wait(kProcessDeadline);
  if (!code.has_value()) p.Kill();
  return code.value_or(-1);
}

void Job::Signal(pid_t pid, int sig) const { kill(pid, sig); }

bool Job::WaitForVersion(int64_t version) const {
  auto stub = v1::ParameterServer::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  return WaitFor([&] {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    v1::StatusResponse status;
    return stub->GetStatus(&context, v1::StatusRequest(), &status).ok() &&
           status.version() >= version;
  });
}

namespace {

// The server's GetStatus, or false when it does not answer within 1 s.
bool GetStatus(int port, v1::StatusResponse* status) {
  auto stub = v1::ParameterServer::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return stub->GetStatus(&context, v1::StatusRequest(), status).ok();
}

}  // namespace

bool Job::WaitForPushFrom(int rank) const {
  return WaitFor([&] {
    v1::StatusResponse status;
    return GetStatus(port_, &status) && status.workers_size() > rank &&
           status.workers(rank).last_step() >= 0;
  });
}

bool Job::WaitForStopHandler(int slot) const {
  // The caught signals' mask in /proc/PID/status: SIGTERM's bit.
  const std::string path = absl::StrCat("/proc/", worker(slot), "/status");
  return WaitFor([&] {
    for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n')) {
      uint64_t mask = 0;
      if (absl::ConsumePrefix(&line, "SigCgt:\t") &&
          absl::SimpleHexAtoi(line, &mask)) {
        return (mask >> (SIGTERM - 1) & 1) != 0;
      }
    }
    return false;
  });
}

std::vector<int> Job::FinishedRanks() const {
  v1::StatusResponse status;
  if (!GetStatus(port_, &status)) return {};
  return std::vector<int>(status.finished_ranks().begin(),
                          status.finished_ranks().end());
}

bool Job::WaitForServerLog(const std::string& text) const {
  return WaitFor([&] { return absl::StrContains(ServerOutput(), text); });
}

bool Job::WaitForWorkerLog(int slot, const std::string& text) const {
  return WaitFor([&] { return absl::StrContains(WorkerOutput(slot), text); });
}

bool Job::WaitForCheckpointTmp() const {
  const std::string dir = dir_ + "/ckpt/shard-0-of-1";
  return WaitFor([&] {
    bool found = false;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) {
        if (absl::EndsWith(e->d_name, ".tmp")) found = true;
      }
      closedir(d);
    }
    return found;
  });
}

bool Job::WaitForCheckpointFile() const {
  return WaitFor([&] { return !CheckpointFiles().empty(); });
}

std::vector<std::string> Job::CheckpointFiles() const {
  const std::string dir = dir_ + "/ckpt/shard-0-of-1";
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (absl::EndsWith(e->d_name, ".lsc")) {
        files.push_back(absl::StrCat(dir, "/", e->d_name));
      }
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

void Job::CorruptByte(const std::string& path) const {
  std::string bytes = ReadFile(path);
  bytes[bytes.size() - 5] ^= 0x20;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void Job::Truncate(const std::string& path) const {
  const std::string bytes = ReadFile(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << bytes.substr(0, bytes.size() / 2);
}

std::vector<float> Job::Weights(int slot) const {
  const std::string bytes = ReadFile(absl::StrCat(dir_, "/w", slot));
  // Two missing dumps would compare equal: a dump must hold weights.
  if (bytes.empty() || bytes.size() % sizeof(float) != 0) {
    ADD_FAILURE() << "worker slot " << slot << " dumped " << bytes.size()
                  << " bytes of weights";
  }
  std::vector<float> w(bytes.size() / sizeof(float));
  std::memcpy(w.data(), bytes.data(), w.size() * sizeof(float));
  return w;
}

std::string Job::ServerOutput() const {
  std::string out;
  for (const auto& s : servers_) out += s->Output();
  return out;
}

std::string Job::WorkerOutput(int slot) const {
  return workers_.at(slot)->Output();
}

}  // namespace lockstep
