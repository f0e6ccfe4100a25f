#include "trace/snapshot.h"

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

void ReclaimTotals::add(const ReclaimTotals& o) {
  direct_ns += o.direct_ns;
  direct_count += o.direct_count;
  memcg_ns += o.memcg_ns;
  memcg_count += o.memcg_count;
  cuda_ns += o.cuda_ns;
}

namespace {
template <typename T>
void add_histogram(T& into, const T& o) {
  into.count += o.count;
  into.bytes += o.bytes;
  into.sum_ns += o.sum_ns;
  into.max_ns = std::max(into.max_ns, o.max_ns);
  for (size_t i = 0; i < into.buckets.size(); ++i) into.buckets[i] += o.buckets[i];
}
}  // namespace

void IoTotals::add(const IoTotals& o) { add_histogram(*this, o); }
void NcclTotals::add(const NcclTotals& o) { add_histogram(*this, o); }

}  // namespace stallwatch
