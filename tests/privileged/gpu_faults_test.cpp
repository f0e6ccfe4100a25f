// Privileged tier, the GPU's own faults (issue #39). The daemon loads the stand-in
// libnvidia-ml.so.1 (tests/mock/mock_nvml.c), whose GPUs are lines of a file this test rewrites
// while a stand-in CUDA job runs; the job's synchronizes sleep a GPU's time, scaled by
// max clock / clock (MOCK_CUDA_SYNC_SCALE_FILE) as a GPU's kernels slow at a lower clock.
//  - A GPU held down by a thermal slowdown under a job that did not slow: no chain. Held by its
//    power cap with the job 1.65x slower: exactly one gpu_throttle chain, opened while capped,
//    closed once restored, naming GPU 0, sw_power_cap and 1,200 MHz.
//  - A thermal hold with the job slowed 2.2x and an agent on its core: the chain still opens
//    (the agent's preemptions are a small share of the rise).
//  - Xid lines written for real into /dev/kmsg (root) while the job hangs in a synchronize: the
//    hang's call_hang chain names Xid 79; a gpu_xid chain opens at once; a hostile line is
//    escaped, a malformed one ignored; every Xid counted by GPU and code.
//  - No NVML: the daemon says so once and exports no GPU series.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "common/json.h"
#include "support/evidence.h"
#include "support/harness.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

using namespace std::chrono_literals;

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";

// The suite's cgroups all lie below /stallwatch-gpu-PID; its daemon traces only there.
std::string top() { return "stallwatch-gpu-" + std::to_string(getpid()); }
std::string unique(const std::string& name) { return top() + "/" + name; }

// Replaces `path` whole (a reader never sees half a file).
void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  ASSERT_EQ(::rename(tmp.c_str(), path.c_str()), 0);
}

// One record into the kernel log, as root may write it. The newline ends the record: without
// it the kernel keeps it open for a continuation, and readers see it only once another comes.
void kmsg(const std::string& line) {
  const int fd = ::open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << "open /dev/kmsg";
  const std::string record = line + "\n";
  ASSERT_EQ(::write(fd, record.data(), record.size()), static_cast<ssize_t>(record.size()));
  ::close(fd);
}

std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::vector<Json> chains_json(const Daemon& d, const std::string& kind, const std::string& cgroup,
                              std::string* raw) {
  return explain_chain_objects(d, kind, cgroup, raw);
}

class GpuFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    state_ = new std::string(std::string(TEST_SCRATCH_DIR) + "/nvml-" +
                             std::to_string(getpid()) + ".state");
    std::ofstream(*state_) << "gpu minor=0 bus=00000000:3B:00.0\n";
    ::setenv("MOCK_NVML_STATE", state_->c_str(), 1);  // the daemon's NVML reads it
    root_ = new OwnCgroupRoot(top());
    daemon_ = new Daemon(root_->flags({"--window", "500ms", "--hang-threshold", "2s",
                                       "--nvml-library", MOCK_NVML_PATH,
                                       "--gpu-sample-interval", "50ms"}));
    ASSERT_TRUE(daemon_->wait_ready()) << "daemon not ready; log: " << daemon_->log_path();
  }
  static void TearDownTestSuite() {
    if (daemon_) {
      EXPECT_EQ(daemon_->stop(), 0) << daemon_->log_path();
      delete daemon_;
      daemon_ = nullptr;
    }
    delete root_;
    root_ = nullptr;
    ::unsetenv("MOCK_NVML_STATE");
    if (state_) ::unlink(state_->c_str());
    delete state_;
    state_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(daemon_, nullptr); }

  // GPU 0 as NVML shall read it from now on, used by `pid`.
  static void gpu0(int pid, unsigned clock, const char* reasons) {
    replace_file(*state_, "gpu minor=0 uuid=GPU-7e57 bus=00000000:3B:00.0 clock=" +
                              std::to_string(clock) + " max=1980 reasons=" + reasons +
                              " temp=80 power_mw=400000 limit_mw=400000 pids=" +
                              std::to_string(pid) + "\n");
  }
  // Waits until the daemon maps the workload of `cgroup` to GPU 0.
  static bool wait_mapped(const std::string& cgroup) {
    return poll_until(
        [&] {
          auto x = parse_exposition(daemon_->metrics());
          return find_sample(x, "stallwatch_workload_gpu_info", {{"cgroup", cgroup}, {"gpu", "0"}})
              .has_value();
        },
        30s, 100ms);
  }
  // A job in `cg` whose synchronize hangs while the file `hold` exists (it is made here), on GPU
  // 0 and mapped to it by the daemon.
  static std::unique_ptr<Child> hung_job(const TestCgroup& cg, const std::string& hold,
                                         const std::string& calls) {
    std::ofstream(hold).put('1');
    Spawn s;
    s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--calls", calls, "--start-delay-ms", "300"};
    s.env = {{"MOCK_CUDA_HOLD_FILE", hold}};
    s.cgroup_dir = cg.dir();
    auto w = std::make_unique<Child>(s);
    gpu0(w->pid(), 1980, "0x0");
    EXPECT_TRUE(wait_mapped(cg.label())) << daemon_->log_path();
    return w;
  }
  // A loop of synchronizes in `cg` (pinned to `cpu` when >= 0) that wait `sleep_us` for the
  // GPU, scaled by the number in `scale`, and spin `cpu_us`; on GPU 0 at full clocks, traced
  // and mapped to it by the daemon.
  static std::unique_ptr<Child> gpu_loop(const TestCgroup& cg, const std::string& scale,
                                         int sleep_us, int cpu_us, int cpu) {
    Spawn s;
    s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--calls", "cudaStreamSynchronize:1",
              "--iterations", "200000", "--start-delay-ms", "300"};
    s.env = {{"MOCK_CUDA_SYNC_SLEEP_US", std::to_string(sleep_us)},
             {"MOCK_CUDA_SYNC_CPU_US", std::to_string(cpu_us)},
             {"MOCK_CUDA_SYNC_SCALE_FILE", scale}};
    s.cgroup_dir = cg.dir();
    s.cpu = cpu;
    auto w = std::make_unique<Child>(s);
    gpu0(w->pid(), 1980, "0x0");
    EXPECT_TRUE(wait_traced(*daemon_, cg.label())) << daemon_->log_path();
    EXPECT_TRUE(wait_mapped(cg.label())) << "the job is not mapped to GPU 0; log: "
                                         << daemon_->log_path();
    return w;
  }
  static double active(const std::string& cgroup, const std::string& kind) {
    auto x = parse_exposition(daemon_->metrics());
    return sum_samples(x, "stallwatch_chain_active", {{"cgroup", cgroup}, {"kind", kind}});
  }

  static Daemon* daemon_;
  static OwnCgroupRoot* root_;
  static std::string* state_;
};
Daemon* GpuFaults::daemon_ = nullptr;
OwnCgroupRoot* GpuFaults::root_ = nullptr;
std::string* GpuFaults::state_ = nullptr;

