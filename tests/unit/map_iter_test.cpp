// Unit tier: the eviction count of an LRU map (trace/map_iter.h) from its counters and its
// live keys, including readings taken while operations were in flight.
#include "trace/map_iter.h"

#include <gtest/gtest.h>

namespace stallwatch::trace {
namespace {

TEST(EvictionCountTest, NothingDroppedReadsZero) {
  EvictionCount e;
  EXPECT_EQ(e.update(0, 0, 0), 0u);
  EXPECT_EQ(e.update(10, 4, 6), 0u);
  EXPECT_EQ(e.update(100, 90, 10), 0u);
}

TEST(EvictionCountTest, DropsCountOnceTwoReadingsAgree) {
  EvictionCount e;
  EXPECT_EQ(e.update(5000, 0, 4096), 0u);  // a first reading alone is not believed
  EXPECT_EQ(e.update(5001, 0, 4096), 904u);
  EXPECT_EQ(e.update(5001, 1, 4095), 905u);
  EXPECT_EQ(e.update(5001, 1, 4095), 905u);
}

TEST(EvictionCountTest, ADeleteNotYetCountedIsNotADrop) {
  EvictionCount e;
  EXPECT_EQ(e.update(10, 0, 10), 0u);
  // The entry is gone but its delete is not yet counted: one reading says 1 dropped...
  EXPECT_EQ(e.update(10, 0, 9), 0u);
  // ...the next sees the delete counted: nothing was dropped.
  EXPECT_EQ(e.update(10, 1, 9), 0u);
  EXPECT_EQ(e.update(10, 1, 9), 0u);
}

TEST(EvictionCountTest, AnInsertNotYetCountedNeverLowersTheTotal) {
  EvictionCount e;
  e.update(20, 0, 10);
  EXPECT_EQ(e.update(20, 0, 10), 10u);
  EXPECT_EQ(e.update(20, 0, 11), 10u);  // visible, not yet counted: reads 9
  EXPECT_EQ(e.update(21, 0, 11), 10u);
}

}  // namespace
}  // namespace stallwatch::trace
