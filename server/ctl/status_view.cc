#include "server/ctl/status_view.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

bool Contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

std::string Ranks(const std::vector<int>& ranks) {
  return ranks.empty() ? "none" : absl::StrJoin(ranks, ",");
}

// One rank over every shard that answered.
struct RankView {
  bool registered = false;
  bool finished = true;
  bool pushed = true;
  absl::Duration age = absl::InfiniteDuration();  // Since its last contact.
  int64_t last_step = -1;
  double step_seconds = 0;
};

}  // namespace

// Columns padded to their widest cell, two spaces apart; no trailing
// spaces.
std::string RenderTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string FormatAge(absl::Time then, absl::Time now) {
  if (then == absl::InfinitePast()) return "never";
  const absl::Duration age = std::max(absl::ZeroDuration(), now - then);
  const int64_t s = absl::ToInt64Seconds(age);
  if (s < 10) return absl::StrFormat("%.1fs ago", absl::ToDoubleSeconds(age));
  if (s < 60) return absl::StrFormat("%ds ago", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds ago", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm ago", s / 3600, (s / 60) % 60);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

bool JobFinished(const std::vector<ShardReading>& shards) {
  bool any = false;
  for (const ShardReading& r : shards) {
    if (!r.status.ok()) continue;
    any = true;
    if (static_cast<int>(r.status->finished_ranks.size()) <
        r.status->num_workers) {
      return false;
    }
  }
  return any;
}

namespace {

// The job's first lines: its version, workers, shards and server time, and
// the model.
std::string JobHeader(const std::vector<const ShardStatus*>& ok,
                      size_t num_shards, int64_t version, bool allreduce) {
  const int workers = ok[0]->num_workers;
  std::string out = absl::StrCat(
      "Lockstep job: ",
      version >= 0 ? absl::StrCat("version ", version, " (step ", version, ")")
      : allreduce  ? std::string("all-reduce among the workers")
                   : std::string("no weights yet"),
      ", ", workers, workers == 1 ? " worker, " : " workers, ", num_shards,
      num_shards == 1 ? " shard" : " shards", "  [",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", ok[0]->server_time,
                       absl::UTCTimeZone()),
      "]\n");
  for (const ShardStatus* s : ok) {
    if (!s->model.empty()) {
      absl::StrAppend(&out, "Model: ", s->model, "\n");
      break;
    }
  }
  return out;
}

// An all-reduce job's server: no model registered, no rank registered, and
// steps that only the ranks' own reports (Coordinator.ReportSteps) made.
bool AllReduceJob(const std::vector<const ShardStatus*>& ok,
                  const std::vector<RankView>& ranks, int64_t version) {
  if (version >= 0) return false;
  for (const ShardStatus* s : ok) {
    if (!s->model.empty() || !s->registered_ranks.empty()) return false;
  }
  for (const RankView& r : ranks) {
    if (r.last_step >= 0) return true;
  }
  return false;
}

// Each rank as the shards that answered see it together; `version` is the
// lowest of theirs.
std::vector<RankView> ViewRanks(const std::vector<const ShardStatus*>& ok,
                                int64_t version) {
  std::vector<RankView> ranks(ok[0]->num_workers);
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    RankView& v = ranks[r];
    for (const ShardStatus* s : ok) {
      v.registered |= Contains(s->registered_ranks, r);
      v.finished &= Contains(s->finished_ranks, r);
      // Shards already past `version` have every push of it.
      if (s->version == version) v.pushed &= Contains(s->pushed_ranks, r);
      if (r < static_cast<int>(s->workers.size())) {
        const ShardStatus::Worker& w = s->workers[r];
        v.last_step = std::max(v.last_step, w.last_step);
        if (w.last_contact != absl::InfinitePast() &&
            s->server_time - w.last_contact < v.age) {
          v.age = s->server_time - w.last_contact;
          v.step_seconds = w.last_step_seconds;
        }
      }
    }
  }
  return ranks;
}

// The line on where the job stands: done, waiting for version 0, or who
// has pushed the step under way.
std::string StepLine(const std::vector<ShardReading>& shards,
                     const ShardStatus& first,
                     const std::vector<RankView>& ranks, int64_t version,
                     bool allreduce) {
  std::vector<int> pushed, awaited;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].finished) continue;
    (ranks[r].pushed && version >= 0 ? pushed : awaited).push_back(r);
  }
  if (JobFinished(shards)) return "Every worker has left: the job is done\n";
  if (allreduce) {
    return "The ranks train among themselves; their steps as they report "
           "them:\n";
  }
  if (version < 0) {
    return absl::StrCat(
        "Waiting for version 0 (rank 0 uploads it); "
        "registered: ",
        Ranks(first.registered_ranks), "\n");
  }
  return absl::StrCat("Step ", version, ": pushed by ", pushed.size(), " of ",
                      pushed.size() + awaited.size(), " (", Ranks(pushed),
                      "); awaiting ", Ranks(awaited), "\n");
}

