// A synthetic host for `stallwatch demo` and the chain unit tests: processes in cgroups that
// make CUDA calls, get preempted and go off-CPU, accumulated exactly as the kernel side would
// (cumulative log2 histograms, per-process off-CPU, preemptors), turned into the same Snapshot
// the collector builds. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chains/outliers.h"
#include "common/snapshot.h"

namespace stallwatch::demo {

// One batch of calls of one kind in a window.
struct CallMix {
  std::string_view call;        // a name from trace/calls.cpp, e.g. "cudaStreamSynchronize"
  std::uint64_t count = 0;
  std::uint64_t typical_ns = 0;  // most calls take this long
  std::uint64_t tail_ns = 0;     // the slow ones (0: none)
  double tail_share = 0;         // share of calls that are slow
  double runnable_share = 0;     // share of the call time spent runnable off-CPU
  double blocked_share = 0;      // share of the call time spent blocked off-CPU
};

class SyntheticHost {
 public:
  void add_process(const std::string& cgroup, int pid, const std::string& comm,
                   std::int64_t start_ns);
  void exit_process(int pid);
  bool has_process(int pid) const { return procs_.count(pid) > 0; }

  void calls(int pid, const CallMix& mix);
  void offcpu(int pid, std::uint64_t runnable_ns, std::uint64_t blocked_ns, std::uint64_t oncpu_ns,
              std::uint64_t preemptions);
  void preempted_by(int victim, int pid, const std::string& comm, const std::string& cgroup,
                    std::uint64_t runnable_ns, std::uint64_t count);

  // The cumulative snapshot at `taken`, covering the window just ended.
  std::shared_ptr<Snapshot> snapshot(std::chrono::system_clock::time_point taken,
                                     std::chrono::nanoseconds window);
  // Outlier records of the slow calls since the last drain (as the ring buffer would send).
  chains::OutlierWindow drain_outliers() { return outliers_.drain(); }

 private:
  struct Proc {
    std::string cgroup;
    std::string comm;
    std::int64_t start_ns = 0;
    std::map<std::uint32_t, CallTotals> calls;
    OffcpuTotals offcpu;
    std::map<int, Preemptor> preemptors;  // by preemptor pid
  };
  std::map<int, Proc> procs_;
  std::map<std::string, std::map<std::uint32_t, CallTotals>> retired_;  // exited, by cgroup
  std::map<std::string, OffcpuTotals> previous_offcpu_;                 // for window ratios
  chains::OutlierSink outliers_{256};
  std::uint64_t sequence_ = 0;
};

}  // namespace stallwatch::demo
