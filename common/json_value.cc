#include "common/json_value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/json_writer.h"

namespace lockstep {

// Recursive descent over the text; one instance per Parse().
class JsonParser final {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> Document() {
    JsonValue value;
    if (!Value(&value, 0)) return Error();
    SkipSpace();
    if (pos_ != text_.size()) {
      error_ = "text after the JSON value";
      return Error();
    }
    return value;
  }

 private:
  static constexpr int kMaxDepth = 256;

  absl::Status Error() const {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON at byte ", pos_, ": ", error_));
  }
  bool Fail(const char* message) {
    error_ = message;
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return Fail("unknown literal");
    pos_ += word.size();
    return true;
  }

  bool Value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Fail("unexpected end");
    const char c = text_[pos_];
    switch (c) {
      case '{': return Object(out, depth);
      case '[': return Array(out, depth);
      case '"':
        out->type_ = JsonValue::Type::kString;
        return String(&out->text_);
      case 't':
        out->type_ = JsonValue::Type::kBool;
        out->boolean_ = true;
        return Literal("true");
      case 'f':
        out->type_ = JsonValue::Type::kBool;
        return Literal("false");
      case 'n': return Literal("null");
      default: return Number(out);
    }
  }

  bool Object(JsonValue* out, int depth) {
    out->type_ = JsonValue::Type::kObject;
    ++pos_;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') {
        return Fail("expected a member name");
      }
      std::string key;
      if (!String(&key)) return false;
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Fail("expected ':'");
      ++pos_;
      JsonValue value;
      if (!Value(&value, depth + 1)) return false;
      out->members_.emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or '}'");
    }
  }

  bool Array(JsonValue* out, int depth) {
    out->type_ = JsonValue::Type::kArray;
    ++pos_;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      JsonValue value;
      if (!Value(&value, depth + 1)) return false;
      out->array_.push_back(std::move(value));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or ']'");
    }
  }

  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Fail("short \\u escape");
    *out = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return Fail("bad \\u escape");
      }
      *out = *out * 16 + digit;
    }
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool String(std::string* out) {
    ++pos_;  // The opening quote.
    while (true) {
      if (pos_ >= text_.size()) return Fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail("control character in a string");
      }
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= text_.size()) return Fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low;
            if (text_.substr(pos_, 2) != "\\u") return Fail("lone surrogate");
            pos_ += 2;
            if (!Hex4(&low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) return Fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("lone surrogate");
          }
          AppendUtf8(cp, out);
          break;
        }
        default: return Fail("unknown escape");
      }
    }
  }

  bool Number(JsonValue* out) {
    const size_t start = pos_;
    auto digits = [this]() {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        ++pos_;
      }
      return pos_ > from;
    };
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      return Fail("expected a value");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Fail("expected digits after '.'");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) {
        ++pos_;
      }
      if (!digits()) return Fail("expected an exponent");
    }
    out->type_ = JsonValue::Type::kNumber;
    out->text_ = std::string(text_.substr(start, pos_ - start));
    out->number_ = std::strtod(out->text_.c_str(), nullptr);
    return true;
  }

  const absl::string_view text_;
  size_t pos_ = 0;
  const char* error_ = "";
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
  return JsonParser(text).Document();
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
