// System context for explain: CPU busy share since the previous sample, memory and swap use,
// load average, CPU count, from /proc. Not thread-safe (keeps the previous CPU counters).
#pragma once

#include <cstdint>

#include "store/records.h"

namespace stallwatch::trace {

class HostSampler {
 public:
  store::HostContext sample();

 private:
  std::uint64_t busy_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace stallwatch::trace
