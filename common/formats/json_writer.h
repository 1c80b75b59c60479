// A small writer for flat JSON objects (summaries, benchmark results).
// Not thread-safe; use one per thread.
#ifndef LOCKSTEP_COMMON_FORMATS_JSON_WRITER_H_
#define LOCKSTEP_COMMON_FORMATS_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
// WriteFileAtomically, which writes the JSON files, is in common/base/env.h.
#include "common/base/env.h"

namespace lockstep {

class JsonObjectWriter final {
 public:
  JsonObjectWriter& Add(absl::string_view key, double value);
  JsonObjectWriter& Add(absl::string_view key, int64_t value);
  JsonObjectWriter& Add(absl::string_view key, int value) {
    return Add(key, static_cast<int64_t>(value));
  }
  JsonObjectWriter& Add(absl::string_view key, absl::string_view value);
  JsonObjectWriter& Add(absl::string_view key, const char* value) {
    return Add(key, absl::string_view(value));
  }
  JsonObjectWriter& AddBool(absl::string_view key, bool value);
  // `json`: a JSON value already written (an array, an object).
  JsonObjectWriter& AddJson(absl::string_view key, absl::string_view json);

  // The object, pretty-printed with one key per line.
  std::string ToString() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // key, JSON text
};

// Quotes and escapes `text` as a JSON string.
std::string JsonQuote(absl::string_view text);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FORMATS_JSON_WRITER_H_
