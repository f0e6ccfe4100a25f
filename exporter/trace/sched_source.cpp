// The scheduler (bpf/sched.bpf.c, bpf/sched.h): off-CPU time of the CUDA-issuing threads per
// (cgroup, process), map offcpu, and the tasks that preempted them, map preemptors.
#include <bpf/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "common/log.h"
#include "common/strings.h"
#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/sched.h"
}

namespace stallwatch::trace {
namespace {

constexpr size_t kRetainedPreemptors = 64;  // of exited victims, per cgroup, the heaviest

OffcpuTotals totals_of(const offcpu_stats& s) {
  return OffcpuTotals{s.runnable_ns, s.blocked_ns, s.oncpu_ns, s.preemptions};
}

using PreemptorKey = std::pair<int, int>;  // victim pid, preemptor pid

// Threads of one preempting process add up; the heaviest thread's name is kept beside the
// process name.
struct Merged {
  Preemptor p;
  std::uint64_t heaviest_thread_ns = 0;
};

void merge(std::map<PreemptorKey, Merged>& into, const Preemptor& p, std::uint64_t thread_ns,
           const std::string& thread) {
  auto [it, fresh] = into.try_emplace({p.victim_pid, p.pid});
  Merged& m = it->second;
  if (fresh) {
    m.p = p;
    m.p.runnable_ns = m.p.count = 0;
  }
  m.p.runnable_ns += p.runnable_ns;
  m.p.count += p.count;
  if (thread_ns > m.heaviest_thread_ns || fresh) {
    m.heaviest_thread_ns = thread_ns;
    m.p.thread = thread;
    if (!p.comm.empty()) m.p.comm = p.comm;  // the newest name of the process
  }
}

std::string name_of(const char (&comm)[SW_COMM_LEN]) {
  return escape_name(std::string_view(comm, strnlen(comm, SW_COMM_LEN)));
}

class SchedSource : public Source {
 public:
  explicit SchedSource(const Tracer& t)
      : fold_link_fd_(t.fold_iter_link_fd()),
        offcpu_fd_(t.map_fd("offcpu")),
        preemptors_fd_(t.map_fd("preemptors")),
        lru_ops_fd_(t.map_fd("lru_ops")) {}
  std::string_view name() const override { return "sched"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    fold_tallies();
    read_offcpu(ctx, snap);
    read_preemptors(ctx, snap);
  }

  // Preemptors of a vanished cgroup's exited processes go with it.
  void retire_cgroup(std::uint64_t cgroup_id, SeriesTotals&) override { retired_.erase(cgroup_id); }

 private:
  // Runs fold_offcpu over every task: the threads' tallies join offcpu before it is read.
  void fold_tallies() {
    const int fd = fold_link_fd_ < 0 ? -1 : bpf_iter_create(fold_link_fd_);
    if (fd < 0) {
      if (!warned_) SW_LOG(kWarn) << "folding off-CPU tallies failed: " << std::strerror(errno);
      warned_ = true;
      return;
    }
    char buf[64];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    ::close(fd);
  }

  void read_offcpu(SourceContext& ctx, Snapshot& snap) {
    for_each_process_entry<offcpu_key, offcpu_stats>(
        offcpu_fd_,
        [&](const offcpu_key& k) { return !ctx.alive(static_cast<int>(k.tgid), k.start_tag); },
        [&](const offcpu_key& k, const offcpu_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
          slot.live = true;
          Series& s = snap.series[slot.label];
          s.offcpu.add(totals_of(v));
          ctx.process(s, static_cast<int>(k.tgid)).offcpu.add(totals_of(v));
        },
        [&](const offcpu_key& k, const offcpu_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
          slot.retired.offcpu.add(totals_of(v));
          ctx.exited_process(snap, slot.label, static_cast<int>(k.tgid), k.start_tag)
              .offcpu.add(totals_of(v));
        });
  }

  void read_preemptors(SourceContext& ctx, Snapshot& snap) {
    std::map<std::string, std::map<PreemptorKey, Merged>> merged;  // by label
    const Walk walk = for_each_entry<preemptor_key, preemptor_stats>(
        preemptors_fd_, [&](const preemptor_key& k, const preemptor_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.victim_cgroup_id);
          Preemptor p;
          p.victim_pid = static_cast<int>(k.victim_tgid);
          p.pid = static_cast<int>(v.id.tgid);
          p.comm = name_of(v.id.process_comm);
          p.ppid = static_cast<int>(v.id.ppid);
          p.kernel_thread = (v.id.flags & SW_PREEMPTOR_KTHREAD) != 0;
          p.cgroup = ctx.cgroup_path(v.id.cgroup_id);
          const identity::Identity where = ctx.cgroup_identity(v.id.cgroup_id);
          p.pod_uid = where.pod_uid;
          p.unit = where.systemd_unit;
          p.runnable_ns = v.runnable_ns;
          p.count = v.count;
          std::string thread = name_of(v.id.comm);
          if (p.comm.empty()) p.comm = thread;
          if (thread == p.comm) thread.clear();
          if (!ctx.alive(p.victim_pid, k.victim_start_tag)) {
            // the victim's evidence outlives it
            merge(retired_[k.victim_cgroup_id], p, v.runnable_ns, thread);
            return true;
          }
          merge(merged[slot.label], p, v.runnable_ns, thread);
          return false;
        });
    // Entries the map dropped for room: a long job's preemptor list past 8192 (victim,
    // preemptor thread) pairs loses its least recent ones.
    deleted_ += walk.deleted;
    const LruOps ops = read_lru_ops(lru_ops_fd_, SW_LRU_PREEMPTORS);
    snap.evicted[SW_LRU_PREEMPTORS] = evicted_.update(ops.inserts, ops.deletes + deleted_, walk.live);
    for (auto& [id, r] : retired_) {
      while (r.size() > kRetainedPreemptors) {  // keep the heaviest
        auto lightest = std::min_element(r.begin(), r.end(), [](const auto& a, const auto& b) {
          return a.second.p.runnable_ns < b.second.p.runnable_ns;
        });
        r.erase(lightest);
      }
      const std::string& label = ctx.cgroup(id).label;
      for (const auto& [key, m] : r) merge(merged[label], m.p, m.heaviest_thread_ns, m.p.thread);
    }
    // Every preemptor is kept (the map bounds them): a cut by cumulative time would hide a new
    // hog behind a long job's old ones, and would count its whole history into the window it
    // entered the cut.
    for (auto& [label, by_key] : merged) {
      auto& p = snap.series[label].preemptors;
      for (auto& [key, m] : by_key) p.push_back(std::move(m.p));
      std::sort(p.begin(), p.end(), [](const Preemptor& a, const Preemptor& b) {
        return a.runnable_ns > b.runnable_ns;
      });
    }
  }

  int fold_link_fd_;
  bool warned_ = false;
  int offcpu_fd_;
  int preemptors_fd_;
  int lru_ops_fd_;
  std::uint64_t deleted_ = 0;  // preemptors entries deleted here (of exited victims), cumulative
  EvictionCount evicted_;
  std::map<std::uint64_t, std::map<PreemptorKey, Merged>> retired_;  // by victim cgroup id
};

}  // namespace

std::unique_ptr<Source> make_sched_source(const SourceDeps& d) {
  return std::make_unique<SchedSource>(d.tracer);
}

}  // namespace stallwatch::trace
