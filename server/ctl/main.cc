// lockstep_ctl: look inside a running Lockstep job and act on it.
//
//   lockstep_ctl status ADDRESS[,ADDRESS...] [--watch] [--interval=1s]
//                [--count=N]
//   lockstep_ctl stragglers ADDRESS[,ADDRESS...] [--straggler_fraction=0.2]
//   lockstep_ctl checkpoint ADDRESS[,ADDRESS...]
//   lockstep_ctl merge-traces OUT IN...
//   lockstep_ctl reshard FROM TO --num_shards=S [--chunk_bytes=auto]
//
// ADDRESS is a parameter-server shard (host:port); give every shard of the
// job, in shard order. Exit codes: 0 done (with --watch: the job
// finished), 1 a server did not answer or refused (with --watch: for 10 s,
// or refused connections for 3 s, before the job finished), 2 bad usage.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/exit_codes.h"
#include "common/flags/flags.h"
#include "common/formats/json_writer.h"
#include "common/security/tls_flags.h"
#include "server/ctl/reshard.h"
#include "server/ctl/shard_client.h"
#include "server/ctl/status_view.h"
#include "server/ctl/straggler_view.h"
#include "server/ctl/trace_merge.h"

ABSL_FLAG(bool, watch, false,
          "status: refresh every --interval (redrawn in place on a terminal, "
          "repeated blocks otherwise) until the job finishes (exit 0), its "
          "servers stop answering for 10s before that (exit 1), or --count "
          "views.");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1),
          "status --watch: time between refreshes.");
ABSL_FLAG(int, count, 0,
          "status --watch: stop after this many views (0: no limit).");
ABSL_FLAG(double, straggler_fraction, 0.2,
          "stragglers: name a rank slower than the other ranks' median by "
          "more than this fraction of a step.");
ABSL_FLAG(int, num_shards, 0,
          "reshard: the shard count the new job's servers run with.");
ABSL_FLAG(std::string, chunk_bytes, "auto",
          "reshard: the new job's --chunk_bytes (its workers' flag): auto, "
          "or the byte count they are given.");
ABSL_FLAG(absl::Duration, timeout, absl::ZeroDuration(),
          "Deadline of each call (default: 5s for status, 10m for "
          "checkpoint).");

namespace lockstep {
namespace {

// --help (absl's) and UsageError put "lockstep_ctl: " before it.
constexpr char kUsage[] =
    "live status of a Lockstep job and admin actions.\n"
    "Usage:\n"
    "  lockstep_ctl status ADDRESS[,ADDRESS...] [--watch] [--interval=1s] "
    "[--count=N]\n"
    "  lockstep_ctl stragglers ADDRESS[,ADDRESS...] "
    "[--straggler_fraction=0.2]   (which ranks are slow, and in which "
    "phase: input, compute, push or network)\n"
    "  lockstep_ctl checkpoint ADDRESS[,ADDRESS...]   (a checkpoint, and the "
    "model as safetensors where a server has --weights_file)\n"
    "  lockstep_ctl merge-traces OUT IN...\n"
    "  lockstep_ctl reshard FROM TO --num_shards=S [--chunk_bytes=auto]   "
    "(a job's checkpoints of S shards, for new servers of S' shards: "
    "--num_shards=S' --init_from=TO)\n"
    "ADDRESS: every server shard of the job (host:port), in shard order. "
    "TLS and token flags (--tls_ca, --token_file, ...) as for the other "
    "binaries.\n"
    "Exit codes: 0 done (--watch: the job finished), 1 a server did not "
    "answer or refused (--watch: for 10s, or refused connections for 3s, "
    "before the job finished), 2 bad usage.";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "lockstep_ctl: %s\n\nlockstep_ctl: %s\n",
               message.c_str(), kUsage);
  return kExitPermanent;
}

