#include "common/rpc/wire_format.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/varint.h"

namespace lockstep {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

// PushRequest field numbers (see lockstep.proto).
constexpr uint32_t kPushRank = 1;
constexpr uint32_t kPushIncarnation = 2;
constexpr uint32_t kPushStep = 3;
constexpr uint32_t kPushChunk = 4;
constexpr uint32_t kPushDtype = 5;
constexpr uint32_t kPushData = 6;
constexpr uint32_t kPushGeneration = 7;
constexpr uint32_t kPushBatchShard = 8;
constexpr uint32_t kPushReportStep = 9;  // The step + 1; 0: no report.
constexpr uint32_t kPushReportInput = 10;
constexpr uint32_t kPushReportCompute = 11;
constexpr uint32_t kPushReportPush = 12;
constexpr uint32_t kPushReportWait = 13;

// PushResponse / PullResponse field numbers.
constexpr uint32_t kReplyVersion = 1;
constexpr uint32_t kReplyChunk = 2;
constexpr uint32_t kReplyDtype = 3;
constexpr uint32_t kReplyData = 4;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

// Reads bytes across slice boundaries.
class Cursor {
 public:
  explicit Cursor(const std::vector<absl::string_view>& parts)
      : parts_(parts) {
    SkipEmpty();
  }

  bool AtEnd() const { return part_ == parts_.size(); }

  // At most `max_bytes` bytes: 10 for a value, 5 for a key or a length
  // (protobuf reads those as 32-bit and refuses longer encodings).
  absl::StatusOr<uint64_t> Varint(int max_bytes = 10) {
    uint64_t value = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (AtEnd()) return Malformed("truncated varint");
      const uint8_t byte = static_cast<uint8_t>(parts_[part_][pos_]);
      Advance(1);
      value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) return value;
    }
    return Malformed(absl::StrCat("varint longer than ", max_bytes, " bytes"));
  }

  // Takes `n` bytes as pieces referring to the slices.
  absl::Status Take(uint64_t n, std::vector<absl::string_view>* out) {
    while (n > 0) {
      if (AtEnd()) return Malformed("truncated field");
      const absl::string_view part = parts_[part_].substr(pos_);
      const size_t take = static_cast<size_t>(
          std::min<uint64_t>(n, part.size()));
      if (out != nullptr) out->push_back(part.substr(0, take));
      Advance(take);
      n -= take;
    }
    return absl::OkStatus();
  }

 private:
  void Advance(size_t n) {
    pos_ += n;
    if (pos_ == parts_[part_].size()) {
      ++part_;
      pos_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (part_ < parts_.size() && parts_[part_].empty()) ++part_;
  }

  const std::vector<absl::string_view>& parts_;
  size_t part_ = 0;
  size_t pos_ = 0;
};

void AppendVarintField(uint32_t field, int64_t value, std::string* out) {
  if (value == 0) return;  // proto3 leaves defaults out.
  AppendVarint(uint64_t{field} << 3 | kVarint, out);
  AppendVarint(static_cast<uint64_t>(value), out);
}

// Releases the reference a reply slice holds on its payload's owner.
void ReleaseOwner(void* owner) {
  delete static_cast<std::shared_ptr<const void>*>(owner);
}

void AppendBytesKey(uint32_t field, size_t size, std::string* out) {
  AppendVarint(uint64_t{field} << 3 | kLengthDelimited, out);
  AppendVarint(size, out);
}

