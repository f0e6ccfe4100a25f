// Privileged tier, end to end: the real daemon on this kernel turns real CPU contention on a
// mock CUDA workload into a cpu_contention chain (metrics, store, explain) within two windows
// of the contention, naming the hogs; the same workload without hogs yields no chain.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/harness.h"

namespace stallwatch::test {
namespace {

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";

// 13 bytes: fits a comm (15). What `prctl(PR_SET_NAME)` lets any user call a process.
const std::string kHostileName = "x\nsh /tmp/p #";

// A copy of yes(1) named sw-shipper in a new temporary directory (a busy process with a name
// of our choosing); returns its path.
std::string copy_of_yes() {
  char dir[] = "/tmp/stallwatch-chains-XXXXXX";
  if (!mkdtemp(dir)) return "/usr/bin/yes";
  const std::string path = std::string(dir) + "/sw-shipper";
  std::ifstream in("/usr/bin/yes", std::ios::binary);
  std::ofstream out(path, std::ios::binary);
  out << in.rdbuf();
  out.close();
  chmod(path.c_str(), 0755);
  return path;
}

// The suite's cgroups all lie below /stallwatch-chains-PID; its daemon traces only there.
std::string top() { return "stallwatch-chains-" + std::to_string(getpid()); }
std::string unique(const std::string& name) { return top() + "/" + name; }

// The workload: syncs that each spin 2 ms of CPU (a CUDA runtime polling for completion),
// long enough to span many 500 ms windows.
pid_t start_workload(const TestCgroup& cg, int cpu, int calls) {
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "300", "--calls",
            "cudaStreamSynchronize:" + std::to_string(calls)};
  s.env = {{"MOCK_CUDA_SYNC_CPU_US", "2000"}};
  s.cgroup_dir = cg.dir();
  s.cpu = cpu;
  return spawn(s);
}

struct Poll {
  long sequence = 0;
  double calls = 0;
  double active_high = 0;  // open cpu_contention chains of severity high or critical
  double active_any = 0;   // open chains of any kind for the cgroup
};

Poll poll(const Daemon& d, const std::string& cgroup) {
  Poll p;
  auto s = parse_exposition(d.metrics());
  p.sequence = static_cast<long>(find_sample(s, "stallwatch_snapshot_sequence", {}).value_or(0));
  p.calls = find_sample(s, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cgroup}, {"call", "cudaStreamSynchronize"}})
                .value_or(0);
  for (const auto& x : s) {
    if (x.name != "stallwatch_chain_active") continue;
    auto l = x.labels;
    if (l["cgroup"] != cgroup) continue;
    p.active_any += x.value;
    if (l["kind"] == "cpu_contention" && (l["severity"] == "high" || l["severity"] == "critical")) {
      p.active_high += x.value;
    }
  }
  return p;
}

