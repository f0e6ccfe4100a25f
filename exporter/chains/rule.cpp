#include "chains/rule.h"

#include <algorithm>

namespace stallwatch::chains {

std::vector<std::unique_ptr<Rule>> default_rules() {
  std::vector<std::unique_ptr<Rule>> out;
  for (const auto& k : kKinds) out.push_back(k.make());
  return out;
}

Chain WindowContext::base_chain(Kind kind, const ProcessWindow& p) const {
  Chain c = base_chain(kind, p.cgroup);
  c.pid = p.pid;
  c.comm = p.comm;
  return c;
}

Chain WindowContext::base_chain(Kind kind, const std::string& cgroup) const {
  Chain c;
  c.kind = kind;
  auto it = identities.find(cgroup);
  if (it != identities.end()) c.identity = it->second;
  c.identity.cgroup = cgroup;
  return c;
}

const Baseline* WindowContext::baseline(const ProcessWindow& p, std::uint32_t call_id) const {
  return baselines.known(p, call_id, options.thresholds.baseline_min_windows);
}

std::uint64_t WindowContext::worst_stall_ns(const ProcessWindow& p) const {
  std::uint64_t worst = 0;
  for (const auto& [id, t] : p.calls) worst = std::max(worst, t.max_ns);
  auto it = outliers.by_pid.find(static_cast<std::uint32_t>(p.pid));
  if (it != outliers.by_pid.end()) worst = std::max(worst, it->second.worst_ns);
  return worst;
}

std::vector<const ProcessWindow*> WindowContext::cuda_processes(const std::string& cgroup) const {
  std::vector<const ProcessWindow*> out;
  for (const auto& p : view.processes) {
    if (p.cgroup == cgroup && !p.calls.empty()) out.push_back(&p);
  }
  std::stable_sort(out.begin(), out.end(), [](const ProcessWindow* a, const ProcessWindow* b) {
    return a->cuda_ns() > b->cuda_ns();
  });
  return out;
}

}  // namespace stallwatch::chains
