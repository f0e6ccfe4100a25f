// /proc/PID/maps text, which names files any process can create (paths with spaces,
// newlines, " (deleted)"): parsed line by line without a crash; what is found is a CUDA library.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trace/proc_maps.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  stallwatch::trace::MapsEntry entry;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    (void)stallwatch::trace::parse_maps_line(text.substr(start, end - start), entry);
    start = end + 1;
  }
  for (const auto& lib : stallwatch::trace::cuda_libraries_in_maps(text)) {
    if (lib.path.empty()) std::abort();
  }
  return 0;
}