TEST_F(GpuFaults, ClockHeldDownOpensAChainOnlyWhenTheJobSlowed) {
  TestCgroup cg(unique("throttle"));
  const std::string scale = std::string(TEST_SCRATCH_DIR) + "/gpu-scale-" + std::to_string(getpid());
  replace_file(scale, "1\n");
  // A GPU-bound loop: each synchronize sleeps 2 ms (the GPU's work), no CPU spin.
  auto job = gpu_loop(cg, scale, 2000, 0, -1);
  Child& w = *job;
  ASSERT_TRUE(daemon_->wait_windows(6));  // the synchronize's baseline

  // Held by a thermal slowdown, but this job's syncs keep their time: context, no chain.
  gpu0(w.pid(), 1500, "0x20");
  ASSERT_TRUE(daemon_->wait_windows(8));
  auto x = parse_exposition(daemon_->metrics());
  EXPECT_GT(sum_samples(x, "stallwatch_gpu_clock_throttle_seconds_total",
                        {{"gpu", "0"}, {"reason", "sw_thermal"}}),
            2.0)
      << "the held time is measured";
  EXPECT_EQ(chains_total(x, cg.label(), "gpu_throttle"), 0) << "no effect, no chain";

  // Its power cap: 1,200 MHz instead of 1,980, and the job's GPU work 1.65x as long.
  gpu0(w.pid(), 1200, "0x4");
  replace_file(scale, "1.65\n");
  const auto capped = std::chrono::steady_clock::now();
  ASSERT_TRUE(poll_until([&] { return active(cg.label(), "gpu_throttle") == 1; }, 20s, 100ms))
      << "no gpu_throttle chain; log: " << daemon_->log_path();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - capped).count();
  std::cout << "gpu_throttle opened " << took << " s after the cap\n";
  EXPECT_LE(took, 5.0) << "two windows of 500 ms, plus the scrape's lag";
  ASSERT_TRUE(daemon_->wait_windows(4));

  // Restored: the chain closes.
  gpu0(w.pid(), 1980, "0x0");
  replace_file(scale, "1\n");
  ASSERT_TRUE(poll_until([&] { return active(cg.label(), "gpu_throttle") == 0; }, 20s, 100ms));
  ASSERT_TRUE(daemon_->wait_windows(2));

  std::string raw;
  auto chains = chains_json(*daemon_, "gpu_throttle", cg.label(), &raw);
  ASSERT_EQ(chains.size(), 1u) << raw;
  const Json& c = chains[0];
  std::cout << "gpu_throttle: " << c["summary"].get<std::string>() << "\n";
  EXPECT_EQ(c["open"], false);
  EXPECT_EQ(c["pid"], w.pid());
  EXPECT_EQ(c["call"], "cudaStreamSynchronize");
  const std::string root = c["root_cause"].get<std::string>();
  EXPECT_NE(root.find("GPU 0 (GPU-7e57, PCI 00000000:3B:00.0)"), std::string::npos) << root;
  EXPECT_NE(root.find("sw_power_cap"), std::string::npos) << root;
  EXPECT_NE(root.find("1200 MHz instead of 1980"), std::string::npos) << root;
  EXPECT_NEAR(c["evidence"].value("held_clock_mhz", 0.0), 1200, 1);
  EXPECT_GE(c["evidence"].value("call_slowdown", 0.0), 1.2);
  EXPECT_TRUE(chains_json(*daemon_, "gpu_contention", cg.label(), &raw).empty()) << raw;
  w.stop();
  ::unlink(scale.c_str());
}

