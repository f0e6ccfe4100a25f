// Privileged tier: the real daemon, real eBPF on this kernel, mock CUDA libraries, workloads
// in cgroups the test creates. Trigger → capture → assert, each bounded in time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include "support/harness.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
const std::string kCuda = std::string(MOCK_DIR) + "/libcuda.so.1";
const std::string kCudart2 = std::string(MOCK2_DIR) + "/libcudart.so.12";

std::string unique(const std::string& name) {
  return "stallwatch-test-" + std::to_string(getpid()) + "/" + name;
}

// The suite's cgroups all lie below /stallwatch-test-PID, and its daemon traces only there
// (--cgroup-roots, issue #50): other CUDA processes on the host, another stallwatch's test
// jobs included, change none of its counts. A child that stays for the suite keeps the root
// from being removed (and made again as another cgroup) when a test's cgroups go.
std::string suite_root() { return "/stallwatch-test-" + std::to_string(getpid()); }

class Tracing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    keep_ = new TestCgroup(unique("keep"));
    daemon_ = new Daemon({"--cgroup-roots", suite_root()});
    ASSERT_TRUE(daemon_->wait_ready()) << "daemon not ready; log: " << daemon_->log_path();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(daemon_->stop(), 0) << "daemon exit status; log: " << daemon_->log_path();
    delete daemon_;
    delete keep_;
  }

  // Runs the workload to completion in `cg` and returns its exit status.
  static int run_workload(const TestCgroup& cg, std::vector<std::string> args,
                          std::map<std::string, std::string> env = {}, int cpu = -1) {
    Spawn s;
    s.argv = {WORKLOAD_BIN};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.env = std::move(env);
    s.cgroup_dir = cg.dir();
    s.cpu = cpu;
    return wait_exit(spawn(s), std::chrono::seconds(120));
  }

  static std::vector<Sample> scrape() {
    EXPECT_TRUE(daemon_->wait_windows()) << "no new window; log: " << daemon_->log_path();
    return parse_exposition(daemon_->metrics());
  }

  static double count_of(const std::vector<Sample>& s, const std::string& cgroup,
                         const std::string& call) {
    return find_sample(s, "stallwatch_cuda_call_duration_seconds_count",
                       {{"cgroup", cgroup}, {"call", call}})
        .value_or(-1);
  }

  static Daemon* daemon_;
  static TestCgroup* keep_;
};
Daemon* Tracing::daemon_ = nullptr;
TestCgroup* Tracing::keep_ = nullptr;

