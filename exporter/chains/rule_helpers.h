// Helpers shared by the rule files (rules.cpp, rules_host.cpp, rules_nccl.cpp): a call's numbers
// in one window and the pieces of chain text every rule writes. Internal to the chain engine.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "chains/chain.h"
#include "chains/engine.h"
#include "common/snapshot.h"

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
std::string_view call_name(std::uint32_t id);  // "" for an unknown id
bool named(std::uint32_t id, std::initializer_list<std::string_view> names);

inline double share(double part, double whole) { return whole > 0 ? part / whole : 0; }
inline double secs(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }
std::string upper(std::string_view s);

// What the slow calls cost the workload beyond their latency: the call rate against its
// baseline, else the window's count.
std::string effect_text(const CallStat& s, const Baseline* b, bool known);
// The chain's call, api, p50/p99 and (when known) baseline and ratio.
void set_call(Chain& c, const CallStat& s, const Baseline* b, bool known);
// "[HIGH] kind: rest"
std::string summary_of(const Chain& c, const std::string& rest);
// "python3 (PID 4242)"
std::string process_text(const std::string& comm, int pid);

}  // namespace stallwatch::chains
