// What every host string goes through before a person, a label or a protobuf sees it:
// to_valid_utf8 is valid UTF-8 and idempotent; escape_name is one printable line.
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
  const std::string quoted = stallwatch::shell_quote(s);
  if (quoted.size() < 2 || quoted.front() != '\'' || quoted.back() != '\'') std::abort();
  return 0;
}
