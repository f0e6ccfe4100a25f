// Builds the next Snapshot once per window from the evidence sources (source.h, listed in
// sources.h): each reads its kernel maps into the series' cumulative totals. What is generic
// lives here, once:
// - which series a cgroup feeds: its cgroup path, or `_overflow` for cgroups past max_cgroups
//   (first come, kept while the cgroup exists);
// - retirement: map entries of exited processes are read one last time into their cgroup's
//   retired totals (SeriesTotals) and deleted, so maps stay bounded and exported counters never
//   go backwards; a vanished cgroup's retired totals pass to another cgroup of the same label,
//   else its series disappears;
// - the names and start times of live processes (host/procfs.h), and each series' identity.
// Window ratios are not computed here: the window step (chains/window.h) owns them.
// Not thread-safe: one collector thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/procfs.h"
#include "identity/cgroup_resolver.h"
#include "identity/kube_metadata.h"
#include "trace/snapshot.h"
#include "trace/source.h"

namespace stallwatch::trace {

struct CollectorOptions {
  size_t max_cgroups = 256;
  identity::KubeMetadata* kube = nullptr;  // pod/namespace/container names, when configured
  // The name of a process that exited before the collector read it alive (a job shorter than a
  // window), by PID and start tag; "" when unknown. May be empty (no names).
  std::function<std::string(int, std::uint32_t)> exited_name;
  std::string node;  // Snapshot::node
};

struct TraceCounts {
  std::uint64_t outliers = 0;
  std::uint64_t traced_processes = 0;
  std::uint64_t attached_libraries = 0;
  std::uint64_t attached_probes = 0;
  std::uint64_t emulated_probes = 0;    // of attached_probes, on sites the kernel emulates
  std::uint64_t libraries_refused = 0;  // over --max-libraries (each file once)
  std::uint64_t discovery_dropped = 0;  // library-mapping events dropped: discovery's queue full
  const ProbeCalibration* calibration = nullptr;  // the start's measure of a probe's cost
  std::vector<bool> stepped_calls;  // by call id: probed on a single-stepped site somewhere
  double cost_budget = 0;           // --cost-budget (0: none)
  // Per process the cost budget cycled: ns its launch probes were detached, cumulative.
  std::map<int, std::uint64_t> launch_off_ns;
};

class Collector : private SourceContext {
 public:
  Collector(std::vector<std::unique_ptr<Source>> sources, identity::CgroupResolver& resolver,
            const host::Procfs& fs, CollectorOptions options);

  // The caller may fill the chain and store fields before publishing it as const.
  std::shared_ptr<Snapshot> collect(std::chrono::nanoseconds window, const TraceCounts& counts);

 private:
  // SourceContext
  CgroupSlot& cgroup(std::uint64_t cgroup_id) override;
  std::string cgroup_path(std::uint64_t cgroup_id) override;
  identity::Identity cgroup_identity(std::uint64_t cgroup_id) override;
  bool alive(int pid, std::uint32_t start_tag) override;
  ProcessInfo& process(Series& s, int pid) override;
  ProcessInfo& exited_process(Snapshot& snap, const std::string& label, int pid,
                              std::uint32_t start_tag) override;
  bool known_process(int pid) override { return procs_.count(pid) > 0; }
  std::string comm(int pid) override;

  void drop_vanished_cgroups();

  std::vector<std::unique_ptr<Source>> sources_;
  identity::CgroupResolver& resolver_;
  const host::Procfs& fs_;
  CollectorOptions options_;
  std::map<std::uint64_t, CgroupSlot> cgroups_;
  std::map<std::string, size_t> label_users_;  // label → cgroup slots using it
  struct Running {
    bool exists = false;
    std::uint32_t start_tag = 0;  // of the process with this PID now; 0 unknown
  };
  const Running& running(int pid);
  std::map<int, Running> alive_cache_;         // per pass
  std::map<int, ProcessInfo> procs_;           // comm and start time of live pids
  std::uint64_t sequence_ = 0;
};

}  // namespace stallwatch::trace
