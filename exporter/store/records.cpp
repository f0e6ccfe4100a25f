#include "store/records.h"

namespace stallwatch::store {

size_t WindowBatch::rows() const {
  size_t n = 1 + cgroups.size() + outliers.size() + chains.size() + inflight.size() + sites.size() +
             gpus.size() + nccl.size();
  for (const auto& p : processes) n += 1 + p.calls.size() + p.preemptors.size();
  return n;
}

}  // namespace stallwatch::store
