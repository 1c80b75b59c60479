#include "worker/exchange/inner_state_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "common/formats/safetensors.h"

namespace lockstep {
namespace {

constexpr absl::string_view kSuffix = ".safetensors";

// Each slot as a tensor of the file.
std::vector<TensorInfo> SlotTensors(Optimizer& optimizer) {
  std::vector<TensorInfo> tensors;
  for (const auto& [name, values] : optimizer.Slots()) {
    tensors.push_back({name, {static_cast<int64_t>(values.size())}});
  }
  return tensors;
}

}  // namespace

std::vector<float> FlatSlots(Optimizer& optimizer) {
  std::vector<float> flat;
  for (const auto& [name, values] : optimizer.Slots()) {
    flat.insert(flat.end(), values.begin(), values.end());
  }
  return flat;
}

void SetFlatSlots(Optimizer& optimizer, absl::Span<const float> flat) {
  size_t at = 0;
  for (const auto& [name, values] : optimizer.Slots()) {
    if (at + values.size() > flat.size()) return;  // Not the same kind.
    std::copy(flat.begin() + at, flat.begin() + at + values.size(),
              values.begin());
    at += values.size();
  }
}

std::string InnerStateStore::PathOf(int64_t version) const {
  return absl::StrCat(dir_, "/inner-rank", rank_, "-v", version, kSuffix);
}

absl::StatusOr<std::vector<int64_t>> InnerStateStore::Versions() const {
  std::vector<int64_t> versions;
  absl::StatusOr<std::vector<std::string>> names = env_->GetChildren(dir_);
  if (absl::IsNotFound(names.status())) return versions;
  RETURN_IF_ERROR(names.status());
  const std::string prefix = absl::StrCat("inner-rank", rank_, "-v");
  for (absl::string_view name : *names) {
    int64_t version = 0;
    if (absl::ConsumePrefix(&name, prefix) &&
        absl::ConsumeSuffix(&name, kSuffix) &&
        absl::SimpleAtoi(name, &version) && version >= 0) {
      versions.push_back(version);
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

absl::Status InnerStateStore::Save(int64_t version, Optimizer& optimizer) {
  if (optimizer.Slots().empty()) return absl::OkStatus();
  RETURN_IF_ERROR(env_->CreateDirs(dir_));
  RETURN_IF_ERROR(WriteSafetensors(PathOf(version), SlotTensors(optimizer),
                                   FlatSlots(optimizer), env_));
  // Versions (version - kKeep, version] stay: older ones are no longer
  // needed, newer ones are another history's (the servers stepped back, or
  // the folder was an earlier run's). A failed removal leaves a file.
  ASSIGN_OR_RETURN(std::vector<int64_t> versions, Versions());
  for (int64_t v : versions) {
    if (v <= version - kKeep || v > version) {
      env_->RemoveFile(PathOf(v)).IgnoreError();
    }
  }
  return absl::OkStatus();
}

void InnerStateStore::ForgetAfter(int64_t version) {
  absl::StatusOr<std::vector<int64_t>> versions = Versions();
  if (!versions.ok()) return;
  for (int64_t v : *versions) {
    if (v > version) env_->RemoveFile(PathOf(v)).IgnoreError();
  }
}

absl::StatusOr<bool> InnerStateStore::Load(int64_t version,
                                           Optimizer& optimizer) const {
  if (optimizer.Slots().empty()) return false;
  const std::string path = PathOf(version);
  absl::StatusOr<std::vector<NamedTensor>> file = ReadSafetensors(path, env_);
  if (absl::IsNotFound(file.status())) return false;
  RETURN_IF_ERROR(file.status());
  const std::vector<TensorInfo> want = SlotTensors(optimizer);
  absl::StatusOr<std::vector<float>> flat = FlattenByName(want, *file);
  if (!flat.ok() || file->size() != want.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " holds another optimizer's or model's state (",
                     flat.ok() ? "other slots" : flat.status().message(),
                     "): is --inner_state_dir another job's?"));
  }
  SetFlatSlots(optimizer, *flat);
  return true;
}

}  // namespace lockstep
