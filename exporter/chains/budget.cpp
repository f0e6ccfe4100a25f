#include "chains/budget.h"

#include <algorithm>

namespace stallwatch::chains {

DutyPlan plan_launch_duty(const WindowView& view, const Snapshot& snap, double budget,
                          const std::map<int, double>& held) {
  DutyPlan plan;
  if (!(budget > 0)) return plan;
  std::map<std::string, std::vector<const ProcessWindow*>> by_series;
  for (const ProcessWindow& p : view.processes) by_series[p.cgroup].push_back(&p);
  for (const auto& [label, procs] : by_series) {
    // The window's counts are estimates of every call (window.h scales cycled launches), so
    // these are the costs with every probe on.
    double launches = 0, others = 0, cpu = 0;
    for (const ProcessWindow* p : procs) {
      cpu += static_cast<double>(p->offcpu.oncpu_ns) * 1e-9;
      for (const auto& [id, t] : p->calls) {
        (is_cycled_call(id) ? launches : others) +=
            static_cast<double>(t.count) * probe_pair_seconds(snap, id);
      }
    }
    if (launches <= 0) {
      double kept = 0;
      for (const ProcessWindow* p : procs) {
        auto h = held.find(p->pid);
        if (p->launch_duty < 1 && h != held.end()) kept = plan.duty[p->pid] = h->second;
      }
      if (kept > 0) plan.series.push_back({label, 0, kept, false, false});
      continue;
    }
    if (cpu <= 0) continue;
    const double unbudgeted = (launches + others) / cpu;
    if (unbudgeted <= budget) continue;
    SeriesDuty s;
    s.cgroup = label;
    s.unbudgeted = unbudgeted;
    s.duty = std::clamp((budget * cpu - others) / launches, kMinDuty, 1.0);
    s.over = (others + s.duty * launches) / cpu > budget * 1.0001;
    s.others_over = others / cpu > budget;
    for (const ProcessWindow* p : procs) {
      for (const auto& [id, t] : p->calls) {
        if (is_cycled_call(id) && t.count > 0) {
          plan.duty[p->pid] = s.duty;
          break;
        }
      }
    }
    plan.series.push_back(std::move(s));
  }
  return plan;
}

}  // namespace stallwatch::chains
