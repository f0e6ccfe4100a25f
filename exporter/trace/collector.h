// Reads the BPF maps once per window and builds the next Snapshot: per-series cumulative call
// histograms and off-CPU totals, window off-CPU ratios, top preemptors, lost counts.
//
// Map entries are keyed per process. Entries of exited processes are read one last time,
// folded into their cgroup's retired totals and deleted, so maps stay bounded and exported
// counters never go backwards. At most max_cgroups cgroups get a series of their own (first
// come, kept while the cgroup exists); later ones fold into the `_overflow` series.
// Not thread-safe: one collector thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trace/snapshot.h"
#include "identity/cgroup_resolver.h"
#include "identity/kube_metadata.h"

namespace stallwatch::trace {

class Tracer;

struct CollectorOptions {
  size_t max_cgroups = 256;
  identity::KubeMetadata* kube = nullptr;  // pod/namespace/container names, when configured
};

struct TraceCounts {
  std::uint64_t outliers = 0;
  std::uint64_t traced_processes = 0;
  std::uint64_t attached_libraries = 0;
  std::uint64_t attached_probes = 0;
};

class Collector {
 public:
  Collector(const Tracer& tracer, identity::CgroupResolver& resolver, CollectorOptions options);

  // The caller may fill the chain and store fields before publishing it as const.
  std::shared_ptr<Snapshot> collect(std::chrono::nanoseconds window, const TraceCounts& counts);

  // An OOM kill reported by the kernel (host.bpf.c); thread-safe, taken by the next collect().
  void add_oom_kill(std::uint64_t cgroup_id, OomKill kill);

 private:
  struct CgroupState {
    std::string label;
    std::map<std::uint32_t, CallTotals> retired_calls;
    OffcpuTotals retired_offcpu;
    std::map<int, Preemptor> retired_preemptors;  // of exited processes, by preemptor pid
    bool live = false;  // had map entries in this pass
    // Host evidence (collector_host.cpp): retired = of exited processes or a vanished cgroup
    // that shared this label; the per-cgroup maps are read whole each window.
    std::map<IoKey, IoTotals> retired_io;
    std::map<NcclKey, NcclTotals> retired_nccl;
    ReclaimTotals retired_reclaim;
    std::uint64_t retired_retransmits_ipv4 = 0;
    std::uint64_t retired_retransmits_ipv6 = 0;
    std::uint64_t oom_kills = 0;
    std::uint64_t oom_kills_cuda = 0;
    std::deque<OomKill> oom_victims;
  };

  CgroupState& state_of(std::uint64_t cgroup_id);
  std::string cgroup_path(std::uint64_t cgroup_id);
  bool alive(int pid);
  ProcessInfo& process_info(Series& s, int pid);
  void read_calls(std::map<std::string, Series>& out);
  void read_offcpu(std::map<std::string, Series>& out);
  void read_preemptors(std::map<std::string, Series>& out);
  void drop_vanished_cgroups();
  // collector_host.cpp
  void read_host(std::map<std::string, Series>& out);
  void read_reclaim(std::map<std::string, Series>& out);
  void read_io(std::map<std::string, Series>& out);
  void read_retransmits(std::map<std::string, Series>& out);
  void read_nccl(std::map<std::string, Series>& out);
  void take_oom_kills();
  void retire_cgroup_maps(std::uint64_t cgroup_id, CgroupState& into);
  void finish_host(std::map<std::string, Series>& out);
  const std::string& device_name(std::uint32_t major, std::uint32_t minor);

  const Tracer& tracer_;
  identity::CgroupResolver& resolver_;
  CollectorOptions options_;
  std::map<std::uint64_t, CgroupState> cgroups_;
  std::map<std::string, size_t> label_users_;  // label → cgroup states using it
  std::map<int, bool> alive_cache_;            // per pass
  std::map<int, ProcessInfo> procs_;           // comm and start time of live pids
  std::shared_ptr<const Snapshot> previous_;
  std::map<std::uint64_t, std::string> devices_;  // (major << 32 | minor) → kernel name
  std::mutex oom_mu_;
  std::vector<std::pair<std::uint64_t, OomKill>> pending_ooms_;  // guarded by oom_mu_
};

}  // namespace stallwatch::trace
