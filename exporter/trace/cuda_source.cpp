// CUDA calls (bpf/cuda.bpf.c, bpf/cuda.h): per (cgroup, call, process) cumulative latency
// histograms with the off-CPU time inside the calls: the hash call_index gives each its slot of
// the array call_slots, read here through a shared mapping of the array. The slots of exited
// processes are zeroed and pushed on free_call_slots for the kernel to hand out again. Also
// un-watches a vanished cgroup (watched_cgroups, which the call probes fill).
#include <bpf/bpf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "common/log.h"
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
  t.sum_ns = s.sum_ns;
  t.runnable_ns = s.runnable_ns;
  t.blocked_ns = s.blocked_ns;
  t.max_ns = s.max_ns;
  std::copy(std::begin(s.buckets), std::end(s.buckets), t.buckets.begin());
  // The kernel keeps no count (one atomic add fewer per call): the buckets hold every call.
  t.count = std::accumulate(t.buckets.begin(), t.buckets.end(), std::uint64_t{0});
  t.alloc_bytes = s.alloc_bytes;
  t.freed_bytes = s.freed_bytes;
  t.alloc_failures = s.alloc_failures;
  t.failed_bytes = s.failed_bytes;
  return t;
}

// A read-only mapping of call_slots (BPF_F_MMAPABLE): a window reads each slot in place.
class SlotMapping {
 public:
  explicit SlotMapping(int fd) {
    const long page = sysconf(_SC_PAGESIZE);
    bytes_ = (sizeof(call_stats) * SW_CALL_SLOTS + page - 1) / page * page;
    void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      SW_LOG(kError) << "mapping the call statistics (call_slots) failed: " << std::strerror(errno)
                     << "; call histograms stay empty";
      return;
    }
    slots_ = static_cast<const call_stats*>(p);
  }
  ~SlotMapping() {
    if (slots_) munmap(const_cast<call_stats*>(slots_), bytes_);
  }
  SlotMapping(const SlotMapping&) = delete;
  SlotMapping& operator=(const SlotMapping&) = delete;
  // The slot's statistics as they are now; nullptr for a slot out of range or no mapping.
  const call_stats* at(std::uint32_t slot) const {
    return slots_ && slot < SW_CALL_SLOTS ? &slots_[slot] : nullptr;
  }

 private:
  const call_stats* slots_ = nullptr;
  size_t bytes_ = 0;
};

class CudaSource : public Source {
 public:
  explicit CudaSource(const Tracer& t)
      : index_fd_(t.map_fd("call_index")),
        slots_fd_(t.map_fd("call_slots")),
        free_fd_(t.map_fd("free_call_slots")),
        watched_fd_(t.map_fd("watched_cgroups")),
        allocs_fd_(t.map_fd("cuda_allocs")),
        slots_(slots_fd_) {}
  std::string_view name() const override { return "cuda"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    std::set<std::pair<std::uint32_t, std::uint32_t>> exited_holding;  // (tgid, start tag)
    freed_.clear();
    for_each_entry<call_key, __u32>(index_fd_, [&](const call_key& k, const __u32& slot) {
      const call_stats* v = slots_.at(slot);
      if (!v) return false;
      CgroupSlot& cg = ctx.cgroup(k.cgroup_id);
      CallTotals t = totals_of(*v);
      const int pid = static_cast<int>(k.tgid);
      if (!ctx.alive(pid, k.start_tag)) {
        exited_holding.emplace(k.tgid, k.start_tag);
        if (t.alloc_failures > 0) {
          snap.series[cg.label].exited_alloc_failures.push_back(
              ExitedAllocFailure{pid, ctx.comm(pid), k.call_id, t.alloc_failures, t.failed_bytes});
        }
        cg.retired.calls[k.call_id].add(t);
        // Its last window still has a row per call (the store, explain and export count it).
        snap.exited[cg.label].calls.push_back(ProcessCall{pid, k.call_id, t, true});
        ctx.exited_process(snap, cg.label, pid, k.start_tag);
        freed_.push_back(slot);
        return true;
      }
      cg.live = true;
      Series& s = snap.series[cg.label];
      s.calls[k.call_id].add(t);
      s.processes.push_back(ProcessCall{pid, k.call_id, t});
      ctx.process(s, pid);
      return false;
    });
    if (!exited_holding.empty()) forget_allocations(exited_holding);
    release(freed_);
  }

  void retire_cgroup(std::uint64_t cgroup_id, SeriesTotals&) override {
    __u64 id = cgroup_id;
    bpf_map_delete_elem(watched_fd_, &id);
  }

 private:
  // An exited process's memory is released with it: its entries in cuda_allocs go (a later
  // process with the same PID has another start tag and keeps its own). Before its slots are
  // handed out again, so no stale record credits a free to another process's call.
  void forget_allocations(const std::set<std::pair<std::uint32_t, std::uint32_t>>& exited) {
    for_each_entry<cuda_alloc_key, cuda_alloc>(
        allocs_fd_, [&](const cuda_alloc_key& k, const cuda_alloc& v) {
          return exited.contains({k.tgid, v.start_tag});
        });
  }

  // The slots of exited processes, whose index entries are gone: zeroed, then free for reuse.
  void release(const std::vector<__u32>& slots) {
    static const call_stats zero{};
    for (__u32 slot : slots) {
      if (bpf_map_update_elem(slots_fd_, &slot, &zero, BPF_ANY) != 0) continue;  // kept unused
      bpf_map_update_elem(free_fd_, nullptr, &slot, BPF_ANY);
    }
  }

  int index_fd_;
  int slots_fd_;
  int free_fd_;
  int watched_fd_;
  int allocs_fd_;
  SlotMapping slots_;
  std::vector<__u32> freed_;
};

}  // namespace

std::unique_ptr<Source> make_cuda_source(const SourceDeps& d) {
  return std::make_unique<CudaSource>(d.tracer);
}

}  // namespace stallwatch::trace
