// What stallwatch reads out of a traced CPython process is the process's to forge: a code
// object's line table and the interpreter's _Py_DebugOffsets. Decoding them never crashes,
// never reads past the input, and a line, when one is found, is a plain int.
// Input: byte 0 picks the parser (0: 3.10 line table, 1: 3.11+ location table, 2: debug
// offsets), bytes 1-4 the instruction offset (little endian), the rest is the table or blob.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "trace/python.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  std::uint32_t instr = 0;
  std::memcpy(&instr, data + 1, 4);
  const std::string_view rest(reinterpret_cast<const char*>(data + 5), size - 5);
  switch (data[0] % 3) {
    case 0:
      (void)stallwatch::trace::py_line_310(rest, 1, instr);
      break;
    case 1:
      (void)stallwatch::trace::py_line_311(rest, 1, instr);
      break;
    default: {
      auto layout = stallwatch::trace::layout_from_debug_offsets(rest);
      if (layout && layout->minor < 13) __builtin_trap();
      break;
    }
  }
  return 0;
}
