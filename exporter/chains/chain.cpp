#include "chains/chain.h"

#include <array>

namespace stallwatch::chains {
namespace {

constexpr std::array<std::string_view, kKindCount> kKinds = {
    "cpu_contention", "memory_pressure", "io_stall",      "network_retransmit", "alloc_spike",
    "cold_start",     "memcpy_bound",    "gpu_contention", "nccl_straggler"};
constexpr std::array<std::string_view, kSeverityCount> kSeverities = {"low", "medium", "high",
                                                                       "critical"};

}  // namespace

std::string_view kind_name(Kind k) { return kKinds[static_cast<size_t>(k)]; }

std::optional<Kind> kind_from_name(std::string_view name) {
  for (size_t i = 0; i < kKinds.size(); i++) {
    if (kKinds[i] == name) return static_cast<Kind>(i);
  }
  return std::nullopt;
}

std::string_view severity_name(Severity s) { return kSeverities[static_cast<size_t>(s)]; }

std::optional<Severity> severity_from_name(std::string_view name) {
  for (size_t i = 0; i < kSeverities.size(); i++) {
    if (kSeverities[i] == name) return static_cast<Severity>(i);
  }
  return std::nullopt;
}

double Chain::evidence_value(std::string_view name, double fallback) const {
  for (const auto& [k, v] : evidence) {
    if (k == name) return v;
  }
  return fallback;
}

}  // namespace stallwatch::chains
