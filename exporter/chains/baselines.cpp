#include "chains/baselines.h"

#include <algorithm>

#include "trace/histogram.h"

namespace stallwatch::chains {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

double Baseline::median_p50() const { return median(p50); }
double Baseline::median_p99() const { return median(p99); }
double Baseline::median_calls() const { return median(calls); }
double Baseline::median_mean() const { return median(mean); }

void Baseline::push(double p50_s, double p99_s, double calls_per_window, size_t cap,
                    double mean_s) {
  p50.push_back(p50_s);
  p99.push_back(p99_s);
  calls.push_back(calls_per_window);
  mean.push_back(mean_s);
  if (p50.size() > cap) {
    p50.erase(p50.begin());
    p99.erase(p99.begin());
    calls.erase(calls.begin());
    mean.erase(mean.begin());
  }
}

const Baseline* Baselines::find(const std::string& cgroup, int pid, std::uint32_t call_id) const {
  auto it = by_key_.find({cgroup, pid, call_id});
  return it == by_key_.end() ? nullptr : &it->second;
}

const Baseline* Baselines::known(const ProcessWindow& p, std::uint32_t call_id,
                                 size_t min_windows) const {
  for (int pid : {p.pid, 0}) {
    const Baseline* b = find(p.cgroup, pid, call_id);
    if (b && b->known(min_windows)) return b;
  }
  return nullptr;
}

void Baselines::update(const WindowView& view, const std::set<std::pair<std::string, int>>& frozen,
                       std::uint64_t min_calls, size_t cap) {
  for (const auto& p : view.processes) {
    if (frozen.count({p.cgroup, p.pid}) || frozen.count({p.cgroup, 0})) continue;
    for (const auto& [id, t] : p.calls) {
      if (t.count < min_calls) continue;
      double p50 = trace::quantile_seconds(t.buckets, 0.50, t.max_ns);
      double p99 = trace::quantile_seconds(t.buckets, 0.99, t.max_ns);
      const double n = static_cast<double>(t.count);
      const double mean = static_cast<double>(t.sum_ns) / 1e9 / n;
      by_key_[{p.cgroup, p.pid, id}].push(p50, p99, n, cap, mean);
      by_key_[{p.cgroup, 0, id}].push(p50, p99, n, cap, mean);
    }
  }
}

void Baselines::forget_exited(const Snapshot& snap) {
  for (auto it = by_key_.begin(); it != by_key_.end();) {
    const auto& [cgroup, pid, call] = it->first;
    bool keep = pid == 0;
    if (!keep) {
      auto s = snap.series.find(cgroup);
      keep = s != snap.series.end() && s->second.process_info.count(pid);
    }
    it = keep ? std::next(it) : by_key_.erase(it);
  }
}

}  // namespace stallwatch::chains
