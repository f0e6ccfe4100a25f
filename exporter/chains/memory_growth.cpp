#include "chains/memory_growth.h"

#include <algorithm>
#include <array>

namespace stallwatch::chains {

std::optional<MemoryGrowth> memory_growth(
    const std::vector<std::pair<std::int64_t, std::uint64_t>>& samples) {
  if (samples.size() < kGrowthMinSamples) return std::nullopt;
  const std::int64_t t0 = samples.front().first, t1 = samples.back().first;
  const double span_s = static_cast<double>(t1 - t0) / 1e9;
  if (span_s < kGrowthMinSpanS) return std::nullopt;
  const std::uint64_t from = samples.front().second, to = samples.back().second;
  if (to < from + kGrowthMinBytes) return std::nullopt;
  std::array<std::uint64_t, 4> peak{};
  std::array<bool, 4> seen{};
  for (const auto& [ts, bytes] : samples) {
    const auto q = std::min<std::size_t>(
        3, static_cast<std::size_t>(4.0 * static_cast<double>(ts - t0) /
                                    static_cast<double>(t1 - t0)));
    peak[q] = std::max(peak[q], bytes);
    seen[q] = true;
  }
  for (std::size_t q = 1; q < peak.size(); ++q) {
    if (!seen[q] || !seen[q - 1]) return std::nullopt;
    const std::uint64_t step = std::max<std::uint64_t>(peak[q - 1] / 100, 1ULL << 20);
    if (peak[q] < peak[q - 1] + step) return std::nullopt;
  }
  return MemoryGrowth{from, to, span_s, static_cast<double>(to - from) / span_s};
}

}  // namespace stallwatch::chains
