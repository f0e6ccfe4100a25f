// procfs and sysfs behind a root path (`run --path.procfs`, `--path.sysfs`, as node_exporter
// does), so that what the daemon reads of the host has unit tests over fixture trees
// (tests/fixtures/procfs, tests/fixtures/sysfs). Every read is bounded: the files are the host's,
// and a hostile process controls some of them (its comm, its cmdline). Pure apart from the
// reads; thread-safe (the boot time is cached once, under a lock-free once-flag).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stallwatch::host {

// bpf/stallwatch.h SW_START_TAG_NS (checked where both are seen, trace/cuda_source.cpp).
inline constexpr std::uint64_t kStartTagNs = 10'000'000;

class Procfs {
 public:
  explicit Procfs(std::string proc_root = "/proc", std::string sys_root = "/sys");

  const std::string& proc_root() const { return proc_; }
  const std::string& sys_root() const { return sys_; }

  // PROC/PID, or PROC/PID/REL.
  std::string pid_path(int pid, std::string_view rel = {}) const;
  bool pid_exists(int pid) const;
  // At most `max_bytes` of the file; "" when it cannot be read.
  static std::string read_bounded(const std::string& path, size_t max_bytes);

  // The process's name (PROC/PID/comm without its newline, at most 64 bytes); "" when gone.
  std::string comm(int pid) const;
  // The CPUs the process may run on (PROC/PID/status Cpus_allowed_list, e.g. "0-3,8"),
  // ascending; empty when unknown.
  std::vector<int> cpus_allowed(int pid) const;
  // Unix time the process started (PROC/PID/stat field 22 after PROC/stat btime); 0 unknown.
  std::int64_t start_unix_ns(int pid) const;
  // Its start time since boot in clock ticks (stat field 22); nullopt when unknown.
  std::optional<std::uint64_t> start_ticks(int pid) const;
  // The same instant as the BPF programs' start tag (bpf/stallwatch.h SW_START_TAG_NS, 10 ms
  // units, low 32 bits); 0 when unknown.
  std::uint32_t start_tag(int pid) const;
  // PROC/stat btime in seconds; 0 unknown. Read once.
  std::int64_t boot_unix_s() const;
  // The kernel name of a block device (SYS/dev/block/MAJ:MIN/uevent DEVNAME), else "MAJ:MIN".
  std::string block_device(std::uint32_t major, std::uint32_t minor) const;

 private:
  std::string proc_;
  std::string sys_;
  mutable std::once_flag boot_once_;
  mutable std::int64_t boot_s_ = 0;
};

}  // namespace stallwatch::host