// Issue #50: an agent on the job's core (at nice -10, it wakes every 100 ms and spins 3 ms)
// preempts some of the job's synchronizes, which spin 1 ms and wait 1 ms for the GPU; the GPU is
// then held at 900 of 1,980 MHz for a thermal slowdown and the job's GPU wait takes 2.2x as long.
// The CPU wait is a small share of the whole rise, so gpu_throttle must open. (The audit saw no
// chain in 4 of 4 runs of such a job when the rule judged the window's longest call; this
// scenario passed on that rule too, 3 of 3 here: it guards the outcome, not that fix.)
TEST_F(GpuFaults, ALightAgentOnTheJobsCoreDoesNotHideAThermalHold) {
  TestCgroup cg(unique("agent-throttle")), agents(unique("agent"));
  const std::string scale =
      std::string(TEST_SCRATCH_DIR) + "/gpu-scale-agent-" + std::to_string(getpid());
  replace_file(scale, "1\n");
  Spawn tick;
  tick.argv = {DATA_WORKER_BIN, "--tick-us", "100000", "--tick-run-us", "3000", "--seconds", "60"};
  tick.cgroup_dir = agents.dir();
  tick.cpu = 0;
  tick.comm = "sw-gpu-agent";
  tick.nice = -10;  // a node agent at a raised priority: it runs its 3 ms as soon as it wakes
  tick.output_path = "/dev/null";
  Child agent(tick);
  auto job = gpu_loop(cg, scale, 1000, 1000, 0);
  Child& w = *job;
  ASSERT_TRUE(daemon_->wait_windows(6));  // the synchronize's baseline, the agent already there
  EXPECT_EQ(active(cg.label(), "gpu_throttle"), 0) << "full clocks: no chain";

  gpu0(w.pid(), 900, "0x20");
  replace_file(scale, "2.2\n");
  const auto held = std::chrono::steady_clock::now();
  ASSERT_TRUE(poll_until([&] { return active(cg.label(), "gpu_throttle") == 1; }, 20s, 100ms))
      << "no gpu_throttle chain with the agent on the job's core; log: " << daemon_->log_path();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - held).count();
  std::cout << "gpu_throttle opened " << took << " s after the hold, the agent on the job's core\n";
  EXPECT_LE(took, 5.0) << "two windows of 500 ms, plus the scrape's lag";

  std::string raw;
  auto chains = chains_json(*daemon_, "gpu_throttle", cg.label(), &raw);
  ASSERT_EQ(chains.size(), 1u) << raw;
  const std::string root = chains[0]["root_cause"].get<std::string>();
  EXPECT_NE(root.find("sw_thermal"), std::string::npos) << root;
  EXPECT_NE(root.find("900 MHz instead of 1980"), std::string::npos) << root;
  gpu0(w.pid(), 1980, "0x0");
  w.stop();
  agent.stop();
  ::unlink(scale.c_str());
}

TEST_F(GpuFaults, XidUnderAHungSynchronizeIsNamedByTheHang) {
  TestCgroup cg(unique("xid"));
  const std::string hold = std::string(TEST_SCRATCH_DIR) + "/gpu-hold-" + std::to_string(getpid());
  const auto job = hung_job(cg, hold, "cudaMalloc:1,cudaStreamSynchronize:1");
  ASSERT_FALSE(HasFailure());
  Child& w = *job;
  const std::string pid = std::to_string(w.pid());
  // A hostile line (escape sequences, a command substitution), a malformed one, then the GPU
  // falls off the bus.
  kmsg("NVRM: Xid (PCI:0000:3b:00): 13, pid=" + pid +
       ", name=cuda_workload, \x1b[31m$(id)\xe2\x80\xae stallwatch test line");
  kmsg("NVRM: Xid (PCI:0000:3b:00: 79, stallwatch test line without its parenthesis");
  // A user's process named "NVRM: Xid (): 8" (a whole 15-byte comm: the program's file name)
  // that crashes: the kernel logs "NVRM: Xid (): 8[PID]: segfault at ...", no Xid (issue #49).
  const std::string dir = std::string(TEST_SCRATCH_DIR) + "/xid-name-" + std::to_string(getpid());
  ::mkdir(dir.c_str(), 0755);
  const std::string named = dir + "/NVRM: Xid (): 8";
  ASSERT_EQ(::symlink("/usr/bin/python3", named.c_str()), 0) << named;
  EXPECT_EQ(run_command({named, "-c", "import ctypes; ctypes.string_at(0)"}, nullptr, 30s),
            128 + SIGSEGV);
  ::unlink(named.c_str());
  ::rmdir(dir.c_str());
  std::string dmesg;
  run_command({"dmesg"}, &dmesg, 10s);
  EXPECT_NE(dmesg.find("NVRM: Xid (): 8["), std::string::npos)
      << "the kernel did not log the crash (debug.exception-trace 0, or rate-limited): the "
         "attack was not exercised";
  kmsg("NVRM: Xid (PCI:0000:3b:00): 79, pid=" + pid +
       ", name=cuda_workload, GPU has fallen off the bus. (stallwatch test line)");
  ASSERT_TRUE(poll_until([&] { return active(cg.label(), "call_hang") == 1; }, 30s, 100ms))
      << daemon_->log_path();
  ASSERT_TRUE(daemon_->wait_windows(2));

  auto x = parse_exposition(daemon_->metrics());
  EXPECT_EQ(find_sample(x, "stallwatch_gpu_xid_errors_total", {{"gpu", "0"}, {"xid", "79"}}), 1.0);
  EXPECT_EQ(find_sample(x, "stallwatch_gpu_xid_errors_total", {{"gpu", "0"}, {"xid", "13"}}), 1.0);
  EXPECT_EQ(sum_samples(x, "stallwatch_gpu_xid_errors_total", {}), 2.0) << "the malformed line";
  EXPECT_EQ(chains_total(x, cg.label(), "gpu_xid"), 1);

  std::string raw;
  auto hangs = chains_json(*daemon_, "call_hang", cg.label(), &raw);
  ASSERT_EQ(hangs.size(), 1u) << raw;
  std::cout << "call_hang: " << hangs[0]["summary"].get<std::string>() << "\n";
  EXPECT_NE(hangs[0]["summary"].get<std::string>().find("(Xid 79)"), std::string::npos) << raw;
  const std::string root = hangs[0]["root_cause"].get<std::string>();
  EXPECT_NE(root.find("Xid 79 (GPU has fallen off the bus) on GPU 0"), std::string::npos) << root;
  EXPECT_NE(root.find("a fault that needs a GPU reset"), std::string::npos) << root;
  EXPECT_EQ(hangs[0]["evidence"].value("xid", 0.0), 79);
  auto xids = chains_json(*daemon_, "gpu_xid", cg.label(), &raw);
  ASSERT_EQ(xids.size(), 1u) << raw;
  EXPECT_EQ(xids[0]["severity"], "critical");
  // The hostile text reached no output raw: no ESC in the log, the store or explain.
  EXPECT_EQ(raw.find('\x1b'), std::string::npos);
  EXPECT_EQ(slurp(daemon_->log_path()).find('\x1b'), std::string::npos);
  std::string text;
  run_command({STALLWATCH_BIN, "explain", "--db", daemon_->db_path(), "--since", "1h"}, &text, 30s);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find("\xe2\x80\xae"), std::string::npos);

  ::unlink(hold.c_str());
  EXPECT_EQ(w.wait(30s), 0);
}

