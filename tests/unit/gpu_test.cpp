// The GPU readers (issue #39): Xid lines and /dev/kmsg records (the driver's spellings, hostile
// and malformed lines), PCI addresses, clock reasons; NVML loaded from the stand-in
// libnvidia-ml.so.1 (tests/mock/mock_nvml.c), whose GPUs a file lists; the monitor's sampled
// totals and its kernel log follower, fed through a FIFO standing in for /dev/kmsg.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "host/gpu_monitor.h"
#include "host/nvml.h"
#include "host/xid.h"

namespace stallwatch::host {
namespace {

using namespace std::chrono_literals;

TEST(Xid, ParsesTheDriversLines) {
  auto x = parse_xid("NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen "
                     "off the bus.");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->code, 79);
  EXPECT_EQ(x->pid, 4242);
  // One spelling everywhere (issue #50): NVML's and DCGM's, not the kernel line's.
  EXPECT_EQ(x->pci, "00000000:3B:00.0");
  EXPECT_TRUE(x->address_known);
  EXPECT_EQ(x->address, (PciAddress{0, 0x3b, 0}));
  EXPECT_EQ(x->text, "pid=4242, name=python3, GPU has fallen off the bus.");
  // No PID, an engine exception; an older driver without "PCI:".
  x = parse_xid("NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 0)");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->code, 13);
  EXPECT_EQ(x->pid, 0);
  x = parse_xid("NVRM: Xid (0000:c1:00): 48, An uncorrectable double bit error");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->address, (PciAddress{0, 0xc1, 0}));
  EXPECT_EQ(xid_info(79).action, XidAction::kReset);
  EXPECT_EQ(xid_info(31).action, XidAction::kApplication);
  EXPECT_EQ(xid_info(63).action, XidAction::kCheck);
  EXPECT_EQ(xid_info(4321).action, XidAction::kUnknown);
  EXPECT_EQ(xid_action_name(XidAction::kReset), "reset");
}

TEST(Xid, RefusesWhatIsNotOneAndBoundsWhatIs) {
  EXPECT_FALSE(parse_xid(""));
  EXPECT_FALSE(parse_xid("usb 1-1: new high-speed USB device"));
  EXPECT_FALSE(parse_xid("someone wrote: NVRM: Xid (PCI:0000:3b:00): 79, quoted"));
  EXPECT_FALSE(parse_xid("NVRM: Xid (PCI:0000:3b:00: 79"));         // no ")"
  EXPECT_FALSE(parse_xid("NVRM: Xid (PCI:0000:3b:00): , nothing"));  // no code
  EXPECT_FALSE(parse_xid("NVRM: Xid (PCI:0000:3b:00): 123456, too long"));
  EXPECT_FALSE(parse_xid("NVRM: Xid (" + std::string(200, 'a') + "): 79, x"));
  // Only the driver's full format (issue #49): a process named "NVRM: Xid (): 8" (a whole
  // 15-byte comm) that segfaults makes the kernel log this, which is no Xid; nor is a line
  // without a PCI address or without the comma after its code.
  EXPECT_FALSE(parse_xid("NVRM: Xid (): 8[4242]: segfault at 0 ip 0000000000401000 sp "
                         "00007ffd00000000 error 4 in a.out[401000+1000]"));
  EXPECT_FALSE(parse_xid("NVRM: Xid (PCI:zz\x1b[31m): 31, pid=1, x"));
  EXPECT_FALSE(parse_xid("NVRM: Xid (PCI:0000:3b:00): 8[4242]: segfault at 0"));
  EXPECT_FALSE(parse_xid("NVRM: Xid (PCI:0000:3b:00): 8"));
  // A hostile rest: control bytes, an ANSI sequence, a bidi override, 10 KB: one escaped line,
  // cut.
  const std::string hostile = "NVRM: Xid (PCI:0000:3b:00): 31, pid=1, \n\x1b[2J$(id)\xe2\x80\xae" +
                              std::string(10000, 'x');
  auto x = parse_xid(hostile);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->code, 31);
  EXPECT_TRUE(x->address_known);
  EXPECT_EQ(x->pci.find('\x1b'), std::string::npos);
  EXPECT_EQ(x->text.find('\x1b'), std::string::npos);
  EXPECT_EQ(x->text.find('\n'), std::string::npos);
  EXPECT_EQ(x->text.find("\xe2\x80\xae"), std::string::npos);
  EXPECT_LE(x->text.size(), 4 * kMaxXidText);  // escaped bytes take up to 4 characters
}

