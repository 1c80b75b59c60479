#include "common/formats/json_value.h"

#include <string>

#include "common/formats/json_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

TEST(JsonValueTest, ParsesEveryKindAndWritesItBack) {
  const std::string text =
      R"({"a":[1,-2.5e3,true,false,null],"b":{"c":"x\"y\\z\n\u00e9\ud83d\ude00"},)"
      R"("ts":1718000000123456.789})";
  absl::StatusOr<JsonValue> v = JsonValue::Parse(text);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->type(), JsonValue::Type::kObject);
  const JsonValue* a = v->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array().size(), 5u);
  EXPECT_EQ(a->array()[1].number(), -2500);
  EXPECT_TRUE(a->array()[2].boolean());
  EXPECT_EQ(a->array()[4].type(), JsonValue::Type::kNull);
  EXPECT_EQ(v->Find("b")->Find("c")->string(),
            "x\"y\\z\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v->Find("missing"), nullptr);
  // Numbers keep their digits; strings are re-escaped.
  EXPECT_EQ(v->ToJson(),
            R"({"a":[1,-2.5e3,true,false,null],"b":{"c":"x\"y\\z\n)"
            "\xc3\xa9\xf0\x9f\x98\x80"
            R"("},"ts":1718000000123456.789})");
}

TEST(JsonValueTest, RefusesMalformedText) {
  for (const char* bad :
       {"", "{", "[1,]", "{\"a\" 1}", "tru", "01", "1.", "\"\\x\"", "\"a",
        "[1] 2", "{\"a\":1,}", "\"\\ud800\"", "-", "\"\x01\""}) {
    EXPECT_EQ(JsonValue::Parse(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_THAT(JsonValue::Parse("[1,]").status().message(),
              HasSubstr("byte 3"));
  EXPECT_THAT(JsonValue::Parse("{\"a\":1,}").status().message(),
              HasSubstr("byte 7"));
  std::string deep(1000, '[');
  EXPECT_THAT(JsonValue::Parse(deep).status().message(),
              HasSubstr("nested more than 256 levels deep"));
  // RFC 8259 text is UTF-8; a stray byte is refused, not passed on.
  EXPECT_EQ(JsonValue::Parse("[\"\xff\"]").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JsonValueTest, KeepsRepeatedNamesAndEveryDigit) {
  absl::StatusOr<JsonValue> v =
      JsonValue::Parse(R"({"a":1,"a":2,"big":18446744073709551616,"t":1e-3})");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->members().size(), 4u);
  EXPECT_EQ(v->Find("a")->number(), 2);  // The last of a repeated name.
  EXPECT_EQ(v->Find("big")->number(), 18446744073709551616.0);
  EXPECT_EQ(v->Find("t")->number(), 1e-3);
  EXPECT_EQ(v->ToJson(),
            R"({"a":1,"a":2,"big":18446744073709551616,"t":1e-3})");
  absl::StatusOr<JsonValue> deepest =
      JsonValue::Parse(std::string(256, '[') + std::string(256, ']'));
  EXPECT_TRUE(deepest.ok()) << deepest.status();
}

TEST(JsonValueTest, MadeNumbersAndStrings) {
  EXPECT_EQ(JsonValue::Number(42).ToJson(), "42");
  EXPECT_EQ(JsonValue::Number(0.5).ToJson(), "0.5");
  EXPECT_EQ(JsonValue::String("a\"b").ToJson(), "\"a\\\"b\"");
  // Control characters are escaped; bytes that are not UTF-8 become U+FFFD,
  // so what is written is always JSON.
  EXPECT_EQ(JsonQuote("\x01\n\t"), "\"\\u0001\\n\\t\"");
  EXPECT_EQ(JsonQuote("a\xff"), "\"a\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace lockstep
