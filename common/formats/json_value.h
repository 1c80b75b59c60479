// JSON documents as values (RFC 8259), read with nlohmann/json's parser:
// traces, summaries and the headers of safetensors files. Numbers keep
// their source text, so a document read and written again keeps every
// digit (trace timestamps have 19 of them); repeated member names are kept
// in source order.
//
// JsonValue is a value type; copies are deep. The whole document is held
// in memory; nesting is bounded.
#ifndef LOCKSTEP_COMMON_FORMATS_JSON_VALUE_H_
#define LOCKSTEP_COMMON_FORMATS_JSON_VALUE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

class JsonValue final {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Members = std::vector<std::pair<std::string, JsonValue>>;

  JsonValue() = default;
  static JsonValue Number(double value);
  static JsonValue String(std::string value);

  // INVALID_ARGUMENT naming the byte offset of the first error; nesting
  // deeper than 256 levels is refused.
  static absl::StatusOr<JsonValue> Parse(absl::string_view text);

  Type type() const { return type_; }
  bool boolean() const { return boolean_; }
  double number() const { return number_; }
  const std::string& string() const { return text_; }  // kString.
  const std::vector<JsonValue>& array() const { return array_; }
  std::vector<JsonValue>& mutable_array() { return array_; }
  const Members& members() const { return members_; }  // In source order.

  // The member named `key` of an object (the last if repeated), else null.
  const JsonValue* Find(absl::string_view key) const;
  JsonValue* FindMutable(absl::string_view key);

  // Compact JSON.
  std::string ToJson() const;
  void AppendJson(std::string* out) const;

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool boolean_ = false;
  double number_ = 0;
  std::string text_;  // kString: the value; kNumber: the source text.
  std::vector<JsonValue> array_;
  Members members_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FORMATS_JSON_VALUE_H_
