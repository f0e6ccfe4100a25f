// The chain kinds: the closed set of DESIGN.md in one table (name = the `kind` label value,
// anchor in docs/chains.md, severity cutoffs, and the rule that finds it).
// Adding a kind: a row here, its rule in chains/rules/<kind>.cpp, a test and a demo scenario
// (docs/architecture.md). The enum's values are stored nowhere; its order is the order in which
// the engine runs the rules of each scope (per process, per series, per host), which makes the
// order of one window's findings. Pure; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>

namespace stallwatch::chains {

enum class Kind : std::uint8_t {
  kCpuContention,
  kCpuSteal,
  kCpuThrottle,
  kMemoryPressure,
  kIoStall,
  kNetworkRetransmit,
  kAllocSpike,
  kColdStart,
  kMemcpyBound,
  kGpuContention,
  kNcclStraggler,
  kCallHang,
  kGraphRecapture,
  kCudaOom,
  kGpuThrottle,
  kGpuXid,
};

enum class Severity : std::uint8_t { kLow, kMedium, kHigh, kCritical };
inline constexpr int kSeverityCount = 4;

// A rule's measure at or above `medium` makes the chain medium, and so on; below `medium` it is
// low. kNever: that severity is not reached through the measure.
inline constexpr double kNever = std::numeric_limits<double>::infinity();
struct SeverityCutoffs {
  double medium = kNever;
  double high = kNever;
  double critical = kNever;

  constexpr Severity of(double measure) const {
    return measure >= critical ? Severity::kCritical
           : measure >= high   ? Severity::kHigh
           : measure >= medium ? Severity::kMedium
                               : Severity::kLow;
  }
};

class Rule;
using RuleFactory = std::unique_ptr<Rule> (*)();

// One factory per rule file (chains/rules/<kind>.cpp).
std::unique_ptr<Rule> make_cpu_contention_rule();
std::unique_ptr<Rule> make_cpu_steal_rule();
std::unique_ptr<Rule> make_cpu_throttle_rule();
std::unique_ptr<Rule> make_alloc_spike_rule();
std::unique_ptr<Rule> make_cold_start_rule();
std::unique_ptr<Rule> make_memcpy_bound_rule();
std::unique_ptr<Rule> make_gpu_contention_rule();
std::unique_ptr<Rule> make_memory_pressure_rule();
std::unique_ptr<Rule> make_call_hang_rule();
std::unique_ptr<Rule> make_io_stall_rule();
std::unique_ptr<Rule> make_network_retransmit_rule();
std::unique_ptr<Rule> make_nccl_straggler_rule();
std::unique_ptr<Rule> make_graph_recapture_rule();
std::unique_ptr<Rule> make_cuda_oom_rule();
std::unique_ptr<Rule> make_gpu_throttle_rule();
std::unique_ptr<Rule> make_gpu_xid_rule();

struct KindInfo {
  Kind kind;
  std::string_view name;     // the `kind` label value
  std::string_view anchor;   // docs/chains.md#anchor
  std::string_view measure;  // what the cutoffs are applied to
  SeverityCutoffs cutoffs;
  RuleFactory make;
};

// Rows in Kind order (kind_info relies on it).
inline constexpr std::array<KindInfo, 16> kKinds = {{
    {Kind::kCpuContention,
     "cpu_contention",
     "cpu_contention",
     "runnable share of call or thread time",
     {0.10, 0.25, 0.50},
     make_cpu_contention_rule},
    {Kind::kCpuSteal,
     "cpu_steal",
     "cpu_steal",
     "steal + interrupt share of the process's CPUs (given an on-CPU slowdown it explains)",
     {0.10, 0.25, 0.50},
     make_cpu_steal_rule},
    {Kind::kCpuThrottle,
     "cpu_throttle",
     "cpu_throttle",
     "runnable share of call or thread time that the workload's own CPU limit explains",
     {0.10, 0.25, 0.50},
     make_cpu_throttle_rule},
    {Kind::kMemoryPressure,
     "memory_pressure",
     "memory_pressure",
     "reclaim share of the window",
     {0, 0.25, kNever},
     make_memory_pressure_rule},
    {Kind::kIoStall,
     "io_stall",
     "io_stall",
     "starvation share of the window",
     {0, 0.40, kNever},
     make_io_stall_rule},
    {Kind::kNetworkRetransmit,
     "network_retransmit",
     "network_retransmit",
     "retransmits per second",
     {0, 100, kNever},
     make_network_retransmit_rule},
    {Kind::kAllocSpike,
     "alloc_spike",
     "alloc_spike",
     "allocation share of the window",
     {0.05, 0.20, kNever},
     make_alloc_spike_rule},
    {Kind::kColdStart, "cold_start", "cold_start", "(always low)", {}, make_cold_start_rule},
    {Kind::kMemcpyBound,
     "memcpy_bound",
     "memcpy_bound",
     "copy share of wall time",
     {0.30, 0.60, kNever},
     make_memcpy_bound_rule},
    {Kind::kGpuContention,
     "gpu_contention",
     "gpu_contention",
     "sync p99 / baseline p99",
     {0, 10, kNever},
     make_gpu_contention_rule},
    {Kind::kNcclStraggler,
     "nccl_straggler",
     "nccl_straggler",
     "mean op time / peers' median",
     {0, 0, 10},
     make_nccl_straggler_rule},
    {Kind::kCallHang,
     "call_hang",
     "call_hang",
     "(always critical: a call open past --hang-threshold)",
     {0, 0, 0},
     make_call_hang_rule},
    {Kind::kGraphRecapture,
     "graph_recapture",
     "graph_recapture",
     "share of the process's CUDA time spent building graphs",
     {0.10, 0.25, kNever},
     make_graph_recapture_rule},
    {Kind::kCudaOom,
     "cuda_oom",
     "cuda_oom",
     "(always high: an allocation returned out of memory)",
     {0, 0, kNever},
     make_cuda_oom_rule},
    {Kind::kGpuThrottle,
     "gpu_throttle",
     "gpu_throttle",
     "the slowed call's time / its baseline (one step up for a hardware reason)",
     {1.25, 2, kNever},
     make_gpu_throttle_rule},
    {Kind::kGpuXid,
     "gpu_xid",
     "gpu_xid",
     "what the Xid asks for: 1 unknown or check, 2 the application, 3 a GPU reset or drain",
     {1, 2, 3},
     make_gpu_xid_rule},
}};
inline constexpr int kKindCount = static_cast<int>(kKinds.size());

constexpr const KindInfo& kind_info(Kind k) { return kKinds[static_cast<size_t>(k)]; }
constexpr std::string_view kind_name(Kind k) { return kind_info(k).name; }
std::optional<Kind> kind_from_name(std::string_view name);
std::string_view severity_name(Severity s);  // low, medium, high, critical
std::optional<Severity> severity_from_name(std::string_view name);

}  // namespace stallwatch::chains
