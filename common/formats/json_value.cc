#include "common/formats/json_value.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/formats/json_writer.h"
#include "nlohmann/json.hpp"

namespace lockstep {

// Builds a JsonValue from nlohmann/json's SAX events; one per Parse().
// nlohmann's lexer does the reading (RFC 8259, UTF-8 checked); this keeps
// each number's source text, repeated member names and the nesting bound.
class JsonParser final {
 public:
  using Json = nlohmann::json;

  absl::StatusOr<JsonValue> Document(absl::string_view text) {
    const bool ok = Json::sax_parse(text.begin(), text.end(), this,
                                    Json::input_format_t::json,
                                    /*strict=*/true);
    if (!ok || open_.size() != 1) {
      // A syntax error has its byte; a refusal of ours (depth) has none.
      return absl::InvalidArgumentError(
          error_at_.has_value()
              ? absl::StrCat("JSON at byte ", *error_at_, ": ", error_)
              : absl::StrCat("JSON: ", error_));
    }
    return std::move(root_);
  }

  // The SAX interface (nlohmann::json_sax).
  bool null() { return Add(JsonValue()); }
  bool boolean(bool value) {
    JsonValue v;
    v.type_ = JsonValue::Type::kBool;
    v.boolean_ = value;
    return Add(std::move(v));
  }
  bool number_integer(Json::number_integer_t value) {
    return AddNumber(absl::StrCat(value), static_cast<double>(value));
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    return AddNumber(absl::StrCat(value), static_cast<double>(value));
  }
  bool number_float(Json::number_float_t value, const std::string& text) {
    return AddNumber(text, value);
  }
  bool string(std::string& value) {
    return Add(JsonValue::String(std::move(value)));
  }
  bool binary(Json::binary_t&) { return Fail("binary value"); }
  bool start_object(std::size_t) { return Open(JsonValue::Type::kObject); }
  bool key(std::string& name) {
    open_.back()->members_.emplace_back(std::move(name), JsonValue());
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(JsonValue::Type::kArray); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) {
    // nlohmann counts the bytes read, the bad one included.
    error_at_ = position > 0 ? position - 1 : 0;
    error_ = e.what();
    return false;
  }

 private:
  static constexpr int kMaxDepth = 256;

  bool Fail(const char* message) {
    error_ = message;
    return false;
  }
  // Where the next value goes: the root, an array's end, or the member
  // whose key came last.
  JsonValue* Slot() {
    if (open_.empty()) return &root_;
    JsonValue* parent = open_.back();
    if (parent->type_ == JsonValue::Type::kArray) {
      parent->array_.emplace_back();
      return &parent->array_.back();
    }
    return &parent->members_.back().second;
  }
  bool Add(JsonValue value) {
    *Slot() = std::move(value);
    if (open_.empty()) open_.push_back(&root_);  // The document is done.
    return true;
  }
  bool AddNumber(std::string text, double value) {
    JsonValue v;
    v.type_ = JsonValue::Type::kNumber;
    v.text_ = std::move(text);
    v.number_ = value;
    return Add(std::move(v));
  }
  bool Open(JsonValue::Type type) {
    if (static_cast<int>(open_.size()) > kMaxDepth) {
      return Fail("nested more than 256 levels deep");
    }
    JsonValue* slot = Slot();
    slot->type_ = type;
    open_.push_back(slot);
    return true;
  }
  bool Close() {
    open_.pop_back();
    if (open_.empty()) open_.push_back(&root_);  // The document is done.
    return true;
  }

  JsonValue root_;
  // The objects and arrays being filled, outermost first. Pointers stay
  // valid: only the innermost container grows.
  std::vector<JsonValue*> open_;
  std::optional<size_t> error_at_;
  std::string error_;
};

JsonValue JsonValue::Number(double value) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = value;
  if (std::isfinite(value)) {
    char buffer[64];
    const std::to_chars_result r =
        std::to_chars(buffer, buffer + sizeof(buffer), value);
    v.text_.assign(buffer, r.ptr);
  } else {
    v.type_ = Type::kNull;  // JSON has no NaN or Inf.
  }
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.type_ = Type::kString;
  v.text_ = std::move(value);
  return v;
}

absl::StatusOr<JsonValue> JsonValue::Parse(absl::string_view text) {
  return JsonParser().Document(text);
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  const JsonValue* found = nullptr;
  for (const auto& [name, value] : members_) {
    if (name == key) found = &value;
  }
  return found;
}

JsonValue* JsonValue::FindMutable(absl::string_view key) {
  return const_cast<JsonValue*>(Find(key));
}

void JsonValue::AppendJson(std::string* out) const {
  switch (type_) {
    case Type::kNull: *out += "null"; return;
    case Type::kBool: *out += boolean_ ? "true" : "false"; return;
    case Type::kNumber: *out += text_; return;
    case Type::kString: *out += JsonQuote(text_); return;
    case Type::kArray:
      *out += '[';
      for (size_t i = 0; i < array_.size(); ++i) {
        if (i > 0) *out += ',';
        array_[i].AppendJson(out);
      }
      *out += ']';
      return;
    case Type::kObject:
      *out += '{';
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) *out += ',';
        absl::StrAppend(out, JsonQuote(members_[i].first), ":");
        members_[i].second.AppendJson(out);
      }
      *out += '}';
      return;
  }
}

std::string JsonValue::ToJson() const {
  std::string out;
  AppendJson(&out);
  return out;
}

}  // namespace lockstep
