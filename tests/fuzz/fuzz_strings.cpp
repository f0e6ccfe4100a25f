// What every host string goes through before a person, a label or a protobuf sees it:
// to_valid_utf8 is valid UTF-8 and idempotent; escape_name and escape_line are one printable
// line (escape_text keeps newlines only); shell_quote and shell_word are one word on one line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/strings.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  const std::string fixed = stallwatch::to_valid_utf8(s);
  if (!stallwatch::is_valid_utf8(fixed) || stallwatch::to_valid_utf8(fixed) != fixed) std::abort();
  if (stallwatch::is_valid_utf8(s) && fixed != s) std::abort();
  const std::string shown = stallwatch::escape_name(s);
  if (!stallwatch::is_valid_utf8(shown)) std::abort();
  for (unsigned char c : shown) {
    if (c < 0x20 || c == 0x7f) std::abort();
  }
  auto printable = [](const std::string& t, bool newlines) {
    if (!stallwatch::is_valid_utf8(t)) return false;
    for (unsigned char c : t) {
      if ((c < 0x20 && !(newlines && c == '\n')) || c == 0x7f) return false;
    }
    return true;
  };
  if (!printable(stallwatch::escape_line(s), false)) std::abort();
  if (!printable(stallwatch::escape_text(s), true)) std::abort();
  const std::string quoted = stallwatch::shell_quote(s);
  const bool ansi = quoted.starts_with("$'");
  if (quoted.size() < (ansi ? 3u : 2u) || (!ansi && quoted.front() != '\'') ||
      quoted.back() != '\'') {
    std::abort();
  }
  // Either way the word stays on one printable line: no newline, ESC or CSI to paste.
  if (!printable(quoted, false)) std::abort();
  const std::string word = stallwatch::shell_word(s);
  if (!printable(word, false) || word.empty()) std::abort();
  return 0;
}
