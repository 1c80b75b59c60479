#include "common/formats/json_writer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace lockstep {

std::string JsonQuote(absl::string_view text) {
  // nlohmann/json's escaping; bytes that are not UTF-8 become U+FFFD, so
  // the output is always valid JSON.
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', /*ensure_ascii=*/false,
            nlohmann::json::error_handler_t::replace);
}

JsonObjectWriter& JsonObjectWriter::Add(absl::string_view key, double value) {
  // JSON has no NaN or Inf; null says "not measured".
  fields_.emplace_back(std::string(key), std::isfinite(value)
                                             ? absl::StrFormat("%.10g", value)
                                             : std::string("null"));
  return *this;
}

JsonObjectWriter& JsonObjectWriter::Add(absl::string_view key, int64_t value) {
  fields_.emplace_back(std::string(key), absl::StrCat(value));
  return *this;
}

JsonObjectWriter& JsonObjectWriter::Add(absl::string_view key,
                                        absl::string_view value) {
  fields_.emplace_back(std::string(key), JsonQuote(value));
  return *this;
}

JsonObjectWriter& JsonObjectWriter::AddBool(absl::string_view key, bool value) {
  fields_.emplace_back(std::string(key), value ? "true" : "false");
  return *this;
}

JsonObjectWriter& JsonObjectWriter::AddJson(absl::string_view key,
                                            absl::string_view json) {
  fields_.emplace_back(std::string(key), std::string(json));
  return *this;
}

std::string JsonObjectWriter::ToString() const {
  std::string out = "{\n";
  for (size_t i = 0; i < fields_.size(); ++i) {
    absl::StrAppend(&out, "  ", JsonQuote(fields_[i].first), ": ",
                    fields_[i].second, i + 1 < fields_.size() ? ",\n" : "\n");
  }
  out += "}\n";
  return out;
}

}  // namespace lockstep
