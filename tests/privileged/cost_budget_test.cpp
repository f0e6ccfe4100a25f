// The cost budget on real uprobes (issue #48 item 4): a launch-bound workload over
// --cost-budget gets its kernel-launch probes duty-cycled through its own multi-uprobe link
// pair, so its launches trap only part of each second; a calm workload mapping the same file
// keeps every launch probed; with --cost-budget 0 nothing is cycled; once the launch-bound
// one is gone the file's launches are probed for every process again. What a process traps on
// is read from its own memory: a uprobe is an int3 (0xcc) written into the process's copy of the
// page, so /proc/PID/mem at the launch's probe site tells whether that process pays for it.
// The arithmetic (duty, scaled counts) is tests/unit/budget_test.cpp.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "support/evidence.h"
#include "support/harness.h"
#include "support/process.h"
#include "trace/attach.h"
#include "trace/probe_cost.h"
#include "trace/uprobe_multi.h"

namespace stallwatch::test {
namespace {

using namespace std::chrono_literals;

const std::string kCudart = MOCK_DIR "/libcudart.so.12";
const std::string kCuda = MOCK_DIR "/libcuda.so.1";

// The file offset of cuLaunchKernel's probe site in the stand-in driver, as the daemon places it.
std::uint64_t launch_site() {
  static const std::uint64_t site = [] {
    trace::SitePolicy policy;
    policy.emulation = trace::calibrate_probes().emulation;
    auto plan = trace::plan_probes(kCuda, trace::Api::kDriver, trace::LaunchLayer::kDriver, policy);
    if (!plan) return std::uint64_t{0};
    for (const trace::SymbolSite& s : plan->sites) {
      if (s.symbol == "cuLaunchKernel") return s.offset + s.site.delta;
    }
    return std::uint64_t{0};
  }();
  return site;
}

// The byte at `file_offset` of the stand-in driver as process `pid` sees it; -1 when unmapped.
int byte_at(pid_t pid, std::uint64_t file_offset) {
  char real[PATH_MAX];
  if (!realpath(kCuda.c_str(), real)) return -1;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    if (path != real || perms.find('x') == std::string::npos) continue;
    const std::uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const std::uint64_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    const std::uint64_t off = std::stoull(offset, nullptr, 16);
    if (file_offset < off || file_offset >= off + (end - start)) continue;
    const int fd = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    unsigned char b = 0;
    const ssize_t n = ::pread(fd, &b, 1, static_cast<off_t>(start + file_offset - off));
    ::close(fd);
    return n == 1 ? b : -1;
  }
  return -1;
}

// Samples whether each process has the launch's breakpoint, every 20 ms for `span`.
struct Breakpoints {
  int on = 0, off = 0, unknown = 0;
};
Breakpoints sample(pid_t pid, std::chrono::milliseconds span) {
  Breakpoints b;
  const auto until = std::chrono::steady_clock::now() + span;
  while (std::chrono::steady_clock::now() < until) {
    const int v = byte_at(pid, launch_site());
    (v == 0xcc ? b.on : v < 0 ? b.unknown : b.off)++;
    std::this_thread::sleep_for(20ms);
  }
  return b;
}

pid_t start_loop(const TestCgroup& cg, const std::string& calls, const std::string& spacing_us,
                 const std::string& touch_kb = "0") {
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--cuda", kCuda, "--calls", calls,
            "--iterations", "1000000000", "--spacing-us", spacing_us, "--touch-kb", touch_kb};
  s.cgroup_dir = cg.dir();
  return spawn(s);
}

double duty_of(const Daemon& d, const TestCgroup& cg) {
  auto v = find_sample(parse_exposition(d.metrics()), "stallwatch_probe_duty_ratio",
                       {{"cgroup", cg.label()}});
  return v ? *v : -1;
}

#define REQUIRE_MULTI()                                                                   \
  if (!trace::kernel_has_uprobe_multi()) {                                                \
    GTEST_SKIP() << "this kernel has no multi-uprobe links (Linux 6.6): launches are not " \
                    "duty-cycled here";                                                   \
  }

