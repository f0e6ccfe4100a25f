#include "common/snapshot.h"

#include <algorithm>

namespace stallwatch {

void CallTotals::add(const CallTotals& o) {
  count += o.count;
  sum_ns += o.sum_ns;
  runnable_ns += o.runnable_ns;
  blocked_ns += o.blocked_ns;
  max_ns = std::max(max_ns, o.max_ns);
  for (size_t i = 0; i < buckets.size(); ++i) buckets[i] += o.buckets[i];
}

void OffcpuTotals::add(const OffcpuTotals& o) {
  runnable_ns += o.runnable_ns;
  blocked_ns += o.blocked_ns;
  oncpu_ns += o.oncpu_ns;
  preemptions += o.preemptions;
}

}  // namespace stallwatch