// A workload started after the daemon, in a child cgroup: every call counted exactly, under
// the right api/call/cgroup labels; the library is traced before the first call even though
// the process only waits 500 ms after loading it (as CUDA context creation would).
TEST_F(Tracing, CountsEveryCallExactlyInItsCgroup) {
  TestCgroup cg(unique("exact"));
  ASSERT_EQ(run_workload(cg, {"--cudart", kCudart, "--cuda", kCuda, "--threads", "2",
                              "--iterations", "3", "--start-delay-ms", "500", "--calls",
                              "cudaMalloc:2,cudaLaunchKernel:50,cudaLaunchKernel_ptsz:5,"
                              "cudaStreamSynchronize:10,cudaFree:2,cuLaunchKernel:7,"
                              "cuMemAlloc_v2:1"}),
            0);
  auto s = scrape();
  // threads x iterations = 6
  EXPECT_EQ(count_of(s, cg.label(), "cudaMalloc"), 12);
  // Launches are probed in the driver (--launch-layer=driver, issue #40): the runtime's 330
  // (_ptsz folds into its call) reach cuLaunchKernel underneath, as with NVIDIA's runtime, and
  // add to the workload's own 42 driver launches; cudaLaunchKernel itself has no probe.
  EXPECT_EQ(count_of(s, cg.label(), "cudaLaunchKernel"), -1);
  EXPECT_EQ(count_of(s, cg.label(), "cuLaunchKernel"), 372);
  EXPECT_EQ(count_of(s, cg.label(), "cudaStreamSynchronize"), 60);
  EXPECT_EQ(count_of(s, cg.label(), "cudaFree"), 12);
  EXPECT_EQ(count_of(s, cg.label(), "cuMemAlloc_v2"), 6);
  EXPECT_EQ(count_of(s, cg.label(), "cudaMemcpy"), -1) << "a call never made has no series";
  EXPECT_EQ(find_sample(s, "stallwatch_cuda_call_duration_seconds_bucket",
                        {{"cgroup", cg.label()}, {"call", "cuLaunchKernel"}, {"le", "+Inf"}}),
            372);
  EXPECT_EQ(find_sample(s, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cuLaunchKernel"}, {"api", "driver"}}),
            372);
  EXPECT_EQ(find_sample(s, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaMalloc"}, {"api", "runtime"}}),
            12);
  // The live exposition passes promtool's lint.
  if (system("command -v promtool >/dev/null") == 0) {
    std::string path = "/tmp/stallwatch-metrics-" + std::to_string(getpid()) + ".txt";
    std::ofstream(path) << daemon_->metrics();
    FILE* p = popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
    std::string lint;
    char buf[512];
    while (fgets(buf, sizeof(buf), p)) lint += buf;
    EXPECT_EQ(pclose(p), 0) << lint;
    EXPECT_EQ(lint, "");
    unlink(path.c_str());
  }
  for (const char* source : {"outlier_ringbuf", "discovery_ringbuf", "call_map_full",
                             "thread_state", "call_nesting"}) {
    EXPECT_EQ(find_sample(s, "stallwatch_events_lost_total", {{"source", source}}), 0) << source;
  }
}

// --launch-layer both traces a runtime launch twice (cudaLaunchKernel and the cuLaunchKernel
// under it, as before issue #40); runtime traces cudaLaunchKernel alone; none, no launch (the
// synchronize is still counted). Exact counts for each,
// from the same workload as above, with the daemon's own log line saying which it does.
TEST(LaunchLayer, BothAndRuntimeLayersProbeWhatTheySay) {
  struct Case {
    const char* layer;
    double runtime_launches, driver_launches;
    const char* log;
  };
  for (const Case& c : {Case{"both", 330, 372, "kernel launches: probed at the runtime and the driver"},
                        Case{"runtime", 330, -1, "kernel launches: probed at the runtime"},
                        Case{"none", -1, -1, "kernel launches: not probed"}}) {
    SCOPED_TRACE(c.layer);
    Daemon daemon({"--launch-layer", c.layer, "--window", "500ms"});
    ASSERT_TRUE(daemon.wait_ready()) << daemon.log_path();
    EXPECT_NE(slurp(daemon.log_path()).find(c.log), std::string::npos) << slurp(daemon.log_path());
    TestCgroup cg(unique(std::string("layer-") + c.layer));
    Spawn s;
    s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--cuda", kCuda, "--threads", "2",
              "--iterations", "3", "--start-delay-ms", "500", "--calls",
              "cudaLaunchKernel:50,cudaLaunchKernel_ptsz:5,cudaStreamSynchronize:1,cuLaunchKernel:7"};
    s.cgroup_dir = cg.dir();
    ASSERT_EQ(wait_exit(spawn(s), std::chrono::seconds(120)), 0);
    ASSERT_TRUE(daemon.wait_windows()) << daemon.log_path();
    const auto samples = parse_exposition(daemon.metrics());
    auto count = [&](const char* call) {
      return find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                         {{"cgroup", cg.label()}, {"call", call}})
          .value_or(-1);
    };
    EXPECT_EQ(count("cudaLaunchKernel"), c.runtime_launches);
    EXPECT_EQ(count("cuLaunchKernel"), c.driver_launches);
    EXPECT_EQ(count("cudaStreamSynchronize"), 6);
    EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
  }
}

