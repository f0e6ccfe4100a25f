// host/cpu_limit.h: cpu.stat, cpu.max and /proc/PID/cgroup parsing, the v1 cpu mount in
// mountinfo, and the walk from a cgroup to its hierarchy's root over a tree made in a temporary
// directory (v1 and v2 file names). No root.
#include "host/cpu_limit.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace stallwatch::host {
namespace {

namespace fs = std::filesystem;

TEST(CpuStat, ParsesV1AndV2) {
  auto v1 = parse_cpu_stat("nr_periods 120\nnr_throttled 87\nthrottled_time 8700000000\n"
                           "nr_bursts 0\nburst_time 0\n");
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->periods, 120u);
  EXPECT_EQ(v1->throttled_periods, 87u);
  EXPECT_EQ(v1->throttled_ns, 8700000000u);
  auto v2 = parse_cpu_stat("usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 10\n"
                           "nr_throttled 3\nthrottled_usec 21000\nnr_bursts 0\nburst_usec 0\n");
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->throttled_ns, 21000000u);
  EXPECT_FALSE(parse_cpu_stat("usage_usec 5000\n"));  // v2 without the cpu controller
  EXPECT_FALSE(parse_cpu_stat("nr_periods x\nnr_throttled 1\n"));
  EXPECT_FALSE(parse_cpu_stat("nr_periods 1\nnr_throttled 1\nthrottled_usec 99999999999999999\n"));
}

TEST(CpuMax, ParsesLimitAndMax) {
  auto q = parse_cpu_max("30000 100000\n");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->quota_us, 30000u);
  EXPECT_EQ(q->period_us, 100000u);
  auto m = parse_cpu_max("max 100000\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->quota_us, 0u);
  EXPECT_FALSE(parse_cpu_max("30000"));
  EXPECT_FALSE(parse_cpu_max("30000 0"));
  EXPECT_FALSE(parse_cpu_max("-1 100000"));
}

TEST(CpuCgroupPath, FindsTheControllersLine) {
  const std::string hybrid = "9:name=systemd:/x\n2:cpuacct:/a\n1:cpu,cpuacct:/kubepods/pod1/c1\n"
                             "0::/unified/path\n";
  EXPECT_EQ(cpu_cgroup_path(hybrid, true), "/kubepods/pod1/c1");
  EXPECT_EQ(cpu_cgroup_path(hybrid, false), "/unified/path");
  EXPECT_EQ(cpu_cgroup_path("3:cpuset:/\n1:cpuacct:/a\n", true), std::nullopt);
  // Outside the reader's cgroup namespace, and hostile shapes: refused.
  EXPECT_EQ(cpu_cgroup_path("0::/../../other\n", false), std::nullopt);
  EXPECT_EQ(cpu_cgroup_path("0::relative\n", false), std::nullopt);
  EXPECT_EQ(cpu_cgroup_path("0::/a//b\n", false), std::nullopt);
  EXPECT_EQ(cpu_cgroup_path("0::/\n", false), "/");
}

TEST(CpuMount, FindsTheV1CpuHierarchy) {
  const std::string mi =
      "30 24 0:26 / /sys/fs/cgroup/unified rw,relatime shared:4 - cgroup2 cgroup2 rw\n"
      "31 24 0:27 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
      "32 24 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup "
      "rw,cpu,cpuacct\n";
  EXPECT_EQ(find_cgroup1_cpu_mount(mi), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(find_cgroup1_cpu_mount(
                "30 24 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"),
            std::nullopt);
}

class CpuLimitTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("stallwatch-cpu-limit-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
};

TEST_F(CpuLimitTree, V2SumsLimitedLevelsAndKeepsTheTightest) {
  write("cpu.max", "max 100000\n");
  write("kubepods/cpu.max", "max 100000\n");
  write("kubepods/pod/cpu.max", "400000 100000\n");
  write("kubepods/pod/cpu.stat", "nr_periods 50\nnr_throttled 2\nthrottled_usec 1000\n");
  write("kubepods/pod/c/cpu.max", "200000 100000\n");
  write("kubepods/pod/c/cpu.stat", "nr_periods 40\nnr_throttled 30\nthrottled_usec 900000\n");
  const CpuLimitTotals l = read_cpu_limit(root_.string(), "/kubepods/pod/c", false);
  EXPECT_TRUE(l.known);
  EXPECT_FALSE(l.v1);
  EXPECT_DOUBLE_EQ(l.limit_cores, 2.0);
  EXPECT_EQ(l.limited_at, "/kubepods/pod/c");
  EXPECT_EQ(l.limited_dir, root_.string() + "/kubepods/pod/c");
  EXPECT_EQ(l.periods, 90u);
  EXPECT_EQ(l.throttled_periods, 32u);
  EXPECT_EQ(l.throttled_ns, 901000000u);
}

TEST_F(CpuLimitTree, V1QuotaFilesAndNoLimit) {
  write("job/cpu.cfs_quota_us", "30000\n");
  write("job/cpu.cfs_period_us", "100000\n");
  write("job/cpu.stat", "nr_periods 120\nnr_throttled 87\nthrottled_time 8700000000\n");
  write("free/cpu.cfs_quota_us", "-1\n");
  write("free/cpu.cfs_period_us", "100000\n");
  const CpuLimitTotals l = read_cpu_limit(root_.string(), "/job", true);
  EXPECT_TRUE(l.known);
  EXPECT_DOUBLE_EQ(l.limit_cores, 0.3);
  EXPECT_EQ(l.throttled_periods, 87u);
  const CpuLimitTotals f = read_cpu_limit(root_.string(), "/free", true);
  EXPECT_TRUE(f.known);
  EXPECT_FALSE(f.limited());
  EXPECT_FALSE(read_cpu_limit(root_.string(), "/gone", true).known);
  EXPECT_FALSE(read_cpu_limit(root_.string(), "/job/../free", true).known);
}

}  // namespace
}  // namespace stallwatch::host
