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
#include <map>
#include <memory>
#include <string>

#include "common/snapshot.h"
#include "identity/cgroup_resolver.h"

namespace stallwatch::trace {

class Tracer;

struct CollectorOptions {
  size_t max_cgroups = 256;
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

 private:
  struct CgroupState {
    std::string label;
    std::map<std::uint32_t, CallTotals> retired_calls;
    OffcpuTotals retired_offcpu;
    std::map<int, Preemptor> retired_preemptors;  // of exited processes, by preemptor pid
    bool live = false;  // had map entries in this pass
  };

  CgroupState& state_of(std::uint64_t cgroup_id);
  std::string cgroup_path(std::uint64_t cgroup_id);
  bool alive(int pid);
  ProcessInfo& process_info(Series& s, int pid);
  void read_calls(std::map<std::string, Series>& out);
  void read_offcpu(std::map<std::string, Series>& out);
  void read_preemptors(std::map<std::string, Series>& out);
  void drop_vanished_cgroups();

  const Tracer& tracer_;
  identity::CgroupResolver& resolver_;
  CollectorOptions options_;
  std::map<std::uint64_t, CgroupState> cgroups_;
  std::map<std::string, size_t> label_users_;  // label → cgroup states using it
  std::map<int, bool> alive_cache_;            // per pass
  std::map<int, ProcessInfo> procs_;           // comm and start time of live pids
  std::shared_ptr<const Snapshot> previous_;
};

}  // namespace stallwatch::trace