// Walks the fields of a message held in `buffer`'s slices: on_varint(field,
// value) for varints, and `data` receives the pieces of length-delimited
// field `data_field` (the last occurrence wins, as in protobuf). Other
// fields are skipped.
template <typename OnVarint>
absl::Status ParseMessage(const grpc::ByteBuffer& buffer, uint32_t data_field,
                          std::vector<grpc::Slice>* slices,
                          std::vector<absl::string_view>* data,
                          OnVarint on_varint) {
  if (!buffer.Valid()) return Malformed("empty buffer");
  grpc::Status dumped = buffer.Dump(slices);
  if (!dumped.ok()) return Malformed(dumped.error_message());
  std::vector<absl::string_view> parts;
  parts.reserve(slices->size());
  for (const grpc::Slice& s : *slices) {
    parts.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  Cursor cursor(parts);
  while (!cursor.AtEnd()) {
    absl::StatusOr<uint64_t> key = cursor.Varint(5);
    if (!key.ok()) return key.status();
    if (*key >> 3 == 0 || *key >> 3 > 0x1fffffff) {
      return Malformed("field number out of range");  // As protobuf says.
    }
    const uint32_t field = static_cast<uint32_t>(*key >> 3);
    const int type = static_cast<int>(*key & 7);
    if (type == kVarint) {
      absl::StatusOr<uint64_t> v = cursor.Varint();
      if (!v.ok()) return v.status();
      // Negative int32 values arrive sign-extended to 64 bits.
      on_varint(field, static_cast<int64_t>(*v));
    } else if (type == kLengthDelimited) {
      absl::StatusOr<uint64_t> length = cursor.Varint(5);
      if (!length.ok()) return length.status();
      if (*length > 0x7fffffff) return Malformed("length above 2 GiB");
      std::vector<absl::string_view>* out = nullptr;
      if (field == data_field) {
        data->clear();
        out = data;
      }
      if (absl::Status s = cursor.Take(*length, out); !s.ok()) return s;
    } else if (type == kFixed64 || type == kFixed32) {
      if (absl::Status s = cursor.Take(type == kFixed64 ? 8 : 4, nullptr);
          !s.ok()) {
        return s;
      }
    } else {
      return Malformed(absl::StrCat("unsupported wire type ", type));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PushView> ParsePushRequest(const grpc::ByteBuffer& buffer) {
  PushView view;
  absl::Status s = ParseMessage(
      buffer, kPushData, &view.slices, &view.data,
      [&view](uint32_t field, int64_t value) {
        switch (field) {
          case kPushRank: view.rank = static_cast<int32_t>(value); break;
          case kPushIncarnation: view.incarnation = value; break;
          case kPushStep: view.step = value; break;
          case kPushChunk: view.chunk = static_cast<int32_t>(value); break;
          case kPushDtype: view.dtype = static_cast<int32_t>(value); break;
          case kPushGeneration:
            view.group_generation = value;
            break;
          case kPushBatchShard:
            view.batch_shard = static_cast<int32_t>(value);
            break;
          case kPushReportStep:  // 0 (or a forged negative): no report.
            view.report.step = value > 0 ? value - 1 : -1;
            break;
          case kPushReportInput: view.report.input_us = value; break;
          case kPushReportCompute: view.report.compute_us = value; break;
          case kPushReportPush: view.report.push_us = value; break;
          case kPushReportWait: view.report.wait_us = value; break;
          default: break;  // Unknown fields are skipped, as protobuf does.
        }
      });
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed PushRequest: ", s.message()));
  }
  return view;
}

absl::StatusOr<WeightsView> ParseWeightsReply(const grpc::ByteBuffer& buffer) {
  WeightsView view;
  absl::Status s = ParseMessage(
      buffer, kReplyData, &view.slices, &view.data,
      [&view](uint32_t field, int64_t value) {
        switch (field) {
          case kReplyVersion: view.version = value; break;
          case kReplyChunk: view.chunk = static_cast<int32_t>(value); break;
          case kReplyDtype: view.dtype = static_cast<int32_t>(value); break;
          default: break;
        }
      });
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed weights reply: ", s.message()));
  }
  return view;
}

grpc::ByteBuffer MakeWeightsReply(int64_t version, int32_t chunk,
                                  int32_t dtype, absl::string_view payload,
                                  std::shared_ptr<const void> owner) {
  std::string header;
  AppendVarintField(kReplyVersion, version, &header);
  AppendVarintField(kReplyChunk, chunk, &header);
  AppendVarintField(kReplyDtype, dtype, &header);
  if (!payload.empty()) AppendBytesKey(kReplyData, payload.size(), &header);
  grpc::Slice slices[2] = {
      grpc::Slice(header),
      payload.empty()
          ? grpc::Slice()
          : grpc::Slice(const_cast<char*>(payload.data()), payload.size(),
                        ReleaseOwner,
                        new std::shared_ptr<const void>(std::move(owner)))};
  return grpc::ByteBuffer(slices, payload.empty() ? 1 : 2);
}

grpc::ByteBuffer MakePushRequest(int32_t rank, int64_t incarnation,
                                 int64_t step, int32_t chunk, int32_t dtype,
                                 absl::string_view payload,
                                 const PushSlot& slot) {
  std::string header;
  AppendVarintField(kPushRank, rank, &header);
  AppendVarintField(kPushIncarnation, incarnation, &header);
  AppendVarintField(kPushStep, step, &header);
  AppendVarintField(kPushChunk, chunk, &header);
  AppendVarintField(kPushDtype, dtype, &header);
  if (slot.generation != 0) {
    AppendVarintField(kPushGeneration, slot.generation, &header);
    AppendVarintField(kPushBatchShard, slot.batch_shard, &header);
  }
  if (const StepReport& r = slot.report; r.step >= 0) {
    AppendVarintField(kPushReportStep, r.step + 1, &header);
    AppendVarintField(kPushReportInput, std::max<int64_t>(r.input_us, 0),
                      &header);
    AppendVarintField(kPushReportCompute, std::max<int64_t>(r.compute_us, 0),
                      &header);
    AppendVarintField(kPushReportPush, std::max<int64_t>(r.push_us, 0),
                      &header);
    AppendVarintField(kPushReportWait, std::max<int64_t>(r.wait_us, 0),
                      &header);
  }
  if (!payload.empty()) AppendBytesKey(kPushData, payload.size(), &header);
  grpc::Slice slices[2] = {
      grpc::Slice(header),
      grpc::Slice(const_cast<char*>(payload.data()), payload.size(),
                  grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, payload.empty() ? 1 : 2);
}

}  // namespace lockstep
