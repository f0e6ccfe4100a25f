#include "chains/chain.h"

#include <array>

namespace stallwatch::chains {
namespace {

constexpr std::array<std::string_view, kSeverityCount> kSeverities = {"low", "medium", "high",
                                                                       "critical"};

}  // namespace

std::optional<Kind> kind_from_name(std::string_view name) {
  for (const auto& k : kKinds) {
    if (k.name == name) return k.kind;
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
