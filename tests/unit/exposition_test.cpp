// Unit tests for metrics/exposition.h: a synthetic Snapshot rendered to the Prometheus text
// format, checked line by line (labels appear in the order exposition.cpp gives them) and by
// `promtool check metrics`.
#include "metrics/exposition.h"
#include "metrics/text_format.h"
#include "oracle/gunzip.h"
#include "oracle/prometheus_oracle.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <cstring>

#include "trace/records.h"
#include "identity/cgroup_identity.h"
#include "metrics/http_server.h"
#include "trace/calls.h"

extern "C" {  // the kernel's constants, which these tests hold the user-space side to
#include <linux/types.h>

#include "bpf/stallwatch.h"
}

namespace stallwatch::metrics {
namespace {

constexpr std::string_view kContainerId =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kContainerCgroup =
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-" +
    std::string(kContainerId) + ".scope";
// Its `workload` key: the pod UID and the short container id (no Kubernetes names here).
const std::string kPodKey = "pod/1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/0123456789ab";

// Every label and every bound, one series per call: what the defaults were before issue #37,
// and what these tests of the writer read.
ExpositionOptions detailed() {
  ExpositionOptions o;
  o.cgroup = o.container_id = o.per_call = true;
  o.ladder_step = 1;
  return o;
}

std::uint32_t call_id(std::string_view name) {
  const auto calls = trace::all_calls();
  for (std::uint32_t i = 0; i < calls.size(); ++i) {
    if (calls[i].name == name) return i;
  }
  ADD_FAILURE() << name << " is not a traced call";
  return 0;
}

Snapshot synthetic_snapshot() {
  Snapshot snap;
  snap.sequence = 42;
  snap.outliers = 17;
  snap.traced_processes = 3;
  snap.attached_libraries = 2;
  snap.attached_probes = 50;
  for (unsigned i = 0; i < SW_LOST_MAX; ++i) snap.lost[i] = 10 + i;
  for (unsigned i = 0; i < SW_LRU_MAX; ++i) snap.evicted[i] = 30 + i;

  Series& root = snap.series["/"];
  root.identity = identity::parse_cgroup_path("/");
  CallTotals malloc_totals;
  malloc_totals.count = 3;
  malloc_totals.sum_ns = 1'500'000;         // 0.0015 s
  malloc_totals.runnable_ns = 250'000'000;  // 0.25 s
  malloc_totals.blocked_ns = 125'000'000;   // 0.125 s
  malloc_totals.buckets[5] = 1;             // 2^-25 s: below the exported range, folds into 2^-20
  malloc_totals.buckets[20] = 1;            // 2^-10 s = 0.0009765625
  malloc_totals.buckets[26] = 1;            // 2^-4 s = 0.0625
  root.calls[call_id("cudaMalloc")] = malloc_totals;
  CallTotals launch_totals;
  launch_totals.count = 2;
  launch_totals.sum_ns = 300'000'000'000;  // 300 s
  launch_totals.buckets[36] = 1;           // 2^6 s = 64, the last exported bound
  launch_totals.buckets[38] = 1;           // 2^8 s: above the exported range, +Inf
  root.calls[call_id("cuLaunchKernel")] = launch_totals;
  root.calls[9999] = launch_totals;        // not a call id: skipped
  root.offcpu.runnable_ns = 500'000'000;   // 0.5 s
  root.offcpu.blocked_ns = 1'250'000'000;  // 1.25 s
  root.runnable_ratio = 0.25;
  root.blocked_ratio = 0.5;

  Series& pod = snap.series[kContainerCgroup];
  pod.identity = identity::parse_cgroup_path(kContainerCgroup);
  CallTotals memcpy_totals;
  memcpy_totals.count = 2;
  memcpy_totals.sum_ns = 4'000'000;  // 0.004 s
  memcpy_totals.buckets[22] = 2;     // 2^-8 s = 0.00390625
  pod.calls[call_id("cudaMemcpyAsync")] = memcpy_totals;
  pod.offcpu.runnable_ns = 2'000'000'000;
  return snap;
}

std::string rendered() {
  return render_exposition(synthetic_snapshot(), {"1.2.3", "abc"}, detailed());
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whether `text` has `line` as one whole line.
::testing::AssertionResult HasLine(const std::string& text, const std::string& line) {
  for (const std::string& l : lines_of(text)) {
    if (l == line) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no line\n  " << line << "\nin\n" << text;
}

TEST(ExpositionTest, HistogramCountSumAndInf) {
  const std::string text = rendered();
  const std::string root = R"(workload="/",cgroup="/",api="runtime",class="memory",call="cudaMalloc")";
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_count{" + root + "} 3"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_sum{" + root + "} 0.0015"));
  EXPECT_TRUE(
      HasLine(text, "stallwatch_cuda_call_duration_seconds_bucket{" + root + R"(,le="+Inf"} 3)"));
  EXPECT_TRUE(HasLine(text, R"(# TYPE stallwatch_cuda_call_duration_seconds histogram)"));
}

TEST(ExpositionTest, CumulativeBuckets) {
  const std::string text = rendered();
  const auto bucket = [](const std::string& labels, const char* le, int v) {
    return "stallwatch_cuda_call_duration_seconds_bucket{" + labels + R"(,le=")" + le + "\"} " +
           std::to_string(v);
  };
  const std::string malloc_labels = R"(workload="/",cgroup="/",api="runtime",class="memory",call="cudaMalloc")";
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "9.5367431640625e-07", 1)));  // folded from 2^-25
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.00048828125", 1)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.0009765625", 2)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.03125", 2)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.0625", 3)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "1", 3)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "64", 3)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "+Inf", 3)));

  const std::string launch_labels = R"(workload="/",cgroup="/",api="driver",class="launch",call="cuLaunchKernel")";
  EXPECT_TRUE(HasLine(text, bucket(launch_labels, "32", 0)));
  EXPECT_TRUE(HasLine(text, bucket(launch_labels, "64", 1)));
  EXPECT_TRUE(HasLine(text, bucket(launch_labels, "+Inf", 2)));  // 2^8 s lands in +Inf only
  EXPECT_TRUE(
      HasLine(text, "stallwatch_cuda_call_duration_seconds_count{" + launch_labels + "} 2"));
  EXPECT_TRUE(
      HasLine(text, "stallwatch_cuda_call_duration_seconds_sum{" + launch_labels + "} 300"));

  // 27 finite bounds and +Inf per histogram; three histograms (the unknown call id is skipped).
  std::size_t buckets = 0;
  for (const std::string& l : lines_of(text)) {
    buckets += l.starts_with("stallwatch_cuda_call_duration_seconds_bucket{");
  }
  EXPECT_EQ(buckets, 3u * 28u);
}