// Two copies of libcudart in different directories (as pip wheels and conda bring their own),
// each used by a workload in its own cgroup: both traced, each cgroup with its own counts.
TEST_F(Tracing, TracesEveryCopyAndSeparatesCgroups) {
  TestCgroup a(unique("copy-a")), b(unique("copy-b"));
  ASSERT_EQ(run_workload(a, {"--cudart", kCudart, "--start-delay-ms", "500", "--calls",
                             "cudaMemcpy:11"}),
            0);
  ASSERT_EQ(run_workload(b, {"--cudart", kCudart2, "--start-delay-ms", "500", "--calls",
                             "cudaMemcpy:13"}),
            0);
  auto s = scrape();
  EXPECT_EQ(count_of(s, a.label(), "cudaMemcpy"), 11);
  EXPECT_EQ(count_of(s, b.label(), "cudaMemcpy"), 13);
  std::string log;
  {
    std::ifstream in(daemon_->log_path());
    log.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(log.find("tracing " + kCudart), std::string::npos) << log;
  EXPECT_NE(log.find("tracing " + kCudart2), std::string::npos) << log;
}

// With CPU hogs pinned to the workload's CPU, the runnable off-CPU time inside
// cudaStreamSynchronize rises far above a calm run's, and the hogs are the preemptors.
TEST_F(Tracing, CpuContentionShowsAsRunnableTimeInsideSyncAndNamesThePreemptors) {
  TestCgroup calm(unique("calm")), hot(unique("hot")), agents(unique("agents"));
  const int cpu = 0;
  std::vector<std::string> args = {"--cudart", kCudart, "--start-delay-ms", "500", "--calls",
                                   "cudaStreamSynchronize:100"};
  std::map<std::string, std::string> env = {{"MOCK_CUDA_SYNC_CPU_US", "2000"}};

  ASSERT_EQ(run_workload(calm, args, env, cpu), 0);
  pid_t hog1 = start_hog("sw-hog-1", cpu, agents.dir());
  pid_t hog2 = start_hog("sw-hog-2", cpu, agents.dir());
  int rc = run_workload(hot, args, env, cpu);
  auto s = scrape();
  std::string json = daemon_->snapshot_json();
  kill_and_reap(hog1);
  kill_and_reap(hog2);
  ASSERT_EQ(rc, 0);

  auto runnable = [&](const std::string& cg) {
    return find_sample(s, "stallwatch_cuda_call_offcpu_seconds_total",
                       {{"cgroup", cg}, {"call", "cudaStreamSynchronize"}, {"state", "runnable"}})
        .value_or(-1);
  };
  double calm_runnable = runnable(calm.label()), hot_runnable = runnable(hot.label());
  EXPECT_EQ(count_of(s, calm.label(), "cudaStreamSynchronize"), 100);
  EXPECT_EQ(count_of(s, hot.label(), "cudaStreamSynchronize"), 100);
  // 100 calls x 2 ms of CPU each, sharing one CPU with two hogs: about 0.4 s runnable.
  EXPECT_GT(hot_runnable, 0.15) << json;
  EXPECT_LT(calm_runnable, 0.05) << json;
  EXPECT_GT(hot_runnable, 5 * calm_runnable) << json;

  // The hogs are recorded as preemptors of the hot workload, with their cgroup.
  std::smatch m;
  std::regex hot_series("\\{\"cgroup\":\"" + hot.label() + "\".*?\"preemptors\":\\[(.*?)\\]\\}");
  ASSERT_TRUE(std::regex_search(json, m, hot_series)) << json;
  std::string pre = m[1];
  EXPECT_NE(pre.find("\"pid\":" + std::to_string(hog1) + ",\"comm\":\"sw-hog-1\",\"cgroup\":\"" +
                     agents.label() + "\""),
            std::string::npos)
      << pre;
  EXPECT_NE(pre.find("\"pid\":" + std::to_string(hog2) + ",\"comm\":\"sw-hog-2\""),
            std::string::npos)
      << pre;
}

// Issue #50: the same job in a cgroup outside --cgroup-roots, run beside one inside: the one
// inside is counted exactly, the one outside gets no series at all (calls, off-CPU time,
// preemptors), however busy it is.
TEST_F(Tracing, OnlyTheCgroupRootsAreTraced) {
  TestCgroup in(unique("roots-in"));
  TestCgroup out("stallwatch-outside-" + std::to_string(getpid()) + "/job");
  Spawn outside;
  outside.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--calls", "cudaStreamSynchronize:1,cudaMalloc:1",
                  "--iterations", "1500", "--spacing-us", "1000", "--start-delay-ms", "100"};
  // It calls for ~1.6 s, spanning the inside job's run (from 300 ms): the probes fire for it.
  outside.cgroup_dir = out.dir();
  outside.output_path = "/dev/null";
  const pid_t o = spawn(outside);
  ASSERT_EQ(run_workload(in, {"--cudart", kCudart, "--calls", "cudaStreamSynchronize:1,cudaMalloc:1",
                              "--iterations", "300", "--start-delay-ms", "300"}),
            0);
  ASSERT_EQ(wait_exit(o, std::chrono::seconds(120)), 0);
  auto s = scrape();
  EXPECT_EQ(count_of(s, in.label(), "cudaStreamSynchronize"), 300);
  EXPECT_EQ(count_of(s, in.label(), "cudaMalloc"), 300);
  for (const auto& sample : s) {
    const auto it = sample.labels.find("cgroup");
    EXPECT_FALSE(it != sample.labels.end() && it->second == out.label())
        << sample.name << " has a series of the cgroup outside the roots";
  }
}

