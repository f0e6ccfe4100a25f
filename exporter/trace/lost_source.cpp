// What the kernel side could not record (bpf/stallwatch.h, enum sw_lost_source): per-CPU
// counters in map events_lost, summed into Snapshot::lost (stallwatch_events_lost_total); and
// the entries the LRU maps no other source deletes from dropped for room (Snapshot::evicted;
// the preemptors map is the scheduler source's).
#include <array>

#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/nccl.h"
}

namespace stallwatch::trace {
namespace {

class LostSource : public Source {
 public:
  explicit LostSource(const Tracer& t)
      : fd_(t.map_fd("events_lost")),
        lru_ops_fd_(t.map_fd("lru_ops")),
        io_inflight_fd_(t.map_fd("io_inflight")),
        nccl_comms_fd_(t.map_fd("nccl_comms")),
        reclaim_starts_fd_(t.map_fd("reclaim_starts")) {}
  std::string_view name() const override { return "lost"; }
  void read(SourceContext&, Snapshot& snap) override {
    snap.lost = read_lost(fd_);
    // Keys first, counters after: an insert in between reads as an eviction for one pass only.
    evict(snap, SW_LRU_IO_INFLIGHT, count_keys<__u64>(io_inflight_fd_));
    evict(snap, SW_LRU_NCCL_COMMS, count_keys<nccl_comm_key>(nccl_comms_fd_));
    evict(snap, SW_LRU_RECLAIM_STARTS, count_keys<__u32>(reclaim_starts_fd_));
  }

 private:
  void evict(Snapshot& snap, unsigned lru, std::size_t live) {
    const LruOps ops = read_lru_ops(lru_ops_fd_, lru);
    snap.evicted[lru] = evicted_[lru].update(ops.inserts, ops.deletes, live);
  }

  int fd_;
  int lru_ops_fd_;
  int io_inflight_fd_;
  int nccl_comms_fd_;
  int reclaim_starts_fd_;
  std::array<EvictionCount, kLruMaps> evicted_;
};

}  // namespace

std::unique_ptr<Source> make_lost_source(const SourceDeps& d) {
  return std::make_unique<LostSource>(d.tracer);
}

}  // namespace stallwatch::trace
