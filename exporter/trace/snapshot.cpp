#include "trace/snapshot.h"

#include <algorithm>

#include "trace/histogram.h"

namespace stallwatch {

void CallTotals::add(const CallTotals& o) {
  count += o.count;
  sum_ns += o.sum_ns;
  runnable_ns += o.runnable_ns;
  blocked_ns += o.blocked_ns;
  max_ns = std::max(max_ns, o.max_ns);
  for (size_t i = 0; i < buckets.size(); ++i) buckets[i] += o.buckets[i];
  alloc_bytes += o.alloc_bytes;
  freed_bytes += o.freed_bytes;
  alloc_failures += o.alloc_failures;
  failed_bytes = std::max(failed_bytes, o.failed_bytes);
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

void SeriesTotals::add(const SeriesTotals& o) {
  for (const auto& [id, t] : o.calls) calls[id].add(t);
  offcpu.add(o.offcpu);
  reclaim.add(o.reclaim);
  oom_kills += o.oom_kills;
  oom_kills_cuda += o.oom_kills_cuda;
  oom_victims.insert(oom_victims.end(), o.oom_victims.begin(), o.oom_victims.end());
  for (const auto& [k, t] : o.io) io[k].add(t);
  tcp_retransmits_ipv4 += o.tcp_retransmits_ipv4;
  tcp_retransmits_ipv6 += o.tcp_retransmits_ipv6;
  for (const auto& [k, t] : o.nccl) nccl[k].add(t);
}

bool SeriesTotals::empty() const {
  return calls.empty() && io.empty() && nccl.empty() && oom_kills == 0 &&
         reclaim.direct_count + reclaim.memcg_count == 0 &&
         tcp_retransmits_ipv4 + tcp_retransmits_ipv6 == 0;
}

std::uint64_t counter_delta(std::uint64_t now, std::uint64_t before) {
  return now >= before ? now - before : now;
}

namespace {

// The histogram part shared by CallTotals, IoTotals and NcclTotals; `before` is not null and
// counted no more than `now`.
template <typename T>
void histogram_delta(T& d, const T& now, const T& before) {
  d.count = now.count - before.count;
  d.sum_ns = counter_delta(now.sum_ns, before.sum_ns);
  for (size_t k = 0; k < d.buckets.size(); k++) {
    d.buckets[k] = counter_delta(now.buckets[k], before.buckets[k]);
  }
  // The window's worst: exact when it set a new maximum, else the top bucket's bound.
  if (now.max_ns > before.max_ns) {
    d.max_ns = now.max_ns;
    return;
  }
  for (size_t k = d.buckets.size(); k-- > 0;) {
    if (d.buckets[k] == 0) continue;
    const auto bound =
        static_cast<std::uint64_t>(trace::bucket_upper_seconds(static_cast<unsigned>(k)) * 1e9);
    d.max_ns = std::min<std::uint64_t>(now.max_ns, bound);
    break;
  }
}

template <typename T>
T bytes_delta(const T& now, const T* before) {
  if (!before || now.count < before->count) return now;
  T d;
  histogram_delta(d, now, *before);
  d.bytes = counter_delta(now.bytes, before->bytes);
  return d;
}

}  // namespace

CallTotals delta(const CallTotals& now, const CallTotals* before) {
  if (!before || now.count < before->count) return now;
  CallTotals d;
  histogram_delta(d, now, *before);
  d.runnable_ns = counter_delta(now.runnable_ns, before->runnable_ns);
  d.blocked_ns = counter_delta(now.blocked_ns, before->blocked_ns);
  d.alloc_bytes = counter_delta(now.alloc_bytes, before->alloc_bytes);
  d.freed_bytes = counter_delta(now.freed_bytes, before->freed_bytes);
  d.alloc_failures = counter_delta(now.alloc_failures, before->alloc_failures);
  d.failed_bytes = now.failed_bytes;
  return d;
}

IoTotals delta(const IoTotals& now, const IoTotals* before) { return bytes_delta(now, before); }

NcclTotals delta(const NcclTotals& now, const NcclTotals* before) {
  return bytes_delta(now, before);
}

OffcpuTotals delta(const OffcpuTotals& now, const OffcpuTotals* before) {
  if (!before) return now;
  return OffcpuTotals{counter_delta(now.runnable_ns, before->runnable_ns),
                      counter_delta(now.blocked_ns, before->blocked_ns),
                      counter_delta(now.oncpu_ns, before->oncpu_ns),
                      counter_delta(now.preemptions, before->preemptions)};
}

ReclaimTotals delta(const ReclaimTotals& now, const ReclaimTotals* before) {
  if (!before) return now;
  ReclaimTotals d;
  d.direct_ns = counter_delta(now.direct_ns, before->direct_ns);
  d.direct_count = counter_delta(now.direct_count, before->direct_count);
  d.memcg_ns = counter_delta(now.memcg_ns, before->memcg_ns);
  d.memcg_count = counter_delta(now.memcg_count, before->memcg_count);
  d.cuda_ns = counter_delta(now.cuda_ns, before->cuda_ns);
  return d;
}

PressureTotals delta(const PressureTotals& now, const PressureTotals* before) {
  if (!before) return now;
  // Totals cover the cgroup's whole life: a window needs a value before it as well.
  if (!now.known || !before->known) return PressureTotals{};
  PressureTotals d;
  d.known = true;
  d.cpu_some_ns = counter_delta(now.cpu_some_ns, before->cpu_some_ns);
  d.cpu_full_ns = counter_delta(now.cpu_full_ns, before->cpu_full_ns);
  d.memory_some_ns = counter_delta(now.memory_some_ns, before->memory_some_ns);
  d.memory_full_ns = counter_delta(now.memory_full_ns, before->memory_full_ns);
  d.io_some_ns = counter_delta(now.io_some_ns, before->io_some_ns);
  d.io_full_ns = counter_delta(now.io_full_ns, before->io_full_ns);
  return d;
}

}  // namespace stallwatch
