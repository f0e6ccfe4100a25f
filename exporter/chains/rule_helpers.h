// Helpers shared by the rule files (chains/rules/*.cpp): a call's numbers in one window, the
// pieces of chain text every rule writes and the lines of its advice. Internal to the rules.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chains/advice.h"
#include "chains/chain.h"
#include "chains/baselines.h"
#include "chains/window.h"
#include "trace/snapshot.h"

namespace stallwatch::chains {

// A call's numbers in one window.
struct CallStat {
  std::uint32_t id = 0;
  std::string_view name;
  std::string_view api;
  std::uint64_t count = 0;
  std::uint64_t sum_ns = 0;
  std::uint64_t runnable_ns = 0;
  std::uint64_t max_ns = 0;
  double p50 = 0;
  double p99 = 0;
  double mean() const {
    return count ? static_cast<double>(sum_ns) / 1e9 / static_cast<double>(count) : 0;
  }
};

CallStat stat_of(std::uint32_t id, const CallTotals& t);

// A process's CUDA calls in one window as the CPU rules read them: runnable time inside them,
// time inside them, and the call that waited for a CPU the longest (ties: the longer); null
// when the process made no call.
struct RunnableCalls {
  std::uint64_t runnable_ns = 0;
  std::uint64_t cuda_ns = 0;
  const CallTotals* worst = nullptr;
  std::uint32_t worst_id = 0;
};
RunnableCalls runnable_calls(const ProcessWindow& p);
std::string_view call_name(std::uint32_t id);  // "" for an unknown id

inline double share(double part, double whole) { return whole > 0 ? part / whole : 0; }
inline double secs(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }
std::string upper(std::string_view s);

// What the slow calls cost the workload beyond their latency: the call rate against its
// baseline (`b`, null while unknown), else the window's count.
std::string effect_text(const CallStat& s, const Baseline* b);
// The chain's call, api, p50/p99 and (when `b` is known) baseline and ratio.
void set_call(Chain& c, const CallStat& s, const Baseline* b);
// "[HIGH] kind: rest"
std::string summary_of(const Chain& c, const std::string& rest);
// "python3 (PID 4242)"
std::string process_text(const std::string& comm, int pid);
// How a person knows the workload: its container, systemd unit or cgroup path.
std::string workload_of(const Chain& c);
// "python3 (PID 4242)", or the workload when the series has no CUDA process this window.
std::string process_or_workload(const ProcessWindow* p, const Chain& c);
// One severity up, at most high.
Severity step_up(Severity s);

// The chain's recommendation and its typed commands, from `a`.
void set_advice(Chain& c, const Advice& a);
std::string last_component(std::string_view path);  // of a cgroup path: the unit or scope
bool in_kubepods(std::string_view cgroup);
// Interrupt work on one CPU, named by the softirq raised most there (host::CpuStolen): "softirq
// NET_RX on CPU 0 (93% of the softirqs raised there)", "" when unknown; and a note on moving that kind of work
// off the training cores (RPS and IRQ affinity for the network, the NVMe queues' affinity for
// block completions, nohz_full for timers and ticks).
std::string softirq_text(const host::CpuStolen& cpu);
void advise_softirq(Advice& out, const host::CpuStolen& cpu);

}  // namespace stallwatch::chains