// Exited processes are forgotten at once and their library's probes removed after the linger
// time; the counts they made stay (counters never go backwards).
// Issue #19: a switch adds off-CPU time to the thread's own tally, which a task iterator folds
// into the per-process map each window and the thread folds itself at its last switch: two
// threads that each sleep 3 x 100 ms between their calls and exit before the next window keep
// all of it (0.6 s blocked), not what the last fold before their exit had seen.
TEST_F(Tracing, OffCpuTimeOfExitedThreadsIsKeptWhole) {
  TestCgroup cg(unique("exit-tally"));
  ASSERT_EQ(run_workload(cg, {"--cudart", kCudart, "--threads", "2", "--start-delay-ms", "500",
                              "--spacing-us", "100000", "--calls", "cudaMemset:4"}),
            0);
  auto s = scrape();
  EXPECT_EQ(count_of(s, cg.label(), "cudaMemset"), 8);
  const double blocked =
      find_sample(s, "stallwatch_offcpu_seconds_total", {{"cgroup", cg.label()}, {"state", "blocked"}})
          .value_or(-1);
  EXPECT_GE(blocked, 0.6) << "threads' last off-CPU periods lost at exit";
  EXPECT_LT(blocked, 1.0);
  EXPECT_EQ(find_sample(s, "stallwatch_events_lost_total", {{"source", "offcpu_map_full"}}), 0);
}

// Issue #51: a job shorter than a window (it starts and exits between two of them) has every
// call in /metrics, in the store, in explain and in export alike; before, the store had none
// of them (the last window of an exiting process was not written).
TEST_F(Tracing, AShortJobAgreesInMetricsStoreExplainAndExport) {
  TestCgroup cg(unique("short"));
  ASSERT_EQ(run_workload(cg, {"--cudart", kCudart, "--start-delay-ms", "500", "--calls",
                              "cudaFree:1500"}),
            0);
  auto s = scrape();
  ASSERT_EQ(count_of(s, cg.label(), "cudaFree"), 1500);
  const std::string db = daemon_->db_path();
  const std::string bin = STALLWATCH_BIN;
  EXPECT_EQ(capture(bin + " query --db " + db + " --format csv \"SELECT sum(count) AS n FROM "
                    "call_windows WHERE cgroup = '" + cg.label() + "' AND call = 'cudaFree'\""),
            "n\r\n1500\r\n");
  EXPECT_EQ(capture(bin + " query --db " + db + " --format csv \"SELECT comm FROM processes "
                    "WHERE cgroup = '" + cg.label() + "'\""),
            "comm\r\ncuda_workload\r\n")
      << "named although it exited before a window read it alive";
  const std::string explained = capture(bin + " explain --db " + db + " --since 1h --cgroup " + cg.label() + " 2>&1");
  EXPECT_NE(explained.find("  " + cg.label() + ": 1 process, 1,500 CUDA calls"), std::string::npos)
      << explained;
  const std::string out = "/tmp/stallwatch-short-" + std::to_string(getpid()) + ".json";
  const std::string exported =
      capture(bin + " export --db " + db + " --since 1h --format chrome-json --cgroup " +
              cg.label() + " -o " + out + " 2>&1");
  EXPECT_NE(exported.find(": 1 process"), std::string::npos) << exported;
  EXPECT_NE(slurp(out).find("cuda_workload"), std::string::npos) << "its process track";
  unlink(out.c_str());
}

// Issue #51: a stop (SIGTERM) stores the partial window since the last one. With a one-hour
// window nothing but that last, partial window can hold the job's calls.
TEST(Stop, ThePartialWindowAtSigtermIsStoredAndSaidSo) {
  const std::string root = "/stallwatch-test-stop-" + std::to_string(getpid());
  TestCgroup keep(root.substr(1) + "/keep");
  Daemon daemon({"--window", "1h", "--cgroup-roots", root});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_path();
  TestCgroup cg(root.substr(1) + "/job");
  Spawn sp;
  sp.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "500", "--calls", "cudaFree:700"};
  sp.cgroup_dir = cg.dir();
  ASSERT_EQ(wait_exit(spawn(sp), std::chrono::seconds(60)), 0);
  EXPECT_EQ(daemon.stop(), 0);
  const std::string log = slurp(daemon.log_path());
  EXPECT_NE(log.find("published as a window; "), std::string::npos) << log;
  EXPECT_NE(log.find(" written to " + daemon.db_path() + ", 0 lost; detaching probes"),
            std::string::npos)
      << log;
  EXPECT_EQ(capture(std::string(STALLWATCH_BIN) + " query --db " + daemon.db_path() +
                    " --format csv \"SELECT sum(count) AS n FROM call_windows WHERE cgroup = '" +
                    cg.label() + "'\""),
            "n\r\n700\r\n");
}

