// Memory (bpf/host.bpf.c, bpf/host.h): time each watched cgroup's tasks spent reclaiming, map
// memory_reclaim (per cgroup, read whole every window), and OOM kills, which arrive one by one
// through the host ring buffer (decoded by the tracer) on the polling thread.
#include <bpf/bpf.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "common/log.h"
#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/host.h"
}

namespace stallwatch::trace {
namespace {

constexpr size_t kMaxPendingKills = 1024;

ReclaimTotals reclaim_of(const reclaim_stats& v) {
  return ReclaimTotals{v.direct_ns, v.direct_count, v.memcg_ns, v.memcg_count, v.cuda_ns};
}

class HostSource : public Source {
 public:
  explicit HostSource(Tracer& t) : reclaim_fd_(t.map_fd("memory_reclaim")) {
    t.on_oom_kill([this](std::uint64_t cgroup_id, OomKill kill) {
      SW_LOG(kInfo) << "OOM kill: " << kill.comm << " (pid " << kill.pid << ")"
                    << (kill.cuda ? ", a CUDA-issuing process" : "");
      std::lock_guard lock(mu_);
      if (pending_.size() < kMaxPendingKills) pending_.emplace_back(cgroup_id, std::move(kill));
    });
  }
  std::string_view name() const override { return "host"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    take_oom_kills(ctx);
    for_each_entry<__u64, reclaim_stats>(reclaim_fd_, [&](const __u64& id, const reclaim_stats& v) {
      snap.series[ctx.cgroup(id).label].reclaim.add(reclaim_of(v));
      return false;
    });
  }

  void retire_cgroup(std::uint64_t cgroup_id, SeriesTotals& into) override {
    __u64 id = cgroup_id;
    reclaim_stats r{};
    if (bpf_map_lookup_elem(reclaim_fd_, &id, &r) == 0) {
      into.reclaim.add(reclaim_of(r));
      bpf_map_delete_elem(reclaim_fd_, &id);
    }
  }

  // The latest victims of each series, oldest first.
  void finish(Snapshot& snap) override {
    for (auto& [label, s] : snap.series) {
      std::sort(s.oom_victims.begin(), s.oom_victims.end(),
                [](const OomKill& a, const OomKill& b) { return a.at_ns < b.at_ns; });
      if (s.oom_victims.size() > kMaxOomVictims) {
        s.oom_victims.erase(s.oom_victims.begin(),
                            s.oom_victims.end() - static_cast<long>(kMaxOomVictims));
      }
    }
  }

 private:
  // Kills are events: they live in the cgroup's retired totals from the start.
  void take_oom_kills(SourceContext& ctx) {
    std::vector<std::pair<std::uint64_t, OomKill>> kills;
    {
      std::lock_guard lock(mu_);
      kills.swap(pending_);
    }
    for (auto& [cgroup_id, kill] : kills) {
      SeriesTotals& r = ctx.cgroup(cgroup_id).retired;
      // The kernel flags a victim thread that issued CUDA calls; a process whose other
      // threads did is known from the call map.
      if (ctx.known_process(kill.pid)) kill.cuda = true;
      r.oom_kills++;
      if (kill.cuda) r.oom_kills_cuda++;
      r.oom_victims.push_back(std::move(kill));
      if (r.oom_victims.size() > kMaxOomVictims) r.oom_victims.erase(r.oom_victims.begin());
    }
  }

  int reclaim_fd_;
  std::mutex mu_;
  std::vector<std::pair<std::uint64_t, OomKill>> pending_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<Source> make_host_source(const SourceDeps& d) {
  return std::make_unique<HostSource>(d.tracer);
}

}  // namespace stallwatch::trace
