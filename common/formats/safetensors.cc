#include "common/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/env.h"
#include "common/base/status_macros.h"
#include "common/formats/json_value.h"
#include "common/formats/json_writer.h"

namespace lockstep {
namespace {

static_assert(sizeof(float) == 4, "float32 tensors");

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// A JSON number that must be a whole number in [0, 2^53].
absl::StatusOr<int64_t> WholeNumber(const JsonValue& value,
                                    absl::string_view what) {
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (value.type() != JsonValue::Type::kNumber || value.number() < 0 ||
      value.number() > kExact ||
      value.number() !=
          static_cast<double>(static_cast<int64_t>(value.number()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", what, " is not a whole number >= 0"));
  }
  return static_cast<int64_t>(value.number());
}

struct Entry {
  TensorInfo info;
  int64_t begin = 0;
  int64_t end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& name,
                                 const JsonValue& value) {
  if (value.type() != JsonValue::Type::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: tensor \"", name, "\" is not an object"));
  }
  const JsonValue* dtype = value.Find("dtype");
  const JsonValue* shape = value.Find("shape");
  const JsonValue* offsets = value.Find("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr ||
      dtype->type() != JsonValue::Type::kString ||
      shape->type() != JsonValue::Type::kArray ||
      offsets->type() != JsonValue::Type::kArray ||
      offsets->array().size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: tensor \"", name,
        "\" needs a dtype string, a shape list and two data_offsets"));
  }
  if (dtype->string() != "F32") {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: tensor \"", name, "\" is ", dtype->string(),
                     "; Lockstep reads F32 tensors only"));
  }
  Entry entry;
  entry.info.name = name;
  int64_t elements = 1;
  for (const JsonValue& dim : shape->array()) {
    ASSIGN_OR_RETURN(const int64_t d,
                     WholeNumber(dim, absl::StrCat(name, "'s shape")));
    if (d > 0 && elements > std::numeric_limits<int64_t>::max() / 4 / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor \"", name, "\" is too large"));
    }
    elements *= d;
    entry.info.shape.push_back(d);
  }
  ASSIGN_OR_RETURN(
      entry.begin,
      WholeNumber(offsets->array()[0], absl::StrCat(name, "'s data_offsets")));
  ASSIGN_OR_RETURN(
      entry.end,
      WholeNumber(offsets->array()[1], absl::StrCat(name, "'s data_offsets")));
  if (entry.end < entry.begin || entry.end - entry.begin != elements * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: tensor \"", name, "\" of shape ",
        ShapeText(entry.info.shape), " has ", entry.end - entry.begin,
        " bytes of data, not ", elements * 4));
  }
  return entry;
}

}  // namespace

absl::StatusOr<std::string> EncodeSafetensors(
    const std::vector<TensorInfo>& tensors, absl::Span<const float> flat) {
  std::string header = "{";
  int64_t offset = 0;  // In bytes.
  std::set<std::string> names;
  for (const TensorInfo& t : tensors) {
    if (t.name.empty() || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor names must be non-empty and unique, got \"",
          t.name, "\""));
    }
    const int64_t bytes = t.NumElements() * 4;
    if (header.size() > 1) header += ",";
    absl::StrAppend(&header, JsonQuote(t.name),
                    ":{\"dtype\":\"F32\",\"shape\":", ShapeText(t.shape),
                    ",\"data_offsets\":[", offset, ",", offset + bytes, "]}");
    offset += bytes;
  }
  if (offset != static_cast<int64_t>(flat.size()) * 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: the tensors hold ", offset / 4,
                     " values, the weights ", flat.size()));
  }
  header += "}";
  // Readers map the data straight into memory: pad the header with spaces
  // so the data starts 8-byte aligned, as the format's own writer does.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  const size_t data_at = out.size();
  out.resize(data_at + static_cast<size_t>(offset));
  if (offset > 0)
    std::memcpy(&out[data_at], flat.data(), static_cast<size_t>(offset));
  return out;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorInfo>& tensors,
                              absl::Span<const float> flat, Env* env) {
  ASSIGN_OR_RETURN(const std::string bytes, EncodeSafetensors(tensors, flat));
  return WriteFileAtomically(path, bytes, env);
}

