// The helpers every string from the host goes through (issue #15): escape_name for what a
// person reads, shell_quote for what a person pastes, to_valid_utf8 for labels and protobuf.
#include <gtest/gtest.h>

#include <string>

#include "common/strings.h"

namespace stallwatch {
namespace {

TEST(Utf8Test, ValidSequencesAndTheRfc3629Exclusions) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii; with \"quotes\""));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // a UTF-16 surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xe2\x82"));          // cut short
  EXPECT_EQ(utf8_sequence(""), 0u);
  EXPECT_EQ(utf8_sequence("\xe2\x82\xac!"), 3u);
}

TEST(Utf8Test, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(to_valid_utf8("kubepods;\xff\xfe/x"), "kubepods;\xEF\xBF\xBD\xEF\xBF\xBD/x");
  EXPECT_EQ(to_valid_utf8("\xe2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_TRUE(is_valid_utf8(to_valid_utf8("\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80")));
}

TEST(EscapeNameTest, OneLineOfPrintableText) {
  EXPECT_EQ(escape_name("x\nsh /tmp/p #"), "x\\nsh /tmp/p #");
  EXPECT_EQ(escape_name("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(escape_name("a\\b\tc\x7f"), "a\\\\b\\tc\\x7f");
  EXPECT_EQ(escape_name("bad\xff utf"), "bad\\xff utf");
  EXPECT_EQ(escape_name("caf\xc3\xa9"), "caf\xc3\xa9");
}

TEST(ShellQuoteTest, OneWordWhateverTheName) {
  EXPECT_EQ(shell_quote("fluent-bit"), "'fluent-bit'");
  EXPECT_EQ(shell_quote("x'; rm -rf / #"), "'x'\\''; rm -rf / #'");
  EXPECT_EQ(shell_quote(""), "''");
}

}  // namespace
}  // namespace stallwatch
