#include "tests/bench/study_matrix.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

struct CommSize {
  int64_t params;
  int warmup;
  int iters;
  std::vector<int> workers;
};

std::vector<CommSize> CommSizes(const std::string& link, bool quick) {
  if (quick) return {{10'000, 1, 3, {2}}};
  // 0.4 MB (the tutorial MLP's size: latency and overheads dominate) and
  // 10 MB (bandwidth dominates); 40 MB only where a link model exists, for
  // the cost-model check. Fewer steps for larger M keep each run a few
  // seconds at 1 Gbit/s.
  std::vector<CommSize> sizes = {{100'000, 5, 40, {2, 3, 4}},
                                 {2'500'000, 2, 10, {2, 3, 4}}};
  if (link == "sim") sizes.push_back({10'000'000, 1, 5, {2, 4}});
  return sizes;
}

// PS shard counts for n workers: one server, two, and one per worker (the
// cost model's best case), never more shards than workers.
std::vector<int> ShardCounts(int workers, bool quick) {
  std::vector<int> counts =
      quick ? std::vector<int>{1, 2} : std::vector<int>{1, 2, workers};
  counts.erase(std::remove_if(counts.begin(), counts.end(),
                              [&](int k) { return k > workers; }),
               counts.end());
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

RunSpec Comm(const std::string& link, const CommSize& size, int workers,
             const std::string& mode, int shards) {
  RunSpec spec;
  spec.row.link = link;
  spec.row.kind = "comm";
  spec.row.mode = mode;
  spec.row.label = mode == "ps" ? absl::StrCat("ps k=", shards)
                                : absl::StrCat("allreduce ", mode);
  if (mode == "ps") spec.row.placement = "dedicated";
  spec.row.workers = workers;
  spec.row.shards = shards;
  spec.row.model_bytes = size.params * 4;
  spec.params = size.params;
  spec.warmup = size.warmup;
  spec.iters = size.iters;
  return spec;
}

// An MLP job; `sync` is ps, async, ssp or an all-reduce backend.
RunSpec Mlp(const std::string& link, const std::string& kind,
            const std::string& label, const std::string& sync, int workers,
            int shards, const std::vector<std::string>& data_flags) {
  RunSpec spec;
  spec.row.link = link;
  spec.row.kind = kind;
  spec.row.mode = sync;
  spec.row.label = label;
  spec.row.workers = workers;
  const bool allreduce = sync == "gloo" || sync == "grpc-ring";
  spec.row.shards = allreduce ? 1 : shards;
  spec.row.model_bytes = 101'770 * 4;  // MLP 784-128-10.
  spec.job.sync = allreduce ? "allreduce" : sync;
  spec.job.allreduce = allreduce ? sync : "";
  spec.job.workers = workers;
  spec.job.shards = spec.row.shards;
  spec.job.data_flags = data_flags;
  return spec;
}

RunSpec WithBackup(RunSpec spec, int backup) {
  spec.row.backup_workers = backup;
  spec.job.backup_workers = backup;
  return spec;
}

RunSpec WithStaleness(RunSpec spec, int staleness) {
  spec.row.staleness = staleness;
  spec.job.staleness = staleness;
  return spec;
}

// A fixed delay on one rank (never rank 0, which writes the step log), or a
// random delay on every rank.
RunSpec WithStraggle(RunSpec spec, int rank, int ms, bool random) {
  if (random) {
    spec.row.straggle = absl::StrCat("random:", ms);
    spec.job.straggle_random_ms = ms;
  } else {
    spec.row.straggle = absl::StrCat(rank, ":", ms);
    spec.job.straggle = spec.row.straggle;
  }
  return spec;
}

// The MLP jobs' worker count.
int MlpWorkers(bool quick) { return quick ? 2 : 4; }

// The comm-only runs: every PS shard count (and, on simulated links, the
// colocated shards) and both all-reduce backends, per size and worker count.
void AppendCommRuns(const std::string& link, bool quick,
                    std::vector<RunSpec>* specs) {
  for (const CommSize& size : CommSizes(link, quick)) {
    for (int n : size.workers) {
      for (int k : ShardCounts(n, quick)) {
        specs->push_back(Comm(link, size, n, "ps", k));
      }
      if (link == "sim" || quick) {
        // BytePS's usual deployment when no spare hosts exist: a shard on
        // every worker's host (on loopback every process shares one host,
        // so there is nothing to compare; the quick matrix has it anyway,
        // for the smoke test).
        RunSpec colocated = Comm(link, size, n, "ps", n);
        colocated.colocate = true;
        colocated.row.placement = "colocated";
        colocated.row.label = absl::StrCat("ps k=", n, " colocated");
        specs->push_back(colocated);
      }
      specs->push_back(Comm(link, size, n, "gloo", 1));
      specs->push_back(Comm(link, size, n, "grpc-ring", 1));
    }
  }
}

// Loss curves: every sync mode on the same model, data and seed.
void AppendLossCurves(const std::string& link, bool quick,
                      const std::vector<std::string>& data_flags,
                      std::vector<RunSpec>* specs) {
  const int n = MlpWorkers(quick);
  const auto mlp = [&](const std::string& label, const std::string& sync,
                       int shards) {
    return Mlp(link, "mlp", label, sync, n, shards, data_flags);
  };
  std::vector<RunSpec> curves = {mlp("ps k=1", "ps", 1),
                                 mlp("allreduce gloo", "gloo", 1)};
  if (!quick) {
    curves.push_back(mlp("ps k=2", "ps", 2));
    curves.push_back(mlp("allreduce grpc-ring", "grpc-ring", 1));
    curves.push_back(mlp("async", "async", 1));
    curves.push_back(WithStaleness(mlp("ssp s=2", "ssp", 1), 2));
    curves.push_back(WithBackup(mlp("ps b=1", "ps", 1), 1));
  }
  for (RunSpec& spec : curves) {
    // Quick: a few steps; full: one epoch (234 steps of 4 x 64).
    spec.job.max_steps = quick ? 10 : 0;
    specs->push_back(spec);
  }
}

// Stragglers: the last rank sleeps before every step, or every rank a
// random 0..ms; synchronous training waits for the slowest, backup
// workers let a step close without it.
void AppendStragglers(const std::string& link, bool quick,
                      const std::vector<std::string>& data_flags,
                      std::vector<RunSpec>* specs) {
  const int n = MlpWorkers(quick);
  const int slow = n - 1;
  const int ms = quick ? 5 : 40;
  const auto straggler = [&](const std::string& what, const std::string& sync,
                             int backup, bool random) {
    std::string label = sync == "ps" && backup > 0
                            ? absl::StrCat("ps b=", backup)
                        : sync == "gloo" ? "allreduce gloo"
                                         : sync;
    absl::StrAppend(&label, " (", what, ")");  // No commas: CSV stays plain.
    RunSpec spec = WithBackup(
        Mlp(link, "straggler", label, sync, n, 1, data_flags), backup);
    if (what != "none") spec = WithStraggle(spec, slow, ms, random);
    spec.job.max_steps = quick ? 8 : 100;
    return spec;
  };
  const std::string fixed = absl::StrFormat("rank %d +%dms", slow, ms);
  const std::string random = absl::StrFormat("random 0-%dms", ms);
  std::vector<RunSpec> stragglers = {straggler(fixed, "ps", 0, false),
                                     straggler(fixed, "ps", 1, false)};
  if (!quick) {
    stragglers.insert(stragglers.begin(), straggler("none", "ps", 0, false));
    stragglers.push_back(straggler(fixed, "gloo", 0, false));
    stragglers.push_back(straggler(fixed, "async", 0, false));
    stragglers.push_back(straggler(random, "ps", 0, true));
    stragglers.push_back(straggler(random, "ps", 1, true));
  }
  for (RunSpec& spec : stragglers) specs->push_back(spec);
}

// Rounds: LocalSGD and DiLoCo (a push every H steps) against a push every
// step (sync PS, ring all-reduce), each for the tutorial's 5 epochs with
// the test accuracy after every epoch: time to a target accuracy, and the
// bytes each worker sends.
void AppendRounds(const std::string& link, bool quick,
                  const std::vector<std::string>& data_flags,
                  std::vector<RunSpec>* specs) {
  const int n = MlpWorkers(quick);
  const auto run = [&](const std::string& label, const std::string& sync,
                       int local_steps) {
    RunSpec spec = Mlp(link, "rounds", label, sync, n, 1, data_flags);
    spec.row.local_steps = local_steps;
    spec.row.target_accuracy = kRoundsTargetAccuracy;
    spec.job.local_steps = local_steps;
    spec.job.eval_every_epoch = true;
    spec.job.epochs = quick ? 2 : 5;
    spec.job.max_steps = quick ? 8 : 0;
    return spec;
  };
  if (quick) {
    specs->push_back(run("diloco H=2", "diloco", 2));
    return;
  }
  specs->push_back(run("ps k=1", "ps", 0));
  specs->push_back(run("allreduce gloo", "gloo", 0));
  specs->push_back(run("localsgd H=10", "localsgd", 10));
  specs->push_back(run("diloco H=10", "diloco", 10));
  specs->push_back(run("diloco H=50", "diloco", 50));
}

}  // namespace

std::vector<RunSpec> StudyMatrix(const std::string& link, bool quick,
                                 const std::vector<std::string>& data_flags) {
  std::vector<RunSpec> specs;
  AppendCommRuns(link, quick, &specs);
  AppendLossCurves(link, quick, data_flags, &specs);
  AppendStragglers(link, quick, data_flags, &specs);
  AppendRounds(link, quick, data_flags, &specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].row.run_id =
        absl::StrFormat("%s-%s-%03d", link, specs[i].row.kind, i);
  }
  return specs;
}

}  // namespace lockstep