TEST(ExpositionTest, ContainerIdOnlyOnContainerSeries) {
  const std::string text = rendered();
  const std::string pod =
      "workload=\"" + kPodKey + "\",cgroup=\"" + kContainerCgroup + "\",container_id=\"" + std::string(kContainerId) + "\"";
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_count{" + pod +
                                R"(,api="runtime",class="copy",call="cudaMemcpyAsync"} 2)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_bucket{" + pod +
                                R"(,api="runtime",class="copy",call="cudaMemcpyAsync",le="0.001953125"} 0)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_bucket{" + pod +
                                R"(,api="runtime",class="copy",call="cudaMemcpyAsync",le="0.00390625"} 2)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_offcpu_seconds_total{" + pod + R"(,state="runnable"} 2)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cgroup_info{" + pod +
                                R"(,pod_uid="1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901",)"
                                R"(runtime="containerd",systemd_unit="",slurm_job="",)"
                                R"(slurm_step=""} 1)"));
  std::size_t root_lines = 0, pod_lines = 0;
  for (const std::string& l : lines_of(text)) {
    if (l.find(R"({workload="/",cgroup="/",)") != std::string::npos) {
      ++root_lines;
      EXPECT_EQ(l.find("container_id"), std::string::npos) << l;
    }
    if (l.find("{workload=\"" + kPodKey + "\",cgroup=\"" + kContainerCgroup + "\",") != std::string::npos) {
      ++pod_lines;
      EXPECT_NE(l.find(pod), std::string::npos) << l;
    }
  }
  // Root: 2 histograms x 30 lines, 4 call off-CPU, 2 off-CPU, 2 ratio, 1 info.
  EXPECT_EQ(root_lines, 2u * 30u + 4u + 2u + 2u + 1u);
  // Container: 1 histogram x 30 lines, 2 call off-CPU, 2 off-CPU, 2 ratio, 1 info, 1 starvation
  // ratio (the root's has no label after cgroup, so the count above does not see it).
  EXPECT_EQ(pod_lines, 30u + 2u + 2u + 2u + 1u + 1u);
}

TEST(ExpositionTest, OffCpuAndRatios) {
  const std::string text = rendered();
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_seconds_total{workload="/",cgroup="/",state="runnable"} 0.5)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_seconds_total{workload="/",cgroup="/",state="blocked"} 1.25)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_offcpu_seconds_total{workload="/",cgroup="/",)"
                            R"(api="runtime",class="memory",call="cudaMalloc",state="runnable"} 0.25)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_offcpu_seconds_total{workload="/",cgroup="/",)"
                            R"(api="runtime",class="memory",call="cudaMalloc",state="blocked"} 0.125)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_ratio{workload="/",cgroup="/",state="runnable"} 0.25)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_ratio{workload="/",cgroup="/",state="blocked"} 0.5)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cgroup_info{workload="/",cgroup="/",pod_uid="",runtime="",)"
                            R"(systemd_unit="",slurm_job="",slurm_step=""} 1)"));
}

// --metrics.identity-labels none and --metrics.histogram-ladder x16: series keep only
// `workload`, stallwatch_cgroup_info keeps the cgroup path and container_id for joins, and
// histograms have 7 finite bounds (2^-20 .. 2^4 s) plus +Inf with the same cumulative counts
// where they coincide.
TEST(ExpositionTest, IdentityLabelsAndLadderAreTheDeploymentsChoice) {
  ExpositionOptions o;
  o.pod = o.pod_namespace = o.container = false;
  o.per_call = true;
  o.ladder_step = 4;
  const std::string text = render_exposition(synthetic_snapshot(), {"1.2.3", "abc"}, o);
  const std::string cg = "workload=\"" + kPodKey + "\"";
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_count{" + cg +
                                R"(,api="runtime",class="copy",call="cudaMemcpyAsync"} 2)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_offcpu_seconds_total{" + cg + R"(,state="runnable"} 2)"));
  EXPECT_EQ(text.find("container_id=\"" + std::string(kContainerId) + "\",api"), std::string::npos);
  EXPECT_NE(text.find("stallwatch_cgroup_info{" + cg + ",cgroup=\"" + kContainerCgroup +
                      "\",container_id=\"" + std::string(kContainerId)),
            std::string::npos)
      << "the info series keeps them";
  size_t buckets = 0;
  for (const std::string& l : lines_of(text)) {
    if (l.starts_with("stallwatch_cuda_call_duration_seconds_bucket{" + cg +
                      R"(,api="runtime",class="copy",call="cudaMemcpyAsync")")) {
      ++buckets;
    }
  }
  EXPECT_EQ(buckets, 8u);
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_bucket{" + cg +
                                R"(,api="runtime",class="copy",call="cudaMemcpyAsync",le="0.00390625"} 2)"));
  EXPECT_EQ(text.find(R"(le="0.001953125")"), std::string::npos) << "not on the x16 ladder";
}

