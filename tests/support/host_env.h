// Host conditions for the privileged tests of host-side causes (issue 4): memory-limited
// cgroups (cgroup v1 memory controller on hybrid hosts, v2 memory.max on unified ones), a pair
// of network namespaces joined by veth with an nftables drop rule, and the block device behind
// a file. Every external command and wait is bounded; every object removes what it made when
// destroyed. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/harness.h"

namespace stallwatch::test {

// A directory for test files on a filesystem with a block device behind it (not tmpfs, not
// overlay on tmpfs): TEST_SCRATCH_DIR, else /var/tmp, else /tmp; empty when none qualifies.
std::string block_backed_dir();
// The kernel name of the block device holding `path`'s filesystem, as block tracepoints see
// requests: the whole disk for a partition (vda for vda1). Empty when unknown.
std::string block_device_of(const std::string& path);

// A cgroup whose memory is limited. The `cgroup` label is always the cgroup v2 directory (what
// the daemon attributes by); the limit sits on the v2 directory where cgroup v2 has the memory
// controller, else on a cgroup v1 memory cgroup of the same name created below the test's own
// memory cgroup (hybrid hosts). place() puts a Spawn in both.
class MemoryCgroup {
 public:
  MemoryCgroup(const std::string& name, std::uint64_t limit_bytes);
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& label() const { return v2_.label(); }
  const std::string& dir() const { return v2_.dir(); }
  bool v1() const { return v1_; }
  const std::string& memory_dir() const { return memory_dir_; }  // where the limit is
  void place(Spawn& s) const;
  // OOM kills in this cgroup as the kernel counts them (memory.oom_control / memory.events).
  std::uint64_t oom_kills() const;
  // Times the cgroup hit its limit (v1 memory.failcnt + memory.memsw.failcnt, v2
  // memory.events "max").
  std::uint64_t limit_hits() const;

 private:
  TestCgroup v2_;
  bool v1_ = false;
  std::string memory_dir_;
  std::vector<std::string> created_;  // v1 directories made here, leaf last
  std::string error_;
};

// Two network namespaces, "<prefix>a" (sender side) and "<prefix>b" (receiver side), joined by
// a veth pair with 10.253.<subnet>.1/30 in a and .2/30 in b, and an nftables table in b whose
// input chain drops `drop_percent` % of arriving TCP packets at random (numgen random mod 100).
// Nothing touches the host's own namespace but the veth creation; the destructor deletes both
// namespaces (and with them the veth pair and the rules). `prefix` must be short (veth names
// are prefix + "a"/"b", at most 15 characters).
class NetnsPair {
 public:
  NetnsPair(const std::string& prefix, int subnet, int drop_percent);
  ~NetnsPair();
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool set_drop_percent(int percent);  // replaces the rule; false (and error()) on failure
  const std::string& sender_ns() const { return ns_a_; }
  const std::string& receiver_ns() const { return ns_b_; }
  const std::string& sender_addr() const { return addr_a_; }
  const std::string& receiver_addr() const { return addr_b_; }
  const std::string& receiver_addr6() const { return addr6_b_; }  // same link, IPv6 (ULA)
  std::uint64_t dropped_packets() const;  // the rule's counter

 private:
  bool ip(const std::vector<std::string>& args);
  std::string ns_a_, ns_b_, addr_a_, addr_b_, addr6_a_, addr6_b_, error_;
  bool created_a_ = false, created_b_ = false;
};

// A cgroup whose CPU time is limited (CFS bandwidth): `quota_us` per `period_us`, as
// Kubernetes limits.cpu sets it. The `cgroup` label is the cgroup v2 directory; the limit sits on
// it where cgroup v2 has the cpu controller (cpu.max), else on a cgroup v1 cpu cgroup of the
// same name below the test's own (cpu.cfs_quota_us; hybrid hosts). place() puts a Spawn in both.
class CpuLimitCgroup {
 public:
  CpuLimitCgroup(const std::string& name, std::uint64_t quota_us, std::uint64_t period_us);
  ~CpuLimitCgroup();
  CpuLimitCgroup(const CpuLimitCgroup&) = delete;
  CpuLimitCgroup& operator=(const CpuLimitCgroup&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& label() const { return v2_.label(); }
  const std::string& dir() const { return v2_.dir(); }
  bool v1() const { return v1_; }
  void place(Spawn& s) const;
  std::uint64_t throttled_periods() const;  // cpu.stat nr_throttled, as the kernel counts it

 private:
  TestCgroup v2_;
  bool v1_ = false;
  std::string cpu_dir_;
  std::vector<std::string> created_;
  std::string error_;
};

// The VM's weather while it lives: per CPU, the time the hypervisor (steal) and interrupts
// (irq + softirq) took, sampled from /proc/stat every `every` by a thread of its own. The
// diagnosis scenarios judge a cpu_steal chain with it: right when steal or interrupts were
// there, never counted false for the weather. Thread-safe.
class CpuWeather {
 public:
  explicit CpuWeather(std::chrono::milliseconds every = std::chrono::milliseconds(500));
  ~CpuWeather();
  CpuWeather(const CpuWeather&) = delete;
  CpuWeather& operator=(const CpuWeather&) = delete;
  void stop();

  struct Seen {
    double max_steal = 0;  // the largest share of one sample interval
    double max_irq = 0;
    double max_stolen = 0;  // steal + interrupts, the largest share of one interval
    std::uint64_t steal_ticks = 0, irq_ticks = 0, ticks = 0;
    double mean_steal() const { return ticks ? static_cast<double>(steal_ticks) / ticks : 0; }
    double mean_irq() const { return ticks ? static_cast<double>(irq_ticks) / ticks : 0; }
  };
  Seen on(int cpu) const;

 private:
  std::chrono::milliseconds every_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<int, Seen> seen_;
  std::thread thread_;
};

}  // namespace stallwatch::test
