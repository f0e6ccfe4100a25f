// Privileged tier, GPU memory and CUDA Graphs (issue #20): the stand-in libraries hand out
// memory of known sizes through every allocating call; the daemon's counters must give exactly
// those bytes, allocated and freed by allocating call, live by api and kind while the process
// holds them and nothing once it exits; an allocation nested in another (the runtime reaching
// the driver) counts once. An out-of-memory return opens a cuda_oom chain naming the request
// and the largest holder; graphs rebuilt every step open graph_recapture while a loop that
// launches one graph built once does not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "common/json.h"
#include "support/evidence.h"
#include "support/harness.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

using namespace std::chrono_literals;

const std::string kCudart = std::string(MOCK_DIR) + "/libcudart.so.12";
const std::string kCuda = std::string(MOCK_DIR) + "/libcuda.so.1";
constexpr double kMiB = 1048576;

std::string unique(const std::string& name) {
  return suite_cgroup("gpumem-" + name);
}

// The chains of `kind` in `cgroup`, as explain --json gives them.
std::vector<Json> chains_json(const Daemon& d, const std::string& kind, const std::string& cgroup,
                              std::string* raw) {
  run_command({STALLWATCH_BIN, "explain", "--db", d.db_path(), "--since", "1h", "--json"}, raw,
              30s);
  std::vector<Json> out;
  const Json doc = Json::parse(*raw, nullptr, false);
  if (doc.is_discarded() || !doc.contains("chains")) return out;
  for (const auto& c : doc["chains"]) {
    if (c["kind"] == kind && c["cgroup"] == cgroup) out.push_back(c);
  }
  return out;
}

class GpuMemory : public DaemonSuite {
 protected:
  static double metric(const std::vector<Sample>& x, const std::string& name,
                       const std::string& cgroup, std::map<std::string, std::string> labels) {
    labels["cgroup"] = cgroup;
    return find_sample(x, name, labels).value_or(-1);
  }
};

