// Unit tests for metrics/exposition.h: a synthetic Snapshot rendered to the Prometheus text
// format, checked line by line (labels appear in the order exposition.cpp gives them) and by
// `promtool check metrics`.
#include "metrics/exposition.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "identity/cgroup_identity.h"
#include "trace/calls.h"

namespace stallwatch::metrics {
namespace {

constexpr std::string_view kContainerId =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kContainerCgroup =
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-" +
    std::string(kContainerId) + ".scope";

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

std::string rendered() { return render_text(to_families(synthetic_snapshot(), {"1.2.3", "abc"})); }

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
  const std::string root = R"(cgroup="/",api="runtime",call="cudaMalloc")";
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
  const std::string malloc_labels = R"(cgroup="/",api="runtime",call="cudaMalloc")";
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "9.5367431640625e-07", 1)));  // folded from 2^-25
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.00048828125", 1)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.0009765625", 2)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.03125", 2)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "0.0625", 3)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "1", 3)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "64", 3)));
  EXPECT_TRUE(HasLine(text, bucket(malloc_labels, "+Inf", 3)));

  const std::string launch_labels = R"(cgroup="/",api="driver",call="cuLaunchKernel")";
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
      "cgroup=\"" + kContainerCgroup + "\",container_id=\"" + std::string(kContainerId) + "\"";
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_count{" + pod +
                                R"(,api="runtime",call="cudaMemcpyAsync"} 2)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_bucket{" + pod +
                                R"(,api="runtime",call="cudaMemcpyAsync",le="0.001953125"} 0)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cuda_call_duration_seconds_bucket{" + pod +
                                R"(,api="runtime",call="cudaMemcpyAsync",le="0.00390625"} 2)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_offcpu_seconds_total{" + pod + R"(,state="runnable"} 2)"));
  EXPECT_TRUE(HasLine(text, "stallwatch_cgroup_info{" + pod +
                                R"(,pod_uid="1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901",)"
                                R"(runtime="containerd",systemd_unit="",slurm_job="",)"
                                R"(slurm_step=""} 1)"));
  std::size_t root_lines = 0, pod_lines = 0;
  for (const std::string& l : lines_of(text)) {
    if (l.find(R"({cgroup="/",)") != std::string::npos) {
      ++root_lines;
      EXPECT_EQ(l.find("container_id"), std::string::npos) << l;
    }
    if (l.find("{cgroup=\"" + kContainerCgroup + "\",") != std::string::npos) {
      ++pod_lines;
      EXPECT_NE(l.find(pod), std::string::npos) << l;
    }
  }
  // Root: 2 histograms x 30 lines, 4 call off-CPU, 2 off-CPU, 2 ratio, 1 info.
  EXPECT_EQ(root_lines, 2u * 30u + 4u + 2u + 2u + 1u);
  // Container: 1 histogram x 30 lines, 2 call off-CPU, 2 off-CPU, 2 ratio, 1 info.
  EXPECT_EQ(pod_lines, 30u + 2u + 2u + 2u + 1u);
}

TEST(ExpositionTest, OffCpuAndRatios) {
  const std::string text = rendered();
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_seconds_total{cgroup="/",state="runnable"} 0.5)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_seconds_total{cgroup="/",state="blocked"} 1.25)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_offcpu_seconds_total{cgroup="/",)"
                            R"(api="runtime",call="cudaMalloc",state="runnable"} 0.25)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cuda_call_offcpu_seconds_total{cgroup="/",)"
                            R"(api="runtime",call="cudaMalloc",state="blocked"} 0.125)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_ratio{cgroup="/",state="runnable"} 0.25)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_offcpu_ratio{cgroup="/",state="blocked"} 0.5)"));
  EXPECT_TRUE(HasLine(text, R"(stallwatch_cgroup_info{cgroup="/",pod_uid="",runtime="",)"
                            R"(systemd_unit="",slurm_job="",slurm_step=""} 1)"));
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
  EXPECT_TRUE(HasLine(text, "stallwatch_outliers_total 17"));
  EXPECT_TRUE(HasLine(text, "stallwatch_traced_processes 3"));
  EXPECT_TRUE(HasLine(text, "stallwatch_attached_libraries 2"));
  EXPECT_TRUE(HasLine(text, "stallwatch_attached_probes 50"));
  EXPECT_TRUE(HasLine(text, "stallwatch_snapshot_sequence 42"));
  std::size_t lost = 0;
  for (const std::string& l : lines_of(text))
    lost += l.starts_with("stallwatch_events_lost_total{");
  EXPECT_EQ(lost, static_cast<std::size_t>(SW_LOST_MAX));
}

TEST(ExpositionTest, LostSourceNames) {
  EXPECT_STREQ(lost_source_name(SW_LOST_OUTLIER_RINGBUF), "outlier_ringbuf");
  EXPECT_STREQ(lost_source_name(SW_LOST_NESTING), "call_nesting");
  EXPECT_STREQ(lost_source_name(SW_LOST_MAX), "unknown");
}

TEST(ExpositionTest, EmptySnapshot) {
  const std::string text = render_text(to_families(Snapshot{}, {"0.1.0", "unknown"}));
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
  const std::string text = render_text(to_families(snap, {"1.2.3", "abc"}));
  EXPECT_TRUE(HasLine(
      text, R"(stallwatch_offcpu_seconds_total{cgroup="/odd\"dir\\name\nx",state="runnable"} 1)"));
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
      promtool_check(*tool, render_text(to_families(odd_cgroup_snapshot(), {"1.2.3", "abc"})));
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
