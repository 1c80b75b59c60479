#include "server/daemon/server_telemetry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/ops/telemetry_endpoints.h"

namespace lockstep {
namespace {

constexpr char kBarrierWait[] = "lockstep_server_barrier_wait_seconds";
constexpr char kBarrierWaitHelp[] =
    "How long a rank's push of a chunk waited for the chunk's barrier to "
    "close (one observation per chunk and step; the straggler waits least).";

// Trace tracks: one per chunk, so that a chunk's accumulate and apply
// events (serialized by its lock) never overlap.
int ChunkTrack(int chunk) { return chunk + 1; }
// Then one per rank for its lateness, past any chunk's.
constexpr int kRankTrackBase = 1 << 24;

}  // namespace

absl::StatusOr<std::unique_ptr<ServerTelemetry>> ServerTelemetry::Create(
    const ServerTelemetryOptions& options) {
  std::unique_ptr<ServerTelemetry> t(new ServerTelemetry(options));
  TelemetryEndpointOptions endpoints;
  endpoints.health_port = options.health_port;
  endpoints.metrics_port = options.metrics_port;
  endpoints.trace.path = options.trace_path;
  endpoints.trace.process_name =
      absl::StrCat("lockstep_server shard ", options.shard);
  endpoints.trace.sort_index = options.shard;
  absl::StatusOr<TelemetryEndpoints> started =
      StartTelemetryEndpoints(endpoints, &t->registry_);
  if (!started.ok()) return started.status();
  t->health_ = std::move(started->health);  // NOT_SERVING until told.
  t->http_ = std::move(started->http);
  t->trace_ = std::move(started->trace);
  t->enabled_ = t->http_ != nullptr || t->trace_ != nullptr;
  return t;
}

void ServerTelemetry::SetServing(bool serving) {
  serving_->Set(serving ? 1 : 0);
  if (health_ != nullptr) health_->SetServing(serving);
}

ServerTelemetry::ServerTelemetry(const ServerTelemetryOptions& options)
    : options_(options), start_(absl::Now()) {
  step_seconds_ = registry_.GetHistogram(
      "lockstep_server_step_seconds",
      "Time between consecutive versions of a chunk of this shard (one "
      "observation per chunk and step).",
      SecondsBuckets());
  apply_seconds_ = registry_.GetHistogram(
      "lockstep_server_apply_seconds",
      "Averaging, optimizer and publishing of one chunk's step.",
      SecondsBuckets());
  serving_ = registry_.GetGauge(
      "lockstep_server_serving",
      "1 while grpc.health.v1 reports SERVING, 0 while loading a checkpoint "
      "or draining.");
  registry_.AddCollector([this]() { Collect(); });
}

ServerTelemetry::~ServerTelemetry() {
  // The HTTP thread reads the registry: stop it first.
  http_.reset();
  trace_.reset();
}

void ServerTelemetry::AttachCore(const ParameterServer* core, int num_workers) {
  absl::MutexLock lock(&mu_);
  core_ = core;
  for (int r = static_cast<int>(barrier_wait_.size()); r < num_workers; ++r) {
    barrier_wait_.push_back(registry_.GetHistogram(
        kBarrierWait, kBarrierWaitHelp, SecondsBuckets(),
        {{"rank", absl::StrCat(r)}}));
  }
}

Histogram* ServerTelemetry::BarrierWait(int rank) {
  absl::MutexLock lock(&mu_);
  while (static_cast<int>(barrier_wait_.size()) <= rank) {
    barrier_wait_.push_back(registry_.GetHistogram(
        kBarrierWait, kBarrierWaitHelp, SecondsBuckets(),
        {{"rank", absl::StrCat(barrier_wait_.size())}}));
  }
  return barrier_wait_[rank];
}

void ServerTelemetry::CheckpointSaved(int64_t version, absl::Time when) {
  checkpoint_version_.store(version);
  checkpoint_unix_micros_.store(absl::ToUnixMicros(when));
}

absl::Status ServerTelemetry::FlushTrace() {
  return trace_ == nullptr ? absl::OkStatus() : trace_->Flush();
}

void ServerTelemetry::OnAccumulate(int chunk, int64_t step, int rank,
                                   absl::Time start, absl::Time end) {
  if (trace_ != nullptr) {
    trace_->Complete("accumulate", "server", ChunkTrack(chunk), start, end,
                     {"step", step}, {"rank", rank});
  }
}

void ServerTelemetry::OnApply(const Applied& a) {
  apply_seconds_->Observe(absl::ToDoubleSeconds(a.end - a.start));
  if (a.previous != absl::InfinitePast()) {
    step_seconds_->Observe(absl::ToDoubleSeconds(a.end - a.previous));
  }
  absl::Time first = absl::InfiniteFuture();
  for (int r = 0; r < static_cast<int>(a.arrivals.size()); ++r) {
    if (a.arrivals[r] == absl::InfinitePast()) continue;
    first = std::min(first, a.arrivals[r]);
    BarrierWait(r)->Observe(absl::ToDoubleSeconds(a.start - a.arrivals[r]));
  }
  if (trace_ != nullptr) {
    const int track = ChunkTrack(a.chunk);
    trace_->NameThread(track, absl::StrCat("chunk ", a.chunk));
    if (first != absl::InfiniteFuture()) {
      // From the step's first push to the barrier closing: holds the
      // accumulate events of the step.
      trace_->Complete("gather", "server", track, first, a.start,
                       {"step", a.step});
    }
    trace_->Complete("apply", "server", track, a.start, a.end,
                     {"step", a.step});
    if (a.chunk == 0 && first != absl::InfiniteFuture()) {
      // Each rank's lateness on a track of its own: from the step's first
      // push to this rank's (chunk 0's pushes, one event per rank a step).
      for (int r = 0; r < static_cast<int>(a.arrivals.size()); ++r) {
        if (a.arrivals[r] == absl::InfinitePast()) continue;
        const int rank_track = kRankTrackBase + r;
        trace_->NameThread(rank_track, absl::StrCat("rank ", r, " lateness"));
        trace_->Complete("late", "server", rank_track, first, a.arrivals[r],
                         {"step", a.step}, {"rank", r});
      }
    }
  }
}

void ServerTelemetry::Collect() {
  const ParameterServer* core;
  {
    absl::MutexLock lock(&mu_);
    core = core_;
  }
  if (options_.checkpoints) CollectCheckpoint(absl::Now());
  if (core == nullptr) return;
  const ServerStatus s = core->GetStatus();
  registry_
      .GetGauge("lockstep_server_version",
                "Latest version this shard has published (-1 before version "
                "0).")
      ->Set(static_cast<double>(s.version));
  CollectCounters(s.counters);
  CollectWorkers(s);
}

void ServerTelemetry::CollectCheckpoint(absl::Time now) {
  const int64_t saved = checkpoint_unix_micros_.load();
  registry_
      .GetGauge("lockstep_server_checkpoint_age_seconds",
                "Seconds since the last checkpoint was written or restored "
                "(since the server started, before the first).")
      ->Set(absl::ToDoubleSeconds(
          now - (saved > 0 ? absl::FromUnixMicros(saved) : start_)));
  registry_
      .GetGauge("lockstep_server_checkpoint_version",
                "Version in the last checkpoint written or restored (-1: "
                "none).")
      ->Set(static_cast<double>(checkpoint_version_.load()));
}

void ServerTelemetry::CollectCounters(const ServerCounters& c) {
  auto counter = [this](const char* name, const char* help, double total,
                        const MetricLabels& labels = {}) {
    registry_.GetCounter(name, help, labels)->IncrementTo(total);
  };
  counter("lockstep_server_pushes_accepted_total",
          "Gradient chunks summed into an accumulator.",
          static_cast<double>(c.pushes_accepted));
  for (const auto& [code, n] : c.pushes_refused_by_code) {
    counter("lockstep_server_pushes_refused_total",
            "Pushes answered with an error, by gRPC code.",
            static_cast<double>(n),
            {{"code", absl::StatusCodeToString(code)}});
  }
  counter("lockstep_server_pushes_dropped_late_total",
          "Pushes that arrived after their step closed without them (backup "
          "workers).",
          static_cast<double>(c.pushes_dropped_late));
  counter("lockstep_server_received_bytes_total",
          "Gradient payload bytes received.",
          static_cast<double>(c.bytes_received));
  counter("lockstep_server_sent_bytes_total",
          "Weight payload bytes sent in replies.",
          static_cast<double>(c.bytes_sent));
  counter("lockstep_server_chunk_steps_total",
          "Chunk barriers closed (optimizer runs).",
          static_cast<double>(c.chunk_steps));
  counter("lockstep_server_accumulate_seconds_total",
          "Time spent checking and summing pushed gradients.",
          c.accumulate_seconds);
}

void ServerTelemetry::CollectWorkers(const ServerStatus& s) {
  const char* kWorkersHelp =
      "Workers of the job by state: registered (holding a registration), "
      "pushed (the step being gathered), finished (left).";
  registry_.GetGauge("lockstep_server_workers", kWorkersHelp,
                     {{"state", "registered"}})
      ->Set(static_cast<double>(s.registered_ranks.size()));
  registry_.GetGauge("lockstep_server_workers", kWorkersHelp,
                     {{"state", "pushed"}})
      ->Set(static_cast<double>(s.pushed_ranks.size()));
  registry_.GetGauge("lockstep_server_workers", kWorkersHelp,
                     {{"state", "finished"}})
      ->Set(static_cast<double>(s.finished_ranks.size()));
  for (const WorkerActivity& w : s.workers) {
    if (w.last_contact == absl::InfinitePast()) continue;
    const MetricLabels rank = {{"rank", absl::StrCat(w.rank)}};
    registry_
        .GetGauge("lockstep_server_worker_contact_age_seconds",
                  "Seconds since the rank's last RPC to this shard.", rank)
        ->Set(absl::ToDoubleSeconds(s.now - w.last_contact));
    registry_
        .GetGauge("lockstep_server_worker_step_seconds",
                  "The rank's latest whole step as this shard saw it (between "
                  "its first pushes of two consecutive steps).",
                  rank)
        ->Set(absl::ToDoubleSeconds(w.last_step_time));
    const ActivityWindow& win = w.window;
    // Lateness compares the ranks' same steps: sync mode only.
    if (win.late_steps > 0 && s.signature.has_value() &&
        s.signature->sync.mode == SyncMode::kSync) {
      registry_
          .GetGauge("lockstep_server_worker_lateness_seconds",
                    "Sync mode: median over the rank's recent steps of the "
                    "time from a step's first push (any rank's) to this "
                    "rank's last push of it.",
                    rank)
          ->Set(absl::ToDoubleSeconds(win.lateness));
    }
    if (win.reports == 0) continue;
    const std::pair<const char*, absl::Duration> phases[] = {
        {"input", win.input},
        {"compute", win.compute},
        {"push", win.push},
        {"wait", win.wait}};
    for (const auto& [phase, took] : phases) {
      registry_
          .GetGauge("lockstep_server_worker_phase_seconds",
                    "Median over the rank's recent steps of each phase of "
                    "its step, as its worker reports it: input, compute, "
                    "push, wait.",
                    {{"rank", absl::StrCat(w.rank)}, {"phase", phase}})
          ->Set(absl::ToDoubleSeconds(took));
    }
  }
}

}  // namespace lockstep
