// NCCL (bpf/nccl.bpf.c, bpf/nccl.h): collective and point-to-point ops per (cgroup, process, op,
// rank, world size), map nccl_op_duration.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/nccl.h"
}

namespace stallwatch::trace {
namespace {

// (rank, world_size) pairs per series and op before further ones fold into rank "" (-1).
constexpr size_t kMaxRanksPerOp = 64;

class NcclSource : public Source {
 public:
  explicit NcclSource(const Tracer& t) : fd_(t.map_fd("nccl_op_duration")) {}
  std::string_view name() const override { return "nccl"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    // Rank pairs per (series, op): bounded so a job with thousands of communicators cannot
    // explode the label set; later pairs fold into rank "" / world_size "".
    std::map<std::pair<std::string, std::uint32_t>, std::set<std::pair<int, int>>> seen;
    auto bounded = [&](const std::string& label, NcclKey key) {
      auto& ranks = seen[{label, key.call_id}];
      if (!ranks.count({key.rank, key.world_size}) && ranks.size() >= kMaxRanksPerOp) {
        key.rank = -1;
        key.world_size = -1;
      }
      ranks.insert({key.rank, key.world_size});
      return key;
    };
    for_each_process_entry<nccl_key, nccl_stats>(
        fd_,
        [&](const nccl_key& k) { return !ctx.alive(static_cast<int>(k.tgid), k.start_tag); },
        [&](const nccl_key& k, const nccl_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
          NcclKey key = bounded(slot.label, NcclKey{k.call_id, k.rank, k.world_size});
          NcclTotals t = bytes_histogram_of<NcclTotals>(v);
          Series& s = snap.series[slot.label];
          s.nccl[key].add(t);
          s.nccl_processes.push_back(ProcessNccl{static_cast<int>(k.tgid), key, t});
        },
        [&](const nccl_key& k, const nccl_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
          NcclKey key = bounded(slot.label, NcclKey{k.call_id, k.rank, k.world_size});
          slot.retired.nccl[key].add(bytes_histogram_of<NcclTotals>(v));
        });
  }

 private:
  int fd_;
};

}  // namespace

std::unique_ptr<Source> make_nccl_source(const SourceDeps& d) {
  return std::make_unique<NcclSource>(d.tracer);
}

}  // namespace stallwatch::trace
