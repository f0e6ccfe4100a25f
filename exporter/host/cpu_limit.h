// CPU limits (CFS bandwidth control) of a process's cgroup and its ancestors, and how often the
// kernel throttled them: cgroup v2 `cpu.max` + `cpu.stat`, cgroup v1 `cpu.cfs_quota_us` /
// `cpu.cfs_period_us` + `cpu.stat`, found from the process's own /proc/PID/cgroup entries (the
// v1 `cpu` controller's line where one is mounted, else the unified `0::` line; hybrid hosts
// included). What Kubernetes `limits.cpu`, systemd `CPUQuota=` and `docker --cpus` set.
// Owns only reading and parsing; the cpu_limit source decides which processes and when.
// Every read is bounded (small files, at most kMaxDepth levels); paths from /proc are checked
// (no `..`, no empty or `.` component) before they are joined to a mount. Pure apart from the
// reads; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stallwatch::host {

// Cumulative throttling of the limited levels (those with a quota) from the process's cgroup up
// to the hierarchy's root, summed; and the tightest of those limits.
struct CpuLimitTotals {
  bool known = false;         // the process's cpu cgroup was found and read
  bool v1 = false;            // from the cgroup v1 `cpu` hierarchy
  double limit_cores = 0;     // quota / period of the tightest level; 0: no limit anywhere
  std::uint64_t quota_us = 0;   // of that level
  std::uint64_t period_us = 0;
  std::string limited_at;     // that level's path, relative to the hierarchy's mount
  std::string limited_dir;    // that level's directory (the mount joined to limited_at)
  std::uint64_t periods = 0;            // nr_periods, limited levels summed
  std::uint64_t throttled_periods = 0;  // nr_throttled
  std::uint64_t throttled_ns = 0;       // v1 throttled_time, v2 throttled_usec × 1000

  bool limited() const { return limit_cores > 0; }
};

// The parts of a cpu.stat file the limit needs. Unknown keys are skipped; nullopt when
// nr_periods or nr_throttled is missing or a value is not a number.
struct CpuStat {
  std::uint64_t periods = 0;
  std::uint64_t throttled_periods = 0;
  std::uint64_t throttled_ns = 0;
};
std::optional<CpuStat> parse_cpu_stat(std::string_view text);

// cgroup v2 cpu.max: "max 100000" (no limit: quota 0) or "30000 100000". nullopt if malformed.
struct CpuQuota {
  std::uint64_t quota_us = 0;  // 0: no limit
  std::uint64_t period_us = 0;
};
std::optional<CpuQuota> parse_cpu_max(std::string_view text);

// The path of the process's cpu cgroup in a /proc/PID/cgroup text: the line whose controller
// list holds `cpu` when `v1`, else the `0::` line. nullopt when absent or when the path is not a
// plain absolute path (outside the reader's cgroup namespace it reads "/../x").
std::optional<std::string> cpu_cgroup_path(std::string_view proc_cgroup, bool v1);

// The v1 `cpu` controller's mount point in a mountinfo text ("/sys/fs/cgroup/cpu,cpuacct");
// nullopt when no v1 hierarchy has the cpu controller.
std::optional<std::string> find_cgroup1_cpu_mount(std::string_view mountinfo_text);

// Reads the limits of `path` (relative to `mount`, "/" the root) and its ancestors. `v1` picks
// the file names. known = false when the leaf cannot be read.
CpuLimitTotals read_cpu_limit(const std::string& mount, const std::string& path, bool v1);

}  // namespace stallwatch::host