TEST(Xid, KmsgRecords) {
  auto r = parse_kmsg_record("4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, x\n DEVICE=+pci\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->facility, 0);
  EXPECT_EQ(r->level, 4);
  EXPECT_EQ(r->seq, 1234u);
  EXPECT_EQ(r->ts_us, 5678901u);
  EXPECT_EQ(r->message, "NVRM: Xid (PCI:0000:3b:00): 79, x");
  r = parse_kmsg_record("12,7,1,-,caller=T1;written by root");  // facility 1: a user's write
  ASSERT_TRUE(r);
  EXPECT_EQ(r->facility, 1);
  EXPECT_EQ(r->message, "written by root");
  EXPECT_FALSE(parse_kmsg_record("no header"));
  EXPECT_FALSE(parse_kmsg_record("x,1,2,-;text"));
  EXPECT_FALSE(parse_kmsg_record("1,2;text"));
}

TEST(Gpu, PciAddressesInEverySpelling) {
  PciAddress a, b, c;
  ASSERT_TRUE(parse_pci_address("00000000:3B:00.0", a));
  ASSERT_TRUE(parse_pci_address("0000:3b:00", b));
  ASSERT_TRUE(parse_pci_address("0000:3b:00.0", c));
  EXPECT_EQ(a, b);
  EXPECT_EQ(b, c);
  EXPECT_FALSE(parse_pci_address("", a));
  EXPECT_FALSE(parse_pci_address("0000:3b", a));
  EXPECT_FALSE(parse_pci_address("0000:3b:00x", a));
  EXPECT_FALSE(parse_pci_address("0000:1ff:00", a));
  EXPECT_EQ(pci_text(a), "00000000:3B:00.0");
  ASSERT_TRUE(parse_pci_address("10000:ff:1f.0", a));  // a second PCI segment (VMD, large hosts)
  EXPECT_EQ(pci_text(a), "00010000:FF:1F.0");
}

TEST(Gpu, ClockReasons) {
  EXPECT_EQ(reason_names(0), "");
  EXPECT_EQ(reason_names(0x4 | 0x40), "sw_power_cap, hw_thermal");
  EXPECT_EQ(reason_names(0x1 | 0x10000), "gpu_idle, 0x10000");
  EXPECT_EQ(held_reasons(0x1 | 0x100), 0u);  // idle and the display clock hold nothing
  EXPECT_EQ(held_reasons(0x1 | 0x4), 0x4u);
}

// The stand-in NVML's GPUs, rewritten whole (write, rename) as a test would on a live daemon.
class StandIn : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/nvml-" + std::to_string(getpid()) + ".state";
    ::setenv("MOCK_NVML_STATE", path_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("MOCK_NVML_STATE");
    ::unlink(path_.c_str());
  }
  void write(const std::string& text) {
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << text;
    ASSERT_EQ(::rename(tmp.c_str(), path_.c_str()), 0);
  }
  std::string path_;
};

TEST_F(StandIn, ReadsEveryGpuAndSaysWhyNot) {
  // Absent: one line that names the file, never a crash.
  auto missing = Nvml::open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  // Issue #49: a library others can write runs their code as root: refused before dlopen.
  {
    char dir[] = "/tmp/sw-nvml-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    const std::string copy = std::string(dir) + "/libnvidia-ml.so.1";
    std::filesystem::copy_file(MOCK_NVML_PATH, copy);
    ::chmod(copy.c_str(), 0666);
    auto writable = Nvml::open(copy);
    ASSERT_FALSE(writable);
    EXPECT_EQ(writable.error().message,
              "NVML: --nvml-library " + copy +
                  " is writable by group or others (mode 0666); stallwatch runs its code as "
                  "root: chmod go-w it; no GPU clocks, throttle reasons or gpu_throttle chains");
    std::filesystem::remove_all(dir);
  }
  // Not NVML: a library without nvmlInit_v2.
  auto wrong = Nvml::open("libz.so.1");
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("does not export nvmlInit_v2"), std::string::npos)
      << wrong.error().message;
  // No driver: nvmlInit_v2 refuses (the state file is not there yet).
  auto nodriver = Nvml::open(MOCK_NVML_PATH);
  ASSERT_FALSE(nodriver);
  EXPECT_NE(nodriver.error().message.find("Driver Not Loaded (9)"), std::string::npos)
      << nodriver.error().message;

  write("gpu minor=0 uuid=GPU-aaaa bus=00000000:3B:00.0 clock=1200 max=1980 reasons=0x44 temp=87 "
        "power_mw=650500 limit_mw=700000 pids=11,12\n"
        "gpu minor=1 fail=15\n");
  auto n = Nvml::open(MOCK_NVML_PATH);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ((*n)->driver(), "580.00.00 (stand-in)");
  EXPECT_TRUE((*n)->missing().empty());
  auto gpus = (*n)->read();
  ASSERT_EQ(gpus.size(), 2u);
  const GpuReading& g = gpus[0];
  EXPECT_EQ(g.uuid, "GPU-aaaa");
  EXPECT_EQ(g.bus_id, "00000000:3B:00.0");
  EXPECT_TRUE(g.minor_known);
  EXPECT_EQ(g.minor, 0u);
  EXPECT_TRUE(g.clocks_known);
  EXPECT_EQ(g.sm_clock_mhz, 1200u);
  EXPECT_EQ(g.sm_clock_max_mhz, 1980u);
  EXPECT_EQ(g.reasons, 0x44u);
  EXPECT_EQ(g.temperature_c, 87u);
  EXPECT_DOUBLE_EQ(g.power_w, 650.5);
  EXPECT_DOUBLE_EQ(g.power_limit_w, 700);
  EXPECT_EQ(g.pids, (std::vector<int>{11, 12}));
  EXPECT_TRUE(g.error.empty()) << g.error;
  // A GPU that is lost: said, not fatal.
  EXPECT_EQ(gpus[1].index, 1u);
  EXPECT_FALSE(gpus[1].clocks_known);
  EXPECT_NE(gpus[1].error.find("GPU is lost (15)"), std::string::npos) << gpus[1].error;
  // More compute processes than the first buffer holds.
  std::string pids;
  for (int i = 1; i <= 40; ++i) pids += (i > 1 ? "," : "") + std::to_string(1000 + i);
  write("gpu pids=" + pids + "\n");
  gpus = (*n)->read();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].pids.size(), 40u);
}

