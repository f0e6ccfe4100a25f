// The daemon's own process metrics, the ones every Prometheus exporter has (process_cpu_seconds
// _total, process_resident_memory_bytes, ...), read from /proc/self once per window by `run`.
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <optional>

namespace stallwatch::host {

struct SelfStats {
  double cpu_seconds = 0;              // user + system
  std::uint64_t resident_bytes = 0;
  std::uint64_t virtual_bytes = 0;
  std::uint64_t open_fds = 0;
  std::uint64_t max_fds = 0;           // RLIMIT_NOFILE soft limit
  double start_time_seconds = 0;       // unix time the process started
};

// nullopt when /proc/self cannot be read (no procfs).
std::optional<SelfStats> read_self_stats();

}  // namespace stallwatch::host
