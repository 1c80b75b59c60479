#include "server/ctl/reshard.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/env.h"
#include "common/base/status_macros.h"
#include "common/model/model_signature.h"
#include "server/core/checkpoint.h"

namespace lockstep {
namespace {

// S of FROM's "shard-I-of-S" folders: one S, and every I in [0, S).
absl::StatusOr<int> OldShardCount(Env* env, const std::string& from) {
  ASSIGN_OR_RETURN(const std::vector<std::string> names,
                   env->GetChildren(from));
  std::set<std::pair<int, int>> found;  // (S, I)
  for (const std::string& name : names) {
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, "shard-")) continue;
    const std::vector<absl::string_view> parts = absl::StrSplit(rest, "-of-");
    int shard = 0;
    int shards = 0;
    if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &shard) &&
        absl::SimpleAtoi(parts[1], &shards) && shards > 0 && shard >= 0 &&
        shard < shards) {
      found.emplace(shards, shard);
    }
  }
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("no shard-I-of-S folders in ", from,
                                            " (a job's --checkpoint_dir)"));
  }
  const int shards = found.begin()->first;
  if (found.rbegin()->first != shards ||
      static_cast<int>(found.size()) != shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        from, " holds the folders of ", found.size(),
        " shard(s) of jobs of different shard counts, or not every shard of "
        "one: reshard reads one job's --checkpoint_dir"));
  }
  return shards;
}

// The newest version every shard holds.
absl::StatusOr<int64_t> CommonVersion(
    const std::vector<std::unique_ptr<const CheckpointStore>>& stores,
    const std::string& from) {
  std::vector<int64_t> common = stores[0]->Versions();
  for (size_t i = 1; i < stores.size(); ++i) {
    const std::vector<int64_t> mine = stores[i]->Versions();
    std::vector<int64_t> both;
    std::set_intersection(common.begin(), common.end(), mine.begin(),
                          mine.end(), std::back_inserter(both));
    common = std::move(both);
  }
  if (common.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no version of which every shard in ", from, " holds a checkpoint"));
  }
  return common.back();
}

// One checkpoint's chunks laid into the flat vectors. `seen` marks the old
// plan's chunks; `slot_names[c]` lists chunk c's slots.
struct Flat {
  std::vector<float> weights;
  std::vector<std::pair<std::string, std::vector<float>>> slots;
  std::vector<bool> seen;
  std::vector<std::vector<std::string>> slot_names;
};

std::vector<float>& SlotVector(Flat& flat, const std::string& name,
                               size_t size) {
  for (auto& [n, values] : flat.slots) {
    if (n == name) return values;
  }
  flat.slots.emplace_back(name, std::vector<float>(size));
  return flat.slots.back().second;
}

absl::Status LayOut(const ShardCheckpoint& checkpoint, const ChunkPlan& plan,
                    int64_t version, Flat& flat) {
  for (const ChunkState& state : checkpoint.chunks) {
    if (state.chunk < 0 || state.chunk >= plan.num_chunks()) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", checkpoint.shard, " holds chunk ", state.chunk,
                       ", not a chunk of its model"));
    }
    const Chunk& chunk = plan.chunks()[state.chunk];
    const size_t size = static_cast<size_t>(chunk.size);
    if (chunk.shard != checkpoint.shard || flat.seen[state.chunk] ||
        state.weights.size() != size) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", checkpoint.shard, "'s chunk ", state.chunk,
          " does not fit the model's plan (another shard's, a second copy, "
          "or ",
          state.weights.size(), " values for ", size, ")"));
    }
    if (state.version != version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", checkpoint.shard, "'s chunk ", state.chunk,
          " is at version ", state.version, ", not ", version,
          ": its chunks drifted apart (async or SSP), and reshard needs "
          "one version for all"));
    }
    flat.seen[state.chunk] = true;
    std::copy(state.weights.begin(), state.weights.end(),
              flat.weights.begin() + chunk.offset);
    for (const auto& [name, values] : state.slots) {
      if (values.size() != size) {
        return absl::FailedPreconditionError(
            absl::StrCat("slot ", name, " of chunk ", state.chunk, " holds ",
                         values.size(), " values for ", size));
      }
      std::copy(
          values.begin(), values.end(),
          SlotVector(flat, name, flat.weights.size()).begin() + chunk.offset);
      flat.slot_names[state.chunk].push_back(name);
    }
  }
  return absl::OkStatus();
}

// The slots of the old chunks of one kind (parameters or state), which
// must all have the same.
absl::StatusOr<std::vector<std::string>> SlotsOfKind(const ChunkPlan& plan,
                                                     const Flat& flat,
                                                     bool state) {
  std::optional<std::vector<std::string>> names;
  int first = 0;
  for (const Chunk& chunk : plan.chunks()) {
    if (chunk.state != state) continue;
    if (!names.has_value()) {
      names = flat.slot_names[chunk.index];
      first = chunk.index;
    }
    if (*names != flat.slot_names[chunk.index]) {
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", chunk.index,
                       " has other optimizer slots than chunk ", first));
    }
  }
  return names.value_or(std::vector<std::string>());
}

}  // namespace