// Issue #37's defaults: `workload` and the Kubernetes names (none known here), no cgroup path or
// container id beside them, calls merged per class (the root's cudaMalloc and cuLaunchKernel
// are one memory and one launch series), a bound every power of four.
TEST(ExpositionTest, DefaultsAreTheFleetShape) {
  const std::string text = render_exposition(synthetic_snapshot(), {"1.2.3", "abc"});
  EXPECT_EQ(text.find("call=\""), std::string::npos);
  EXPECT_EQ(text.find("container_id=\"" + std::string(kContainerId) + "\",api"), std::string::npos);
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_duration_seconds_count{workload="/",api="runtime",class="memory"} 3)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_duration_seconds_bucket{workload="/",api="runtime",class="memory",le="+Inf"} 3)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_count{workload=\"" + kPodKey +
                                R"(",api="runtime",class="copy"} 2)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_offcpu_seconds_total{workload="/",api="runtime",state="runnable"} 0.25)"));
  EXPECT_NE(text.find("stallwatch_cgroup_info{workload=\"" + kPodKey + "\",cgroup=\"" +
                      kContainerCgroup + "\",container_id=\""),
            std::string::npos);
  size_t buckets = 0;
  for (const std::string& l : lines_of(text)) {
    if (l.starts_with(R"(stallwatch_cuda_call_duration_seconds_bucket{workload="/",api="runtime",class="memory",)")) {
      ++buckets;
    }
  }
  EXPECT_EQ(buckets, 15u) << "14 bounds, 2^-20 .. 2^6 s, and +Inf";
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_duration_seconds_bucket{workload="/",api="runtime",class="memory",le="6.103515625e-05"} 1)"));
}

// Issue #37's budget: a training-loop-shaped workload (the calls of the H100 validation's loop,
// docs/validation.md: launches, copies, synchronizes and allocations at both layers, pinned
// host memory included; 15 distinct calls) costs at defaults at most 150 classic series on the
// text form and at most 40 series where the scraper keeps native histograms (one series each).
// Measured here: 145 and 33. The same workload cost 502 classic series before.
Snapshot training_loop_snapshot() {
  Snapshot snap;
  Series& s = snap.series[kContainerCgroup];
  s.identity = identity::parse_cgroup_path(kContainerCgroup);
  s.identity.pod = "llm-train-0";
  s.identity.pod_namespace = "ml-training";
  s.identity.container = "trainer";
  for (const char* name :
       {"cuLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cuMemcpyAsync",
        "cudaStreamSynchronize", "cuStreamSynchronize", "cudaDeviceSynchronize",
        "cuCtxSynchronize", "cudaEventSynchronize", "cudaMalloc", "cuMemAlloc_v2", "cudaFree",
        "cuMemFree_v2", "cudaHostAlloc", "cuMemHostAlloc"}) {
    const std::uint32_t id = call_id(name);
    CallTotals t;
    t.count = 1000;
    t.sum_ns = 7'000'000;
    t.buckets[17] = 990;
    t.buckets[27] = 10;
    t.runnable_ns = 1'000'000;
    t.blocked_ns = 2'000'000;
    if (trace::is_allocating_call(id)) t.alloc_bytes = 1 << 30;
    s.calls[id] = t;
    if (trace::is_allocating_call(id)) s.processes.push_back({1234, id, t});
  }
  s.offcpu.runnable_ns = 1'000'000;
  s.offcpu.blocked_ns = 2'000'000;
  return snap;
}

// Series of a workload in a text exposition: every sample line (classic), and with native
// histograms every line but the buckets and sums of histograms (their _count stands for one).
std::pair<size_t, size_t> series_of(const std::string& text, const std::string& workload) {
  size_t classic = 0, native = 0;
  std::set<std::string> histograms;
  std::string family;
  for (const std::string& l : lines_of(text)) {
    if (l.starts_with("# TYPE ")) {
      std::istringstream in(l.substr(7));
      std::string name, type;
      in >> name >> type;
      if (type == "histogram") histograms.insert(name);
      continue;
    }
    if (l.empty() || l[0] == '#' || l.find("workload=\"" + workload + "\"") == std::string::npos) {
      continue;
    }
    ++classic;
    const std::string name = l.substr(0, l.find('{'));
    bool part = false;
    for (const char* suffix : {"_bucket", "_sum"}) {
      if (name.ends_with(suffix) && histograms.count(name.substr(0, name.size() - std::strlen(suffix)))) {
        part = true;
      }
    }
    if (!part) ++native;
  }
  return {classic, native};
}

TEST(SeriesBudget, FifteenCallTrainingLoopAtDefaults) {
  const Snapshot snap = training_loop_snapshot();
  const std::string text = render_exposition(snap, {"1.2.3", "abc"});
  const std::string key = "ml-training/llm-train-0/trainer";
  const auto [classic, native] = series_of(text, key);
  EXPECT_LE(classic, 150u) << text;
  EXPECT_LE(native, 40u) << text;
  // Exactly: 7 duration histograms (runtime copy, sync, memory; driver launch, copy, sync,
  // memory) of 14 bounds + +Inf + _sum + _count; off-CPU in calls per api and state (4);
  // allocated, freed and failed allocations per api and kind of memory (3 x 4), live bytes (4);
  // off-CPU and its ratio per state (4), starvation (1), info (1).
  EXPECT_EQ(classic, 7u * 17u + 4u + 12u + 4u + 4u + 1u + 1u);
  EXPECT_EQ(native, 7u + 4u + 12u + 4u + 4u + 1u + 1u);
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_count{workload=\"" + key +
                                R"(",pod="llm-train-0",namespace="ml-training",container="trainer",)"
                                R"(api="driver",class="sync"} 2000)"));
  // The whole identity stays on the info series, for joins.
  EXPECT_NE(text.find("stallwatch_cgroup_info{workload=\"" + key + "\",cgroup=\"" +
                      kContainerCgroup + "\",container_id=\"" + std::string(kContainerId)),
            std::string::npos);
  // What it cost with every label, call and bound (the defaults before issue #37).
  const auto before = series_of(render_exposition(snap, {"1.2.3", "abc"}, detailed()), key);
  EXPECT_EQ(before.first, 15u * 30u + 15u * 2u + 4u * 3u + 4u + 4u + 1u + 1u);
}