// One link per probe (--uprobe-multi=off, as on kernels before 6.6): the other tests here use
// multi-uprobe links where the kernel has them, this one the per-probe path.
TEST(Cleanup, ExitedProcessesAndUnusedLibrariesAreCleanedUpAndCountsKept) {
  Daemon daemon({"--detach-linger", "500ms", "--uprobe-multi", "off"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_path();
  EXPECT_NE(slurp(daemon.log_path()).find("call probes: one link per probe (--uprobe-multi=off)"),
            std::string::npos);
  TestCgroup cg(unique("exit"));
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "500", "--calls", "cudaMemset:4"};
  s.cgroup_dir = cg.dir();
  ASSERT_EQ(wait_exit(spawn(s)), 0);
  ASSERT_TRUE(daemon.wait_windows());
  auto samples = parse_exposition(daemon.metrics());
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaMemset"}}),
            4);
  EXPECT_EQ(find_sample(samples, "stallwatch_traced_processes", {}), 0);
  // Bounded wait for the detach (linger 500 ms, then the detach itself).
  std::optional<double> libs;
  for (int i = 0; i < 200; ++i) {
    libs = find_sample(parse_exposition(daemon.metrics()), "stallwatch_attached_libraries", {});
    if (libs == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(libs, 0) << daemon.log_path();
  EXPECT_EQ(find_sample(parse_exposition(daemon.metrics()), "stallwatch_attached_probes", {}), 0);
  EXPECT_EQ(find_sample(parse_exposition(daemon.metrics()),
                        "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaMemset"}}),
            4);
  // The exited process's statistics slot was zeroed and freed: the next process takes it
  // (issue #19) and counts from 0, while the first keeps its 4 in its cgroup's totals.
  TestCgroup next(unique("exit-next"));
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "500", "--calls", "cudaMemset:3"};
  s.cgroup_dir = next.dir();
  ASSERT_EQ(wait_exit(spawn(s)), 0);
  ASSERT_TRUE(daemon.wait_windows());
  samples = parse_exposition(daemon.metrics());
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", next.label()}, {"call", "cudaMemset"}}),
            3);
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaMemset"}}),
            4);
  EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
}

// Issue #19: the library files of a --library-dirs directory get their probes at start, before
// any process maps them: a process that calls right after its dlopen (no start delay) has
// every call counted, and the file keeps its probes while no process maps it.
TEST(Preattach, LibraryDirsAreAttachedBeforeUseSoNoFirstCallIsLost) {
  char dir[] = "/tmp/stallwatch-preattach-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string copy = std::string(dir) + "/libcudart.so.12", out = std::string(dir) + "/out";
  {
    std::ifstream in(kCudart, std::ios::binary);
    std::ofstream to(copy, std::ios::binary);
    to << in.rdbuf();
  }
  // --attach-on-disk=false: only the directory named, whatever the standard ones hold.
  Daemon daemon({"--window", "500ms", "--library-dirs", dir, "--detach-linger", "500ms",
                 "--attach-on-disk", "false"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_path();
  EXPECT_NE(slurp(daemon.log_path()).find(copy + " (runtime, on disk, before any process maps it)"),
            std::string::npos)
      << slurp(daemon.log_path());
  // Kernels with multi-uprobe links (their link type is in vmlinux BTF) get one link per file
  // and direction (issue #19).
  if (slurp("/sys/kernel/btf/vmlinux").find("bpf_uprobe_multi_link") != std::string::npos) {
    EXPECT_NE(slurp(daemon.log_path()).find("call probes: one multi-uprobe link per library file"),
              std::string::npos)
        << slurp(daemon.log_path());
  }
  TestCgroup cg(unique("preattach"));
  Spawn s;
  s.argv = {STACK_APP_BIN, copy, "3000"};  // dlopen, then 3,000 syncs at once
  s.cgroup_dir = cg.dir();
  s.output_path = out;
  Child app(s);
  ASSERT_TRUE(poll_until([&] { return slurp(out).find("done") != std::string::npos; },
                         std::chrono::seconds(30)));
  ASSERT_TRUE(daemon.wait_windows(2)) << daemon.log_path();
  EXPECT_EQ(find_sample(parse_exposition(daemon.metrics()),
                        "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaStreamSynchronize"}}),
            3000);
  app.stop();
  // Unmapped for longer than the linger: still attached, ready for the next process.
  ASSERT_TRUE(daemon.wait_windows(4)) << daemon.log_path();
  EXPECT_EQ(find_sample(parse_exposition(daemon.metrics()), "stallwatch_attached_libraries", {}), 1);
  EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
  unlink(copy.c_str());
  unlink(out.c_str());
  rmdir(dir);
}

