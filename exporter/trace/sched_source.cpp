// The scheduler (bpf/sched.bpf.c, bpf/sched.h): off-CPU time of the CUDA-issuing threads per
// (cgroup, process), map offcpu, and the tasks that preempted them, map preemptors.
#include <algorithm>
#include <cstring>
#include <map>

#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/sched.h"
}

namespace stallwatch::trace {
namespace {

constexpr size_t kTopPreemptors = 10;       // per series in the snapshot
constexpr size_t kRetainedPreemptors = 64;  // of exited victims, per cgroup, the heaviest

OffcpuTotals totals_of(const offcpu_stats& s) {
  return OffcpuTotals{s.runnable_ns, s.blocked_ns, s.oncpu_ns, s.preemptions};
}

void merge(std::map<int, Preemptor>& into, const Preemptor& p) {
  auto [it, fresh] = into.emplace(p.pid, p);
  if (!fresh) {
    it->second.runnable_ns += p.runnable_ns;
    it->second.count += p.count;
  }
}

class SchedSource : public Source {
 public:
  explicit SchedSource(const Tracer& t)
      : offcpu_fd_(t.map_fd("offcpu")), preemptors_fd_(t.map_fd("preemptors")) {}
  std::string_view name() const override { return "sched"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    read_offcpu(ctx, snap);
    read_preemptors(ctx, snap);
  }

  // Preemptors of a vanished cgroup's exited processes go with it.
  void retire_cgroup(std::uint64_t cgroup_id, SeriesTotals&) override { retired_.erase(cgroup_id); }

 private:
  void read_offcpu(SourceContext& ctx, Snapshot& snap) {
    for_each_entry<offcpu_key, offcpu_stats>(offcpu_fd_,
                                             [&](const offcpu_key& k, const offcpu_stats& v) {
                                               CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
                                               const int pid = static_cast<int>(k.tgid);
                                               if (!ctx.alive(pid)) {
                                                 slot.retired.offcpu.add(totals_of(v));
                                                 return true;
                                               }
                                               slot.live = true;
                                               Series& s = snap.series[slot.label];
                                               s.offcpu.add(totals_of(v));
                                               ctx.process(s, pid).offcpu.add(totals_of(v));
                                               return false;
                                             });
  }

  void read_preemptors(SourceContext& ctx, Snapshot& snap) {
    std::map<std::string, std::map<int, Preemptor>> merged;  // by label, then preemptor pid
    for_each_entry<preemptor_key, preemptor_stats>(
        preemptors_fd_, [&](const preemptor_key& k, const preemptor_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.victim_cgroup_id);
          Preemptor p;
          p.victim_pid = static_cast<int>(k.victim_tgid);
          p.pid = static_cast<int>(k.preemptor_tgid);
          p.comm = std::string(v.comm, strnlen(v.comm, sizeof(v.comm)));
          p.cgroup = ctx.cgroup_path(v.preemptor_cgroup_id);
          p.runnable_ns = v.runnable_ns;
          p.count = v.count;
          if (!ctx.alive(p.victim_pid)) {
            merge(retired_[k.victim_cgroup_id], p);  // the victim's evidence outlives it
            return true;
          }
          merge(merged[slot.label], p);
          return false;
        });
    for (auto& [id, r] : retired_) {
      while (r.size() > kRetainedPreemptors) {  // keep the heaviest
        auto lightest = std::min_element(r.begin(), r.end(), [](const auto& a, const auto& b) {
          return a.second.runnable_ns < b.second.runnable_ns;
        });
        r.erase(lightest);
      }
      const std::string& label = ctx.cgroup(id).label;
      for (const auto& [pid, p] : r) merge(merged[label], p);
    }
    for (auto& [label, by_pid] : merged) {
      auto& p = snap.series[label].preemptors;
      for (auto& [pid, pre] : by_pid) p.push_back(std::move(pre));
      std::sort(p.begin(), p.end(), [](const Preemptor& a, const Preemptor& b) {
        return a.runnable_ns > b.runnable_ns;
      });
      if (p.size() > kTopPreemptors) p.resize(kTopPreemptors);
    }
  }

  int offcpu_fd_;
  int preemptors_fd_;
  std::map<std::uint64_t, std::map<int, Preemptor>> retired_;  // by victim cgroup id, pid
};

}  // namespace

std::unique_ptr<Source> make_sched_source(const SourceDeps& d) {
  return std::make_unique<SchedSource>(d.tracer);
}

}  // namespace stallwatch::trace