// Two workloads of one key (a unit and a cgroup below it) go by their cgroup paths; a third
// keeps its short key.
TEST(SeriesBudget, WorkloadsSharingAKeyGoByTheirPaths) {
  Snapshot snap;
  for (const std::string cg : {"/system.slice/train.service", "/system.slice/train.service/worker",
                               "/system.slice/fluent-bit.service"}) {
    Series& s = snap.series[cg];
    s.identity = identity::parse_cgroup_path(cg);
    s.offcpu.runnable_ns = 1;
  }
  const std::string text = render_exposition(snap, {"1.2.3", "abc"});
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_seconds_total{workload="/system.slice/train.service",state="runnable"} 1e-09)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_seconds_total{workload="/system.slice/train.service/worker",state="runnable"} 1e-09)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_seconds_total{workload="fluent-bit.service",state="runnable"} 1e-09)"));
}

// An 8-GPU node with one such workload per GPU (docs/metrics.md "What a node costs"): the bytes of
// one scrape, text and gzip'd, at the defaults and as before.
TEST(SeriesBudget, EightGpuNode) {
  Snapshot node;
  const Snapshot one = training_loop_snapshot();
  for (int gpu = 0; gpu < 8; ++gpu) {
    std::string cgroup = kContainerCgroup;
    cgroup.replace(cgroup.size() - 7, 1, std::to_string(gpu));  // another container id
    Series s = one.series.begin()->second;
    s.identity = identity::parse_cgroup_path(cgroup);
    s.identity.pod = "llm-train-" + std::to_string(gpu);
    s.identity.pod_namespace = "ml-training";
    s.identity.container = "trainer";
    node.series[cgroup] = s;
  }
  const std::string text = render_exposition(node, {"1.2.3", "abc"});
  const std::string gz = render_exposition_gzip(node, {"1.2.3", "abc"}, {}, false, 1);
  const std::string old = render_exposition(node, {"1.2.3", "abc"}, detailed());
  const std::string old_gz = render_exposition_gzip(node, {"1.2.3", "abc"}, detailed(), false, 1);
  size_t series = 0;
  for (int gpu = 0; gpu < 8; ++gpu) {
    series += series_of(text, "ml-training/llm-train-" + std::to_string(gpu) + "/trainer").first;
  }
  EXPECT_EQ(series, 8u * 145u);
  std::printf("8 workloads: %zu classic series, text %zu bytes (%zu gzip'd); before: %zu (%zu)\n",
              series, text.size(), gz.size(), old.size(), old_gz.size());
  EXPECT_LT(text.size(), old.size() / 3);
}

// OpenMetrics text 1.0.0 (what a Prometheus without native histograms asks for first): counter
// families named without `_total`, buckets before count and sum, quotes escaped in HELP, # EOF.
TEST(ExpositionTest, OpenMetricsForm) {
  const std::string text = render_exposition(synthetic_snapshot(), {"1.2.3", "abc"}, detailed(), true);
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_outliers counter"));
  EXPECT_TRUE(HasLine(text, "stallwatch_outliers_total 17"));
  EXPECT_EQ(text.find("# TYPE stallwatch_outliers_total"), std::string::npos);
  EXPECT_TRUE(text.ends_with("\n# EOF\n"));
  const size_t bucket = text.find("stallwatch_cuda_call_duration_seconds_bucket{");
  const size_t count = text.find("stallwatch_cuda_call_duration_seconds_count{");
  ASSERT_NE(bucket, std::string::npos);
  EXPECT_LT(bucket, count) << "buckets first";
  EXPECT_EQ(text.find("(\"\" until known)"), std::string::npos);
  EXPECT_TRUE(accepts_openmetrics(
      "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
      "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"));
  EXPECT_FALSE(accepts_openmetrics("text/plain;version=0.0.4"));
  EXPECT_FALSE(accepts_openmetrics("application/openmetrics-text;q=0"));
  // The text form is what it was.
  EXPECT_EQ(render_exposition(synthetic_snapshot(), {"1.2.3", "abc"}, detailed(), false), rendered());
}

TEST(ExpositionTest, DaemonFamilies) {
  const std::string text = rendered();
  EXPECT_TRUE(HasLine(text, R"(stallwatch_build_info{version="1.2.3",revision="abc"} 1)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="outlier_ringbuf"} 10)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="discovery_ringbuf"} 11)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="call_map_full"} 12)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="offcpu_map_full"} 13)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="thread_state"} 14)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="call_nesting"} 15)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="host_ringbuf"} 16)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="host_map_full"} 17)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="watched_cgroups_full"} 18)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="library_limit"} 0)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="discovery_queue"} 0)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="preemptors_evicted"} 30)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="io_inflight_evicted"} 31)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="nccl_comms_evicted"} 32)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="reclaim_starts_evicted"} 33)"));
  EXPECT_EQ(text.find(R"(source="unknown")"), std::string::npos);
  EXPECT_TRUE(HasLine(text, "stallwatch_outliers_total 17"));
  EXPECT_TRUE(HasLine(text, "stallwatch_traced_processes 3"));
  EXPECT_TRUE(HasLine(text, "stallwatch_attached_libraries 2"));
  EXPECT_TRUE(HasLine(text, "stallwatch_attached_probes 50"));
  EXPECT_TRUE(HasLine(text, "stallwatch_snapshot_sequence 42"));
  std::size_t lost = 0;
  for (const std::string& l : lines_of(text))
    lost += l.starts_with("stallwatch_events_lost_total{");
  // + the daemon's three (library limit, discovery queue, thread failures) and the LRU maps' drops
  EXPECT_EQ(lost, static_cast<std::size_t>(SW_LOST_MAX) + 3 + SW_LRU_MAX);
  EXPECT_TRUE(HasLine(text, R"(stallwatch_events_lost_total{source="thread_failure"} 0)"));
}

