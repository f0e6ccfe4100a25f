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

// The least share of a period a cycled process's launches stay probed (20 ms of each second:
// an attach and a detach take ~1 ms here, and a window keeps enough launches to show their
// latency); below it a window's launch latencies rest on too few calls.
inline constexpr double kMinDuty = 0.02;

struct SeriesDuty {
  std::string cgroup;
  double unbudgeted = 0;  // its probe cost with every launch trapped (share of on-CPU time)
  double duty = 1;        // the share its launches stay probed from now on
  bool over = false;      // still over the budget at kMinDuty
  bool others_over = false;  // its other calls' probes alone pass the budget
};

struct DutyPlan {
  std::map<int, double> duty;       // per process with launches, those cycled (duty < 1)
  std::vector<SeriesDuty> series;   // each series over the budget or cycled now
};

// `budget` 0 (or less): nothing is cycled. `held`: the previous plan's duty per process; a
// cycled series whose window saw no launch (its on-phase fell outside the window, or it paused)
// keeps it: no launch seen is no evidence that it is within the budget.
DutyPlan plan_launch_duty(const WindowView& view, const Snapshot& snap, double budget,
                          const std::map<int, double>& held = {});

}  // namespace stallwatch::chains
