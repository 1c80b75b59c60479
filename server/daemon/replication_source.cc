#include "server/daemon/replication_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep {
namespace {

// How long a snapshot for a follower waits for the chunks to line up.
constexpr absl::Duration kSnapshotWait = absl::Milliseconds(50);

}  // namespace

ReplicationSource::ReplicationSource(const Options& options,
                                     ParameterServer* core, DaemonLog log)
    : options_(options), core_(core), log_(std::move(log)) {
  thread_ = std::thread([this] { Loop(); });
}

ReplicationSource::~ReplicationSource() { Shutdown(); }

ChunkCallback ReplicationSource::Wrap(ChunkCallback done) {
  return [this, done = std::move(done)](
             absl::StatusOr<ChunkSnapshot> answer) mutable {
    if (answer.ok()) {
      absl::MutexLock lock(&mu_);
      if (attached_ && !stopping_ &&
          answer->version > AckedLocked(answer->chunk)) {
        const int chunk = answer->chunk;
        const int64_t version = answer->version;
        held_.push_back(
            Held{chunk, version, std::move(done), std::move(answer)});
        wake_.Signal();
        return;
      }
    }
    done(std::move(answer));
  };
}

void ReplicationSource::Follow(int64_t held, const std::string& standby,
                               ReplicationService::Done done) {
  std::vector<Held> release;
  std::optional<Pending> replaced;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      mu_.Unlock();
      done(absl::UnavailableError("the primary is shutting down"));
      mu_.Lock();
      return;
    }
    const absl::Time now = absl::Now();
    last_follow_ = now;
    // Holding what was sent last acknowledges it.
    if (held > 0 && held == sent_sequence_) {
      if (!attached_) {
        log_(absl::StrCat("standby ", standby, " follows from version ",
                          sent_version_,
                          ": answers wait until it holds their version"));
      }
      attached_ = true;
      standby_ = standby;
      acked_ = sent_chunks_;
      release = ReleaseLocked(false);
    }
    replaced = std::move(pending_);
    pending_ = Pending{held, std::move(done), now};
    wake_.Signal();
  }
  for (Held& h : release) h.done(std::move(h.answer));
  if (replaced.has_value()) {
    replaced->done(absl::AbortedError("a newer Follow came"));
  }
}

bool ReplicationSource::TellJobDone(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  job_done_ = true;
  wake_.Signal();
  if (!attached_ && !pending_.has_value()) return false;
  mu_.AwaitWithTimeout(absl::Condition(&told_done_), timeout);
  return told_done_;
}

void ReplicationSource::Shutdown() {
  std::vector<Held> release;
  std::optional<Pending> pending;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      release = ReleaseLocked(true);
      pending = std::move(pending_);
      pending_.reset();
      wake_.Signal();
    }
  }
  const absl::Status going = absl::UnavailableError("server is shutting down");
  for (Held& h : release) h.done(going);
  if (pending.has_value()) pending->done(going);
  if (thread_.joinable()) thread_.join();
}

ReplicationSource::Stats ReplicationSource::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::vector<ReplicationSource::Held> ReplicationSource::ReleaseLocked(
    bool all) {
  std::vector<Held> out;
  auto keep = std::stable_partition(
      held_.begin(), held_.end(), [this, all](const Held& h) {
        mu_.AssertHeld();
        return !all && h.version > AckedLocked(h.chunk);
      });
  std::move(keep, held_.end(), std::back_inserter(out));
  held_.erase(keep, held_.end());
  return out;
}

int64_t ReplicationSource::AckedLocked(int chunk) const {
  auto it = acked_.find(chunk);
  return it == acked_.end() ? -1 : it->second;
}

std::optional<ShardCheckpoint> ReplicationSource::StateToSendLocked(
    int64_t held) {
  // A follower that holds what was sent needs a state only when an answer
  // waits for a chunk version it lacks, and then the chunks as they are
  // (the step's later chunks may wait for pushes that wait for these
  // answers); a new one needs a lined-up state, to take over with.
  const bool following = attached_ && held == sent_sequence_;
  if (following && held_.empty()) return std::nullopt;
  mu_.Unlock();
  absl::StatusOr<ShardCheckpoint> now =
      core_->Snapshot(kSnapshotWait, /*lined_up=*/!following);
  mu_.Lock();
  if (!now.ok()) return std::nullopt;
  if (following) {
    bool newer = false;
    for (const ChunkState& c : now->chunks) {
      newer = newer || c.version > AckedLocked(c.chunk);
    }
    if (!newer) return std::nullopt;
  }
  return *std::move(now);
}

void ReplicationSource::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    wake_.WaitWithTimeout(
        &mu_, held_.empty() ? absl::Milliseconds(20) : absl::Microseconds(100));
    if (stopping_) break;
    const absl::Time now = absl::Now();
    std::vector<Held> release;
    if (attached_ && !pending_.has_value() &&
        now - last_follow_ > options_.standby_timeout) {
      attached_ = false;
      log_(absl::StrCat("standby ", standby_, " has not followed for ",
                        absl::FormatDuration(now - last_follow_),
                        ": going on without a standby (it held version ",
                        sent_version_, ")"));
      release = ReleaseLocked(true);
    }
    std::optional<Pending> answering;
    ReplicaUpdate update;
    std::optional<ShardCheckpoint> state;
    if (pending_.has_value()) {
      update.version = sent_version_;
      if (job_done_) {
        update.job_done = true;
        told_done_ = true;
        answering = std::move(pending_);
      } else if ((state = StateToSendLocked(pending_->held)).has_value() &&
                 pending_.has_value() && !stopping_) {
        sent_version_ = update.version = state->version;
        update.sequence = ++sent_sequence_;
        sent_chunks_.clear();
        for (const ChunkState& c : state->chunks) {
          sent_chunks_[c.chunk] = c.version;
        }
        answering = std::move(pending_);
      } else if (pending_.has_value() &&
                 now - pending_->since >= options_.longest_wait) {
        answering = std::move(pending_);  // A heartbeat.
      }
      if (update.sequence == 0) state.reset();  // Taken for no one.
      if (answering.has_value()) pending_.reset();
    }
    if (release.empty() && !answering.has_value()) continue;
    mu_.Unlock();
    for (Held& h : release) h.done(std::move(h.answer));
    if (answering.has_value()) {
      if (state.has_value()) {
        const absl::Time start = absl::Now();
        update.checkpoint = EncodeCheckpoint(*state);
        const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
        absl::MutexLock count(&mu_);
        ++stats_.versions_sent;
        stats_.bytes_sent += static_cast<int64_t>(update.checkpoint.size());
        stats_.encode_seconds += seconds;
      }
      answering->done(std::move(update));
    }
    mu_.Lock();
  }
}

}  // namespace lockstep
