// The fault matrix (issue #16): each scenario creates its fault for real on this machine, in
// cgroups of its own, with the stand-in CUDA libraries, and states what a correct diagnosis is:
// the chain kind, the culprit, and no other chain (a false chain fails the scenario). The daemon
// runs with 500 ms windows. Each scenario prints one `DIAGNOSIS {json}` line (expected and
// observed kinds, culprit, windows to detect and to close, false chains); `make accuracy` runs
// this test N times and turns those lines into rates (scripts/accuracy.sh, docs/accuracy.md).
// The host-cause scenarios (memory pressure, slow disk, retransmits, NCCL straggler, wrapped and
// hostile-named hogs) are in memory_test, io_test, net_test, nccl_test and chains_test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/harness.h"

namespace stallwatch::test {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::system_clock;

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
constexpr std::int64_t kWindowNs = 500'000'000;

std::string unique(const std::string& name) {
  return "stallwatch-diag-" + std::to_string(getpid()) + "/" + name;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

struct Observed {
  std::string kind;
  int pid = 0;
  int top_pid = 0;  // the heaviest contributor that is not the process itself
  std::int64_t opened_ns = 0, closed_ns = 0;
};

// The chains the store holds for `cgroup` (cgroup labels here are plain path characters).
std::vector<Observed> chains_of(const Daemon& d, const std::string& cgroup) {
  const std::string out = capture(
      std::string(STALLWATCH_BIN) + " query --format json --db " + d.db_path() +
      " \"SELECT kind, pid, contributors, opened_ns, closed_ns FROM chains WHERE cgroup = '" +
      cgroup + "' ORDER BY opened_ns\"");
  std::vector<Observed> v;
  Json rows = Json::parse(out, nullptr, false);
  if (!rows.is_array()) return v;
  for (const auto& r : rows) {
    Observed o;
    o.kind = r.value("kind", "");
    o.pid = r["pid"].is_number() ? r["pid"].get<int>() : 0;
    o.opened_ns = r.value("opened_ns", std::int64_t{0});
    o.closed_ns = r.value("closed_ns", std::int64_t{0});
    Json contributors = Json::parse(r.value("contributors", std::string("[]")), nullptr, false);
    if (contributors.is_array()) {
      for (const auto& k : contributors) {
        const int pid = k.value("pid", 0);
        if (pid != o.pid && k.value("role", "") != "preemptor, kernel thread") {
          o.top_pid = pid;
          break;
        }
      }
    }
    v.push_back(o);
  }
  return v;
}

// One scenario's verdict: asserted, and printed for `make accuracy`.
struct Verdict {
  std::string scenario;
  std::string expected_kind;  // "" when no chain is the right answer
  int expected_culprit = 0;   // pid the chain must name first; 0: not checked
  std::int64_t cause_start_ns = 0, cause_end_ns = 0;

  void judge(const std::vector<Observed>& chains) const {
    std::set<std::string> kinds;
    int false_chains = 0;
    const Observed* hit = nullptr;
    for (const auto& c : chains) {
      kinds.insert(c.kind);
      if (c.kind == expected_kind && !hit) {
        hit = &c;
      } else {
        false_chains++;
      }
    }
    const bool kind_ok = expected_kind.empty() ? chains.empty() : hit != nullptr;
    const bool culprit_ok = !hit || expected_culprit == 0 || hit->top_pid == expected_culprit;
    Json line = {{"scenario", scenario},
                 {"expected", expected_kind},
                 {"observed", kinds},
                 {"kind_ok", kind_ok},
                 {"culprit_ok", culprit_ok},
                 {"false_chains", false_chains}};
    if (hit) {
      line["detect_windows"] =
          static_cast<double>(hit->opened_ns - cause_start_ns) / static_cast<double>(kWindowNs);
      if (hit->closed_ns > 0 && cause_end_ns > 0) {
        line["close_windows"] =
            static_cast<double>(hit->closed_ns - cause_end_ns) / static_cast<double>(kWindowNs);
      }
    }
    std::cout << "DIAGNOSIS " << line.dump() << std::endl;
    if (const char* path = std::getenv("STALLWATCH_ACCURACY_OUT")) {
      std::ofstream(path, std::ios::app) << line.dump() << "\n";
    }
    EXPECT_TRUE(kind_ok) << scenario << ": " << line.dump();
    EXPECT_TRUE(culprit_ok) << scenario << ": " << line.dump();
    EXPECT_EQ(false_chains, 0) << scenario << ": " << line.dump();
  }
};

// A workload pinned to `cpu` in `cg`: `calls` of its --calls SPEC, `iterations` times.
pid_t start_workload(const TestCgroup& cg, int cpu, const std::string& calls, int iterations,
                     std::map<std::string, std::string> env, int spacing_us = 0) {
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "300", "--calls", calls,
            "--iterations", std::to_string(iterations)};
  if (spacing_us > 0) {
    s.argv.push_back("--spacing-us");
    s.argv.push_back(std::to_string(spacing_us));
  }
  s.env = std::move(env);
  s.cgroup_dir = cg.dir();
  s.cpu = cpu;
  return spawn(s);
}

class Diagnosis : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new Daemon({"--window", "500ms"});
    ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log_path();
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  // After the scenario: windows enough for an open chain to close (close_after is 3 windows,
  // alloc_spike's up to twice its period).
  static void settle() { ASSERT_TRUE(daemon_->wait_windows(8)) << daemon_->log_path(); }
  static Daemon* daemon_;
};
Daemon* Diagnosis::daemon_ = nullptr;