TEST_F(GpuMemory, ExactBytesByCallAndKindReleasedAtExit) {
  TestCgroup cg(unique("bytes"));
  Pipe exit_pipe;
  Spawn s;
  // Held at the end (newest freed first): runtime device 3 MiB + 8 KiB pitched, pinned host
  // 1 MiB, cuMemCreate 1 MiB, managed 1 MiB. cudaMalloc reaches cuMemAlloc_v2 underneath.
  s.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--cuda", kCuda, "--alloc-bytes", "1048576",
            "--warmup-calls",
            "cudaMallocPitch:1,cudaMalloc:4,cudaMallocHost:2,cuMemCreate:3,cuMemAllocManaged:1",
            "--calls", "cudaFree:1,cudaFreeHost:1,cuMemRelease:2", "--start-delay-ms", "1000",
            "--exit-fd", std::to_string(exit_pipe.read_end)};
  s.env = {{"MOCK_CUDART_DRIVER", kCuda}};
  s.pass_fds = {exit_pipe.read_end};
  s.cgroup_dir = cg.dir();
  Child w(s);
  exit_pipe.close_read();
  const std::string c = cg.label();
  const std::string alloc = "stallwatch_cuda_memory_allocated_bytes_total";
  const std::string freed = "stallwatch_cuda_memory_freed_bytes_total";
  const std::string live = "stallwatch_cuda_memory_live_bytes";
  std::vector<Sample> x;
  ASSERT_TRUE(poll_until(
      [&] {
        x = parse_exposition(daemon_->metrics());
        return metric(x, freed, c, {{"call", "cuMemCreate"}}) == 2 * kMiB &&
               metric(x, live, c, {{"api", "runtime"}, {"kind", "device"}}) == 3 * kMiB + 8192;
      },
      30s))
      << "log: " << daemon_->log_path();
  EXPECT_EQ(metric(x, alloc, c, {{"api", "runtime"}, {"call", "cudaMalloc"}}), 4 * kMiB);
  EXPECT_EQ(metric(x, freed, c, {{"api", "runtime"}, {"call", "cudaMalloc"}}), 1 * kMiB);
  EXPECT_EQ(metric(x, alloc, c, {{"call", "cudaMallocPitch"}}), 8192) << "pitch 1024 x 8 rows";
  EXPECT_EQ(metric(x, freed, c, {{"call", "cudaMallocPitch"}}), 0);
  EXPECT_EQ(metric(x, alloc, c, {{"call", "cudaMallocHost"}}), 2 * kMiB);
  EXPECT_EQ(metric(x, freed, c, {{"call", "cudaMallocHost"}}), 1 * kMiB);
  EXPECT_EQ(metric(x, alloc, c, {{"api", "driver"}, {"call", "cuMemCreate"}}), 3 * kMiB);
  EXPECT_EQ(metric(x, alloc, c, {{"api", "driver"}, {"call", "cuMemAllocManaged"}}), 1 * kMiB);
  EXPECT_EQ(metric(x, live, c, {{"api", "runtime"}, {"kind", "host"}}), 1 * kMiB);
  EXPECT_EQ(metric(x, live, c, {{"api", "driver"}, {"kind", "device"}}), 1 * kMiB);
  EXPECT_EQ(metric(x, live, c, {{"api", "driver"}, {"kind", "managed"}}), 1 * kMiB);
  // The four cudaMalloc and one cudaFree reached the driver: timed there, not counted twice.
  EXPECT_EQ(metric(x, "stallwatch_cuda_call_duration_seconds_count", c,
                   {{"api", "driver"}, {"call", "cuMemAlloc_v2"}}),
            4);
  EXPECT_EQ(metric(x, alloc, c, {{"call", "cuMemAlloc_v2"}}), -1) << "counted once";
  EXPECT_EQ(sum_samples(x, "stallwatch_cuda_memory_alloc_failures_total", {{"cgroup", c}}), 0);

  // Exit without freeing: live drops to zero, the counters stay.
  ASSERT_TRUE(write_byte(exit_pipe.write_end));
  ASSERT_EQ(w.wait(30s), 0);
  ASSERT_TRUE(poll_until(
      [&] {
        x = parse_exposition(daemon_->metrics());
        return sum_samples(x, live, {{"cgroup", c}}) == 0;
      },
      20s))
      << "live bytes after exit: " << sum_samples(x, live, {{"cgroup", c}});
  EXPECT_EQ(metric(x, alloc, c, {{"api", "runtime"}, {"call", "cudaMalloc"}}), 4 * kMiB);
  EXPECT_EQ(metric(x, freed, c, {{"api", "runtime"}, {"call", "cudaMalloc"}}), 1 * kMiB);
  EXPECT_EQ(sum_samples(x, "stallwatch_events_lost_total", {{"source", "alloc_map_full"}}), 0);
  std::string raw;
  EXPECT_TRUE(chains_json(*daemon_, "cuda_oom", c, &raw).empty()) << raw;
}