TEST(ExpositionTest, LostSourceNames) {
  EXPECT_STREQ(trace::lost_source_name(SW_LOST_OUTLIER_RINGBUF), "outlier_ringbuf");
  EXPECT_STREQ(trace::lost_source_name(SW_LOST_NESTING), "call_nesting");
  EXPECT_STREQ(trace::lost_source_name(SW_LOST_HOST_RINGBUF), "host_ringbuf");
  EXPECT_STREQ(trace::lost_source_name(SW_LOST_HOST_MAP), "host_map_full");
  EXPECT_STREQ(trace::lost_source_name(SW_LOST_MAX), "unknown");
}

TEST(ExpositionTest, EmptySnapshot) {
  const std::string text = render_exposition(Snapshot{}, {"0.1.0", "unknown"});
  EXPECT_EQ(text.find("stallwatch_cuda_call_duration_seconds_bucket"), std::string::npos);
  EXPECT_EQ(text.find("cgroup="), std::string::npos);
  EXPECT_TRUE(HasLine(text, "stallwatch_snapshot_sequence 0"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_build_info{version="0.1.0",revision="unknown"} 1)"));
}

Snapshot odd_cgroup_snapshot() {
  Snapshot snap;
  Series& s = snap.series["/odd\"dir\\name\nx"];
  s.identity = identity::parse_cgroup_path("/odd\"dir\\name\nx");
  s.offcpu.runnable_ns = 1'000'000'000;
  return snap;
}

TEST(ExpositionTest, LabelEscaping) {
  const Snapshot snap = odd_cgroup_snapshot();
  ASSERT_EQ(snap.series.begin()->second.identity.cgroup, "/odd\"dir\\name\nx");
  const std::string text = render_exposition(snap, {"1.2.3", "abc"}, detailed());
  EXPECT_TRUE(HasLine(
      text, R"(stallwatch_offcpu_seconds_total{workload="/odd\"dir\\name\nx",cgroup="/odd\"dir\\name\nx",state="runnable"} 1)"));
}

// ---- Host-side families (issue 4) ----

const std::string kLoaderCgroup = "/system.slice/loader.service";

// Three series: the container's CUDA workload with every host field set; the root with CUDA
// calls only (no I/O, NCCL, reclaim, OOM, retransmits, and pressure not known); a data loader's
// cgroup with block I/O only (no CUDA-issuing threads).
Snapshot host_snapshot() {
  Snapshot snap;
  Series& pod = snap.series[kContainerCgroup];
  pod.identity = identity::parse_cgroup_path(kContainerCgroup);
  CallTotals sync;
  sync.count = 1;
  sync.sum_ns = 1'000'000;
  sync.buckets[20] = 1;
  pod.calls[call_id("cudaStreamSynchronize")] = sync;
  pod.offcpu.blocked_ns = 3'000'000'000;
  pod.starvation_ratio = 0.375;
  pod.reclaim.direct_ns = 1'500'000'000;  // 1.5 s
  pod.reclaim.direct_count = 3;
  pod.reclaim.memcg_ns = 250'000'000;  // 0.25 s
  pod.reclaim.memcg_count = 7;
  pod.reclaim.cuda_ns = 100'000'000;  // not exported
  pod.oom_kills = 3;
  pod.oom_kills_cuda = 1;
  pod.oom_victims.push_back(OomKill{4242, "python", true, 1'700'000'000'000'000'000});
  pod.pressure = PressureTotals{.known = true,
                                .cpu_some_ns = 2'000'000'000,
                                .cpu_full_ns = 500'000'000,
                                .memory_some_ns = 125'000'000,
                                .memory_full_ns = 62'500'000,
                                .io_some_ns = 4'000'000'000,
                                .io_full_ns = 3'000'000'000};
  IoTotals reads;
  reads.count = 3;
  reads.bytes = 12'288;
  reads.sum_ns = 6'000'000;  // 0.006 s
  reads.max_ns = 4'000'000;
  reads.buckets[18] = 1;  // 2^-12 s = 0.000244140625
  reads.buckets[22] = 2;  // 2^-8 s = 0.00390625
  pod.io[IoKey{"nvme0n1", "read"}] = reads;
  IoTotals flushes;
  flushes.count = 1;
  flushes.sum_ns = 200'000'000'000;  // 200 s
  flushes.buckets[38] = 1;           // (128, 256] s: above the exported range, +Inf only
  pod.io[IoKey{"nvme0n1", "flush"}] = flushes;
  pod.tcp_retransmits_ipv4 = 5;
  pod.tcp_retransmits_ipv6 = 2;
  NcclTotals allreduce;
  allreduce.count = 2;
  allreduce.bytes = 8'388'608;
  allreduce.sum_ns = 750'000'000;  // 0.75 s
  allreduce.buckets[29] = 1;       // 2^-1 s
  allreduce.buckets[30] = 1;       // 1 s
  pod.nccl[NcclKey{call_id("ncclAllReduce"), 1, 4}] = allreduce;
  NcclTotals send;
  send.count = 1;
  send.bytes = 1024;
  send.sum_ns = 500;
  send.buckets[5] = 1;  // below the exported range: folds into 2^-20
  pod.nccl[NcclKey{call_id("ncclSend"), -1, -1}] = send;
  pod.nccl[NcclKey{9999, 0, 2}] = send;  // not a call id: skipped

  Series& root = snap.series["/"];
  root.identity = identity::parse_cgroup_path("/");
  root.calls[call_id("cudaMalloc")] = sync;
  root.pressure.known = false;
  root.pressure.cpu_some_ns = 1'000'000'000;  // ignored while not known

  Series& loader = snap.series[kLoaderCgroup];
  loader.identity = identity::parse_cgroup_path(kLoaderCgroup);
  IoTotals writes;
  writes.count = 1;
  writes.bytes = 4096;
  writes.sum_ns = 1'000'000;
  writes.buckets[20] = 1;  // 2^-10 s
  loader.io[IoKey{"sda", "write"}] = writes;
  return snap;
}

std::string host_rendered() {
  return render_exposition(host_snapshot(), {"1.2.3", "abc"}, detailed());
}

std::string pod_labels() {
  return "workload=\"" + kPodKey + "\",cgroup=\"" + kContainerCgroup + "\",container_id=\"" + std::string(kContainerId) + "\"";
}

// The lines of `text` that are samples of `family` (any suffix) for cgroup `cgroup`.
std::vector<std::string> samples_of(const std::string& text, const std::string& family,
                                    const std::string& cgroup) {
  std::vector<std::string> out;
  for (const std::string& l : lines_of(text)) {
    if (l.starts_with(family) && l.find(",cgroup=\"" + cgroup + "\"") != std::string::npos) {
      out.push_back(l);
    }
  }
  return out;
}

TEST(ExpositionHostTest, StarvationRatio) {
  const std::string text = host_rendered();
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_gpu_starvation_ratio gauge"));
  EXPECT_TRUE(HasLine(text, "stallwatch_gpu_starvation_ratio{" + pod_labels() + "} 0.375"));
  // Every series with CUDA-issuing threads has it, 0 included; the loader (no CUDA) has not,
  // nor the CUDA-only off-CPU families.
  EXPECT_TRUE(HasLine(text, R"(stallwatch_gpu_starvation_ratio{workload="/",cgroup="/"} 0)"));
  EXPECT_TRUE(samples_of(text, "stallwatch_gpu_starvation_ratio", kLoaderCgroup).empty());
  EXPECT_TRUE(samples_of(text, "stallwatch_offcpu_", kLoaderCgroup).empty());
  EXPECT_EQ(samples_of(text, "stallwatch_cgroup_info", kLoaderCgroup).size(), 1u);
}

TEST(ExpositionHostTest, MemoryReclaimAndOom) {
  const std::string text = host_rendered();
  const std::string pod = pod_labels();
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_memory_reclaim_seconds_total counter"));
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_memory_reclaims_total counter"));
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_oom_kills_total counter"));
  EXPECT_TRUE(
      HasLine(text, "stallwatch_memory_reclaim_seconds_total{" + pod + R"(,kind="direct"} 1.5)"));
  EXPECT_TRUE(
      HasLine(text, "stallwatch_memory_reclaim_seconds_total{" + pod + R"(,kind="memcg"} 0.25)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_memory_reclaims_total{" + pod + R"(,kind="direct"} 3)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_memory_reclaims_total{" + pod + R"(,kind="memcg"} 7)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_oom_kills_total{" + pod + R"(,victim="cuda"} 1)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_oom_kills_total{" + pod + R"(,victim="other"} 2)"));
  EXPECT_EQ(samples_of(text, "stallwatch_memory_reclaim", kContainerCgroup).size(), 4u);
  EXPECT_EQ(samples_of(text, "stallwatch_oom_kills_total", kContainerCgroup).size(), 2u);
}

TEST(ExpositionHostTest, PressureOnlyWhenKnown) {
  const std::string text = host_rendered();
  const auto line = [&](const char* resource, const char* scope, const char* v) {
    return "stallwatch_pressure_stall_seconds_total{" + pod_labels() + ",resource=\"" + resource +
           "\",scope=\"" + scope + "\"} " + v;
  };
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_pressure_stall_seconds_total counter"));
  EXPECT_TRUE(HasLine(text, line("cpu", "some", "2")));
  EXPECT_TRUE(HasLine(text, line("cpu", "full", "0.5")));
  EXPECT_TRUE(HasLine(text, line("memory", "some", "0.125")));
  EXPECT_TRUE(HasLine(text, line("memory", "full", "0.0625")));
  EXPECT_TRUE(HasLine(text, line("io", "some", "4")));
  EXPECT_TRUE(HasLine(text, line("io", "full", "3")));
  EXPECT_EQ(samples_of(text, "stallwatch_pressure_", kContainerCgroup).size(), 6u);
  EXPECT_TRUE(samples_of(text, "stallwatch_pressure_", "/").empty());  // known = false
  EXPECT_TRUE(samples_of(text, "stallwatch_pressure_", kLoaderCgroup).empty());
}

TEST(ExpositionHostTest, BlockIo) {
  const std::string text = host_rendered();
  const std::string reads = pod_labels() + R"(,device="nvme0n1",op="read")";
  const std::string flushes = pod_labels() + R"(,device="nvme0n1",op="flush")";
  const auto bucket = [](const std::string& labels, const char* le, int v) {
    return "stallwatch_block_io_duration_seconds_bucket{" + labels + R"(,le=")" + le + "\"} " +
           std::to_string(v);
  };
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_block_io_duration_seconds histogram"));
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_block_io_bytes_total counter"));
  EXPECT_TRUE(HasLine(text, bucket(reads, "9.5367431640625e-07", 0)));
  EXPECT_TRUE(HasLine(text, bucket(reads, "0.0001220703125", 0)));
  EXPECT_TRUE(HasLine(text, bucket(reads, "0.000244140625", 1)));
  EXPECT_TRUE(HasLine(text, bucket(reads, "0.001953125", 1)));
  EXPECT_TRUE(HasLine(text, bucket(reads, "0.00390625", 3)));
  EXPECT_TRUE(HasLine(text, bucket(reads, "64", 3)));
  EXPECT_TRUE(HasLine(text, bucket(reads, "+Inf", 3)));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_duration_seconds_sum{" + reads + "} 0.006"));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_duration_seconds_count{" + reads + "} 3"));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_bytes_total{" + reads + "} 12288"));
  EXPECT_TRUE(HasLine(text, bucket(flushes, "64", 0)));
  EXPECT_TRUE(HasLine(text, bucket(flushes, "+Inf", 1)));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_duration_seconds_sum{" + flushes + "} 200"));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_duration_seconds_count{" + flushes + "} 1"));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_bytes_total{" + flushes + "} 0"));
  // The loader's own cgroup carries its I/O, without container_id.
  const std::string loader = "workload=\"loader.service\",cgroup=\"" + kLoaderCgroup + R"(",device="sda",op="write")";
  EXPECT_TRUE(HasLine(text, bucket(loader, "0.00048828125", 0)));
  EXPECT_TRUE(HasLine(text, bucket(loader, "0.0009765625", 1)));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_duration_seconds_count{" + loader + "} 1"));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_duration_seconds_sum{" + loader + "} 0.001"));
  EXPECT_TRUE(HasLine(text, "stallwatch_block_io_bytes_total{" + loader + "} 4096"));
  // 27 finite bounds + +Inf, _sum, _count per histogram: two in the pod, one in the loader.
  EXPECT_EQ(samples_of(text, "stallwatch_block_io_duration_seconds", kContainerCgroup).size(),
            2u * 30u);
  EXPECT_EQ(samples_of(text, "stallwatch_block_io_duration_seconds", kLoaderCgroup).size(), 30u);
  EXPECT_EQ(samples_of(text, "stallwatch_block_io_bytes_total", kContainerCgroup).size(), 2u);
}

