// Unit tests for exporter/trace/histogram.h and bpf/stallwatch.h's sw_bucket_of_ns: the
// upper-inclusive log2 buckets (bucket k holds 2^(k-1-30) s < v <= 2^(k-30) s), the fold into
// Prometheus' exported bounds and quantile estimates. Expected buckets come from the definition,
// computed in long double, never from the implementation.
#include "trace/histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>

extern "C" {  // the kernel's constants, which these tests hold the user-space side to
#include <linux/types.h>

#include "bpf/stallwatch.h"
}

namespace stallwatch::trace {
namespace {

constexpr unsigned kOverflow = SW_HIST_BUCKETS - 1;  // 39: above 2^8 s, Prometheus' +Inf

// The smallest k with ns * 1e-9 <= 2^(k-30), i.e. ns * 2^30 <= 1e9 * 2^k, else the overflow
// bucket. Both sides are exact in long double (64-bit mantissa; scaling by 2^n is exact).
unsigned expected_bucket(std::uint64_t ns) {
  const long double v = std::ldexp(static_cast<long double>(ns), SW_TICK_SHIFT);
  for (unsigned k = 0; k < kOverflow; ++k) {
    if (v <= std::ldexp(1e9L, static_cast<int>(k))) return k;
  }
  return kOverflow;
}

// floor(2^(k-30) s in ns): the largest whole number of ns in bucket k (k >= 1).
std::uint64_t floor_bound_ns(unsigned k) {
  return static_cast<std::uint64_t>(
      std::floor(std::ldexp(1e9L, static_cast<int>(k) - SW_TICK_SHIFT)));
}

TEST(BucketOfNsTest, Constants) {
  EXPECT_EQ(SW_HIST_BUCKETS, 40);
  EXPECT_EQ(SW_TICK_SHIFT, 30);
}

TEST(BucketOfNsTest, SmallValues) {
  EXPECT_EQ(sw_bucket_of_ns(0), 0u);  // 0 <= 2^-30 s
  EXPECT_EQ(expected_bucket(0), 0u);
  // 1 ns > 2^-30 s (0.931 ns) and <= 2^-29 s (1.86 ns).
  EXPECT_EQ(sw_bucket_of_ns(1), 1u);
  EXPECT_EQ(expected_bucket(1), 1u);
  EXPECT_EQ(sw_bucket_of_ns(2), 2u);  // 1.86 < 2 <= 3.73
  EXPECT_EQ(sw_bucket_of_ns(3), 2u);
  EXPECT_EQ(sw_bucket_of_ns(4), 3u);  // 3.73 < 4 <= 7.45
  EXPECT_EQ(sw_bucket_of_ns(7), 3u);
  EXPECT_EQ(sw_bucket_of_ns(8), 4u);
  EXPECT_EQ(bucket_of_ns(1), 1u);
}

TEST(BucketOfNsTest, EveryBoundExactly) {
  for (unsigned k = 1; k <= kOverflow - 1; ++k) {
    const std::uint64_t at = floor_bound_ns(k);
    SCOPED_TRACE("k=" + std::to_string(k) + " ns=" + std::to_string(at));
    EXPECT_EQ(expected_bucket(at), k);
    EXPECT_EQ(sw_bucket_of_ns(at), k);
    EXPECT_EQ(bucket_of_ns(at), k);
    EXPECT_EQ(expected_bucket(at + 1), k + 1);
    EXPECT_EQ(sw_bucket_of_ns(at + 1), k + 1);
    EXPECT_EQ(bucket_of_ns(at + 1), k + 1);
  }
}

// The kernel's division-free form picks between two buckets by one comparison: every power of
// two, its neighbours and the values between them (a xorshift walk) land where the definition says.
TEST(BucketOfNsTest, PowersOfTwoAndBetweenMatchTheDefinition) {
  for (unsigned e = 0; e < 64; ++e) {
    const std::uint64_t p = std::uint64_t{1} << e;
    for (std::uint64_t ns : {p - 1, p, p + 1, p + p / 2}) {
      SCOPED_TRACE("ns=" + std::to_string(ns));
      EXPECT_EQ(sw_bucket_of_ns(ns), expected_bucket(ns));
    }
  }
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 200000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const std::uint64_t ns = x >> (x & 63);  // every magnitude
    ASSERT_EQ(sw_bucket_of_ns(ns), expected_bucket(ns)) << "ns=" << ns;
  }
}

TEST(BucketOfNsTest, KnownBounds) {
  // 2^-20 s = 953.67431640625 ns; 2^0 s = 1e9 ns; 2^8 s = 256e9 ns (last finite bucket).
  EXPECT_EQ(sw_bucket_of_ns(953), 10u);
  EXPECT_EQ(sw_bucket_of_ns(954), 11u);
  EXPECT_EQ(sw_bucket_of_ns(1'000'000'000), 30u);
  EXPECT_EQ(sw_bucket_of_ns(1'000'000'001), 31u);
  EXPECT_EQ(sw_bucket_of_ns(500'000'000), 29u);
  EXPECT_EQ(sw_bucket_of_ns(500'000'001), 30u);
  EXPECT_EQ(sw_bucket_of_ns(256'000'000'000), 38u);
  EXPECT_EQ(sw_bucket_of_ns(256'000'000'001), kOverflow);
}

TEST(BucketOfNsTest, HugeValuesOverflow) {
  EXPECT_EQ(sw_bucket_of_ns(1'000'000'000'000), kOverflow);               // 1000 s
  EXPECT_EQ(sw_bucket_of_ns(86'400'000'000'000), kOverflow);              // a day
  EXPECT_EQ(sw_bucket_of_ns((1ULL << 33) * SW_NS_PER_S), kOverflow);      // 2^33 s
  EXPECT_EQ(sw_bucket_of_ns((1ULL << 34) * SW_NS_PER_S - 1), kOverflow);  // just below 2^34 s
  EXPECT_EQ(sw_bucket_of_ns(UINT64_MAX), kOverflow);
  EXPECT_EQ(expected_bucket(UINT64_MAX), kOverflow);
}

TEST(BucketOfNsTest, MatchesDefinitionAcrossRange) {
  // Dense below 10 µs, then a geometric sweep with neighbours up to past 2^8 s.
  for (std::uint64_t ns = 0; ns <= 10'000; ++ns) {
    ASSERT_EQ(sw_bucket_of_ns(ns), expected_bucket(ns)) << ns;
  }
  for (long double x = 10'000; x < 1e15L; x *= 1.01L) {
    const auto ns = static_cast<std::uint64_t>(x);
    for (std::uint64_t v : {ns - 1, ns, ns + 1}) {
      ASSERT_EQ(sw_bucket_of_ns(v), expected_bucket(v)) << v;
    }
  }
}

TEST(BucketUpperSecondsTest, PowersOfTwo) {
  EXPECT_EQ(bucket_upper_seconds(0), std::ldexp(1.0, -30));
  EXPECT_EQ(bucket_upper_seconds(10), std::ldexp(1.0, -20));
  EXPECT_EQ(bucket_upper_seconds(30), 1.0);
  EXPECT_EQ(bucket_upper_seconds(36), 64.0);
  EXPECT_EQ(bucket_upper_seconds(38), 256.0);
}

TEST(ExportedBoundsTest, TwentySevenPowersOfTwo) {
  const std::vector<double> bounds = exported_bounds();
  ASSERT_EQ(bounds.size(), 27u);
  for (size_t i = 0; i < bounds.size(); ++i) {
    EXPECT_EQ(bounds[i], std::ldexp(1.0, static_cast<int>(i) - 20)) << i;
  }
  EXPECT_EQ(bounds.front(), 9.5367431640625e-07);
  EXPECT_EQ(bounds[20], 1.0);
  EXPECT_EQ(bounds.back(), 64.0);
}

TEST(FoldToExportedTest, EmptyIsAllZero) {
  const KernelBuckets kernel{};
  const std::vector<std::uint64_t> out = fold_to_exported(kernel);
  ASSERT_EQ(out.size(), 28u);  // 27 bounds + +Inf
  for (std::uint64_t c : out) EXPECT_EQ(c, 0u);
}

TEST(FoldToExportedTest, EachKernelBucket) {
  // Kernel bucket k alone, count k + 1: where does it land?
  for (unsigned k = 0; k < SW_HIST_BUCKETS; ++k) {
    KernelBuckets kernel{};
    kernel[k] = k + 1;
    const std::vector<std::uint64_t> out = fold_to_exported(kernel);
    ASSERT_EQ(out.size(), 28u);
    size_t want;
    if (k <= 10) {
      want = 0;  // <= 2^-20 s: folds into the first exported bound
    } else if (k <= 36) {
      want = k - 10;  // 2^(k-30) s is exported bound k - 10
    } else {
      want = 27;  // above 2^6 s: +Inf
    }
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i], i == want ? k + 1 : 0u) << "k=" << k << " i=" << i;
    }
  }
}

TEST(FoldToExportedTest, CountsPreserved) {
  KernelBuckets kernel{};
  for (unsigned k = 0; k < SW_HIST_BUCKETS; ++k) kernel[k] = 1000 + k * k;
  const std::vector<std::uint64_t> out = fold_to_exported(kernel);
  const std::uint64_t in_total = std::accumulate(kernel.begin(), kernel.end(), std::uint64_t{0});
  const std::uint64_t out_total = std::accumulate(out.begin(), out.end(), std::uint64_t{0});
  EXPECT_EQ(out_total, in_total);
  std::uint64_t low = 0;
  for (unsigned k = 0; k <= 10; ++k) low += kernel[k];
  EXPECT_EQ(out[0], low);
  EXPECT_EQ(out[1], kernel[11]);
  EXPECT_EQ(out[26], kernel[36]);
  EXPECT_EQ(out[27], kernel[37] + kernel[38] + kernel[39]);
}

TEST(QuantileUpperSecondsTest, Empty) {
  const KernelBuckets kernel{};
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.5), 0.0);
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.99), 0.0);
  EXPECT_EQ(quantile_upper_seconds(kernel, 1.0), 0.0);
}

TEST(QuantileUpperSecondsTest, KnownDistribution) {
  // 100 calls: 50 of <= 2^-10 s (~1 ms), 49 of <= 2^-5 s (~31 ms), one of <= 2^5 s.
  KernelBuckets kernel{};
  kernel[20] = 50;
  kernel[25] = 49;
  kernel[35] = 1;
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.01), std::ldexp(1.0, -10));
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.5), std::ldexp(1.0, -10));  // 50th value
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.51), std::ldexp(1.0, -5));  // 51st value
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.99), std::ldexp(1.0, -5));  // 99th value
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.995), 32.0);                // rank 100
  EXPECT_EQ(quantile_upper_seconds(kernel, 1.0), 32.0);
}

TEST(QuantileUpperSecondsTest, OverflowIsInfinite) {
  KernelBuckets kernel{};
  kernel[30] = 1;
  kernel[kOverflow] = 1;
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.5), 1.0);
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.99), INFINITY);
}

TEST(QuantileUpperSecondsTest, SingleBucket) {
  KernelBuckets kernel{};
  kernel[0] = 7;
  EXPECT_EQ(quantile_upper_seconds(kernel, 0.5), std::ldexp(1.0, -30));
  EXPECT_EQ(quantile_upper_seconds(kernel, 1e-9), std::ldexp(1.0, -30));  // rank rounds up to 1
}

}  // namespace
}  // namespace stallwatch::trace
