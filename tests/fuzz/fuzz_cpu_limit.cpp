// The CPU limit's parsers (host/cpu_limit.h) on hostile text: cpu.stat, cpu.max, a
// /proc/PID/cgroup text and mountinfo. The first byte picks the parser. A path handed back is
// always plain and absolute (no empty, `.` or `..` component: it is joined to a mount); a
// quota's period is never 0; nothing throws.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "host/cpu_limit.h"

namespace {

void check_plain(const std::string_view p) {
  if (p.empty() || p[0] != '/') std::abort();
  if (p == "/") return;
  std::string_view rest = p.substr(1);
  while (true) {
    const std::size_t slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    if (part.empty() || part == "." || part == "..") std::abort();
    if (slash == std::string_view::npos) return;
    rest = rest.substr(slash + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace stallwatch::host;
  switch (data[0] % 4) {
    case 0:
      (void)parse_cpu_stat(text);
      break;
    case 1:
      if (auto q = parse_cpu_max(text); q && q->period_us == 0) std::abort();
      break;
    case 2:
      for (bool v1 : {true, false}) {
        if (auto p = cpu_cgroup_path(text, v1)) check_plain(*p);
      }
      break;
    default:
      if (auto m = find_cgroup1_cpu_mount(text); m && m->find('\\') != std::string::npos) {
        std::abort();
      }
      break;
  }
  return 0;
}