const std::map<std::string, std::string> kSpinSync = {{"MOCK_CUDA_SYNC_CPU_US", "2000"}};

// Hogs on another core than the job's: a busy host is not a cause. No chain.
TEST_F(Diagnosis, HogsOnAnotherCoreAreNoCause) {
  TestCgroup job(unique("other-core-job")), agents(unique("other-core-agents"));
  pid_t hog1 = start_hog("sw-hog-a", 1, agents.dir());
  pid_t hog2 = start_hog("sw-hog-b", 1, agents.dir());
  pid_t w = start_workload(job, 0, "cudaStreamSynchronize:1", 1200, kSpinSync);
  const int rc = wait_exit(w, std::chrono::seconds(60));
  kill_and_reap(hog1);
  kill_and_reap(hog2);
  ASSERT_EQ(rc, 0);
  settle();
  Verdict{"hogs on another core", "", 0, 0, 0}.judge(chains_of(*daemon_, job.label()));
}

// A busy but healthy host: another cgroup reads the disk (O_DIRECT) and burns a CPU, neither
// on the job's core. No chain for the job.
TEST_F(Diagnosis, BusyButHealthyHostIsNoCause) {
  TestCgroup job(unique("busy-host-job")), others(unique("busy-host-others"));
  const std::string path =
      std::string(TEST_SCRATCH_DIR) + "/diagnosis-" + std::to_string(getpid()) + ".dat";
  Spawn create;
  create.argv = {DATA_WORKER_BIN, "--file", path, "--create-mb", "64"};
  create.output_path = "/dev/null";
  ASSERT_EQ(wait_exit(spawn(create), std::chrono::seconds(60)), 0);
  Spawn io;
  io.argv = {DATA_WORKER_BIN, "--file", path, "--direct-reads", "16000"};
  io.cgroup_dir = others.dir();
  io.cpu = 1;
  io.output_path = "/dev/null";
  pid_t reader = spawn(io);
  pid_t hog = start_hog("sw-hog-e", 1, others.dir());
  pid_t w = start_workload(job, 0, "cudaStreamSynchronize:1", 1200, kSpinSync);
  const int rc = wait_exit(w, std::chrono::seconds(60));
  kill_and_reap(hog);
  kill_and_reap(reader);
  unlink(path.c_str());
  ASSERT_EQ(rc, 0);
  settle();
  Verdict{"busy but healthy host", "", 0, 0, 0}.judge(chains_of(*daemon_, job.label()));
}

