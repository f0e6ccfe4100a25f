// System context for explain: CPU busy share since the previous sample, memory and swap use,
// load average, CPU count, from procfs (host/procfs.h). Not thread-safe (keeps the previous
// CPU counters).
#pragma once

#include <cstdint>

#include "host/procfs.h"

namespace stallwatch::host {

// System context of the window (explain's first lines). Negative when unknown.
struct HostContext {
  double cpu_busy = -1;  // share of all CPUs busy, 0..1
  double mem_used = -1;  // share of MemTotal not available, 0..1
  double load1 = -1;
  int cpus = 0;
  std::int64_t swap_used_bytes = -1;
};

class HostSampler {
 public:
  explicit HostSampler(const Procfs& fs) : fs_(fs) {}
  HostContext sample();

 private:
  const Procfs& fs_;
  std::uint64_t busy_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace stallwatch::host
