// The ELF symbol reader over hostile images (any local user can put a file named
// libcudart.so.12 in a container image): errors, never a crash; every offset it returns lies
// inside the image.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trace/elf_symbols.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view image(reinterpret_cast<const char*>(data), size);
  auto symbols = stallwatch::trace::read_function_symbols_in_memory(image);
  if (!symbols) return 0;
  for (const auto& s : *symbols) {
    if (s.name.empty() || s.file_offset >= size) std::abort();
  }
  return 0;
}