TEST(CostBudget, LaunchBoundWorkloadIsCycledCalmOneIsNot) {
  REQUIRE_MULTI();
  ASSERT_NE(launch_site(), 0u);
  Daemon d({"--window", "1s", "--cost-budget", "1%"});
  ASSERT_TRUE(d.wait_ready()) << "log: " << d.log_path();
  TestCgroup hot("sw-budget-hot-" + std::to_string(getpid()));
  TestCgroup calm("sw-budget-calm-" + std::to_string(getpid()));
  // Back-to-back launches: each ~1 µs of trap on a call that costs tens of ns, far over 1 %.
  const pid_t busy = start_loop(hot, "cuLaunchKernel:1000,cuStreamSynchronize:1", "0");
  // A launch and a synchronize every ~10 ms beside 4 MiB of pages written (host work of its
  // own, ms of CPU time): a few µs of traps in that, ~0.1 %.
  const pid_t quiet = start_loop(calm, "cuLaunchKernel:1,cuStreamSynchronize:1", "10000", "4096");
  double hot_duty = -1;
  const bool cycled = poll_until(
      [&] {
        hot_duty = duty_of(d, hot);
        return hot_duty > 0 && hot_duty < 1;
      },
      30s);
  ASSERT_TRUE(cycled) << "duty " << hot_duty << "; log: " << d.log_path();
  // The budget asks for the floor here (the launches alone are ~100x over): attached about a
  // twentieth of each second, the attach and detach themselves included.
  EXPECT_LT(hot_duty, 0.5);
  const Breakpoints hb = sample(busy, 2500ms);
  const Breakpoints qb = sample(quiet, 1000ms);
  EXPECT_GT(hb.off, 0) << "the cycled process always has the breakpoint";
  EXPECT_GT(hb.off, hb.on) << "on " << hb.on << ", off " << hb.off;
  EXPECT_EQ(qb.off, 0) << "the calm process lost its launch probe";
  EXPECT_GT(qb.on, 0);
  EXPECT_EQ(hb.unknown + qb.unknown, 0);
  ASSERT_TRUE(d.wait_windows());
  const auto x = parse_exposition(d.metrics());
  EXPECT_DOUBLE_EQ(*find_sample(x, "stallwatch_probe_duty_ratio", {{"cgroup", calm.label()}}), 1);
  EXPECT_DOUBLE_EQ(*find_sample(x, "stallwatch_probe_cost_budget_ratio", {}), 0.01);
  // What the hot one pays now, as the traps fire: far below the ~100 % it would pay.
  const auto paid = find_sample(x, "stallwatch_workload_probe_cost_ratio", {{"cgroup", hot.label()}});
  ASSERT_TRUE(paid);
  EXPECT_LT(*paid, 0.5);
  const std::string log = slurp(d.log_path());
  EXPECT_NE(log.find("cost budget: " + hot.label() + " would pay"), std::string::npos) << log;
  EXPECT_EQ(log.find("cost budget: " + calm.label()), std::string::npos) << log;

  // Gone: the file's launches go back to every process, the calm one keeps its probe throughout.
  kill_and_reap(busy);
  const bool released = poll_until(
      [&] { return slurp(d.log_path()).find("are on every process again") != std::string::npos; },
      30s);
  EXPECT_TRUE(released) << "log: " << d.log_path();
  EXPECT_EQ(sample(quiet, 500ms).off, 0);
  kill_and_reap(quiet);
  EXPECT_EQ(d.stop(), 0);
}

TEST(CostBudget, ZeroBudgetProbesEveryLaunch) {
  REQUIRE_MULTI();
  ASSERT_NE(launch_site(), 0u);
  Daemon d({"--window", "1s", "--cost-budget", "0"});
  ASSERT_TRUE(d.wait_ready()) << "log: " << d.log_path();
  TestCgroup hot("sw-budget-none-" + std::to_string(getpid()));
  const pid_t busy = start_loop(hot, "cuLaunchKernel:1000,cuStreamSynchronize:1", "0");
  // The workload is seen, priced far over 1 %, and still not cycled.
  double paid = 0;
  const bool priced = poll_until(
      [&] {
        auto v = find_sample(parse_exposition(d.metrics()), "stallwatch_workload_probe_cost_ratio",
                             {{"cgroup", hot.label()}});
        paid = v ? *v : 0;
        return paid > 0.05;
      },
      30s);
  ASSERT_TRUE(priced) << "probe cost " << paid << "; log: " << d.log_path();
  ASSERT_TRUE(d.wait_windows(3));
  EXPECT_DOUBLE_EQ(duty_of(d, hot), 1);
  const Breakpoints b = sample(busy, 1500ms);
  EXPECT_EQ(b.off, 0);
  EXPECT_GT(b.on, 0);
  EXPECT_EQ(slurp(d.log_path()).find("would pay"), std::string::npos);
  kill_and_reap(busy);
  EXPECT_EQ(d.stop(), 0);
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
