// Durations and sizes of every flag (--window 5s, --max-db 2GiB): never crash, never overflow,
// and a parsed duration survives format_duration and back unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/duration.h"
#include "common/size.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto d = stallwatch::parse_duration(text); d && d->count() >= 0) {
    auto again = stallwatch::parse_duration(stallwatch::format_duration(*d));
    if (!again || *again != *d) std::abort();
  }
  if (auto s = stallwatch::parse_size(text)) (void)stallwatch::format_size(*s);
  return 0;
}
