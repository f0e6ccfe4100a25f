// What a process's calls usually cost: per (cgroup, process, call) the p50, p99, calls and mean
// of its recent healthy windows, and per (cgroup, call) the same for the workload as a whole
// (pid 0), which outlives the process for its successor. The engine updates them once per
// window, after the rules; the rules read them. Not thread-safe: one caller (the engine).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "chains/window.h"

namespace stallwatch::chains {

// One (cgroup, pid, call)'s recent healthy windows.
struct Baseline {
  std::vector<double> p50;  // ring, oldest first
  std::vector<double> p99;
  std::vector<double> calls;  // calls per window
  std::vector<double> mean;   // mean call time per window
  bool known(size_t min_windows) const { return p99.size() >= min_windows; }
  double median_p50() const;
  double median_p99() const;
  double median_calls() const;
  double median_mean() const;
  void push(double p50_s, double p99_s, double calls_per_window, size_t cap, double mean_s = 0);
};

class Baselines {
 public:
  // Any baseline, known or not; null when none.
  const Baseline* find(const std::string& cgroup, int pid, std::uint32_t call_id) const;
  // The process's own baseline once `min_windows` are in, else its workload's, else null.
  const Baseline* known(const ProcessWindow& p, std::uint32_t call_id, size_t min_windows) const;

  // Adds the window's calls with at least `min_calls` calls (ring of `cap` windows), except for
  // the (cgroup, pid) in `frozen`: a (cgroup, 0) entry freezes every process of that cgroup.
  void update(const WindowView& view, const std::set<std::pair<std::string, int>>& frozen,
              std::uint64_t min_calls, size_t cap);
  // Drops the baselines of processes that are gone from `snap`; the workloads' (pid 0) stay.
  void forget_exited(const Snapshot& snap);

 private:
  std::map<std::tuple<std::string, int, std::uint32_t>, Baseline> by_key_;
};

}  // namespace stallwatch::chains