absl::StatusOr<std::vector<std::unique_ptr<ShardClient>>> Connect(
    const std::string& addresses) {
  absl::StatusOr<TlsOptions> tls = TlsOptionsFromFlags();
  if (!tls.ok()) return tls.status();
  std::vector<std::unique_ptr<ShardClient>> shards;
  for (absl::string_view address :
       absl::StrSplit(addresses, ',', absl::SkipEmpty())) {
    absl::StatusOr<std::unique_ptr<ShardClient>> client =
        ShardClient::Create(std::string(address), *tls);
    if (!client.ok()) return client.status();
    shards.push_back(std::move(*client));
  }
  if (shards.empty()) {
    return absl::InvalidArgumentError("no server address given");
  }
  return shards;
}

// Asks every shard at once, each on a thread of its own: with `wait` > 0,
// long polls (ShardClient::GetStatus) that servers finishing together
// answer together.
std::vector<ShardReading> Read(
    const std::vector<std::unique_ptr<ShardClient>>& shards,
    absl::Duration timeout, absl::Duration wait) {
  std::vector<ShardReading> readings(shards.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < shards.size(); ++i) {
    threads.emplace_back([&, i] {
      ShardClient& shard = *shards[i];
      ShardReading& r = readings[i];
      r.address = shard.address();
      r.status = shard.GetStatus(timeout, wait);
      // A shard that did not answer GetStatus is not asked twice.
      r.health = r.status.ok() ? shard.Health(timeout) : r.status.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return readings;
}

bool EveryShardAnswered(const std::vector<ShardReading>& readings) {
  for (const ShardReading& r : readings) {
    if (!r.status.ok()) return false;
  }
  return true;
}

// The reasons are in the view; on stderr too, for scripts.
void ReportFailures(const std::vector<ShardReading>& readings) {
  for (const ShardReading& r : readings) {
    if (!r.status.ok()) {
      std::fprintf(stderr, "lockstep_ctl: %s\n",
                   std::string(r.status.status().message()).c_str());
    }
  }
}

// Draws view number `view`: in place on a terminal (home and clear, then
// draw), else as blocks apart.
void Draw(const std::vector<ShardReading>& readings, bool in_place, int view) {
  if (in_place) {
    std::fputs("\033[H\033[2J", stdout);
  } else if (view > 0) {
    std::fputs("\n", stdout);
  }
  std::fputs(RenderJobStatus(readings).c_str(), stdout);
  std::fflush(stdout);
}

// --watch ends with exit 0 once a view shows the job finished, and with
// exit 1 once some shard has not answered for this long (the servers went
// away before the job finished, or never came).
constexpr absl::Duration kWatchGiveUp = absl::Seconds(10);
// ... or sooner, once a shard has refused the connection in every view for
// this long (at least two views): nothing listens at its address any more,
// so the server exited (a finished job's last view came before it did).
constexpr absl::Duration kWatchGone = absl::Seconds(3);

// Whether `reading` says nothing listens at the shard's address.
bool Refused(const ShardReading& reading) {
  return !reading.status.ok() &&
         reading.status.status().code() == absl::StatusCode::kUnavailable &&
         absl::StrContains(reading.status.status().message(),
                           "Connection refused");
}

// The address of a shard whose connection has been refused in every view
// since (*refused_since)[i] for kWatchGone or longer, over two views or
// more; empty when none. Updates `refused_since` and `refused_views` with
// `readings`.
std::string GoneShard(const std::vector<ShardReading>& readings, absl::Time now,
                      std::vector<absl::Time>* refused_since,
                      std::vector<int>* refused_views) {
  std::string gone;
  for (size_t i = 0; i < readings.size(); ++i) {
    if (!Refused(readings[i])) {
      (*refused_views)[i] = 0;
      continue;
    }
    if ((*refused_views)[i]++ == 0) (*refused_since)[i] = now;
    if (gone.empty() && (*refused_views)[i] >= 2 &&
        now - (*refused_since)[i] >= kWatchGone) {
      gone = readings[i].address;
    }
  }
  return gone;
}

int Status(const std::string& addresses) {
  absl::StatusOr<std::vector<std::unique_ptr<ShardClient>>> shards =
      Connect(addresses);
  if (!shards.ok()) return UsageError(std::string(shards.status().message()));
  const bool watch = absl::GetFlag(FLAGS_watch);
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  const int count = absl::GetFlag(FLAGS_count);
  absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) timeout = absl::Seconds(5);
  if (interval <= absl::ZeroDuration() || count < 0) {
    return UsageError("--interval must be positive and --count not negative");
  }
  const bool in_place = watch && isatty(STDOUT_FILENO) == 1;
  // Watching, each read is a long poll of one interval: a server that
  // finishes meanwhile answers it with its final status.
  const absl::Duration wait = watch ? interval : absl::ZeroDuration();
  absl::Time all_answered = absl::Now();
  std::vector<absl::Time> refused_since(shards->size());
  std::vector<int> refused_views(shards->size(), 0);
  for (int view = 0;; ++view) {
    const absl::Time next = absl::Now() + interval;
    const std::vector<ShardReading> readings = Read(*shards, timeout, wait);
    const bool answered = EveryShardAnswered(readings);
    if (answered) all_answered = absl::Now();
    Draw(readings, in_place, view);
    if (watch && JobFinished(readings)) {
      std::printf("\nThe job finished.\n");
      return kExitOk;
    }
    if (const std::string gone =
            GoneShard(readings, absl::Now(), &refused_since, &refused_views);
        watch && !gone.empty()) {
      ReportFailures(readings);
      std::fprintf(stderr,
                   "lockstep_ctl: the server at %s has refused every "
                   "connection for %s: it has exited without the job having "
                   "finished\n",
                   gone.c_str(), absl::FormatDuration(kWatchGone).c_str());
      return kExitFailure;
    }
    if (watch && absl::Now() - all_answered >= kWatchGiveUp) {
      ReportFailures(readings);
      std::fprintf(stderr,
                   "lockstep_ctl: a server shard has not answered for %s: "
                   "the job's servers are gone without it having finished\n",
                   absl::FormatDuration(kWatchGiveUp).c_str());
      return kExitFailure;
    }
    if (!watch || (count > 0 && view + 1 >= count)) {
      ReportFailures(readings);
      return answered ? kExitOk : kExitFailure;
    }
    absl::SleepFor(next - absl::Now());
  }
}

int Stragglers(const std::string& addresses) {
  absl::StatusOr<std::vector<std::unique_ptr<ShardClient>>> shards =
      Connect(addresses);
  if (!shards.ok()) return UsageError(std::string(shards.status().message()));
  StragglerOptions options;
  options.fraction = absl::GetFlag(FLAGS_straggler_fraction);
  if (!(options.fraction > 0) || !std::isfinite(options.fraction)) {
    return UsageError("--straggler_fraction must be a positive number");
  }
  absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) timeout = absl::Seconds(5);
  const std::vector<ShardReading> readings =
      Read(*shards, timeout, absl::ZeroDuration());
  std::fputs(RenderStragglers(readings, options).c_str(), stdout);
  ReportFailures(readings);
  return EveryShardAnswered(readings) ? kExitOk : kExitFailure;
}

int Checkpoint(const std::string& addresses) {
  absl::StatusOr<std::vector<std::unique_ptr<ShardClient>>> shards =
      Connect(addresses);
  if (!shards.ok()) return UsageError(std::string(shards.status().message()));
  absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) timeout = absl::Minutes(10);
  int exit_code = kExitOk;
  for (const auto& shard : *shards) {
    absl::StatusOr<ShardClient::Saved> saved = shard->SaveCheckpoint(timeout);
    if (!saved.ok()) {
      std::fprintf(stderr, "lockstep_ctl: %s\n",
                   std::string(saved.status().message()).c_str());
      exit_code = kExitFailure;
      continue;
    }
    if (saved->checkpoint.empty() && saved->weights_file.empty()) {
      std::printf("%s: owns no chunk of the model; nothing to save\n",
                  shard->address().c_str());
    }
    if (!saved->checkpoint.empty()) {
      std::printf(
          "%s: checkpoint of version %lld in %s\n", shard->address().c_str(),
          static_cast<long long>(saved->version), saved->checkpoint.c_str());
    }
    if (!saved->weights_file.empty()) {
      std::printf(
          "%s: weights of version %lld in %s\n", shard->address().c_str(),
          static_cast<long long>(saved->version), saved->weights_file.c_str());
    }
  }
  return exit_code;
}

