// The cost budget (--cost-budget): from each window, the share of each process's period its
// kernel launches stay probed so that the workload pays at most `budget` of its CUDA-issuing
// threads' on-CPU time in stallwatch's traps. Only launches are cycled: the synchronize, copy,
// allocation and NCCL calls the chains rest on keep every probe, so a workload whose other
// calls alone pass the budget is cycled at kMinDuty and stays over it (said, not hidden).
// Pure; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "chains/window.h"
#include "trace/snapshot.h"

namespace stallwatch::chains {

// The least share of a period a cycled process's launches stay probed: below it a window's
// launch latencies rest on too few calls.
inline constexpr double kMinDuty = 0.05;

struct SeriesDuty {
  std::string cgroup;
  double unbudgeted = 0;  // its probe cost with every launch trapped (share of on-CPU time)
  double duty = 1;        // the share its launches stay probed from now on
  bool over = false;      // still over the budget at kMinDuty (its other calls alone pass it)
};

struct DutyPlan {
  std::map<int, double> duty;       // per process with launches, those cycled (duty < 1)
  std::vector<SeriesDuty> series;   // each series over the budget or cycled now
};

// `budget` 0 (or less): nothing is cycled.
DutyPlan plan_launch_duty(const WindowView& view, const Snapshot& snap, double budget);

}  // namespace stallwatch::chains
