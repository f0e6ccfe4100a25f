// host/procfs.h and host/host_sampler.h over the fixture trees tests/fixtures/procfs and
// tests/fixtures/sysfs (what `run --path.procfs/--path.sysfs` points at), and over a temporary
// tree for what fixtures cannot hold (an oversized comm, a vanished process).
#include "host/procfs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "host/host_sampler.h"

namespace stallwatch::host {
namespace {

namespace fs = std::filesystem;

const std::string kProc = std::string(FIXTURES_DIR) + "/procfs";
const std::string kSys = std::string(FIXTURES_DIR) + "/sysfs";

TEST(Procfs, ProcessNameAndStartTime) {
  Procfs p(kProc, kSys);
  EXPECT_TRUE(p.pid_exists(4242));
  EXPECT_FALSE(p.pid_exists(4243));
  EXPECT_EQ(p.comm(4242), "python3");
  EXPECT_EQ(p.boot_unix_s(), 1795400000);
  const long ticks = sysconf(_SC_CLK_TCK);
  EXPECT_EQ(p.start_unix_ns(4242), 1795400000LL * 1000000000LL + 250000LL * (1000000000LL / ticks));
  EXPECT_EQ(p.comm(4243), "");
  EXPECT_EQ(p.start_unix_ns(4243), 0);
}

TEST(Procfs, HostileNameDoesNotShiftTheStatFields) {
  Procfs p(kProc, kSys);
  EXPECT_EQ(p.comm(77), "x) y (z");
  const long ticks = sysconf(_SC_CLK_TCK);
  EXPECT_EQ(p.start_unix_ns(77), 1795400000LL * 1000000000LL + 100LL * (1000000000LL / ticks));
}

TEST(Procfs, BlockDeviceNames) {
  Procfs p(kProc, kSys);
  EXPECT_EQ(p.block_device(259, 0), "nvme0n1");
  EXPECT_EQ(p.block_device(8, 16), "8:16") << "no DEVNAME: the numbers";
  EXPECT_EQ(p.block_device(1, 2), "1:2") << "no such device";
}

TEST(Procfs, ReadsAreBounded) {
  const fs::path root = fs::temp_directory_path() / ("procfs_test." + std::to_string(getpid()));
  fs::create_directories(root / "9");
  std::ofstream(root / "9" / "comm") << std::string(100000, 'A') << "\n";
  std::ofstream(root / "9" / "stat") << "9 (" << std::string(100000, ')') << ") S";
  std::ofstream(root / "stat") << "btime 1\n";
  Procfs p(root.string(), kSys);
  EXPECT_EQ(p.comm(9), std::string(64, 'A'));
  EXPECT_EQ(p.start_unix_ns(9), 0) << "a stat cut by the bound has no field 22";
  EXPECT_EQ(Procfs::read_bounded((root / "9" / "comm").string(), 10).size(), 10u);
  EXPECT_EQ(Procfs::read_bounded((root / "nope").string(), 10), "");
  // Read in growing chunks: whole below the bound, cut exactly at it past a chunk boundary.
  std::string big;
  for (int i = 0; i < 20000; ++i) big += std::to_string(i) + "\n";
  std::ofstream(root / "big") << big;
  EXPECT_EQ(Procfs::read_bounded((root / "big").string(), 1 << 20), big);
  EXPECT_EQ(Procfs::read_bounded((root / "big").string(), 12289), big.substr(0, 12289));
  EXPECT_EQ(Procfs::read_bounded((root / "big").string(), big.size()), big);
  EXPECT_EQ(Procfs::read_bounded(root.string(), 100), "") << "a directory reads as nothing";
  fs::remove_all(root);
}

TEST(HostSampler, ReadsMemoryLoadAndCpuFromTheRoot) {
  Procfs p(kProc, kSys);
  HostSampler s(p);
  HostContext h = s.sample();
  EXPECT_DOUBLE_EQ(h.mem_used, 0.75);
  EXPECT_DOUBLE_EQ(h.load1, 3.10);
  EXPECT_EQ(h.swap_used_bytes, 500000LL * 1024);
  EXPECT_DOUBLE_EQ(h.cpu_busy, -1) << "the first sample has no interval";
  EXPECT_GT(h.cpus, 0);
  // The same counters again: no time passed, still unknown.
  EXPECT_DOUBLE_EQ(s.sample().cpu_busy, -1);
}

TEST(Procfs, CpusAllowed) {
  Procfs p(kProc, kSys);
  EXPECT_EQ(p.cpus_allowed(4242), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(p.cpus_allowed(77), std::vector<int>{}) << "a range past the bound is refused whole";
  EXPECT_EQ(p.cpus_allowed(4243), std::vector<int>{}) << "no such process";
}

// Per-CPU steal and interrupt shares between two samples (tests/fixtures/procfs-steal).
std::vector<CpuStolen> stolen_between(const std::string& first, const std::string& second) {
  const fs::path root = fs::temp_directory_path() / ("procfs_steal." + std::to_string(getpid()));
  fs::create_directories(root);
  const std::string dir = std::string(FIXTURES_DIR) + "/procfs-steal/";
  Procfs p(root.string(), kSys);
  HostSampler s(p);
  fs::copy_file(dir + first, root / "stat", fs::copy_options::overwrite_existing);
  EXPECT_TRUE(s.sample().cpu_stolen.empty()) << "the first sample has no interval";
  fs::copy_file(dir + second, root / "stat", fs::copy_options::overwrite_existing);
  std::vector<CpuStolen> out = s.sample().cpu_stolen;
  fs::remove_all(root);
  return out;
}

TEST(HostSampler, PerCpuStealAndInterruptShares) {
  auto c = stolen_between("t0/stat", "t1/stat");
  ASSERT_EQ(c.size(), 4u);
  for (int i = 0; i < 4; i++) EXPECT_EQ(c[static_cast<size_t>(i)].cpu, i);
  EXPECT_DOUBLE_EQ(c[0].steal, 0);
  EXPECT_DOUBLE_EQ(c[0].irq, 0.12);
  EXPECT_DOUBLE_EQ(c[1].irq, 0.01);
  EXPECT_DOUBLE_EQ(c[3].steal, 0.30);
  EXPECT_DOUBLE_EQ(c[3].irq, 0);
}

// Issue #50: the softirq raised most on each CPU between two samples, from /proc/softirqs (the
// kernel's format: a CPUn header, one line per vector). CPU 0 took 9,000 NET_RX of 10,000; CPU 1
// mostly timers; CPU 2's counters went backwards (a hot-unplugged CPU): nothing named.
TEST(HostSampler, TheSoftirqRaisedMostOnEachCpu) {
  const fs::path root = fs::temp_directory_path() / ("procfs_softirq." + std::to_string(getpid()));
  fs::create_directories(root);
  const std::string dir = std::string(FIXTURES_DIR) + "/procfs-steal/";
  auto put = [&](const std::string& softirqs) { std::ofstream(root / "softirqs") << softirqs; };
  Procfs p(root.string(), kSys);
  HostSampler s(p);
  fs::copy_file(dir + "t0/stat", root / "stat", fs::copy_options::overwrite_existing);
  put("                    CPU0       CPU1       CPU2       CPU3\n"
      "          HI:          0          0          0          0\n"
      "       TIMER:       1000       1000        500          7\n"
      "      NET_RX:        100        100        500          7\n"
      "         RCU:         50         50        500          7\n");
  s.sample();
  fs::copy_file(dir + "t1/stat", root / "stat", fs::copy_options::overwrite_existing);
  put("                    CPU0       CPU1       CPU2       CPU3\n"
      "          HI:          0          0          0          0\n"
      "       TIMER:       1900       1900        400          7\n"
      "      NET_RX:       9100        150        400          7\n"
      "         RCU:        150        150        400          7\n");
  const auto c = s.sample().cpu_stolen;
  fs::remove_all(root);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].top_softirq, "NET_RX");
  EXPECT_DOUBLE_EQ(c[0].top_softirq_share, 0.9);
  EXPECT_EQ(c[1].top_softirq, "TIMER");
  EXPECT_DOUBLE_EQ(c[1].top_softirq_share, 900.0 / 1050.0);
  EXPECT_EQ(c[2].top_softirq, "") << "counters that went backwards name nothing";
  EXPECT_EQ(c[3].top_softirq, "") << "nothing raised";
}

TEST(HostSampler, SoftirqsParseBoundedAndRefuseAForeignHeader) {
  auto m = parse_softirqs("  CPU0 CPU4\n NET_RX: 5 6\n \x1b[31mX: 1 2\n");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[4]["NET_RX"], 6u);
  EXPECT_EQ(m[0].count("\\x1b[31mX"), 1u) << "a name is escaped";
  EXPECT_TRUE(parse_softirqs("garbage header\nNET_RX: 1\n").empty());
  EXPECT_TRUE(parse_softirqs("").empty());
}

TEST(HostSampler, RecordedCalmVmHasNoSteal) {
  auto c = stolen_between("t0/stat.recorded", "t1/stat.recorded");
  ASSERT_EQ(c.size(), 2u);
  for (const auto& x : c) EXPECT_DOUBLE_EQ(x.total(), 0) << "cpu" << x.cpu;
}

TEST(HostSampler, MissingFilesLeaveValuesUnknown) {
  Procfs p("/nonexistent-procfs", kSys);
  HostContext h = HostSampler(p).sample();
  EXPECT_DOUBLE_EQ(h.mem_used, -1);
  EXPECT_DOUBLE_EQ(h.load1, -1);
  EXPECT_EQ(h.swap_used_bytes, -1);
}

}  // namespace
}  // namespace stallwatch::host
