#include "chains/engine.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace stallwatch::chains {

Engine::Engine(EngineOptions options, std::vector<std::unique_ptr<Rule>> rules)
    : options_(options),
      rules_(std::move(rules)),
      rng_(options.seed ? options.seed : std::random_device{}()) {}

std::string Engine::new_id() {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng_()));
  return buf;
}

// Each process, each series, then the host, every rule in kinds.h's order at each scope.
std::vector<Finding> Engine::run_rules(const WindowContext& ctx) {
  std::vector<Finding> out;
  for (const auto& p : ctx.view.processes) {
    auto [it, fresh] = seen_.try_emplace(p.pid);
    if (!fresh && it->second.cgroup != p.cgroup) {  // moved: the old (cgroup, pid) is gone
      moved_.emplace_back(std::move(it->second.cgroup), p.pid);
    }
    if (fresh || it->second.cgroup != p.cgroup) it->second = Seen{p.cgroup, 0};
    for (auto& r : rules_) r->process(ctx, p, out);
  }
  for (const auto& [label, s] : ctx.view.series) {
    for (auto& r : rules_) r->series(ctx, s, out);
  }
  for (auto& r : rules_) r->host(ctx, out);
  return out;
}

// The rules forget the processes that left the snapshot (and those they met in the window
// without the snapshot listing them). One pass over the snapshot marks the live ones.
void Engine::forget_exited(const Snapshot& snap) {
  for (const auto& [cgroup, pid] : moved_) {
    for (auto& r : rules_) r->forget(cgroup, pid);
  }
  moved_.clear();
  const std::uint64_t now = ++window_;
  for (const auto& [label, s] : snap.series) {
    for (const auto& [pid, info] : s.process_info) {
      auto it = seen_.find(pid);
      if (it != seen_.end() && it->second.cgroup == label) it->second.live_window = now;
    }
  }
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (it->second.live_window == now) {
      ++it;
      continue;
    }
    for (auto& r : rules_) r->forget(it->second.cgroup, it->first);
    it = seen_.erase(it);
  }
  baselines_.forget_exited(snap);
}

namespace {

// The time a chain's process spent in CUDA calls this window (0 for a chain about a cgroup).
std::uint64_t process_cuda_ns(const WindowView& view, const Chain& c) {
  if (c.pid <= 0) return 0;
  for (const auto& p : view.processes) {
    if (p.pid == c.pid && p.cgroup == c.identity.cgroup) return p.cuda_ns();
  }
  return 0;
}

// An open chain updated by a window that says little (Track::cuda_ns): its figures and texts
// stay those of the window they came from; its windows, time and sites move on.
void keep_texts(Chain& c, const Chain& prev) {
  c.severity = prev.severity;
  c.comm = prev.comm;
  c.call = prev.call;
  c.api = prev.api;
  c.p50_s = prev.p50_s;
  c.p99_s = prev.p99_s;
  c.baseline_p50_s = prev.baseline_p50_s;
  c.baseline_p99_s = prev.baseline_p99_s;
  c.ratio = prev.ratio;
  c.summary = prev.summary;
  c.root_cause = prev.root_cause;
  c.effect = prev.effect;
  c.recommendation = prev.recommendation;
  c.commands = prev.commands;
  c.contributors = prev.contributors;
  c.evidence = prev.evidence;
}

}  // namespace

// Healthy windows only: a process with a finding or an open chain keeps its baseline frozen,
// so the incident never becomes the new normal. A finding or chain about a cgroup (pid 0:
// memory_pressure, io_stall, network_retransmit) freezes every process of that cgroup.
std::set<std::pair<std::string, int>> Engine::frozen(const std::vector<Finding>& findings) const {
  std::set<std::pair<std::string, int>> out;
  for (const auto& f : findings) out.insert({f.chain.identity.cgroup, f.chain.pid});
  for (const auto& [key, t] : tracks_) {
    if (t.has_chain) out.insert({std::get<1>(key), std::get<2>(key)});
  }
  return out;
}

std::vector<Chain> Engine::observe(const Snapshot& snap, const WindowView& view,
                                   const OutlierWindow& outliers) {
  if (first_window_ns_ == 0) first_window_ns_ = view.end_ns - view.window_ns;
  for (const auto& [label, s] : snap.series) identities_[label] = s.identity;

  const WindowContext ctx{snap,     view,        outliers,         baselines_,
                          options_, identities_, first_window_ns_,
                          [this](Kind kind, const std::string& cgroup, int pid) -> const Chain* {
                            auto it = tracks_.find(Key{kind, cgroup, pid});
                            return it == tracks_.end() ? nullptr : &it->second.chain;
                          }};
  std::vector<Finding> findings = run_rules(ctx);
  const Thresholds& th = options_.thresholds;
  baselines_.update(view, frozen(findings), th.min_calls, th.baseline_windows);

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
    const std::uint64_t cuda = process_cuda_ns(view, c);
    if (t.has_chain && c.pid > 0 && cuda < t.cuda_ns / 10) {
      keep_texts(c, t.chain);
    } else {
      t.cuda_ns = cuda;
    }
    {
      // The chain's sites over its life: this window's outliers of its process (of the
      // cgroup's processes for a chain about a cgroup) merged into what it had.
      std::vector<ResolvedSite> pool;
      for (const auto& s : outliers.resolved) {
        bool mine = c.pid > 0 && s.pid == c.pid;
        if (c.pid <= 0) {
          for (const auto& p : view.processes) {
            if (p.pid == s.pid && p.cgroup == c.identity.cgroup) mine = true;
          }
        }
        if (mine) pool.push_back(s);
      }
      for (const auto& prev : t.chain.sites) pool.push_back({c.pid, 0, 0, prev});
      c.sites = top_sites(pool, 0, 0, c.call);
    }
    if (!t.has_chain) {
      const int need = f.once || f.immediate ? 1 : th.open_after;
      if (t.hits < need) {
        t.chain = std::move(c);  // not a chain yet: what the rule may build on next window
        continue;
      }
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
  forget_exited(snap);
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
    ChainCount& c = entry(std::string(kind_name(t.chain.kind)),
                          std::string(severity_name(t.chain.severity)), t.chain.identity.cgroup);
    c.active++;
    for (const Contributor& k : t.chain.contributors) {
      if (k.pid == t.chain.pid || k.comm.empty()) continue;  // its own threads blame nobody
      if (std::find(c.culprits.begin(), c.culprits.end(), k.comm) == c.culprits.end()) {
        c.culprits.push_back(k.comm);
      }
      break;
    }
  }
  std::vector<ChainCount> out;
  for (auto& [key, c] : by) out.push_back(std::move(c));
  return out;
}

}  // namespace stallwatch::chains
