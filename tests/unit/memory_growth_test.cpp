// memory_growth (chains/memory_growth.h): a process's live GPU bytes that keep growing with no
// plateau are named; one that grew and then held steady, one too short or too small is not.
#include "chains/memory_growth.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace stallwatch::chains {
namespace {

constexpr std::int64_t kS = 1000000000;
constexpr std::uint64_t kMiB = 1ULL << 20;

using Samples = std::vector<std::pair<std::int64_t, std::uint64_t>>;

// One sample a second for `seconds`, live bytes from `bytes(i)`.
template <typename F>
Samples every_second(int seconds, F bytes) {
  Samples out;
  for (int i = 0; i <= seconds; i++) out.emplace_back(1000 * kS + i * kS, bytes(i));
  return out;
}

TEST(MemoryGrowth, SteadyGrowthIsNamedWithItsRate) {
  auto g = memory_growth(every_second(40, [](int i) { return 100 * kMiB + i * 4 * kMiB; }));
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->from_bytes, 100 * kMiB);
  EXPECT_EQ(g->to_bytes, 260 * kMiB);
  EXPECT_DOUBLE_EQ(g->span_s, 40);
  EXPECT_DOUBLE_EQ(g->bytes_per_s, 4.0 * kMiB);
}

TEST(MemoryGrowth, StepwiseLeakWithFreesBetweenIsNamed) {
  // A service that takes 64 MiB every 10 s and gives back half of it in between.
  auto g = memory_growth(every_second(60, [](int i) {
    return (i / 10) * 64 * kMiB + (i % 2 ? 32 * kMiB : 0);
  }));
  EXPECT_TRUE(g.has_value());
}

TEST(MemoryGrowth, GrowthThenPlateauIsNot) {
  // A caching allocator warming up for 15 s, then steady for 45 s.
  EXPECT_FALSE(memory_growth(every_second(60, [](int i) {
                 return static_cast<std::uint64_t>(std::min(i, 15)) * 64 * kMiB;
               })).has_value());
}

TEST(MemoryGrowth, FlatSawtoothIsNot) {
  EXPECT_FALSE(memory_growth(every_second(60, [](int i) {
                 return 1024 * kMiB + (i % 5) * 100 * kMiB;
               })).has_value());
}

TEST(MemoryGrowth, TooShortTooFewOrTooSmallIsNot) {
  EXPECT_FALSE(memory_growth(every_second(15, [](int i) { return i * 64 * kMiB; })).has_value());
  Samples sparse = {{0, 0}, {30 * kS, 512 * kMiB}};
  EXPECT_FALSE(memory_growth(sparse).has_value());
  EXPECT_FALSE(memory_growth(every_second(40, [](int i) { return 1000 * kMiB + i * 256 * 1024; }))
                   .has_value())
      << "10 MiB over 40 s: under the 16 MiB floor";
  EXPECT_FALSE(memory_growth({}).has_value());
}

}  // namespace
}  // namespace stallwatch::chains