int ReshardCheckpoints(const std::vector<std::string>& args) {
  if (args.size() != 2) return UsageError("reshard takes FROM and TO");
  ReshardOptions options;
  options.from = args[0];
  options.to = args[1];
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  if (options.num_shards < 1) {
    return UsageError("reshard needs --num_shards=S (at least 1)");
  }
  absl::StatusOr<int64_t> chunk_bytes =
      ParseChunkBytes(absl::GetFlag(FLAGS_chunk_bytes), int64_t{1} << 30);
  if (!chunk_bytes.ok()) {
    return UsageError(
        absl::StrCat("--chunk_bytes: ", chunk_bytes.status().message()));
  }
  options.chunk_bytes = *chunk_bytes;
  absl::StatusOr<ReshardResult> result = Reshard(options);
  if (!result.ok()) {
    std::fprintf(stderr, "lockstep_ctl: reshard: %s\n",
                 result.status().ToString().c_str());
    return result.status().code() == absl::StatusCode::kUnavailable
               ? kExitFailure
               : kExitPermanent;
  }
  std::printf("version %lld of %d shard(s) in %s, resharded for %d:\n",
              static_cast<long long>(result->version), result->old_shards,
              options.from.c_str(), options.num_shards);
  for (const std::string& path : result->written) {
    std::printf("  %s\n", path.c_str());
  }
  std::printf("start the servers with --num_shards=%d --init_from=%s\n",
              options.num_shards, options.to.c_str());
  return kExitOk;
}

