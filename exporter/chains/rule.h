// The rule interface: one class per chain kind (chains/rules/<kind>.cpp, listed in kinds.h),
// each owning its thresholds, its memory across windows and its advice. The engine hands every
// rule a read-only view of the window (WindowContext) at three scopes, in this order: each
// active process, each series (cgroup), then the host once; and tells it when a process exits.
// A rule returns findings; the engine turns them into chains (lifecycle, ids, counts).
// Not thread-safe: rules are called by the engine's one caller.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chains/baselines.h"
#include "chains/chain.h"
#include "chains/outliers.h"
#include "chains/window.h"
#include "trace/snapshot.h"

namespace stallwatch::chains {

// Engine-wide thresholds (docs/chains.md, "Baselines" and "Lifecycle"); each rule keeps its own.
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
};

struct EngineOptions {
  Thresholds thresholds;
  int host_cpus = 0;       // for recommendations (taskset ranges); 0 = unknown
  std::uint64_t seed = 0;  // of the chain ids; 0: from the random device
  // A synchronize, copy or NCCL op open this long is a call_hang (run --hang-threshold).
  std::uint64_t hang_threshold_ns = 60'000'000'000ULL;
};

// What a rule found in one window for one (kind, cgroup, pid): the chain's content.
struct Finding {
  Chain chain;             // kind, severity, identity, process, call, texts, contributors, evidence
  bool once = false;       // report and close at once (cold_start)
  bool immediate = false;  // open without waiting for open_after windows (periodic spikes)
  int close_after = 0;     // override of thresholds.close_after when > 0
};

// One window as every rule sees it.
struct WindowContext {
  const Snapshot& snap;
  const WindowView& view;
  const OutlierWindow& outliers;
  const Baselines& baselines;
  const EngineOptions& options;
  const std::map<std::string, identity::Identity>& identities;  // by cgroup label
  std::int64_t first_window_ns = 0;  // start of the first window the engine observed
  // The chain of `kind` about (cgroup, pid) as the previous window left it, while its condition
  // holds or the chain is open (also before it opens): rules that sum over a chain's life
  // (cpu_contention's preemptors) start from it. Null when there is none.
  std::function<const Chain*(Kind, const std::string& cgroup, int pid)> current_chain;

  // A chain of `kind` about the process, or about the cgroup (pid 0), with its identity.
  Chain base_chain(Kind kind, const ProcessWindow& p) const;
  Chain base_chain(Kind kind, const std::string& cgroup) const;
  // The process's known baseline of the call, else its workload's; null while unknown.
  const Baseline* baseline(const ProcessWindow& p, std::uint32_t call_id) const;
  // The worst call of the process in the window, outlier records included.
  std::uint64_t worst_stall_ns(const ProcessWindow& p) const;
  // How much of a slow call's time above `ref_s` (its usual latency) it spent runnable
  // off-CPU, 0..1: from the process's longest outlier record of that call this window when
  // there is one (the kernel's split of that very call), else from the window's totals of the
  // call. A slow call that mostly waited for a CPU is CPU contention, whatever the call.
  double excess_runnable_share(const ProcessWindow& p, std::uint32_t call_id,
                               const CallTotals& t, double ref_s) const;
  // The same over the whole rise of the window's calls (their time above count × `ref_s`),
  // from the window's totals, 0..1: for rules that judge a window's slowdown, not one call, so
  // that one preempted call does not decide for the window (issue #50).
  static double rise_runnable_share(const CallTotals& t, double ref_s);
  // Time the hypervisor and interrupts took from the CPUs the process may run on (all, when
  // unknown): the mean shares over those CPUs (what a thread that spreads over them loses;
  // where it ran is not known, and one CPU serving the GPU's interrupts must not be blamed
  // for a job that runs on eight), and the most affected CPU, to name. Null without data.
  struct Stolen {
    host::CpuStolen mean;   // cpu = the number of CPUs averaged
    host::CpuStolen worst;  // the most affected CPU
  };
  std::optional<Stolen> stolen(const ProcessWindow& p) const;
  // The effect an on-CPU cause (steal, interrupts) must explain: the process's call whose time
  // on-CPU (call time less its runnable and blocked time) rose most above what its baseline
  // says the whole call usually takes (count × the baseline's median mean). Conservative: the
  // baseline's mean includes off-CPU time. Only calls with `min_calls` calls and a known
  // baseline; null when none grew.
  struct OnCpuGrowth {
    std::uint32_t call_id = 0;
    double ratio = 0;            // on-CPU time / (count × baseline mean)
    std::uint64_t excess_ns = 0;  // on-CPU time above count × baseline mean
  };
  std::optional<OnCpuGrowth> oncpu_growth(const ProcessWindow& p) const;
  // The CPU limit of the process's series this window (host/cpu_limit.h, the window's
  // throttling) and the share of the process's runnable wait that throttling explains: the
  // cgroup's throttled time (summed over its CPUs) against the process's runnable time, 0..1.
  // While a level is throttled none of its tasks may run, whoever else wants the CPU. Null
  // without a known limit or without throttling this window.
  struct Throttle {
    const host::CpuLimitTotals* limit = nullptr;
    double explained = 0;
  };
  std::optional<Throttle> throttle(const ProcessWindow& p) const;
  // The GPUs the process used this window (NVML's compute processes or its open /dev/nvidiaN,
  // host/gpu_monitor.h), as the window saw them; empty without NVML or a mapping.
  std::vector<const GpuWindow*> gpus_of(const ProcessWindow& p) const;
  // Of those, the one whose SM clock was held down the largest share of the window, at least
  // `min_share` of it with samples over at least a quarter of it; null when none.
  const GpuWindow* held_gpu(const ProcessWindow& p, double min_share) const;
  // The GPUs both processes used this window; nullopt when the mapping does not know one of
  // them (no NVML, or a process NVML does not list and that holds no /dev/nvidiaN open), so
  // that callers can tell "different GPUs" from "unknown".
  std::optional<std::vector<unsigned>> shared_gpus(int a, int b) const;
  // Xid errors on a GPU the process uses, or naming its PID, oldest first: those read this
  // window (`since_unix_ns` < 0), else those logged at or after it (of the monitor's latest
  // host::kMaxXidKept).
  std::vector<const host::XidEvent*> xids_of(int pid, std::int64_t since_unix_ns) const;
  // The series' CUDA processes this window, most CUDA time first.
  std::vector<const ProcessWindow*> cuda_processes(const std::string& cgroup) const;
};

class Rule {
 public:
  virtual ~Rule() = default;
  virtual Kind kind() const = 0;
  virtual void process(const WindowContext&, const ProcessWindow&, std::vector<Finding>&) {}
  virtual void series(const WindowContext&, const SeriesWindow&, std::vector<Finding>&) {}
  virtual void host(const WindowContext&, std::vector<Finding>&) {}
  // The process left the snapshot: drop what the rule remembers of it.
  virtual void forget(const std::string& /*cgroup*/, int /*pid*/) {}
};

// One rule per row of kinds.h, in that order.
std::vector<std::unique_ptr<Rule>> default_rules();

}  // namespace stallwatch::chains