TEST_F(GpuMemory, OutOfMemoryOpensCudaOomNamingRequestAndHolder) {
  TestCgroup cg(unique("oom"));
  Pipe exit_pipe, ready;
  Spawn holder;
  holder.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--alloc-bytes", "67108864",
                 "--warmup-calls", "cudaMalloc:1", "--calls", "cudaStreamSynchronize:1",
                 "--start-delay-ms", "1000", "--ready-fd", std::to_string(ready.write_end),
                 "--exit-fd", std::to_string(exit_pipe.read_end)};
  holder.pass_fds = {exit_pipe.read_end, ready.write_end};
  holder.cgroup_dir = cg.dir();
  Child h(holder);
  exit_pipe.close_read();
  ready.close_write();
  ASSERT_TRUE(read_byte(ready.read_end, 30s));
  const std::string c = cg.label();
  std::vector<Sample> x;
  ASSERT_TRUE(poll_until(
      [&] {
        x = parse_exposition(daemon_->metrics());
        return sum_samples(x, "stallwatch_cuda_memory_live_bytes", {{"cgroup", c}}) == 64 * kMiB;
      },
      30s));
  Spawn failing;
  failing.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--alloc-bytes", "2147483648", "--calls",
                  "cudaMalloc:3", "--start-delay-ms", "200"};
  failing.env = {{"MOCK_CUDA_OOM_ABOVE", "1073741824"}};
  failing.cgroup_dir = cg.dir();
  Child f(failing);
  const int failing_pid = f.pid();
  ASSERT_EQ(f.wait(30s), 0);
  std::string raw;
  std::vector<Json> chains;
  ASSERT_TRUE(poll_until([&] { return !(chains = chains_json(*daemon_, "cuda_oom", c, &raw)).empty(); },
                         30s, 500ms))
      << raw;
  ASSERT_EQ(chains.size(), 1u) << raw;
  const Json& ch = chains[0];
  std::cout << "cuda_oom: " << ch["summary"].get<std::string>() << "\n  "
            << ch["root_cause"].get<std::string>() << "\n";
  EXPECT_EQ(ch["severity"], "high");
  EXPECT_EQ(ch["pid"], failing_pid);
  EXPECT_EQ(ch["call"], "cudaMalloc");
  EXPECT_EQ(ch["evidence"].value("failures", -1.0), 3);
  EXPECT_EQ(ch["evidence"].value("request_bytes", -1.0), 2048 * kMiB);
  EXPECT_EQ(ch["evidence"].value("workload_live_bytes", -1.0), 64 * kMiB);
  const std::string root = ch["root_cause"].get<std::string>();
  EXPECT_NE(root.find("cudaMalloc of 2 GiB"), std::string::npos) << root;
  EXPECT_NE(root.find("(PID " + std::to_string(h.pid()) + ") 64 MiB"), std::string::npos) << root;
  x = parse_exposition(daemon_->metrics());
  EXPECT_EQ(metric(x, "stallwatch_cuda_memory_alloc_failures_total", c,
                   {{"api", "runtime"}, {"call", "cudaMalloc"}}),
            3);
  EXPECT_EQ(metric(x, "stallwatch_cuda_memory_allocated_bytes_total", c,
                   {{"api", "runtime"}, {"call", "cudaMalloc"}}),
            64 * kMiB)
      << "failed allocations hand out nothing";
  ASSERT_TRUE(write_byte(exit_pipe.write_end));
  EXPECT_EQ(h.wait(30s), 0);
}

TEST_F(GpuMemory, GraphsRebuiltEveryStepOpenGraphRecaptureSteadyLaunchesDoNot) {
  TestCgroup churn_cg(unique("recapture")), steady_cg(unique("steady"));
  // ~12 s each: warm-up (12 windows of 500 ms after the first build) and then the pattern.
  Spawn churn;
  churn.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--calls",
                "cudaStreamBeginCapture:1,cudaLaunchKernel:4,cudaStreamEndCapture:1,"
                "cudaGraphInstantiate:1,cudaGraphLaunch:1,cudaStreamSynchronize:1",
                "--iterations", "600", "--spacing-us", "2000"};
  churn.env = {{"MOCK_CUDA_INSTANTIATE_CPU_US", "3000"}, {"MOCK_CUDA_SYNC_CPU_US", "500"}};
  churn.cgroup_dir = churn_cg.dir();
  Spawn steady;
  steady.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--warmup-calls",
                 "cudaStreamBeginCapture:1,cudaLaunchKernel:4,cudaStreamEndCapture:1,"
                 "cudaGraphInstantiate:1",
                 "--calls", "cudaGraphLaunch:1,cudaStreamSynchronize:1", "--iterations", "1300",
                 "--spacing-us", "4000"};
  steady.env = {{"MOCK_CUDA_INSTANTIATE_CPU_US", "3000"}, {"MOCK_CUDA_SYNC_CPU_US", "500"}};
  steady.cgroup_dir = steady_cg.dir();
  Child a(churn), b(steady);
  std::string raw;
  std::vector<Json> chains;
  ASSERT_TRUE(poll_until(
      [&] {
        return !(chains = chains_json(*daemon_, "graph_recapture", churn_cg.label(), &raw)).empty();
      },
      45s, 1000ms))
      << raw;
  const Json& ch = chains[0];
  std::cout << "graph_recapture: " << ch["summary"].get<std::string>() << "\n  "
            << ch["root_cause"].get<std::string>() << "\n";
  EXPECT_EQ(ch["pid"], a.pid());
  EXPECT_GE(ch["evidence"].value("windows_with_builds", -1.0), 3);
  EXPECT_GE(ch["evidence"].value("build_share", -1.0), 0.10);
  EXPECT_NE(ch["recommendation"].get<std::string>().find("mark_dynamic"), std::string::npos);
  EXPECT_EQ(a.wait(60s), 0);
  EXPECT_EQ(b.wait(60s), 0);
  ASSERT_TRUE(daemon_->wait_windows(2));
  auto x = parse_exposition(daemon_->metrics());
  EXPECT_EQ(sum_samples(x, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", steady_cg.label()}, {"call", "cudaGraphInstantiate"}}),
            1)
      << "the steady loop built its graph once";
  EXPECT_EQ(sum_samples(x, "stallwatch_cuda_call_duration_seconds_count",
                        {{"cgroup", churn_cg.label()}, {"call", "cudaGraphInstantiate"}}),
            600);
  EXPECT_EQ(chains_total(x, steady_cg.label(), "graph_recapture"), 0)
      << chains_json(*daemon_, "graph_recapture", steady_cg.label(), &raw).size() << raw;
}