TEST(ExpositionHostTest, TcpRetransmits) {
  const std::string text = host_rendered();
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_tcp_retransmits_total counter"));
  EXPECT_TRUE(
      HasLine(text, "stallwatch_tcp_retransmits_total{" + pod_labels() + R"(,family="ipv4"} 5)"));
  EXPECT_TRUE(
      HasLine(text, "stallwatch_tcp_retransmits_total{" + pod_labels() + R"(,family="ipv6"} 2)"));
}

TEST(ExpositionHostTest, NcclOps) {
  const std::string text = host_rendered();
  const std::string allreduce = pod_labels() + R"(,op="ncclAllReduce",rank="1",world_size="4")";
  const std::string send = pod_labels() + R"(,op="ncclSend",rank="",world_size="")";
  const auto bucket = [](const std::string& labels, const char* le, int v) {
    return "stallwatch_nccl_op_duration_seconds_bucket{" + labels + R"(,le=")" + le + "\"} " +
           std::to_string(v);
  };
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_nccl_op_duration_seconds histogram"));
  EXPECT_TRUE(HasLine(text, "# TYPE stallwatch_nccl_op_bytes_total counter"));
  EXPECT_TRUE(HasLine(text, bucket(allreduce, "0.25", 0)));
  EXPECT_TRUE(HasLine(text, bucket(allreduce, "0.5", 1)));
  EXPECT_TRUE(HasLine(text, bucket(allreduce, "1", 2)));
  EXPECT_TRUE(HasLine(text, bucket(allreduce, "+Inf", 2)));
  EXPECT_TRUE(HasLine(text, "stallwatch_nccl_op_duration_seconds_sum{" + allreduce + "} 0.75"));
  EXPECT_TRUE(HasLine(text, "stallwatch_nccl_op_duration_seconds_count{" + allreduce + "} 2"));
  EXPECT_TRUE(HasLine(text, "stallwatch_nccl_op_bytes_total{" + allreduce + "} 8388608"));
  EXPECT_TRUE(HasLine(text, bucket(send, "9.5367431640625e-07", 1)));  // folded from 2^-25
  EXPECT_TRUE(HasLine(text, bucket(send, "+Inf", 1)));
  EXPECT_TRUE(HasLine(text, "stallwatch_nccl_op_duration_seconds_sum{" + send + "} 5e-07"));
  EXPECT_TRUE(HasLine(text, "stallwatch_nccl_op_duration_seconds_count{" + send + "} 1"));
  EXPECT_TRUE(HasLine(text, "stallwatch_nccl_op_bytes_total{" + send + "} 1024"));
  // The unknown call id is skipped: two histograms, two byte counters.
  EXPECT_EQ(samples_of(text, "stallwatch_nccl_op_duration_seconds", kContainerCgroup).size(),
            2u * 30u);
  EXPECT_EQ(samples_of(text, "stallwatch_nccl_op_bytes_total", kContainerCgroup).size(), 2u);
}

