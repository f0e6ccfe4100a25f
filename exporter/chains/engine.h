// The chain engine: turns each window (window.h deltas, outlier records, the snapshot's
// identities) into causal chains that open when a condition holds, update while it lasts and
// close when it is gone, one chain per condition. The rules and their thresholds are in
// rules.cpp and docs/chains.md; this file owns baselines and the chain lifecycle.
// Not thread-safe: one caller (the window loop of `run` or `demo`).
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "chains/chain.h"
#include "chains/outliers.h"
#include "chains/window.h"
#include "common/snapshot.h"

namespace stallwatch::chains {

// Thresholds (docs/chains.md explains each). Defaults are what `run` uses.
struct Thresholds {
  // Baseline: median of the last `baseline_windows` healthy windows with at least
  // `min_calls` calls; known once `baseline_min_windows` windows are in.
  size_t baseline_windows = 32;
  size_t baseline_min_windows = 3;
  std::uint64_t min_calls = 3;
  // Lifecycle: a condition must hold in `open_after` consecutive windows to open a chain and
  // be absent in `close_after` consecutive windows to close it.
  int open_after = 2;
  int close_after = 2;
  // cpu_contention: runnable share of CUDA call time, or of the CUDA threads' wall time.
  double cpu_call_share = 0.10;
  double cpu_thread_share = 0.20;
  double cpu_min_window_share = 0.01;  // runnable time in calls ≥ 1% of the window
  // alloc_spike: an allocation call this many times its baseline p50 and at least this long.
  double alloc_ratio = 10;
  double alloc_min_s = 0.001;
  size_t alloc_memory_windows = 64;  // a second spike within this many windows = periodic
  // cold_start: the first window's worst call against the steady p50.
  double cold_ratio = 20;
  double cold_min_s = 0.010;
  // memcpy_bound: copies' share of CUDA time and of wall time.
  double memcpy_cuda_share = 0.30;
  double memcpy_wall_share = 0.20;
  // gpu_contention: sync p99 against baseline with other CUDA processes active and no host
  // cause (call runnable share below cpu_call_share / 2).
  double gpu_ratio = 3;
};

struct EngineOptions {
  Thresholds thresholds;
  int host_cpus = 0;  // for recommendations (taskset ranges); 0 = unknown
};

// Per (cgroup, process, call): recent healthy p50/p99.
struct Baseline {
  std::vector<double> p50;  // ring, oldest first
  std::vector<double> p99;
  std::vector<double> calls;  // calls per window
  bool known(size_t min_windows) const { return p99.size() >= min_windows; }
  double median_p50() const;
  double median_p99() const;
  double median_calls() const;
  void push(double p50_s, double p99_s, double calls_per_window, size_t cap);
};

// What a rule found in one window for one (kind, cgroup, pid): the chain's content.
struct Finding {
  Chain chain;        // kind, severity, identity, process, call, texts, contributors, evidence
  bool once = false;  // report and close at once (cold_start)
  bool immediate = false;  // open without waiting for open_after windows (periodic spikes)
  int close_after = 0;     // override of thresholds.close_after when > 0
};

class Engine {
 public:
  explicit Engine(EngineOptions options = {});

  // Feeds one window. Returns the chains opened, updated or closed by it (copies).
  std::vector<Chain> observe(const Snapshot& snap, const WindowView& view,
                             const OutlierWindow& outliers);

  std::vector<Chain> open_chains() const;
  // Counters for stallwatch_chains_total / stallwatch_chain_active.
  std::vector<ChainCount> counts() const;

  const Baseline* baseline(const std::string& cgroup, int pid, std::uint32_t call_id) const;
  const EngineOptions& options() const { return options_; }

 private:
  using Key = std::tuple<Kind, std::string, int>;  // kind, cgroup, pid
  struct Track {
    int hits = 0;
    int misses = 0;
    std::int64_t first_hit_ns = 0;  // start of the first window of the current run of hits
    bool has_chain = false;
    int close_after = 0;
    Chain chain;
  };

  friend class RuleContext;
  std::string new_id();
  void update_baselines(const WindowView& view, const std::vector<Finding>& findings);

  EngineOptions options_;
  std::mt19937_64 rng_;
  std::int64_t first_window_ns_ = 0;  // start of the first window observed
  std::map<std::tuple<std::string, int, std::uint32_t>, Baseline> baselines_;
  std::map<Key, Track> tracks_;
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> totals_;
  std::map<std::string, identity::Identity> identities_;  // by cgroup label
  // Rule memory across windows.
  struct ColdPending {
    std::string cgroup;
    std::map<std::uint32_t, CallTotals> first;  // first window's calls
    int later_windows = 0;
  };
  std::map<int, ColdPending> cold_;               // by pid
  std::map<std::pair<std::string, int>, std::vector<std::int64_t>> alloc_spikes_;  // window ends
  std::uint64_t window_index_ = 0;
};

}  // namespace stallwatch::chains