// A process that allocates 2 MiB every 200 ms for 24 s keeps growing; one that takes 128 MiB at
// once and then allocates and frees in pairs holds steady. explain --per-process names the first
// (memory_growth) and not the second, from the store's memory_windows.
TEST_F(GpuMemory, GrowingProcessIsNamedOneThatPlateausIsNot) {
  TestCgroup grow_cg(unique("grow")), flat_cg(unique("flat"));
  Spawn grow;
  grow.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--alloc-bytes", "2097152", "--calls",
               "cudaMalloc:1", "--iterations", "120", "--spacing-us", "200000",
               "--start-delay-ms", "1000"};
  grow.cgroup_dir = grow_cg.dir();
  Spawn flat;
  flat.argv = {WORKLOAD_BIN, "--cudart", kCudart, "--alloc-bytes", "2097152", "--warmup-calls",
               "cudaMalloc:64", "--calls", "cudaMalloc:1,cudaFree:1", "--iterations", "120",
               "--spacing-us", "100000", "--start-delay-ms", "1000"};
  flat.cgroup_dir = flat_cg.dir();
  Child a(grow), b(flat);
  const int grow_pid = a.pid(), flat_pid = b.pid();
  ASSERT_EQ(a.wait(60s), 0);
  ASSERT_EQ(b.wait(60s), 0);
  ASSERT_TRUE(daemon_->wait_windows(2));
  std::string raw;
  ASSERT_EQ(run_command({STALLWATCH_BIN, "explain", "--db", daemon_->db_path(), "--since", "1h",
                         "--per-process", "--json"},
                        &raw, 30s),
            0)
      << raw;
  const Json doc = Json::parse(raw, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << raw;
  const Json* grower = nullptr;
  const Json* steady = nullptr;
  for (const auto& p : doc["processes"]) {
    if (p["pid"] == grow_pid && p["cgroup"] == grow_cg.label()) grower = &p;
    if (p["pid"] == flat_pid && p["cgroup"] == flat_cg.label()) steady = &p;
  }
  ASSERT_NE(grower, nullptr) << raw;
  ASSERT_NE(steady, nullptr) << raw;
  ASSERT_TRUE(grower->contains("memory")) << grower->dump();
  const Json& gm = (*grower)["memory"];
  // 240 MiB in all; what it allocated after the last window it was seen alive in is in the
  // workload's counters, not in a per-process row.
  EXPECT_GE(gm["allocated_bytes"].get<double>(), 230 * kMiB);
  EXPECT_LE(gm["allocated_bytes"].get<double>(), 240 * kMiB);
  EXPECT_EQ(gm["freed_bytes"], 0);
  ASSERT_TRUE(gm.contains("memory_growth")) << gm.dump();
  const double rate = gm["memory_growth"]["bytes_per_s"].get<double>();
  std::cout << "memory_growth: " << gm["memory_growth"].dump() << "\n";
  EXPECT_GT(rate, 7 * kMiB) << "2 MiB every 200 ms and a little more: 10 MiB/s at most";
  EXPECT_LT(rate, 10.5 * kMiB);
  ASSERT_TRUE(steady->contains("memory")) << steady->dump();
  const double peak = (*steady)["memory"]["peak_bytes"].get<double>();
  EXPECT_GE(peak, 128 * kMiB);
  EXPECT_LE(peak, 130 * kMiB) << "128 MiB + at most one 2 MiB pair in flight";
  EXPECT_FALSE((*steady)["memory"].contains("memory_growth")) << steady->dump();
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
