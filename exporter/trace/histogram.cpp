#include "trace/histogram.h"

#include <cmath>

extern "C" {
#include <linux/types.h>

#include "bpf/stallwatch.h"
}

namespace stallwatch::trace {

static_assert(kHistBuckets == SW_HIST_BUCKETS && kTickShift == SW_TICK_SHIFT,
              "histogram.h's constants are the kernel's");

unsigned bucket_of_ns(std::uint64_t ns) { return sw_bucket_of_ns(ns); }

double bucket_upper_seconds(unsigned k) {
  return std::ldexp(1.0, static_cast<int>(k) - SW_TICK_SHIFT);
}

std::vector<double> exported_bounds() {
  std::vector<double> bounds;
  for (int e = kMinExportExp; e <= kMaxExportExp; ++e) bounds.push_back(std::ldexp(1.0, e));
  return bounds;
}

std::vector<std::uint64_t> fold_to_exported(const KernelBuckets& kernel) {
  const int n = kMaxExportExp - kMinExportExp + 1;
  std::vector<std::uint64_t> out(n + 1, 0);
  for (unsigned k = 0; k < SW_HIST_BUCKETS; ++k) {
    if (kernel[k] == 0) continue;
    if (k == SW_HIST_BUCKETS - 1) {
      out[n] += kernel[k];
      continue;
    }
    int e = static_cast<int>(k) - SW_TICK_SHIFT;
    if (e < kMinExportExp) e = kMinExportExp;
    if (e > kMaxExportExp) {
      out[n] += kernel[k];
    } else {
      out[e - kMinExportExp] += kernel[k];
    }
  }
  return out;
}

double quantile_upper_seconds(const KernelBuckets& kernel, double q) {
  std::uint64_t total = 0;
  for (auto c : kernel) total += c;
  if (total == 0) return 0;
  auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
  if (rank == 0) rank = 1;
  std::uint64_t seen = 0;
  for (unsigned k = 0; k < SW_HIST_BUCKETS; ++k) {
    seen += kernel[k];
    if (seen >= rank) {
      return k == SW_HIST_BUCKETS - 1 ? INFINITY : bucket_upper_seconds(k);
    }
  }
  return INFINITY;
}

double quantile_seconds(const KernelBuckets& kernel, double q, std::uint64_t max_ns) {
  const double upper = quantile_upper_seconds(kernel, q);
  const double max_s = static_cast<double>(max_ns) / 1e9;
  return max_ns > 0 && max_s < upper ? max_s : upper;
}

}  // namespace stallwatch::trace
