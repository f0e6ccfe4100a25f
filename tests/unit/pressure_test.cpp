// Unit tests for exporter/host/pressure.h: PSI text parsing (cgroup v2 and /proc/pressure
// formats), and read_pressure on a directory of fake *.pressure files and on this host's cgroup2
// root.
#include "host/pressure.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "identity/cgroup_resolver.h"

namespace stallwatch::host {
namespace {

namespace fs = std::filesystem;
using Totals = std::pair<std::uint64_t, std::uint64_t>;

TEST(ParsePressure, SomeAndFullMicrosecondsToNanoseconds) {
  const auto p = parse_pressure(
      "some avg10=0.00 avg60=0.28 avg300=2.05 total=363063113\n"
      "full avg10=0.09 avg60=0.43 avg300=0.69 total=38658091\n");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (Totals{363'063'113'000ULL, 38'658'091'000ULL}));
}

TEST(ParsePressure, ZeroTotals) {
  const auto p = parse_pressure(
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (Totals{0, 0}));
}

TEST(ParsePressure, OnlySomeLineGivesFullZero) {
  // cpu.pressure before Linux 5.13 has no `full` line.
  const auto p = parse_pressure("some avg10=1.50 avg60=0.75 avg300=0.20 total=1234567\n");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (Totals{1'234'567'000ULL, 0}));
}

TEST(ParsePressure, NoTrailingNewlineAndLinesInAnyOrder) {
  const auto p = parse_pressure(
      "full avg10=0.00 avg60=0.00 avg300=0.00 total=2\n"
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=5");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (Totals{5000, 2000}));
}

TEST(ParsePressure, LargestTotalThatFitsInNanoseconds) {
  const std::uint64_t max_us = UINT64_MAX / 1000;
  const auto p = parse_pressure(
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + std::to_string(max_us) + "\n");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->first, max_us * 1000);
  EXPECT_FALSE(parse_pressure(
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + std::to_string(max_us + 1) + "\n"));
}

TEST(ParsePressure, MalformedIsNullopt) {
  for (const char* text : {
           "",
           "\n",
           "full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",  // no `some`
           "some avg10=0.00 avg60=0.00 avg300=0.00\n",          // no total
           "some avg10=0.00 avg60=0.00 avg300=0.00 total=\n",
           "some avg10=0.00 avg60=0.00 avg300=0.00 total=abc\n",
           "some avg10=0.00 avg60=0.00 avg300=0.00 total=-5\n",
           "some avg10=0.00 avg60=0.00 avg300=0.00 total=12x\n",
           "some avg10=0.00 avg60=0.00 avg300=0.00 subtotal=12\n",
           "some avg10=0.00 avg60=0.00 avg300=0.00 total=99999999999999999999999\n",
           "some avg10=0.00 total=1\nsome avg10=0.00 total=2\n",  // `some` twice
           "some avg10=0.00 total=1\nhalf avg10=0.00 total=2\n",  // unknown line
           "cpu 123 456\n",
           "Some avg10=0.00 avg60=0.00 avg300=0.00 total=1\n",
       }) {
    EXPECT_FALSE(parse_pressure(text)) << '"' << text << '"';
  }
}

class ReadPressureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "pressure_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(ReadPressureTest, AllThreeFiles) {
  write("cpu.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=250000\n");
  write("memory.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=2\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n");
  write("io.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=30\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=20\n");
  const PressureTotals p = read_pressure(dir_.string());
  EXPECT_TRUE(p.known);
  EXPECT_EQ(p.cpu_some_ns, 1'000'000'000u);
  EXPECT_EQ(p.cpu_full_ns, 250'000'000u);
  EXPECT_EQ(p.memory_some_ns, 2000u);
  EXPECT_EQ(p.memory_full_ns, 1000u);
  EXPECT_EQ(p.io_some_ns, 30'000u);
  EXPECT_EQ(p.io_full_ns, 20'000u);
  // A trailing slash names the same directory.
  const PressureTotals q = read_pressure(dir_.string() + "/");
  EXPECT_TRUE(q.known);
  EXPECT_EQ(q.io_full_ns, 20'000u);
}

TEST_F(ReadPressureTest, NoFilesIsUnknown) {
  const PressureTotals p = read_pressure(dir_.string());
  EXPECT_FALSE(p.known);
  EXPECT_EQ(p.cpu_some_ns + p.memory_some_ns + p.io_some_ns, 0u);
  EXPECT_FALSE(read_pressure((dir_ / "no-such-cgroup").string()).known);
  EXPECT_FALSE(read_pressure("").known);
}

TEST_F(ReadPressureTest, OnlySomeCpuFileAndMissingOthers) {
  write("cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n");
  const PressureTotals p = read_pressure(dir_.string());
  EXPECT_TRUE(p.known);
  EXPECT_EQ(p.cpu_some_ns, 7000u);
  EXPECT_EQ(p.cpu_full_ns, 0u);
  EXPECT_EQ(p.memory_some_ns, 0u);
  EXPECT_EQ(p.io_some_ns, 0u);
}

TEST_F(ReadPressureTest, MalformedFileLeavesItsFieldsZero) {
  write("cpu.pressure", "garbage\n");
  write("memory.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=3\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=4\n");
  const PressureTotals p = read_pressure(dir_.string());
  EXPECT_TRUE(p.known);
  EXPECT_EQ(p.cpu_some_ns, 0u);
  EXPECT_EQ(p.memory_some_ns, 3000u);
  EXPECT_EQ(p.memory_full_ns, 4000u);
}

TEST_F(ReadPressureTest, OnlyMalformedFilesIsUnknown) {
  write("cpu.pressure", "");
  write("memory.pressure", "some total=x\n");
  write("io.pressure", std::string(100'000, 's'));  // far larger than a pressure file
  EXPECT_FALSE(read_pressure(dir_.string()).known);
}

TEST_F(ReadPressureTest, DirectoryInPlaceOfFileIsUnknown) {
  fs::create_directory(dir_ / "cpu.pressure");
  EXPECT_FALSE(read_pressure(dir_.string()).known);
}

// This host's cgroup2 root (/sys/fs/cgroup on pure v2, /sys/fs/cgroup/unified on hybrid hosts)
// is read as known when the kernel exposes PSI there.
TEST(ReadPressureHost, Cgroup2RootIsKnownWhenItHasPressureFiles) {
  std::string root;
  for (const std::string& candidate :
       {identity::find_cgroup2_mount().value_or(""), std::string("/sys/fs/cgroup/unified"),
        std::string("/sys/fs/cgroup")}) {
    if (!candidate.empty() && access((candidate + "/cpu.pressure").c_str(), R_OK) == 0) {
      root = candidate;
      break;
    }
  }
  if (root.empty()) GTEST_SKIP() << "no cgroup2 root with cpu.pressure on this host";
  std::ifstream probe(root + "/cpu.pressure");
  std::string line;
  if (!std::getline(probe, line)) {
    GTEST_SKIP() << root << "/cpu.pressure cannot be read (PSI disabled, psi=0?)";
  }
  const PressureTotals p = read_pressure(root);
  EXPECT_TRUE(p.known) << root;
}

}  // namespace
}  // namespace stallwatch::host
