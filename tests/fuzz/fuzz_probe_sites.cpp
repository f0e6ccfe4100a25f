// The first bytes of a function in a library file, which any user can write (a file named
// libcuda.so.1 in a directory a process maps): decoded and a site chosen without reading past
// them, the site inside them, and a moved site only onto an instruction the decoder says the
// kernel emulates.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "trace/probe_sites.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stallwatch::trace;
  if (size == 0) return 0;
  // The first byte picks what the kernel emulates; the rest is the code.
  Emulation e;
  for (int k = 0; k < kInsnKinds && k < 8; ++k) e.emulated[k] = (data[0] >> k) & 1;
  const std::span<const std::uint8_t> code(data + 1, size - 1);
  const Insn insn = decode_x86_64(code);
  if (insn.length > code.size() || (insn.kind == InsnKind::kOther) != (insn.length == 0)) {
    std::abort();
  }
  for (bool moves : {true, false}) {
    const ProbeSite site = choose_site(code, e, moves);
    if (site.delta > code.size() || (!moves && site.delta != 0)) std::abort();
    if (site.delta > 0) {
      const Insn at = decode_x86_64(code.subspan(site.delta));
      if (at.kind != site.at || !e(at.kind) || site.cls != SiteClass::kEmulated) std::abort();
    }
  }
  return 0;
}