absl::StatusOr<ReshardResult> Reshard(const ReshardOptions& options) {
  if (options.num_shards < 1 || options.from.empty() || options.to.empty()) {
    return absl::InvalidArgumentError(
        "reshard needs FROM, TO and --num_shards >= 1");
  }
  Env* env = Env::Default();
  ReshardResult result;
  ASSIGN_OR_RETURN(result.old_shards, OldShardCount(env, options.from));
  std::vector<std::unique_ptr<const CheckpointStore>> stores;
  for (int i = 0; i < result.old_shards; ++i) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<const CheckpointStore> store,
        CheckpointStore::OpenToRead(options.from, i, result.old_shards, env));
    stores.push_back(std::move(store));
  }
  ASSIGN_OR_RETURN(result.version, CommonVersion(stores, options.from));
  std::vector<ShardCheckpoint> old;
  for (const auto& store : stores) {
    ASSIGN_OR_RETURN(ShardCheckpoint checkpoint, store->Load(result.version));
    old.push_back(std::move(checkpoint));
  }
  const ModelSignature& signature = old[0].signature;
  for (const ShardCheckpoint& c : old) {
    const std::string difference = DescribeDifference(signature, c.signature);
    if (!difference.empty() || c.num_workers != old[0].num_workers ||
        c.num_shards != result.old_shards) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", c.shard, "'s checkpoint of version ", result.version,
          " is not of shard 0's job: ",
          difference.empty() ? "another worker or shard count" : difference));
    }
  }
  const int64_t params = signature.NumParameters();
  const int64_t state = signature.NumStateElements();
  ASSIGN_OR_RETURN(const ChunkPlan old_plan,
                   ChunkPlan::Create(params, signature.chunk_bytes,
                                     result.old_shards, state));
  Flat flat;
  flat.weights.resize(static_cast<size_t>(params + state));
  flat.seen.assign(old_plan.num_chunks(), false);
  flat.slot_names.resize(old_plan.num_chunks());
  for (const ShardCheckpoint& c : old) {
    RETURN_IF_ERROR(LayOut(c, old_plan, result.version, flat));
  }
  for (const Chunk& chunk : old_plan.chunks()) {
    if (!flat.seen[chunk.index]) {
      return absl::FailedPreconditionError(
          absl::StrCat("no shard's checkpoint of version ", result.version,
                       " holds chunk ", chunk.index));
    }
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> param_slots,
                   SlotsOfKind(old_plan, flat, /*state=*/false));
  ASSIGN_OR_RETURN(const std::vector<std::string> state_slots,
                   SlotsOfKind(old_plan, flat, /*state=*/true));

  ModelSignature resharded = signature;
  resharded.num_shards = options.num_shards;
  resharded.chunk_bytes = ResolveChunkBytes(options.chunk_bytes, params + state,
                                            options.num_shards);
  ASSIGN_OR_RETURN(const ChunkPlan plan,
                   ChunkPlan::Create(params, resharded.chunk_bytes,
                                     options.num_shards, state));
  std::vector<ShardCheckpoint> out(options.num_shards);
  for (int j = 0; j < options.num_shards; ++j) {
    out[j].signature = resharded;
    out[j].shard = j;
    out[j].num_shards = options.num_shards;
    out[j].num_workers = old[0].num_workers;
    out[j].version = result.version;
  }
  for (const Chunk& chunk : plan.chunks()) {
    ChunkState c;
    c.chunk = chunk.index;
    c.version = result.version;
    const auto begin = flat.weights.begin() + chunk.offset;
    c.weights.assign(begin, begin + chunk.size);
    for (const std::string& name : chunk.state ? state_slots : param_slots) {
      const std::vector<float>& values =
          SlotVector(flat, name, flat.weights.size());
      c.slots.emplace_back(
          name, std::vector<float>(values.begin() + chunk.offset,
                                   values.begin() + chunk.offset + chunk.size));
    }
    out[chunk.shard].chunks.push_back(std::move(c));
  }
  std::vector<std::unique_ptr<CheckpointStore>> targets;
  for (int j = 0; j < options.num_shards; ++j) {
    ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStore> store,
                     CheckpointStore::Create(options.to, j, options.num_shards,
                                             /*keep=*/1, env));
    if (!store->List().empty()) {
      return absl::AlreadyExistsError(absl::StrCat(
          options.to, " already holds checkpoints of shard ", j, " of ",
          options.num_shards, ": reshard into an empty folder"));
    }
    targets.push_back(std::move(store));
  }
  for (int j = 0; j < options.num_shards; ++j) {
    ASSIGN_OR_RETURN(std::string path, targets[j]->Save(out[j]));
    result.written.push_back(std::move(path));
  }
  return result;
}

}  // namespace lockstep
