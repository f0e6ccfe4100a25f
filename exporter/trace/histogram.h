// Conversions of the in-kernel log2 histograms (bpf/stallwatch.h) into exported buckets.
// Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace stallwatch::trace {

// The kernel's buckets (bpf/stallwatch.h's SW_HIST_BUCKETS and SW_TICK_SHIFT, which
// histogram.cpp holds these to): bucket k ≤ 2^(k - 30) s, the last one is +Inf.
inline constexpr unsigned kHistBuckets = 40;
inline constexpr int kTickShift = 30;

using KernelBuckets = std::array<std::uint64_t, kHistBuckets>;

// Upper bound in seconds of kernel bucket k (k < kHistBuckets - 1): 2^(k - 30).
double bucket_upper_seconds(unsigned k);

// The bucket index the kernel assigns to a duration (the BPF side's own code).
unsigned bucket_of_ns(std::uint64_t ns);

// Exported range: Prometheus `le` bounds 2^kMinExportExp .. 2^kMaxExportExp seconds
// (about 0.95 µs .. 64 s, 27 bounds) plus +Inf. Kernel buckets below the range fold into the
// first exported bound, above it into +Inf.
inline constexpr int kMinExportExp = -20;
inline constexpr int kMaxExportExp = 6;

std::vector<double> exported_bounds();  // ascending, without +Inf

// Per-bound counts (not cumulative) for exported_bounds(), plus one trailing +Inf count.
std::vector<std::uint64_t> fold_to_exported(const KernelBuckets& kernel);

// Quantile estimate (0 < q <= 1) from kernel buckets: upper bound of the bucket holding the
// q-th value, in seconds; 0 for an empty histogram.
double quantile_upper_seconds(const KernelBuckets& kernel, double q);

// The same, never above the largest value seen (`max_ns`, when known): a bucket's upper bound
// can exceed every value in it, and a p99 above the maximum reads wrong.
double quantile_seconds(const KernelBuckets& kernel, double q, std::uint64_t max_ns);

}  // namespace stallwatch::trace
