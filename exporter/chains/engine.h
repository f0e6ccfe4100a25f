// The chain engine: turns each window (window.h deltas, outlier records, the snapshot's
// identities) into causal chains that open when a condition holds, update while it lasts and
// close when it is gone, one chain per condition. The rules (rule.h, one per kind in
// chains/rules/) find the conditions; this file owns baselines and the chain lifecycle.
// Not thread-safe: one caller (the window loop of `run` or `demo`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "chains/baselines.h"
#include "chains/chain.h"
#include "chains/outliers.h"
#include "chains/rule.h"
#include "chains/window.h"
#include "trace/snapshot.h"

namespace stallwatch::chains {

class Engine {
 public:
  explicit Engine(EngineOptions options = {},
                  std::vector<std::unique_ptr<Rule>> rules = default_rules());

  // Feeds one window. Returns the chains opened, updated or closed by it (copies).
  std::vector<Chain> observe(const Snapshot& snap, const WindowView& view,
                             const OutlierWindow& outliers);

  std::vector<Chain> open_chains() const;
  // Counters for stallwatch_chains_total / stallwatch_chain_active.
  std::vector<ChainCount> counts() const;

  const Baseline* baseline(const std::string& cgroup, int pid, std::uint32_t call_id) const {
    return baselines_.find(cgroup, pid, call_id);
  }
  const EngineOptions& options() const { return options_; }

 private:
  using Key = std::tuple<Kind, std::string, int>;  // kind, cgroup, pid
  struct Track {
    int hits = 0;
    int misses = 0;
    std::int64_t first_hit_ns = 0;  // start of the first window of the current run of hits
    bool has_chain = false;
    int close_after = 0;
    // The process's time in CUDA calls in the window the chain's texts are from. A later hit
    // with less than a tenth of it (the process leaving: a training job that ends while the
    // hog goes on) keeps those texts instead of reporting "0 of 2ms" and "calls fell 99%".
    std::uint64_t cuda_ns = 0;
    Chain chain;
  };

  std::string new_id();
  std::vector<Finding> run_rules(const WindowContext& ctx);
  void forget_exited(const Snapshot& snap);
  std::set<std::pair<std::string, int>> frozen(const std::vector<Finding>& findings) const;

  EngineOptions options_;
  std::vector<std::unique_ptr<Rule>> rules_;
  std::mt19937_64 rng_;
  std::int64_t first_window_ns_ = 0;  // start of the first window observed
  Baselines baselines_;
  std::map<Key, Track> tracks_;
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> totals_;
  std::map<std::string, identity::Identity> identities_;  // by cgroup label
  // Processes the rules may remember, by pid: their cgroup and the window they were last live.
  struct Seen {
    std::string cgroup;
    std::uint64_t live_window = 0;
  };
  std::map<int, Seen> seen_;
  std::vector<std::pair<std::string, int>> moved_;  // (old cgroup, pid), forgotten after the rules
  std::uint64_t window_ = 0;  // windows observed
};

}  // namespace stallwatch::chains