int MergeTraceFiles(const std::vector<std::string>& args) {
  if (args.size() < 2) return UsageError("merge-traces needs OUT and IN...");
  std::vector<std::pair<std::string, std::string>> files;
  for (size_t i = 1; i < args.size(); ++i) {
    std::ifstream in(args[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "lockstep_ctl: cannot read %s\n", args[i].c_str());
      return kExitFailure;
    }
    std::stringstream contents;
    contents << in.rdbuf();
    files.emplace_back(args[i], contents.str());
  }
  absl::StatusOr<std::string> merged = MergeTraces(files);
  if (!merged.ok()) {
    std::fprintf(stderr, "lockstep_ctl: %s\n",
                 std::string(merged.status().message()).c_str());
    return kExitFailure;
  }
  if (absl::Status s = WriteFileAtomically(args[0], *merged); !s.ok()) {
    std::fprintf(stderr, "lockstep_ctl: %s\n", s.ToString().c_str());
    return kExitFailure;
  }
  std::printf("merged %zu trace(s) into %s\n", files.size(), args[0].c_str());
  return kExitOk;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(lockstep::kUsage);
  std::vector<char*> positional = lockstep::ParseFlags(
      argc, argv, {"server/ctl/main.cc", "common/security/tls_flags.cc"});
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  if (args.empty()) return lockstep::UsageError("no command");
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "status" || command == "checkpoint" ||
      command == "stragglers") {
    if (args.size() != 1) {
      return lockstep::UsageError(
          absl::StrCat(command, " takes one ADDRESS[,ADDRESS...]"));
    }
    if (command == "stragglers") return lockstep::Stragglers(args[0]);
    return command == "status" ? lockstep::Status(args[0])
                               : lockstep::Checkpoint(args[0]);
  }
  if (command == "merge-traces") return lockstep::MergeTraceFiles(args);
  if (command == "reshard") return lockstep::ReshardCheckpoints(args);
  return lockstep::UsageError(
      absl::StrCat("unknown command \"", command, "\""));
}
