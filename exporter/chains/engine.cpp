#include "chains/engine.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "chains/rules.h"
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

Engine::Engine(EngineOptions options)
    : options_(options), rng_(options.seed ? options.seed : std::random_device{}()) {}

std::string Engine::new_id() {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng_()));
  return buf;
}

const Baseline* Engine::baseline(const std::string& cgroup, int pid, std::uint32_t call_id) const {
  auto it = baselines_.find({cgroup, pid, call_id});
  return it == baselines_.end() ? nullptr : &it->second;
}

// Healthy windows only: a process with a finding or an open chain keeps its baseline frozen,
// so the incident never becomes the new normal. A finding or chain about a cgroup (pid 0:
// memory_pressure, io_stall, network_retransmit) freezes every process of that cgroup.
void Engine::update_baselines(const WindowView& view, const std::vector<Finding>& findings) {
  std::set<std::pair<std::string, int>> frozen;
  for (const auto& f : findings) frozen.insert({f.chain.identity.cgroup, f.chain.pid});
  for (const auto& [key, t] : tracks_) {
    if (t.has_chain) frozen.insert({std::get<1>(key), std::get<2>(key)});
  }
  const Thresholds& th = options_.thresholds;
  for (const auto& p : view.processes) {
    if (frozen.count({p.cgroup, p.pid}) || frozen.count({p.cgroup, 0})) continue;
    for (const auto& [id, t] : p.calls) {
      if (t.count < th.min_calls) continue;
      double p50 = trace::quantile_seconds(t.buckets, 0.50, t.max_ns);
      double p99 = trace::quantile_seconds(t.buckets, 0.99, t.max_ns);
      const double n = static_cast<double>(t.count);
      const double mean = static_cast<double>(t.sum_ns) / 1e9 / n;
      baselines_[{p.cgroup, p.pid, id}].push(p50, p99, n, th.baseline_windows, mean);
      baselines_[{p.cgroup, 0, id}].push(p50, p99, n, th.baseline_windows, mean);
    }
  }
}

std::vector<Chain> Engine::observe(const Snapshot& snap, const WindowView& view,
                                   const OutlierWindow& outliers) {
  if (first_window_ns_ == 0) first_window_ns_ = view.end_ns - view.window_ns;
  for (const auto& [label, s] : snap.series) identities_[label] = s.identity;

  std::vector<Finding> findings = RuleContext(*this, snap, view, outliers).run();
  update_baselines(view, findings);

  const Thresholds& th = options_.thresholds;
  std::vector<Chain> changed;
  std::set<Key> hit;
  for (auto& f : findings) {
    Key key{f.chain.kind, f.chain.identity.cgroup, f.chain.pid};
    if (!hit.insert(key).second) continue;  // one finding per key and window
    Track& t = tracks_[key];
    t.misses = 0;
    if (t.hits++ == 0) t.first_hit_ns = view.end_ns - view.window_ns;
    Chain c = std::move(f.chain);
    c.updated_ns = view.end_ns;
    if (!t.has_chain) {
      const int need = f.once || f.immediate ? 1 : th.open_after;
      if (t.hits < need) continue;
      c.id = new_id();
      c.opened_ns = t.first_hit_ns;
      c.windows = static_cast<std::uint64_t>(t.hits);
      c.peak = c.severity;
      c.open = true;
      totals_[{std::string(kind_name(c.kind)), std::string(severity_name(c.severity)),
               c.identity.cgroup}]++;
      if (f.once) {
        c.open = false;
        c.closed_ns = view.end_ns;
        changed.push_back(std::move(c));
        tracks_.erase(key);
        continue;
      }
      t.has_chain = true;
    } else {
      c.id = t.chain.id;
      c.opened_ns = t.chain.opened_ns;
      c.windows = t.chain.windows + 1;
      c.peak = std::max(t.chain.peak, c.severity);
      c.open = true;
    }
    t.close_after = f.close_after > 0 ? f.close_after : th.close_after;
    t.chain = c;
    changed.push_back(std::move(c));
  }
  for (auto it = tracks_.begin(); it != tracks_.end();) {
    Track& t = it->second;
    if (hit.count(it->first)) {
      ++it;
      continue;
    }
    if (!t.has_chain) {
      it = tracks_.erase(it);
      continue;
    }
    if (++t.misses < t.close_after) {
      ++it;
      continue;
    }
    t.chain.open = false;
    t.chain.closed_ns = view.end_ns;
    changed.push_back(t.chain);
    it = tracks_.erase(it);
  }
  // Baselines of exited processes go; their workload's (pid 0) stays for the next process.
  for (auto it = baselines_.begin(); it != baselines_.end();) {
    const auto& [cgroup, pid, call] = it->first;
    bool keep = pid == 0;
    if (!keep) {
      auto s = snap.series.find(cgroup);
      keep = s != snap.series.end() && s->second.process_info.count(pid);
    }
    it = keep ? std::next(it) : baselines_.erase(it);
  }
  window_index_++;
  return changed;
}

std::vector<Chain> Engine::open_chains() const {
  std::vector<Chain> out;
  for (const auto& [key, t] : tracks_) {
    if (t.has_chain) out.push_back(t.chain);
  }
  return out;
}

std::vector<ChainCount> Engine::counts() const {
  std::map<std::tuple<std::string, std::string, std::string>, ChainCount> by;
  auto entry = [&](const std::string& kind, const std::string& sev,
                   const std::string& cgroup) -> ChainCount& {
    auto [it, fresh] = by.try_emplace({kind, sev, cgroup});
    if (fresh) {
      it->second.kind = kind;
      it->second.severity = sev;
      auto id = identities_.find(cgroup);
      if (id != identities_.end()) it->second.identity = id->second;
      it->second.identity.cgroup = cgroup;
    }
    return it->second;
  };
  for (const auto& [key, total] : totals_) {
    entry(std::get<0>(key), std::get<1>(key), std::get<2>(key)).total = total;
  }
  for (const auto& [key, t] : tracks_) {
    if (!t.has_chain) continue;
    entry(std::string(kind_name(t.chain.kind)), std::string(severity_name(t.chain.severity)),
          t.chain.identity.cgroup)
        .active++;
  }
  std::vector<ChainCount> out;
  for (auto& [key, c] : by) out.push_back(std::move(c));
  return out;
}

}  // namespace stallwatch::chains
