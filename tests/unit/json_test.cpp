// Unit tests for exporter/common/json.h: JSON string quoting (escapes, UTF-8 validation) and
// number formatting.
#include "common/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace stallwatch {
namespace {

TEST(JsonStringTest, Escapes) {
  EXPECT_EQ(json_string(""), R"("")");
  EXPECT_EQ(json_string("plain /usr/lib"), R"("plain /usr/lib")");
  EXPECT_EQ(json_string("say \"hi\""), R"("say \"hi\"")");
  EXPECT_EQ(json_string("C:\\path\\"), R"("C:\\path\\")");
  EXPECT_EQ(json_string("a\nb\tc\rd\be\ff"), R"("a\nb\tc\rd\be\ff")");
  EXPECT_EQ(json_string(std::string_view("\x01\x1f\0x", 4)), R"("\u0001\u001f\u0000x")");
  EXPECT_EQ(json_string("\x7f"), "\"\x7f\"");
}

TEST(JsonStringTest, Utf8) {
  EXPECT_EQ(json_string("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x9a\x80"),
            "\"caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x9a\x80\"");
  EXPECT_EQ(json_string("a\xff"), R"("a\ufffd")");                    // never valid
  EXPECT_EQ(json_string("\xc3"), R"("\ufffd")");                      // truncated
  EXPECT_EQ(json_string("\xc0\xaf"), R"("\ufffd\ufffd")");            // overlong '/'
  EXPECT_EQ(json_string("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")");  // surrogate
  EXPECT_EQ(json_string("\xe2\x80x"), R"("\ufffd\ufffdx")");          // bad continuation
}

TEST(JsonStringTest, Utf8Limits) {
  EXPECT_EQ(json_string("\xf4\x8f\xbf\xbf"), "\"\xf4\x8f\xbf\xbf\"");  // U+10FFFF
  EXPECT_EQ(json_string("\xf4\x90\x80\x80"),
            R"("\ufffd\ufffd\ufffd\ufffd")");                                   // above U+10FFFF
  EXPECT_EQ(json_string("\xe0\xa0\x80"), "\"\xe0\xa0\x80\"");                   // U+0800
  EXPECT_EQ(json_string("\xe0\x9f\xbf"), R"("\ufffd\ufffd\ufffd")");            // overlong U+07FF
  EXPECT_EQ(json_string("\xed\x9f\xbf"), "\"\xed\x9f\xbf\"");                   // U+D7FF
  EXPECT_EQ(json_string("\xf0\x8f\xbf\xbf"), R"("\ufffd\ufffd\ufffd\ufffd")");  // overlong
}

TEST(JsonNumberTest, FiniteAndNot) {
  EXPECT_EQ(json_number(0), "0");
  EXPECT_EQ(json_number(1.5), "1.5");
  EXPECT_EQ(json_number(-3), "-3");
  EXPECT_EQ(json_number(0.1), "0.10000000000000001");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(std::nan("")), "null");
}

}  // namespace
}  // namespace stallwatch
