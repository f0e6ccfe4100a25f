// Calls that have not returned (bpf/sched.bpf.c, iter/task inflight_calls; bpf/sched.h struct
// inflight_call): each window the task iterator lists every traced thread's open calls, which
// become Series::inflight; and the NCCL communicators of live processes (map nccl_comms), which
// become Snapshot::nccl_members and give an open NCCL op its rank and world size.
#include <bpf/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/strings.h"
#include "trace/calls.h"
#include "trace/map_iter.h"
#include "trace/nccl_ranks.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/nccl.h"
#include "bpf/sched.h"
}

namespace stallwatch::trace {
namespace {

// One read is bounded: 64k open calls (4 per thread) is far past any host.
constexpr size_t kMaxRecords = 65536;

class InflightSource : public Source {
 public:
  InflightSource(const Tracer& t, const host::Procfs& fs)
      : link_fd_(t.inflight_iter_link_fd()), comms_fd_(t.map_fd("nccl_comms")), fs_(fs) {}
  std::string_view name() const override { return "inflight"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    // Communicators first: an open op's rank comes from them.
    std::map<std::pair<std::uint64_t, int>, nccl_comm_info> comms;  // (comm, tgid)
    for_each_entry<nccl_comm_key, nccl_comm_info>(
        comms_fd_, [&](const nccl_comm_key& k, const nccl_comm_info& v) {
          comms[{k.comm, static_cast<int>(k.tgid)}] = v;
          return false;
        });
    std::map<int, std::string> label_of_pid;
    for (const inflight_call& r : records()) {
      if (!ctx.alive(static_cast<int>(r.tgid), r.start_tag)) continue;
      CgroupSlot& slot = ctx.cgroup(r.cgroup_id);
      InflightCall c;
      c.pid = static_cast<int>(r.tgid);
      c.tid = static_cast<int>(r.tid);
      c.thread = escape_name(std::string_view(r.comm, strnlen(r.comm, SW_COMM_LEN)));
      c.call_id = r.call_id;
      c.depth = static_cast<int>(r.depth);
      c.age_ns = r.now_ns > r.start_ns ? r.now_ns - r.start_ns : 0;
      c.runnable_ns = r.runnable_ns;
      c.blocked_ns = r.blocked_ns;
      c.preemptions = r.preemptions;
      c.on_cpu = r.on_cpu != 0;
      if (is_nccl_op(r.call_id)) {
        if (auto it = comms.find({r.nccl_comm, c.pid}); it != comms.end()) {
          c.rank = it->second.rank;
          c.world_size = it->second.world_size;
        }
      }
      label_of_pid[c.pid] = slot.label;
      snap.series[slot.label].inflight.push_back(std::move(c));
    }
    for (auto& [label, s] : snap.series) {
      std::sort(s.inflight.begin(), s.inflight.end(),
                [](const InflightCall& a, const InflightCall& b) { return a.age_ns > b.age_ns; });
    }
    std::map<int, JobKeys> jobs;  // of the members now: read once per process
    for (const auto& [key, info] : comms) {
      const int pid = key.second;
      if (!ctx.known_process(pid)) continue;
      auto it = label_of_pid.find(pid);
      const std::string label = it != label_of_pid.end() ? it->second : process_label(ctx, snap, pid);
      if (label.empty()) continue;
      const std::uint32_t tag = fs_.start_tag(pid);
      auto job = jobs_.find(pid);
      if (job == jobs_.end() || job->second.first != tag) {
        const JobKeys keys = job_keys_from_environ(
            host::Procfs::read_bounded(fs_.pid_path(pid, "environ"), kMaxEnvironBytes));
        job = jobs_.insert_or_assign(pid, std::pair{tag, keys}).first;
      }
      jobs[pid] = job->second.second;
      snap.nccl_members.push_back(
          NcclMember{label, pid, info.rank, info.world_size, info.comm_hash, job->second.second});
    }
    std::erase_if(jobs_, [&](const auto& e) { return !jobs.count(e.first); });
  }

 private:
  // The series a known process is in (from the series the other sources filled).
  static std::string process_label(SourceContext&, const Snapshot& snap, int pid) {
    for (const auto& [label, s] : snap.series) {
      if (s.process_info.count(pid)) return label;
    }
    return {};
  }

  std::vector<inflight_call> records() {
    std::vector<inflight_call> out;
    if (link_fd_ < 0) return out;
    const int fd = bpf_iter_create(link_fd_);
    if (fd < 0) {
      if (!warned_) SW_LOG(kWarn) << "reading open calls failed: " << std::strerror(errno);
      warned_ = true;
      return out;
    }
    inflight_call r;
    size_t have = 0;
    for (;;) {
      const ssize_t n = ::read(fd, reinterpret_cast<char*>(&r) + have, sizeof(r) - have);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      have += static_cast<size_t>(n);
      if (have < sizeof(r)) continue;
      have = 0;
      if (out.size() < kMaxRecords) out.push_back(r);
    }
    ::close(fd);
    return out;
  }

  int link_fd_;
  int comms_fd_;
  const host::Procfs& fs_;
  std::map<int, std::pair<std::uint32_t, JobKeys>> jobs_;  // by pid: start tag, its job keys
  bool warned_ = false;
};

}  // namespace

std::unique_ptr<Source> make_inflight_source(const SourceDeps& d) {
  return std::make_unique<InflightSource>(d.tracer, d.fs);
}

}  // namespace stallwatch::trace
