// System context for explain: CPU busy share since the previous sample, memory and swap use,
// load average, CPU count, and per CPU the time stolen by the hypervisor and by interrupts
// (the cpu_steal chain), from procfs (host/procfs.h). Not thread-safe (keeps the previous
// CPU counters).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host/procfs.h"

namespace stallwatch::host {

// Time one CPU lost, since the previous sample, to the hypervisor (steal: another guest ran on
// the physical CPU) and to interrupts (hardirq + softirq), as shares of that CPU's time.
struct CpuStolen {
  int cpu = 0;
  double steal = 0;
  double irq = 0;
  double total() const { return steal + irq; }
  // The softirq raised most on this CPU since the previous sample (/proc/softirqs: NET_RX,
  // TIMER, BLOCK, ...) and its share of all raised there; "" when none was or unknown. Counts,
  // not time: the kernel keeps no time per vector.
  std::string top_softirq{};
  double top_softirq_share = 0;
};

// System context of the window (explain's first lines). Negative when unknown.
struct HostContext {
  double cpu_busy = -1;  // share of all CPUs busy, 0..1
  double mem_used = -1;  // share of MemTotal not available, 0..1
  double load1 = -1;
  int cpus = 0;
  std::int64_t swap_used_bytes = -1;
  std::vector<CpuStolen> cpu_stolen;  // per online CPU; empty on the first sample
  // The means of cpu_stolen over the online CPUs: the VM's weather, context for explain.
  double cpu_steal = -1;
  double cpu_irq = -1;
};

class HostSampler {
 public:
  explicit HostSampler(const Procfs& fs) : fs_(fs) {}
  HostContext sample();

 private:
  struct CpuTicks {
    std::uint64_t total = 0, steal = 0, irq = 0;
  };
  const Procfs& fs_;
  std::uint64_t busy_ = 0;
  std::uint64_t total_ = 0;
  std::vector<std::pair<int, CpuTicks>> cpus_;  // the previous sample's per-CPU lines
  std::map<int, std::map<std::string, std::uint64_t>> softirqs_;  // previous: CPU → vector → count
};

// /proc/softirqs: per CPU number, each vector's count (at most 64 vectors, names escaped).
std::map<int, std::map<std::string, std::uint64_t>> parse_softirqs(const std::string& text);

}  // namespace stallwatch::host
