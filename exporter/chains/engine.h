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
  // memory_pressure: reclaim time of the series' tasks, or PSI memory `some` stall time, as a
  // share of the window; the CUDA threads' own reclaim share that raises severity one step; how
  // many windows an OOM kill keeps its severity.
  double mem_reclaim_share = 0.05;
  double mem_reclaim_high_share = 0.25;
  double mem_psi_share = 0.10;
  double mem_psi_high_share = 0.40;
  double mem_cuda_reclaim_share = 0.05;
  int oom_hold_windows = 6;
  // io_stall: starvation ratio of the CUDA threads, and how busy or slow the series' block I/O
  // must be: Σ request time / window, or p99 with a smaller busy share.
  double io_starvation = 0.20;
  double io_starvation_high = 0.40;
  double io_busy_share = 0.20;
  double io_slow_p99_s = 0.020;
  double io_slow_busy_share = 0.05;
  // network_retransmit: retransmits in the window (at least this many, and this rate), the
  // rate that makes it high, and the inflation of a sync or NCCL call against its baseline.
  std::uint64_t net_min_retransmits = 10;
  double net_retransmits_per_s = 1;
  double net_high_per_s = 100;
  double net_p99_ratio = 3;
  double net_nccl_mean_ratio = 2;
  // nccl_straggler: one local rank's mean op time against the median of its peers'.
  double nccl_ratio = 3;
  double nccl_critical_ratio = 10;
  double nccl_min_excess_s = 0.005;
};

struct EngineOptions {
  Thresholds thresholds;
  int host_cpus = 0;  // for recommendations (taskset ranges); 0 = unknown
  std::uint64_t seed = 0;  // of the chain ids; 0: from the random device
};

// Per (cgroup, process, call): recent healthy p50/p99/mean.
struct Baseline {
  std::vector<double> p50;  // ring, oldest first
  std::vector<double> p99;
  std::vector<double> calls;  // calls per window
  std::vector<double> mean;   // mean call time per window
  bool known(size_t min_windows) const { return p99.size() >= min_windows; }
  double median_p50() const;
  double median_p99() const;
  double median_calls() const;
  double median_mean() const;
  void push(double p50_s, double p99_s, double calls_per_window, size_t cap, double mean_s = 0);
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
  struct OomMemory {
    std::uint64_t window = 0;  // window_index_ of the latest kill
    bool cuda = false;         // a CUDA-issuing process was among the victims
    std::uint64_t kills = 0;   // since the first of this run of kills
    std::vector<OomKill> victims;  // the latest, at most 16
  };
  std::map<std::string, OomMemory> ooms_;  // by cgroup, while within oom_hold_windows
  std::uint64_t window_index_ = 0;
};

}  // namespace stallwatch::chains