// Issue #50: after Xid 79, NVML answers NVML_ERROR_GPU_IS_LOST for every call about the GPU.
// Its last good identity stays (info series, the job's mapping, the Xid's GPU), it is marked
// lost (a metric, one log line), its clocks go absent, the hang names it, explain says "LOST
// since"; the Xid and the GPU carry one PCI spelling. Then it answers again.
TEST_F(GpuFaults, AGpuThatFallsOffTheBusStaysKnown) {
  TestCgroup cg(unique("lost"));
  const std::string hold = std::string(TEST_SCRATCH_DIR) + "/gpu-lost-" + std::to_string(getpid());
  const auto job = hung_job(cg, hold, "cudaStreamSynchronize:1");
  ASSERT_FALSE(HasFailure());
  Child& w = *job;
  const std::size_t lost_lines_before = occurrences(slurp(daemon_->log_path()), ") is lost: ");
  kmsg("NVRM: Xid (PCI:0000:3b:00): 79, pid=" + std::to_string(w.pid()) +
       ", name=cuda_workload, GPU has fallen off the bus. (stallwatch test line, lost GPU)");
  replace_file(*state_, "gpu minor=0 uuid=GPU-7e57 bus=00000000:3B:00.0 fail=15\n");
  ASSERT_TRUE(poll_until(
      [&] {
        auto x = parse_exposition(daemon_->metrics());
        return find_sample(x, "stallwatch_gpu_lost", {{"gpu", "0"}}).value_or(0) == 1;
      },
      20s, 100ms))
      << daemon_->log_path();
  ASSERT_TRUE(poll_until([&] { return active(cg.label(), "call_hang") == 1; }, 30s, 100ms))
      << daemon_->log_path();
  ASSERT_TRUE(daemon_->wait_windows(3));

  auto x = parse_exposition(daemon_->metrics());
  EXPECT_TRUE(find_sample(x, "stallwatch_gpu_info",
                          {{"gpu", "0"}, {"uuid", "GPU-7e57"}, {"pci_bus_id", "00000000:3B:00.0"}})
                  .has_value())
      << "the last good identity is kept";
  EXPECT_FALSE(find_sample(x, "stallwatch_gpu_sm_clock_hertz", {{"gpu", "0"}}).has_value())
      << "no clock is current on a lost GPU";
  EXPECT_FALSE(find_sample(x, "stallwatch_gpu_temperature_celsius", {{"gpu", "0"}}).has_value());
  EXPECT_TRUE(find_sample(x, "stallwatch_workload_gpu_info", {{"cgroup", cg.label()}, {"gpu", "0"}})
                  .has_value())
      << "the job keeps its GPU";
  EXPECT_TRUE(find_sample(x, "stallwatch_gpu_xid_errors_total",
                          {{"gpu", "0"}, {"pci_bus_id", "00000000:3B:00.0"}, {"xid", "79"}})
                  .has_value())
      << "one PCI spelling for the Xid and the GPU";
  EXPECT_EQ(occurrences(slurp(daemon_->log_path()), ") is lost: "), lost_lines_before + 1)
      << "one log line when it goes, none per sample";

  std::string raw;
  auto hangs = chains_json(*daemon_, "call_hang", cg.label(), &raw);
  ASSERT_EQ(hangs.size(), 1u) << raw;
  const std::string root = hangs[0]["root_cause"].get<std::string>();
  std::cout << "call_hang: " << root << "\n";
  EXPECT_NE(root.find("Xid 79 (GPU has fallen off the bus) on GPU 0"), std::string::npos) << root;
  EXPECT_NE(root.find("GPU 0 (GPU-7e57) has been lost for"), std::string::npos) << root;
  EXPECT_EQ(hangs[0]["evidence"].value("gpu_lost", -1.0), 0);
  std::string text;
  run_command({STALLWATCH_BIN, "explain", "--db", daemon_->db_path(), "--since", "5m"}, &text,
              30s);
  const auto line = text.find("GPU 0");
  ASSERT_NE(line, std::string::npos) << text;
  const std::string gpu_line = text.substr(line, text.find('\n', line) - line);
  EXPECT_NE(gpu_line.find("LOST since "), std::string::npos) << gpu_line;
  EXPECT_EQ(gpu_line.find("MHz"), std::string::npos) << "no clock shown as current: " << gpu_line;

  // It answers again (a reset): not lost, its clocks back, one more line.
  gpu0(w.pid(), 1980, "0x0");
  EXPECT_TRUE(poll_until(
      [&] {
        auto y = parse_exposition(daemon_->metrics());
        return find_sample(y, "stallwatch_gpu_lost", {{"gpu", "0"}}).value_or(1) == 0 &&
               find_sample(y, "stallwatch_gpu_sm_clock_hertz", {{"gpu", "0"}}).has_value();
      },
      20s, 100ms));
  EXPECT_NE(slurp(daemon_->log_path()).find("answers NVML again after it was lost"),
            std::string::npos);
  ::unlink(hold.c_str());
  EXPECT_EQ(w.wait(30s), 0);
}

// A library that is not NVML (a missing one is refused at start: cli_test).
TEST(GpuFaultsNoNvml, NoNvmlIsOneLogLineAndNoGpuSeries) {
  Daemon d({"--nvml-library", "/usr/lib/x86_64-linux-gnu/libz.so.1"});
  ASSERT_TRUE(d.wait_ready()) << d.log_path();
  ASSERT_TRUE(d.wait_windows(2));
  const std::string m = d.metrics();
  EXPECT_EQ(m.find("stallwatch_gpu_info"), std::string::npos);
  EXPECT_EQ(m.find("stallwatch_gpu_sm_clock_hertz"), std::string::npos);
  EXPECT_EQ(d.stop(), 0);
  const std::string log = slurp(d.log_path());
  EXPECT_NE(log.find("/usr/lib/x86_64-linux-gnu/libz.so.1 does not export nvmlInit_v2"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