// A row per rank: its state, the step under way, its last contact and
// step.
std::string RankTable(const std::vector<RankView>& ranks, int64_t version,
                      bool allreduce) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"RANK", "STATE",
                  version >= 0 ? absl::StrCat("STEP ", version) : "STEP",
                  "LAST CONTACT", "STEP TIME", "LAST STEP"});
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const RankView& v = ranks[r];
    const bool seen = v.age != absl::InfiniteDuration();
    // An all-reduce rank registers nowhere: in touch is in the job.
    const bool in = v.registered || (allreduce && seen);
    const char* state = v.finished ? "finished"
                        : in       ? (v.last_step >= 0 ? "training" : "joined")
                        : seen     ? "away"
                                   : "absent";
    const char* step = v.finished    ? "left"
                       : version < 0 ? "-"
                       : v.pushed    ? "pushed"
                                     : "awaited";
    rows.push_back(
        {absl::StrCat(r), state, step,
         seen ? FormatAge(absl::UnixEpoch(), absl::UnixEpoch() + v.age)
              : "never",
         v.step_seconds > 0 ? absl::StrFormat("%.1f ms", v.step_seconds * 1e3)
                            : "-",
         v.last_step >= 0 ? absl::StrCat(v.last_step) : "-"});
  }
  return RenderTable(rows);
}

// Whether a shard owns a chunk of the model, as far as it knows one.
bool OwnsChunks(const ShardStatus& s) {
  return s.model.empty() || s.num_chunks > 0;
}

// A row per shard (question marks for one that did not answer), the
// refused pushes by code, and the shards' errors.
std::string ShardTable(const std::vector<ShardReading>& shards) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SHARD", "ADDRESS", "HEALTH", "VERSION", "PUSHES", "REFUSED",
                  "DROPPED", "IN", "OUT"});
  std::vector<std::string> errors;
  std::map<std::string, int64_t> refused;
  std::vector<int> empty;  // Shards that own no chunk.
  int64_t given_up = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardReading& r = shards[i];
    const std::string health =
        r.health.ok() ? std::string(HealthStatusName(*r.health)) : "?";
    if (!r.status.ok()) {
      rows.push_back(
          {absl::StrCat(i), r.address, health, "?", "?", "?", "?", "?", "?"});
      errors.push_back(std::string(r.status.status().message()));
      continue;
    }
    const ShardStatus& s = *r.status;
    if (!OwnsChunks(s)) empty.push_back(s.shard);
    rows.push_back({absl::StrCat(s.shard), r.address, health,
                    OwnsChunks(s) ? absl::StrCat(s.version) : "none",
                    absl::StrCat(s.pushes_accepted),
                    absl::StrCat(s.pushes_refused),
                    absl::StrCat(s.pushes_dropped_late),
                    FormatBytes(s.bytes_received), FormatBytes(s.bytes_sent)});
    for (const auto& [code, n] : s.pushes_refused_by_code) refused[code] += n;
    given_up += s.waits_cancelled;
  }
  std::string out = RenderTable(rows);
  if (!empty.empty()) {
    absl::StrAppend(&out, "Shard(s) ", absl::StrJoin(empty, ","),
                    " own no chunk of the model (too few values for this "
                    "many shards) and hold no version\n");
  }
  if (!refused.empty()) {
    std::vector<std::string> parts;
    for (const auto& [code, n] : refused)
      parts.push_back(absl::StrCat(code, " ", n));
    absl::StrAppend(&out, "Refused pushes: ", absl::StrJoin(parts, ", "), "\n");
  }
  if (given_up > 0) {
    absl::StrAppend(&out, "Waiting pushes and pulls their callers gave up: ",
                    given_up, "\n");
  }
  for (const std::string& e : errors) absl::StrAppend(&out, "error: ", e, "\n");
  return out;
}

}  // namespace

std::string RenderJobStatus(const std::vector<ShardReading>& shards) {
  std::vector<const ShardStatus*> ok;
  for (const ShardReading& r : shards) {
    if (r.status.ok()) ok.push_back(&*r.status);
  }
  if (ok.empty()) {
    std::string out = "Lockstep job: no server shard answered\n";
    for (const ShardReading& r : shards) {
      absl::StrAppend(&out, "  ", r.status.status().message(), "\n");
    }
    return out;
  }
  // A shard that owns no chunk (the plan leaves some none when N <=
  // S (S - 1)) never holds a version: the job's is the other shards'.
  std::vector<const ShardStatus*> holding;
  for (const ShardStatus* s : ok) {
    if (OwnsChunks(*s)) holding.push_back(s);
  }
  if (holding.empty()) holding = ok;
  int64_t version = holding[0]->version;
  for (const ShardStatus* s : holding) version = std::min(version, s->version);
  const std::vector<RankView> ranks = ViewRanks(holding, version);
  const bool allreduce = AllReduceJob(holding, ranks, version);
  return absl::StrCat(JobHeader(ok, shards.size(), version, allreduce),
                      StepLine(shards, *ok[0], ranks, version, allreduce), "\n",
                      RankTable(ranks, version, allreduce), "\n",
                      ShardTable(shards));
}

}  // namespace lockstep
