// What stallwatch reads out of a traced CPython process is the process's to forge: a code
// object's line table, names and file, and the interpreter's _Py_DebugOffsets. Decoding them
// never crashes, never reads past the input, and a line, when one is found, is a plain int.
// Input: byte 0 picks the parser (0: 3.10 line table, 1: 3.11+ location table, 2: debug
// offsets, 3: a whole code object), bytes 1-4 the instruction offset (little endian), the rest
// is the table or blob. For 3, the rest is a 3.12 code object (the first 256 bytes) and the
// memory its pointers lead to: each pointer field holds an offset into the input, turned into
// an address here, and the resolver reads it all back through /proc/self/mem as it reads a
// traced interpreter's memory (lengths, kinds and flags as forged).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "host/procfs.h"
#include "trace/python.h"

namespace {

void decode_code_object(std::string_view rest, std::uint32_t instr) {
  using namespace stallwatch::trace;
  constexpr size_t kCode = 256;
  if (rest.size() < kCode) return;
  std::string memory(rest);
  const PyLayout layout = *builtin_layout(3, 12);
  for (std::uint16_t field : {layout.co_qualname, layout.co_filename, layout.co_linetable}) {
    std::uint64_t offset = 0;
    std::memcpy(&offset, memory.data() + field, 8);
    const std::uint64_t address =
        reinterpret_cast<std::uint64_t>(memory.data()) + offset % memory.size();
    std::memcpy(memory.data() + field, &address, 8);
  }
  static const stallwatch::host::Procfs procfs;
  PyResolver resolver(procfs, 64 << 10);
  PythonRegistry::Found p;
  p.process.pid = getpid();
  p.process.layout = layout;
  auto frame = resolver.resolve(p, reinterpret_cast<std::uint64_t>(memory.data()), instr);
  if (frame && (frame->function.size() > 4 * 1024 || frame->file.size() > 4 * 1024)) {
    __builtin_trap();  // at most 1024 characters of 4 UTF-8 bytes each
  }
  if (resolver.cached_bytes() > 64 << 10) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  std::uint32_t instr = 0;
  std::memcpy(&instr, data + 1, 4);
  const std::string_view rest(reinterpret_cast<const char*>(data + 5), size - 5);
  switch (data[0] % 4) {
    case 0:
      (void)stallwatch::trace::py_line_310(rest, 1, instr);
      break;
    case 1:
      (void)stallwatch::trace::py_line_311(rest, 1, instr);
      break;
    case 2: {
      auto layout = stallwatch::trace::layout_from_debug_offsets(rest);
      if (layout && layout->minor < 13) __builtin_trap();
      break;
    }
    default:
      decode_code_object(rest, instr);
      break;
  }
  return 0;
}