TEST(ExpositionHostTest, SeriesWithoutHostDataHaveNoHostSamples) {
  const std::string text = host_rendered();
  for (const char* family :
       {"stallwatch_memory_reclaim", "stallwatch_oom_kills_total", "stallwatch_pressure_",
        "stallwatch_block_io_", "stallwatch_tcp_retransmits_total", "stallwatch_nccl_op_"}) {
    EXPECT_TRUE(samples_of(text, family, "/").empty()) << family;
  }
  for (const char* family : {"stallwatch_memory_reclaim", "stallwatch_oom_kills_total",
                             "stallwatch_tcp_retransmits_total", "stallwatch_nccl_op_"}) {
    EXPECT_TRUE(samples_of(text, family, kLoaderCgroup).empty()) << family;
  }
  // The issue-4 families do not exist at all (no HELP or TYPE) when no series has their data.
  const std::string cuda_only = rendered();
  for (const char* family :
       {"stallwatch_memory_reclaim", "stallwatch_oom_kills_total", "stallwatch_pressure_",
        "stallwatch_block_io_", "stallwatch_tcp_retransmits_total", "stallwatch_nccl_op_"}) {
    EXPECT_EQ(cuda_only.find(family), std::string::npos) << family;
  }
  EXPECT_TRUE(HasLine(cuda_only, R"(stallwatch_gpu_starvation_ratio{workload="/",cgroup="/"} 0)"));
}

// promtool's path, or nullopt when it is not installed.
std::optional<std::string> promtool() {
  if (access("/usr/bin/promtool", X_OK) == 0) return "/usr/bin/promtool";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/promtool";
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

struct ToolRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `promtool check metrics` with `text` on its stdin.
ToolRun promtool_check(const std::string& tool, const std::string& text) {
  const std::filesystem::path input =
      std::filesystem::temp_directory_path() /
      ("stallwatch_exposition_test." + std::to_string(getpid()) + ".prom");
  std::ofstream(input) << text;
  ToolRun run;
  const std::string command = "'" + tool + "' check metrics < '" + input.string() + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::filesystem::remove(input);
    return run;
  }
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove(input);
  return run;
}

