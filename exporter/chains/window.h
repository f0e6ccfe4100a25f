// One window's activity per process: the difference of two consecutive cumulative snapshots.
// The chain engine decides from it and the store writes it, so both see the same numbers.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/snapshot.h"

namespace stallwatch::chains {

struct ProcessWindow {
  std::string cgroup;  // the series label
  int pid = 0;
  std::string comm;
  std::int64_t start_ns = 0;
  bool first_seen = false;                     // not in the previous snapshot
  std::map<std::uint32_t, CallTotals> calls;   // call id → this window's delta (count > 0)
  OffcpuTotals offcpu;                         // this window's delta
  std::vector<Preemptor> preemptors;           // this window's delta, worst first
  std::uint64_t cuda_ns() const;               // time inside CUDA calls this window
};

struct WindowView {
  std::int64_t end_ns = 0;     // unix time the window ended
  std::int64_t window_ns = 0;  // its length
  std::vector<ProcessWindow> processes;  // by (cgroup, pid); only processes active this window
};

// `previous` may be null (the first window: everything cumulative counts as this window).
WindowView diff_windows(const Snapshot* previous, const Snapshot& current);

// Subtraction of cumulative totals that never underflows (a reset counts from zero).
CallTotals delta(const CallTotals& now, const CallTotals* before);
OffcpuTotals delta(const OffcpuTotals& now, const OffcpuTotals* before);

}  // namespace stallwatch::chains