TEST(Chains, PinnedCpuHogsOpenACpuContentionChainNamingThemAndCalmOpensNone) {
  OwnCgroupRoot root(top());
  Daemon daemon(root.flags({"--window", "500ms"}));
  ASSERT_TRUE(daemon.wait_ready()) << "log: " << daemon.log_path();
  TestCgroup calm(unique("calm")), hot(unique("hot")), agents(unique("agents"));
  const int cpu = 0;

  // Calm: 600 syncs (~1.2 s of CPU, several windows), no competition → no chain at all.
  pid_t w = start_workload(calm, cpu, 600);
  ASSERT_EQ(wait_exit(w, std::chrono::seconds(60)), 0);
  ASSERT_TRUE(daemon.wait_windows(4)) << daemon.log_path();
  Poll c = poll(daemon, calm.label());
  EXPECT_EQ(c.calls, 600);
  EXPECT_EQ(c.active_any, 0) << daemon.metrics();

  // Hot: three hogs pinned to the workload's CPU, in another cgroup. One names itself like an
  // attacker would (a newline, then a command); one is started through taskset, which moves
  // to the CPU (preempting the workload) under its own name before it execs the hog
  // (issue #16: it used to be reported as `taskset`).
  pid_t hog1 = start_hog("sw-hog-1", cpu, agents.dir());
  pid_t hog2 = start_hog(kHostileName, cpu, agents.dir());
  const std::string shipper = copy_of_yes();
  Spawn wrapped;
  wrapped.argv = {"/usr/bin/taskset", "-c", std::to_string(cpu), shipper};
  wrapped.cgroup_dir = agents.dir();
  wrapped.output_path = "/dev/null";
  pid_t hog3 = spawn(wrapped);
  w = start_workload(hot, cpu, 2000);
  long first_window = -1, opened_at = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (std::chrono::steady_clock::now() < deadline) {
    Poll p = poll(daemon, hot.label());
    if (first_window < 0 && p.calls > 0) first_window = p.sequence;  // first window with calls
    if (p.active_high >= 1) {
      opened_at = p.sequence;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string metrics = daemon.metrics();
  ASSERT_GE(first_window, 0) << "the workload never called; log: " << daemon.log_path();
  ASSERT_GE(opened_at, 0) << "no cpu_contention chain of severity high or critical:\n" << metrics;
  // Opens with the second contended window; the first window with calls may be partial, and
  // the poll may see it one window late.
  EXPECT_LE(opened_at - first_window, 2) << "first window " << first_window << ", opened in "
                                         << opened_at;

  // The store has it, and explain (a separate read-only process, while the daemon writes)
  // names the hogs and recommends a fix.
  // Two windows more, so the chain has seen every hog for a while.
  ASSERT_TRUE(daemon.wait_windows(2)) << daemon.log_path();
  std::string json = capture(std::string(STALLWATCH_BIN) + " explain --db " +
                                 daemon.db_path() + " --since 10m --json");
  std::string text = capture(std::string(STALLWATCH_BIN) + " explain --db " +
                                 daemon.db_path() + " --since 10m");
  if (std::getenv("STALLWATCH_TEST_SHOW")) std::cout << text;
  kill_and_reap(hog1);
  kill_and_reap(hog2);
  kill_and_reap(hog3);
  unlink(shipper.c_str());
  rmdir(shipper.substr(0, shipper.rfind('/')).c_str());
  kill(w, SIGKILL);
  wait_exit(w, std::chrono::seconds(10));
  EXPECT_NE(json.find("\"kind\":\"cpu_contention\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"comm\":\"sw-hog-1\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"comm\":\"sw-shipper\""), std::string::npos) << json;
  EXPECT_EQ(json.find("\"comm\":\"taskset\""), std::string::npos)
      << "the wrapper's name must not stick to what it exec'ed: " << json;
  // The hostile name is kept, escaped: "x\nsh /tmp/p #" as text, in JSON its backslash doubled.
  EXPECT_NE(json.find(R"("comm":"x\\nsh /tmp/p #")"), std::string::npos) << json;
  EXPECT_NE(json.find("taskset -acp"), std::string::npos) << json;
  // explain prints no control character but newlines, and no line of it is the attacker's
  // command: every Fix line stays one line.
  ASSERT_NE(text.find("cpu_contention"), std::string::npos) << text;
  for (char ch : text) {
    EXPECT_TRUE(static_cast<unsigned char>(ch) >= 0x20 || ch == '\n')
        << "control character " << static_cast<int>(ch) << " in:\n" << text;
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t start = line.find_first_not_of(' ');
    EXPECT_FALSE(start != std::string::npos && line.compare(start, 10, "sh /tmp/p ") == 0)
        << "injected line: " << line << "\nin:\n" << text;
  }
  EXPECT_NE(text.find("x\\nsh /tmp/p #"), std::string::npos) << text;
  EXPECT_EQ(json.find("\"cgroup\":\"" + calm.label() + "\""), std::string::npos)
      << "the calm cgroup must have no chain: " << json;

  // chains_total counted exactly one cpu_contention chain for the hot cgroup.
  auto s = parse_exposition(metrics);
  double total = 0;
  for (const auto& x : s) {
    if (x.name == "stallwatch_chains_total" && x.labels.at("cgroup") == hot.label()) {
      EXPECT_EQ(x.labels.at("kind"), "cpu_contention");
      total += x.value;
    }
  }
  EXPECT_EQ(total, 1) << metrics;
  EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
