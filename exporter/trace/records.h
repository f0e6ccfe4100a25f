// Records of the ring buffer as the rest of the daemon sees them: decoded from the kernel's
// structs (bpf/cuda.h, bpf/host.h) by the tracer, so that nothing above trace/ includes a bpf/
// header. Plain values.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>
#include <string>

namespace stallwatch::trace {

inline constexpr std::size_t kCommLen = 16;  // TASK_COMM_LEN

// A CUDA call at or above --outlier-threshold (the only per-call record user space sees).
struct OutlierRecord {
  std::uint64_t ts_ns = 0;  // CLOCK_MONOTONIC, when the call returned
  std::uint64_t cgroup_id = 0;
  std::uint64_t duration_ns = 0;
  std::uint64_t runnable_ns = 0;  // off-CPU inside the call, waiting for a CPU
  std::uint64_t blocked_ns = 0;   // off-CPU inside the call, sleeping
  std::uint32_t tgid = 0;
  std::uint32_t tid = 0;
  std::uint32_t call_id = 0;  // trace/calls.h
  std::uint32_t preemptions = 0;
  char comm[kCommLen] = {};  // not necessarily NUL-terminated
  // The calling thread's stack at the return (--stacks): native return addresses and Python
  // (code object, instruction byte offset) pairs, innermost first.
  std::vector<std::uint64_t> native;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> python;
  std::uint16_t py_status = 0;  // bpf/cuda.h SW_PY_*
};

// Sources of lost events (bpf/stallwatch.h, enum sw_lost_source): Snapshot::lost's size.
inline constexpr unsigned kLostSources = 11;

// The `source` label of stallwatch_events_lost_total for each enum sw_lost_source (the index
// of Snapshot::lost); "unknown" past the end.
const char* lost_source_name(unsigned source);

// The LRU maps (bpf/stallwatch.h, enum sw_lru_map): Snapshot::evicted's size.
inline constexpr unsigned kLruMaps = 4;

// The `source` label of stallwatch_events_lost_total for the entries each LRU map dropped to
// make room ("preemptors_evicted", ...); "unknown" past the end.
const char* lru_evicted_name(unsigned lru);

// Unix time of a CLOCK_MONOTONIC (bpf_ktime_get_ns) timestamp, as of now.
std::int64_t unix_ns_of_monotonic(std::uint64_t mono_ns);

}  // namespace stallwatch::trace