TEST_F(StandIn, MonitorSumsHeldTimeAndFollowsXidLines) {
  write("gpu minor=0 bus=00000000:3B:00.0 clock=1980 max=1980 reasons=0x0 pids=77\n");
  const std::string fifo = ::testing::TempDir() + "/kmsg-" + std::to_string(getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The writer end stays open for the monitor's life (a closed FIFO reads as end of file).
  const int writer = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  Procfs fs;
  GpuMonitorOptions o;
  o.nvml_library = MOCK_NVML_PATH;
  o.interval = 20ms;
  o.kmsg = fifo;
  o.max_xid_per_second = 3;
  {
    GpuMonitor m(o, fs);
    m.start();
    GpuSnapshot s0 = m.snapshot();
    ASSERT_TRUE(s0.nvml) << s0.nvml_status;
    ASSERT_TRUE(s0.kmsg) << s0.kmsg_status;
    ASSERT_EQ(s0.gpus.size(), 1u);
    std::this_thread::sleep_for(300ms);
    write("gpu minor=0 bus=00000000:3B:00.0 clock=1200 max=1980 reasons=0x4 pids=77\n");
    std::this_thread::sleep_for(600ms);
    write("gpu minor=0 bus=00000000:3B:00.0 clock=1980 max=1980 reasons=0x0 pids=77\n");
    std::this_thread::sleep_for(300ms);
    GpuSnapshot s = m.snapshot();
    const GpuTotals& t = s.gpus[0];
    // ~600 ms held of ~1.2 s: the sampler's own timing on a shared VM is loose, the sums exact.
    EXPECT_GT(t.held_ns, 300'000'000u);
    EXPECT_LT(t.held_ns, 1'000'000'000u);
    EXPECT_EQ(t.reason_ns[2], t.held_ns);  // sw_power_cap alone
    EXPECT_GT(t.sampled_ns, t.held_ns);
    EXPECT_NEAR(t.held_clock_mhz_ns / static_cast<double>(t.held_ns), 1200, 1);
    EXPECT_EQ(s.stale, false);

    // Xid records as the kernel hands them (one per read), the rate bound, a hostile line.
    for (const std::string rec :
         {"3,100,1000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=77, name=python3, GPU has fallen off "
          "the bus.\n",
          "3,101,1001,-;an ordinary line\n",
          "3,102,1002,-;NVRM: Xid (PCI:0000:5e:00): 13, \x1b[31m$(reboot)\n",
          "3,103,1003,-;NVRM: Xid (PCI:0000:3b:00): 79, again\n",
          "3,104,1004,-;NVRM: Xid (PCI:0000:3b:00): 79, over the bound\n"}) {
      ASSERT_EQ(::write(writer, rec.data(), rec.size()), static_cast<ssize_t>(rec.size()));
    }
    GpuSnapshot x;
    for (int i = 0; i < 100; ++i) {
      x = m.snapshot();
      if (x.xids.size() + x.xid_dropped >= 4) break;
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(x.xids.size(), 3u);
    EXPECT_EQ(x.xid_dropped, 1u);
    EXPECT_EQ(x.xids[0].code, 79);
    EXPECT_EQ(x.xids[0].gpu, 0);
    EXPECT_EQ(x.xids[0].pid, 77);
    EXPECT_EQ(x.xids[0].seq, 1u);
    EXPECT_EQ(x.xids[1].gpu, -1);  // an address NVML does not report
    EXPECT_EQ(x.xids[1].text.find('\x1b'), std::string::npos);
    EXPECT_EQ(x.xids[2].seq, 3u);
    ASSERT_EQ(x.xid_counts.size(), 2u);
    EXPECT_EQ(x.xid_counts[0].code, 79);
    EXPECT_EQ(x.xid_counts[0].count, 2u);
    EXPECT_EQ(x.xid_counts[1].gpu, -1);

    // The process-to-GPU mapping: NVML's compute processes.
    m.map_processes(x, {77, 78});
    ASSERT_EQ(x.process_gpus.size(), 1u);
    EXPECT_EQ(x.process_gpus[77], (std::vector<unsigned>{0}));
  }
  ::close(writer);
  ::unlink(fifo.c_str());
}

TEST_F(StandIn, AGpuThatStopsAnsweringMakesReadingsStaleNotTheCaller) {
  write("gpu minor=0 clock=1980 max=1980\n");
  Procfs fs;
  GpuMonitorOptions o;
  o.nvml_library = MOCK_NVML_PATH;
  o.interval = 20ms;
  o.stale_after = 200ms;
  o.xid = false;
  GpuMonitor m(o, fs);
  m.start();
  write("gpu minor=0 clock=1980 max=1980 delay_ms=1500\n");
  std::this_thread::sleep_for(600ms);
  const auto t0 = std::chrono::steady_clock::now();
  GpuSnapshot s = m.snapshot();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms) << "the snapshot waited for NVML";
  EXPECT_TRUE(s.stale);
  EXPECT_EQ(s.stale_windows, 1u);
  write("gpu minor=0 clock=1980 max=1980\n");
}

TEST(Gpu, NoNvmlIsOneLineAndNoReadings) {
  Procfs fs;
  GpuMonitorOptions o;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  o.xid = false;
  GpuMonitor m(o, fs);
  m.start();
  GpuSnapshot s = m.snapshot();
  EXPECT_FALSE(s.nvml);
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_NE(s.nvml_status.find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos)
      << s.nvml_status;
}

// A GPU is a character device of NVIDIA's major, whatever its name; a plain file named
// /dev/nvidia1 (anyone can make one in a user namespace of their own) is none (issue #49).
TEST(Gpu, OpenNvidiaDevicesOfAProcess) {
  if (::geteuid() != 0) GTEST_SKIP() << "making character devices (mknod) needs root";
  // A fake procfs whose fd links point at devices made here (this host has no GPU).
  const std::string root = ::testing::TempDir() + "/procfs-" + std::to_string(getpid());
  const std::string fd = root + "/4242/fd", dev = root + "/dev";
  ASSERT_EQ(std::system(("mkdir -p '" + fd + "' '" + dev + "'").c_str()), 0);
  const auto node = [&](const std::string& name, unsigned maj, unsigned min) {
    const std::string path = dev + "/" + name;
    EXPECT_EQ(::mknod(path.c_str(), S_IFCHR | 0600, makedev(maj, min)), 0) << path;
    return path;
  };
  ::symlink(node("nvidia3", kNvidiaMajor, 3).c_str(), (fd + "/5").c_str());
  ::symlink(node("nvidiactl", kNvidiaMajor, 255).c_str(), (fd + "/6").c_str());
  ::symlink(node("nvidia-modeset", kNvidiaMajor, 254).c_str(), (fd + "/7").c_str());
  ::symlink(node("gpu-zero", kNvidiaMajor, 0).c_str(), (fd + "/8").c_str());  // any name
  ::symlink((dev + "/nvidia3").c_str(), (fd + "/9").c_str());
  ::symlink("/dev/null", (fd + "/10").c_str());
  std::ofstream(dev + "/nvidia1") << "a plain file";
  ::symlink((dev + "/nvidia1").c_str(), (fd + "/11").c_str());
  ::symlink(node("nvidia2", 10, 2).c_str(), (fd + "/12").c_str());  // another driver's major
  Procfs fs(root, "/sys");
  EXPECT_EQ(nvidia_minors_of(fs, 4242), (std::vector<unsigned>{0, 3}));
  EXPECT_TRUE(nvidia_minors_of(fs, 4243).empty());
  ASSERT_EQ(std::system(("rm -rf '" + root + "'").c_str()), 0);
}

}  // namespace
}  // namespace stallwatch::host
