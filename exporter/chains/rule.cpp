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

double WindowContext::excess_runnable_share(const ProcessWindow& p, std::uint32_t call_id,
                                            const CallTotals& t, double ref_s) const {
  const double ref_ns = std::max(0.0, ref_s * 1e9);
  const trace::OutlierRecord* longest = nullptr;
  for (const auto& r : outliers.worst) {  // longest first
    if (static_cast<int>(r.tgid) == p.pid && r.call_id == call_id) {
      longest = &r;
      break;
    }
  }
  double runnable = 0, excess = 0;
  if (longest) {
    runnable = static_cast<double>(longest->runnable_ns);
    excess = static_cast<double>(longest->duration_ns) - ref_ns;
  } else {
    runnable = static_cast<double>(t.runnable_ns);
    excess = static_cast<double>(t.sum_ns) - ref_ns * static_cast<double>(t.count);
  }
  if (excess <= 0) return 0;
  return std::clamp(runnable / excess, 0.0, 1.0);
}

double WindowContext::rise_runnable_share(const CallTotals& t, double ref_s) {
  const double rise =
      static_cast<double>(t.sum_ns) - std::max(0.0, ref_s * 1e9) * static_cast<double>(t.count);
  if (rise <= 0) return 0;
  return std::clamp(static_cast<double>(t.runnable_ns) / rise, 0.0, 1.0);
}

std::optional<WindowContext::Stolen> WindowContext::stolen(const ProcessWindow& p) const {
  Stolen s;
  int n = 0;
  for (const auto& c : snap.cpu_stolen) {
    if (!p.cpus.empty() && !std::binary_search(p.cpus.begin(), p.cpus.end(), c.cpu)) continue;
    if (n == 0 || c.total() > s.worst.total()) s.worst = c;
    s.mean.steal += c.steal;
    s.mean.irq += c.irq;
    n++;
  }
  if (n == 0) return std::nullopt;
  s.mean.steal /= n;
  s.mean.irq /= n;
  s.mean.cpu = n;
  return s;
}

std::optional<WindowContext::OnCpuGrowth> WindowContext::oncpu_growth(
    const ProcessWindow& p) const {
  std::optional<OnCpuGrowth> best;
  for (const auto& [id, t] : p.calls) {
    if (t.count < options.thresholds.min_calls) continue;
    const Baseline* b = baseline(p, id);
    const double usual_ns = b ? b->median_mean() * 1e9 * static_cast<double>(t.count) : 0;
    if (usual_ns <= 0) continue;
    const std::uint64_t off = t.runnable_ns + t.blocked_ns;
    const double oncpu = static_cast<double>(t.sum_ns > off ? t.sum_ns - off : 0);
    if (oncpu <= usual_ns) continue;
    const auto excess = static_cast<std::uint64_t>(oncpu - usual_ns);
    if (!best || excess > best->excess_ns) best = OnCpuGrowth{id, oncpu / usual_ns, excess};
  }
  return best;
}

std::optional<WindowContext::Throttle> WindowContext::throttle(const ProcessWindow& p) const {
  auto it = view.series.find(p.cgroup);
  if (it == view.series.end()) return std::nullopt;
  const host::CpuLimitTotals& l = it->second.cpu_limit;
  if (!l.known || !l.limited() || l.throttled_periods == 0 || l.throttled_ns == 0) {
    return std::nullopt;
  }
  const double runnable = static_cast<double>(p.offcpu.runnable_ns);
  const double explained =
      runnable > 0 ? std::min(1.0, static_cast<double>(l.throttled_ns) / runnable) : 0;
  return Throttle{&l, explained};
}

std::vector<const GpuWindow*> WindowContext::gpus_of(const ProcessWindow& p) const {
  std::vector<const GpuWindow*> out;
  auto it = view.process_gpus.find(p.pid);
  if (it == view.process_gpus.end()) return out;
  for (unsigned index : it->second) {
    for (const auto& g : view.gpus) {
      if (g.last.index == index) out.push_back(&g);
    }
  }
  return out;
}

const GpuWindow* WindowContext::held_gpu(const ProcessWindow& p, double min_share) const {
  const GpuWindow* best = nullptr;
  for (const GpuWindow* g : gpus_of(p)) {
    if (4 * g->sampled_ns < static_cast<std::uint64_t>(view.window_ns)) continue;
    if (g->held_share() < min_share) continue;
    if (!best || g->held_share() > best->held_share()) best = g;
  }
  return best;
}

std::optional<std::vector<unsigned>> WindowContext::shared_gpus(int a, int b) const {
  const auto ia = view.process_gpus.find(a);
  const auto ib = view.process_gpus.find(b);
  if (ia == view.process_gpus.end() || ib == view.process_gpus.end()) return std::nullopt;
  if (ia->second.empty() || ib->second.empty()) return std::nullopt;
  std::vector<unsigned> out;
  for (unsigned g : ia->second) {
    if (std::find(ib->second.begin(), ib->second.end(), g) != ib->second.end()) out.push_back(g);
  }
  return out;
}

std::vector<const host::XidEvent*> WindowContext::xids_of(int pid,
                                                          std::int64_t since_unix_ns) const {
  std::vector<const host::XidEvent*> out;
  const auto it = view.process_gpus.find(pid);
  for (const auto& x : since_unix_ns < 0 ? view.new_xids : snap.gpu.xids) {
    if (x.unix_ns < since_unix_ns) continue;
    const bool mine =
        (x.pid != 0 && x.pid == pid) ||
        (x.gpu >= 0 && it != view.process_gpus.end() &&
         std::find(it->second.begin(), it->second.end(), static_cast<unsigned>(x.gpu)) !=
             it->second.end());
    if (mine) out.push_back(&x);
  }
  return out;
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