// /debug/snapshot carries the host evidence per series, pids and comms included (never labels).
TEST(ExpositionHostTest, DebugSnapshotJsonHasTheHostEvidence) {
  Snapshot snap = host_snapshot();
  Series& pod = snap.series[kContainerCgroup];
  ProcessIo io;
  io.pid = 77;
  io.comm = "pt_data_worker";
  io.key = IoKey{"nvme0n1", "read"};
  io.totals.count = 3;
  io.totals.bytes = 12288;
  io.totals.sum_ns = 6'000'000;
  pod.io_processes.push_back(io);
  NcclTotals t;
  t.count = 2;
  t.bytes = 8'388'608;
  t.sum_ns = 750'000'000;
  pod.nccl_processes.push_back(ProcessNccl{88, NcclKey{call_id("ncclAllReduce"), 1, 4}, t});
  const std::string json = snapshot_json(snap);
  EXPECT_NE(json.find("\"starvation_ratio\":0.375"), std::string::npos) << json;
  EXPECT_NE(json.find("\"reclaim\":{\"direct_ns\":1500000000,\"direct_count\":3,\"memcg_ns\":"
                      "250000000,\"memcg_count\":7,\"cuda_ns\":100000000}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"oom_kills\":3,\"oom_kills_cuda\":1,\"oom_victims\":[{\"pid\":4242,"
                      "\"comm\":\"python\",\"cuda\":true"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"tcp_retransmits\":{\"ipv4\":5,\"ipv6\":2}"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"pid\":77,\"comm\":\"pt_data_worker\",\"device\":\"nvme0n1\",\"op\":"
                      "\"read\",\"count\":3,\"bytes\":12288,\"sum_ns\":6000000}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"pid\":88,\"op\":\"ncclAllReduce\",\"rank\":1,\"world_size\":4,"
                      "\"count\":2,\"bytes\":8388608,\"sum_ns\":750000000}"),
            std::string::npos)
      << json;
}

TEST(ExpositionPromtoolTest, SyntheticSnapshotPassesLint) {
  const auto tool = promtool();
  if (!tool) GTEST_SKIP() << "promtool is not installed (/usr/bin/promtool or on PATH)";
  const ToolRun run = promtool_check(*tool, rendered());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "");
}

TEST(ExpositionPromtoolTest, EscapedLabelsPassLint) {
  const auto tool = promtool();
  if (!tool) GTEST_SKIP() << "promtool is not installed (/usr/bin/promtool or on PATH)";
  const ToolRun run =
      promtool_check(*tool, render_exposition(odd_cgroup_snapshot(), {"1.2.3", "abc"}));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "");
}

TEST(ExpositionPromtoolTest, HostFamiliesPassLint) {
  const auto tool = promtool();
  if (!tool) GTEST_SKIP() << "promtool is not installed (/usr/bin/promtool or on PATH)";
  const ToolRun run = promtool_check(*tool, host_rendered());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "");
}

TEST(ExpositionPromtoolTest, RejectsBrokenText) {
  // The harness itself: promtool must notice a broken exposition, or the checks above prove
  // nothing.
  const auto tool = promtool();
  if (!tool) GTEST_SKIP() << "promtool is not installed (/usr/bin/promtool or on PATH)";
  const ToolRun run = promtool_check(*tool, "# TYPE x counter\nx{a=\"b} 1\n");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output, "");
}

}  // namespace
}  // namespace stallwatch::metrics

namespace stallwatch::metrics {
namespace {

// The writer /metrics uses (text_format.h) against prometheus-cpp's serializer, byte for byte,
// on every snapshot above: odd label values, histograms past the exported range, host families.
TEST(ExpositionTest, WriterMatchesPrometheusCppByteForByte) {
  for (const Snapshot& snap : {Snapshot{}, synthetic_snapshot(), host_snapshot(),
                               odd_cgroup_snapshot()}) {
    EXPECT_EQ(render_exposition(snap, {"1.2.3", "abc"}, detailed()),
              render_text(to_families(snap, {"1.2.3", "abc"})));
  }
}

// /metrics gzips the text as it is written, in pieces (issue #18): the pieces are the text, cut
// at sample boundaries, and the gzip'd render is the text.
TEST(ExpositionTest, TextInPiecesIsTheSameText) {
  for (const Snapshot& snap : {Snapshot{}, synthetic_snapshot(), host_snapshot(),
                               odd_cgroup_snapshot()}) {
    const auto families = build_model(snap, {"1.2.3", "abc"});
    for (const bool om : {false, true}) {
      const std::string whole = render_text(families, 1, om);
      for (const size_t piece : {size_t{1}, size_t{700}, size_t{1} << 20}) {
        std::string joined;
        size_t pieces = 0;
        render_text_in_pieces(families, 1, om, piece, [&](std::string_view p) {
          EXPECT_TRUE(p.ends_with('\n'));
          pieces++;
          joined += p;
        });
        EXPECT_EQ(joined, whole) << "piece " << piece;
        if (piece == 1) {
          EXPECT_GT(pieces, 3u);  // one per sample
        } else if (whole.size() < piece) {
          EXPECT_EQ(pieces, 1u);
        }
      }
    }
  }
}

TEST(ExpositionTest, GzipRenderIsTheTextGzipped) {
  ExpositionOptions lean;
  lean.container_id = lean.pod = false;
  lean.ladder_step = 4;
  for (const Snapshot& snap : {Snapshot{}, synthetic_snapshot(), host_snapshot()}) {
    for (const ExpositionOptions& o : {ExpositionOptions{}, lean}) {
      for (const bool om : {false, true}) {
        const std::string gz = render_exposition_gzip(snap, {"1.2.3", "abc"}, o, om, 1);
        ASSERT_GE(gz.size(), 18u);
        EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);
        EXPECT_EQ(oracle::gunzip(gz), render_exposition(snap, {"1.2.3", "abc"}, o, om));
      }
    }
  }
}

}  // namespace
}  // namespace stallwatch::metrics
