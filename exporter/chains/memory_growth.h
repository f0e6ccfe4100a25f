// memory_growth: a process whose traced GPU memory keeps growing window after window with no
// plateau (a leak in a long-running service), judged from its live bytes over a period. Not a
// chain kind (memory that grows is not yet a stall): explain --per-process names it as a finding
// beside the process. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace stallwatch::chains {

struct MemoryGrowth {
  std::uint64_t from_bytes = 0;  // live at the first sample
  std::uint64_t to_bytes = 0;    // live at the last
  double span_s = 0;             // between them
  double bytes_per_s = 0;        // (to - from) / span
};

// Thresholds: at least this long a record, this many samples, and this much growth.
inline constexpr double kGrowthMinSpanS = 20;
inline constexpr std::size_t kGrowthMinSamples = 8;
inline constexpr std::uint64_t kGrowthMinBytes = 16ULL << 20;

// `samples` are (unix ns, live bytes) in time order. Growth means: the period splits into four
// equal quarters and each quarter's peak is above the one before (by at least 1% and 1 MiB), and
// the last sample is at least kGrowthMinBytes above the first. A process that grew and then
// held steady (a warmed-up caching allocator) has a last quarter no higher than the third.
std::optional<MemoryGrowth> memory_growth(
    const std::vector<std::pair<std::int64_t, std::uint64_t>>& samples);

}  // namespace stallwatch::chains
