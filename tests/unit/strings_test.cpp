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

// Issue #35: valid UTF-8 can still drive a terminal. U+009B is a one-byte CSI (ESC [), U+202E
// shows the rest of a line backwards, U+2028 breaks it: each is written as \uXXXX.
TEST(EscapeNameTest, C1ControlsAndBidiOverridesAreEscaped) {
  EXPECT_EQ(escape_name("a\xc2\x9b" "31mred"), "a\\u009b31mred");
  EXPECT_EQ(escape_name("exe.\xe2\x80\xaetxt"), "exe.\\u202etxt");
  EXPECT_EQ(escape_name("a\xe2\x80\xa8" "b\xe2\x81\xa6" "c"), "a\\u2028b\\u2066c");
  EXPECT_EQ(escape_name("\xd8\xb9\xe2\x82\xac"), "\xd8\xb9\xe2\x82\xac");  // Arabic, euro kept
}

TEST(ShellQuoteTest, OneWordWhateverTheName) {
  EXPECT_EQ(shell_quote("fluent-bit"), "'fluent-bit'");
  EXPECT_EQ(shell_quote("x'; rm -rf / #"), "'x'\\''; rm -rf / #'");
  EXPECT_EQ(shell_quote(""), "''");
}

// A name with a newline or an escape sequence stays one printable line: $'...' with \xNN.
TEST(ShellQuoteTest, ControlBytesAreAnsiCQuoted) {
  EXPECT_EQ(shell_quote("a\nb"), "$'a\\x0ab'");
  EXPECT_EQ(shell_quote("x'\\\x1b"), "$'x\\'\\\\\\x1b'");
  EXPECT_EQ(shell_quote("\xe2\x80\xae"), "$'\\xe2\\x80\\xae'");
  EXPECT_EQ(shell_quote("\xff"), "$'\\xff'");
}

TEST(ShellWordTest, BareOnlyWhenPlain) {
  EXPECT_EQ(shell_word("0-3,5"), "0-3,5");
  EXPECT_EQ(shell_word("fluent-bit.service"), "fluent-bit.service");
  EXPECT_EQ(shell_word("a b"), "'a b'");
  EXPECT_EQ(shell_word("$(id)"), "'$(id)'");
  EXPECT_EQ(shell_word(""), "''");
}

}  // namespace
}  // namespace stallwatch