// Issue #40: where the kernel has multi-uprobe links, the default attaches the standard
// directories' CUDA libraries at start (those `check` lists): NVIDIA's own libcudart, loaded and
// called at once (no start delay), has every call counted. It was 0 of 7 cudaMalloc before.
// The toolkit's runtime fails each call here (no driver); its probes fire all the same.
TEST(Preattach, StandardDirectoriesAreAttachedByDefaultWithMultiUprobeLinks) {
  if (slurp("/sys/kernel/btf/vmlinux").find("bpf_uprobe_multi_link") == std::string::npos) {
    GTEST_SKIP() << "this kernel has no multi-uprobe links: the default stays off (check says why)";
  }
  std::string toolkit;
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib"}) {
    const std::string path = std::string(dir) + "/libcudart.so.13";
    if (access(path.c_str(), R_OK) == 0) toolkit = path;
  }
  if (toolkit.empty()) GTEST_SKIP() << "no CUDA 13 toolkit runtime under /usr/local/cuda";
  char* real = realpath(toolkit.c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  const std::string canonical = real;
  free(real);
  Daemon daemon({"--window", "500ms"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_path();
  const std::string log = slurp(daemon.log_path());
  EXPECT_NE(log.find("CUDA libraries of the standard directories: attached at start"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("tracing " + canonical + " (runtime, on disk, before any process maps it)"),
            std::string::npos)
      << log;
  TestCgroup cg(unique("toolkit"));
  Spawn s;
  s.argv = {WORKLOAD_BIN, "--cudart", toolkit, "--calls", "cudaMalloc:7,cudaStreamSynchronize:3"};
  s.cgroup_dir = cg.dir();
  ASSERT_EQ(wait_exit(spawn(s), std::chrono::seconds(60)), 0);
  ASSERT_TRUE(daemon.wait_windows(2)) << daemon.log_path();
  const auto samples = parse_exposition(daemon.metrics());
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaMalloc"}}),
            7);
  EXPECT_EQ(find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", cg.label()}, {"call", "cudaStreamSynchronize"}}),
            3);
  EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
}

// Past --max-cgroups, new cgroups fold into one overflow series instead of adding series.
TEST(Cardinality, CgroupsPastTheLimitFoldIntoOverflow) {
  Daemon daemon({"--max-cgroups", "1"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_path();
  TestCgroup first(unique("limit-1")), second(unique("limit-2")), third(unique("limit-3"));
  int calls = 3;
  for (const TestCgroup* cg : {&first, &second, &third}) {
    Spawn s;
    s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--start-delay-ms", "500", "--calls",
              "cudaEventSynchronize:" + std::to_string(calls++)};
    s.cgroup_dir = cg->dir();
    ASSERT_EQ(wait_exit(spawn(s)), 0);
  }
  ASSERT_TRUE(daemon.wait_windows());
  auto samples = parse_exposition(daemon.metrics());
  auto count = [&](const std::string& cgroup) {
    return find_sample(samples, "stallwatch_cuda_call_duration_seconds_count",
                       {{"cgroup", cgroup}, {"call", "cudaEventSynchronize"}});
  };
  EXPECT_EQ(count(first.label()), 3);
  EXPECT_EQ(count(second.label()), std::nullopt);
  EXPECT_EQ(count(third.label()), std::nullopt);
  EXPECT_EQ(count("_overflow"), 4 + 5);
  EXPECT_EQ(daemon.stop(), 0) << daemon.log_path();
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
