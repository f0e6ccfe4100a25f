// The ELF symbol reader over hostile images (any local user can put a file named
// libcudart.so.12 in a container image): errors, never a crash; every offset it returns lies
// inside the image. Each input is parsed in memory and, from a memfd, as a file (pread, and
// lseek SEEK_DATA/SEEK_HOLE for the sparse checks): the two must agree. Inputs of odd length
// are also read with a 1 GiB hole after their bytes, so counts and sizes that point into the
// hole (issue 35: sparse files claiming 2^34 sections or a 200 MiB table) are refused.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trace/elf_symbols.h"

namespace {

int image_file() {
  static const int fd = memfd_create("fuzz_elf", MFD_CLOEXEC);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stallwatch::trace;
  const std::string_view image(reinterpret_cast<const char*>(data), size);
  auto symbols = read_function_symbols_in_memory(image);
  if (symbols) {
    for (const auto& s : *symbols) {
      if (s.name.empty() || s.file_offset >= size) std::abort();
    }
  }
  (void)read_symbol_addresses_in_memory(image, {"_PyRuntime", "cudaMalloc"});

  const int fd = image_file();
  if (fd < 0 || ftruncate(fd, 0) != 0) return 0;
  if (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  auto from_file = read_function_symbols(fd, "fuzz");
  if (from_file.ok() != symbols.ok()) std::abort();
  if (symbols && from_file->size() != symbols->size()) std::abort();
  if (size % 2 == 1 && ftruncate(fd, static_cast<off_t>(size) + (1 << 30)) == 0) {
    auto sparse = read_function_symbols(fd, "fuzz");
    if (sparse) {
      for (const auto& s : *sparse) {
        if (s.name.empty() || s.file_offset >= size + (1u << 30)) std::abort();
      }
    }
    (void)read_symbol_addresses(fd, "fuzz", {"_PyRuntime"});
  }
  return 0;
}