namespace {

// The header's length from the first 8 bytes, checked against the limit
// and the file's size.
absl::StatusOr<uint64_t> HeaderLength(const std::string& bytes) {
  if (bytes.size() < 8) {
    return absl::DataLossError(
        absl::StrCat("safetensors: ", bytes.size(),
                     " bytes, too short for the header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) {
    n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  }
  if (n > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: a header of ", n, " bytes is over the limit of ",
        kMaxSafetensorsHeaderBytes));
  }
  if (n > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat("safetensors: the header says ", n,
                                            " bytes, the file has ",
                                            bytes.size() - 8, " after it"));
  }
  return n;
}

// The header's tensors by their byte range in the data, which they must
// cover, `data_bytes` long, without gaps or overlaps.
absl::StatusOr<std::vector<Entry>> SortedEntries(const JsonValue& header,
                                                 int64_t data_bytes) {
  if (header.type() != JsonValue::Type::kObject) {
    return absl::InvalidArgumentError(
        "safetensors: the header is not an object");
  }
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.members()) {
    if (name == "__metadata__") continue;
    ASSIGN_OR_RETURN(Entry entry, ParseEntry(name, value));
    entries.push_back(std::move(entry));
  }
  // By range: an empty tensor at the offset where the next one starts
  // comes first.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::make_pair(a.begin, a.end) < std::make_pair(b.begin, b.end);
  });
  int64_t expect = 0;
  for (const Entry& e : entries) {
    if (e.begin != expect) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor \"", e.info.name, "\" starts at byte ", e.begin,
          " of the data, not ", expect, " (ranges overlap or leave a gap)"));
    }
    expect = e.end;
  }
  if (expect != data_bytes) {
    return absl::DataLossError(
        absl::StrCat("safetensors: the tensors cover ", expect,
                     " bytes of data, the file holds ", data_bytes));
  }
  return entries;
}

}  // namespace

absl::StatusOr<std::vector<NamedTensor>> DecodeSafetensors(
    const std::string& bytes) {
  ASSIGN_OR_RETURN(const uint64_t n, HeaderLength(bytes));
  ASSIGN_OR_RETURN(const JsonValue header,
                   JsonValue::Parse(absl::string_view(bytes).substr(8, n)));
  ASSIGN_OR_RETURN(
      std::vector<Entry> entries,
      SortedEntries(header, static_cast<int64_t>(bytes.size() - 8 - n)));
  std::vector<NamedTensor> out;
  out.reserve(entries.size());
  const char* data = bytes.data() + 8 + n;
  for (Entry& e : entries) {
    NamedTensor t;
    t.values.resize(static_cast<size_t>((e.end - e.begin) / 4));
    if (!t.values.empty()) {
      std::memcpy(t.values.data(), data + e.begin,
                  static_cast<size_t>(e.end - e.begin));
    }
    t.info = std::move(e.info);
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<NamedTensor>> ReadSafetensors(
    const std::string& path, Env* env) {
  ASSIGN_OR_RETURN(const std::string bytes, env->ReadFile(path));
  absl::StatusOr<std::vector<NamedTensor>> tensors = DecodeSafetensors(bytes);
  if (!tensors.ok()) {
    return absl::Status(tensors.status().code(),
                        absl::StrCat(path, ": ", tensors.status().message()));
  }
  return tensors;
}

absl::StatusOr<std::vector<float>> FlattenByName(
    const std::vector<TensorInfo>& tensors,
    const std::vector<NamedTensor>& file) {
  std::vector<float> flat;
  for (const TensorInfo& t : tensors) {
    const auto found = std::find_if(
        file.begin(), file.end(),
        [&](const NamedTensor& f) { return f.info.name == t.name; });
    if (found == file.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the weights file has no tensor \"", t.name, "\""));
    }
    if (found->info.shape != t.shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor \"", t.name, "\" has shape ", ShapeText(found->info.shape),
          " in the weights file, ", ShapeText(t.shape), " in the model"));
    }
    flat.insert(flat.end(), found->values.begin(), found->values.end());
  }
  return flat;
}

}  // namespace lockstep
