// CUDA calls (bpf/cuda.bpf.c, bpf/cuda.h): per (cgroup, call, process) cumulative latency
// histograms with the off-CPU time inside the calls, map cuda_call_duration. Also un-watches a
// vanished cgroup (watched_cgroups, which the call probes fill).
#include <bpf/bpf.h>

#include <algorithm>
#include <set>
#include <utility>

#include "host/procfs.h"
#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/cuda.h"
}

namespace stallwatch::trace {
namespace {

static_assert(host::kStartTagNs == SW_START_TAG_NS);

CallTotals totals_of(const call_stats& s) {
  CallTotals t;
  t.count = s.count;
  t.sum_ns = s.sum_ns;
  t.runnable_ns = s.runnable_ns;
  t.blocked_ns = s.blocked_ns;
  t.max_ns = s.max_ns;
  std::copy(std::begin(s.buckets), std::end(s.buckets), t.buckets.begin());
  t.alloc_bytes = s.alloc_bytes;
  t.freed_bytes = s.freed_bytes;
  t.alloc_failures = s.alloc_failures;
  t.failed_bytes = s.failed_bytes;
  return t;
}

class CudaSource : public Source {
 public:
  explicit CudaSource(const Tracer& t)
      : calls_fd_(t.map_fd("cuda_call_duration")),
        watched_fd_(t.map_fd("watched_cgroups")),
        allocs_fd_(t.map_fd("cuda_allocs")) {}
  std::string_view name() const override { return "cuda"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    std::set<std::pair<std::uint32_t, std::uint32_t>> exited_holding;  // (tgid, start tag)
    for_each_entry<call_key, call_stats>(calls_fd_, [&](const call_key& k, const call_stats& v) {
      CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
      CallTotals t = totals_of(v);
      const int pid = static_cast<int>(k.tgid);
      if (!ctx.alive(pid, k.start_tag)) {
        if (t.live_bytes() > 0) exited_holding.emplace(k.tgid, k.start_tag);
        if (t.alloc_failures > 0) {
          snap.series[slot.label].exited_alloc_failures.push_back(
              ExitedAllocFailure{pid, ctx.comm(pid), k.call_id, t.alloc_failures, t.failed_bytes});
        }
        slot.retired.calls[k.call_id].add(t);
        return true;
      }
      slot.live = true;
      Series& s = snap.series[slot.label];
      s.calls[k.call_id].add(t);
      s.processes.push_back(ProcessCall{pid, k.call_id, t});
      ctx.process(s, pid);
      return false;
    });
    if (!exited_holding.empty()) forget_allocations(exited_holding);
  }

  void retire_cgroup(std::uint64_t cgroup_id, SeriesTotals&) override {
    __u64 id = cgroup_id;
    bpf_map_delete_elem(watched_fd_, &id);
  }

 private:
  // An exited process's memory is released with it: its entries in cuda_allocs go (a later
  // process with the same PID has another start tag and keeps its own).
  void forget_allocations(const std::set<std::pair<std::uint32_t, std::uint32_t>>& exited) {
    for_each_entry<cuda_alloc_key, cuda_alloc>(
        allocs_fd_, [&](const cuda_alloc_key& k, const cuda_alloc& v) {
          return exited.contains({k.tgid, v.start_tag});
        });
  }

  int calls_fd_;
  int watched_fd_;
  int allocs_fd_;
};

}  // namespace

std::unique_ptr<Source> make_cuda_source(const SourceDeps& d) {
  return std::make_unique<CudaSource>(d.tracer);
}

}  // namespace stallwatch::trace