// A GPU-bound job: each step launches and then sleeps 5 ms in the sync waiting for the GPU.
// High GPU wait is not a host cause. No chain.
TEST_F(Diagnosis, GpuBoundHealthyJobIsNoCause) {
  TestCgroup job(unique("gpu-bound"));
  pid_t w = start_workload(job, 0, "cudaLaunchKernel:4,cudaStreamSynchronize:1", 400,
                           {{"MOCK_CUDA_SYNC_SLEEP_US", "5000"}, {"MOCK_CUDA_SYNC_CPU_US", "20"}});
  ASSERT_EQ(wait_exit(w, std::chrono::seconds(60)), 0);
  settle();
  Verdict{"GPU-bound healthy job", "", 0, 0, 0}.judge(chains_of(*daemon_, job.label()));
}

// Two CUDA jobs pinned to one core: cpu_contention on each, naming the other.
TEST_F(Diagnosis, TwoJobsOnOneCoreNameEachOther) {
  TestCgroup a(unique("pair-a")), b(unique("pair-b"));
  const std::int64_t start = now_ns();
  pid_t wa = start_workload(a, 0, "cudaStreamSynchronize:1", 1500, kSpinSync);
  pid_t wb = start_workload(b, 0, "cudaStreamSynchronize:1", 1500, kSpinSync);
  const int ra = wait_exit(wa, std::chrono::seconds(90));
  const int rb = wait_exit(wb, std::chrono::seconds(90));
  const std::int64_t end = now_ns();
  ASSERT_EQ(ra, 0);
  ASSERT_EQ(rb, 0);
  settle();
  // The workloads wait 300 ms before their first call.
  Verdict{"two jobs on one core (a)", "cpu_contention", wb, start + 300'000'000, end}.judge(
      chains_of(*daemon_, a.label()));
  Verdict{"two jobs on one core (b)", "cpu_contention", wa, start + 300'000'000, end}.judge(
      chains_of(*daemon_, b.label()));
}

// A caching allocator growing its pool: every 25th cudaMalloc sleeps 30 ms in the driver, no
// contention. alloc_spike and nothing else.
TEST_F(Diagnosis, TrueAllocatorGrowthIsAllocSpike) {
  TestCgroup job(unique("alloc-growth"));
  const std::int64_t start = now_ns();
  pid_t w = start_workload(job, 0, "cudaMalloc:1,cudaFree:1,cudaStreamSynchronize:1", 300,
                           {{"MOCK_CUDA_MALLOC_SLOW_EVERY", "25"},
                            {"MOCK_CUDA_MALLOC_SLOW_US", "30000"}},
                           3000);
  ASSERT_EQ(wait_exit(w, std::chrono::seconds(60)), 0);
  const std::int64_t end = now_ns();
  settle();
  Verdict{"allocator growth", "alloc_spike", 0, start + 300'000'000, end}.judge(
      chains_of(*daemon_, job.label()));
}

// CPU hogs on the job's core while it allocates: cudaMalloc is slow because it waits for the
// CPU inside. cpu_contention naming a hog; no alloc_spike, memcpy_bound or gpu_contention.
TEST_F(Diagnosis, ContentionAloneIsNoAllocSpike) {
  TestCgroup job(unique("contended-alloc")), agents(unique("contended-agents"));
  const std::int64_t start = now_ns();
  pid_t hog1 = start_hog("sw-hog-c", 0, agents.dir());
  pid_t hog2 = start_hog("sw-hog-d", 0, agents.dir());
  pid_t w = start_workload(job, 0, "cudaMalloc:1,cudaFree:1,cudaStreamSynchronize:1", 250,
                           {{"MOCK_CUDA_SYNC_CPU_US", "2000"}, {"MOCK_CUDA_MALLOC_CPU_US", "400"}});
  const int rc = wait_exit(w, std::chrono::seconds(90));
  const std::int64_t end = now_ns();
  kill_and_reap(hog1);
  kill_and_reap(hog2);
  ASSERT_EQ(rc, 0);
  settle();
  auto chains = chains_of(*daemon_, job.label());
  // Either hog is the right culprit: they take the CPU in turns.
  int culprit = 0;
  for (const auto& c : chains) {
    if (c.kind == "cpu_contention" && (c.top_pid == hog1 || c.top_pid == hog2)) culprit = c.top_pid;
  }
  Verdict{"contention alone (no alloc_spike)", "cpu_contention", culprit ? culprit : hog1,
          start + 300'000'000, end}
      .judge(chains);
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
