// Unit tests of the chain engine (chains/engine.h, rules*.cpp, window.h, outliers.h) driven
// window by window through the demo's synthetic host at fixed timestamps: every demo scenario
// produces exactly its chain, quiet workloads produce none, chains keep one identity for their
// whole life, baselines stay frozen during an incident, and the counters behind
// stallwatch_chains_total / stallwatch_chain_active follow their documented semantics. The
// host-evidence rules (memory_pressure, io_stall, network_retransmit, nccl_straggler) each have
// their positives, thresholds and negatives, and diff_windows its per-series deltas.
// No root, no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "chains/chain.h"
#include "chains/engine.h"
#include "chains/outliers.h"
#include "chains/pipeline.h"
#include "chains/window.h"
#include "common/snapshot.h"
#include "demo/scenarios.h"
#include "demo/synthetic.h"
#include "metrics/http_server.h"
#include "store/records.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch {
namespace {

using chains::Chain;
using chains::Kind;
using chains::Severity;

constexpr std::int64_t kS = 1000000000;
constexpr std::int64_t kT0 = 1795183391 * kS;  // 2026-11-20 14:03:11 UTC, start of window 1
constexpr std::int64_t kWindow = 1 * kS;

const std::string kCg = "/system.slice/train.service";
const std::string kOtherCg = "/system.slice/other.service";

std::uint32_t call_id(std::string_view name) {
  auto calls = trace::all_calls();
  for (std::uint32_t i = 0; i < calls.size(); i++) {
    if (calls[i].name == name) return i;
  }
  ADD_FAILURE() << "no call " << name;
  return 0;
}

// Every calm cudaStreamSynchronize takes exactly 7 µs; quantiles are capped at the window's
// largest call, so the calm p50 and p99 are 7 µs (not the 7.6 µs bucket bound).
constexpr double kCalmSyncS = 7e-6;

double bucket_upper(std::uint64_t ns) {
  return trace::bucket_upper_seconds(trace::bucket_of_ns(ns));
}

bool has_contributor(const Chain& c, const std::string& comm) {
  return std::any_of(c.contributors.begin(), c.contributors.end(),
                     [&](const chains::Contributor& k) { return k.comm == comm; });
}

std::string contributors_of(const Chain& c) {
  std::string s;
  for (const auto& k : c.contributors) s += k.comm + "(" + std::to_string(k.pid) + ") ";
  return s;
}

// The engine fed by a synthetic host, one window per step(), at kT0 + n * window.
class Driver {
 public:
  explicit Driver(chains::EngineOptions o = default_options(), std::int64_t window = kWindow)
      : engine(o), window_ns(window) {}

  static chains::EngineOptions default_options() {
    chains::EngineOptions o;
    o.host_cpus = 8;
    return o;
  }

  std::int64_t next_end() const { return kT0 + (windows + 1) * window_ns; }

  // Runs `fill` for the window now ending, snapshots and observes it.
  std::vector<Chain> step(const std::function<void(demo::SyntheticHost&, std::int64_t end)>& fill) {
    const std::int64_t end = next_end();
    fill(host, end);
    auto snap = host.snapshot(std::chrono::system_clock::time_point(
                                  std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                      std::chrono::nanoseconds(end))),
                              std::chrono::nanoseconds(window_ns));
    last_view = chains::diff_windows(previous.get(), *snap);
    auto changed = engine.observe(*snap, last_view, host.drain_outliers());
    previous = snap;
    windows++;
    all.insert(all.end(), changed.begin(), changed.end());
    return changed;
  }

  demo::SyntheticHost host;
  chains::Engine engine;
  std::int64_t window_ns;
  std::int64_t windows = 0;
  std::shared_ptr<const Snapshot> previous;
  chains::WindowView last_view;
  std::vector<Chain> all;  // every change, in order
};

// ---------------------------------------------------------------------------------------------
// The demo scenarios, phase by phase.

struct WindowOutcome {
  size_t phase = 0;
  int i = 0;  // window within the phase
  std::int64_t end_ns = 0;
  std::vector<Chain> changed;
};

struct ScenarioRun {
  std::vector<WindowOutcome> windows;
  std::vector<Chain> changes() const {
    std::vector<Chain> out;
    for (const auto& w : windows) out.insert(out.end(), w.changed.begin(), w.changed.end());
    return out;
  }
  // The first window that opened, updated or closed a chain; null when none did.
  const WindowOutcome* first_change() const {
    for (const auto& w : windows) {
      if (!w.changed.empty()) return &w;
    }
    return nullptr;
  }
  std::vector<std::string> ids() const {
    std::vector<std::string> out;
    for (const auto& c : changes()) {
      if (std::find(out.begin(), out.end(), c.id) == out.end()) out.push_back(c.id);
    }
    return out;
  }
  // The latest state of each chain.
  std::vector<Chain> chains() const {
    std::vector<Chain> out;
    for (const auto& c : changes()) {
      auto it = std::find_if(out.begin(), out.end(), [&](const Chain& o) { return o.id == c.id; });
      if (it == out.end()) {
        out.push_back(c);
      } else {
        *it = c;
      }
    }
    return out;
  }
  // The first state each chain was reported in (its opening).
  std::vector<Chain> openings() const {
    std::vector<Chain> out;
    for (const auto& c : changes()) {
      auto it = std::find_if(out.begin(), out.end(), [&](const Chain& o) { return o.id == c.id; });
      if (it == out.end()) out.push_back(c);
    }
    return out;
  }
};

ScenarioRun run_scenario(const std::string& name, Driver& d) {
  auto s = demo::make_scenario(name);
  EXPECT_TRUE(s.has_value()) << name;
  ScenarioRun run;
  if (!s) return run;
  for (size_t pi = 0; pi < s->phases.size(); pi++) {
    const demo::Phase& phase = s->phases[pi];
    for (int i = 0; i < phase.windows; i++) {
      WindowOutcome w;
      w.phase = pi;
      w.i = i;
      w.end_ns = d.next_end();
      w.changed = d.step([&](demo::SyntheticHost& h, std::int64_t end) {
        phase.step(h, i, end, d.window_ns);
      });
      run.windows.push_back(std::move(w));
    }
  }
  return run;
}

ScenarioRun run_scenario(const std::string& name) {
  Driver d;
  return run_scenario(name, d);
}

TEST(ChainScenarios, AllScenariosExist) {
  const auto names = demo::scenario_names();
  EXPECT_EQ(names, (std::vector<std::string>{"incident", "cpu-contention", "cold-start",
                                             "memcpy-bottleneck", "periodic-spike", "gpu-steal",
                                             "memory-pressure", "io-stall", "network-retransmit",
                                             "nccl-straggler", "healthy"}));
  for (const auto& n : names) EXPECT_TRUE(demo::make_scenario(n).has_value()) << n;
  EXPECT_FALSE(demo::make_scenario("nosuch").has_value());
}

TEST(ChainScenarios, IncidentIsOneCriticalCpuContention) {
  Driver d;
  ScenarioRun run = run_scenario("incident", d);
  ASSERT_EQ(run.windows.size(), 20u);
  ASSERT_EQ(run.ids().size(), 1u) << "exactly one chain";
  const Chain opened = run.openings()[0];
  const Chain last = run.chains()[0];

  EXPECT_EQ(opened.kind, Kind::kCpuContention);
  EXPECT_EQ(opened.severity, Severity::kCritical);
  EXPECT_EQ(last.peak, Severity::kCritical);
  EXPECT_EQ(opened.pid, 3821);
  EXPECT_EQ(opened.comm, "python3");
  EXPECT_EQ(opened.call, "cudaStreamSynchronize");
  EXPECT_EQ(opened.api, "runtime");
  EXPECT_NE(opened.identity.cgroup.find("kubepods-burstable-pod6f1c2a3b"), std::string::npos);
  EXPECT_TRUE(opened.summary.starts_with("[CRITICAL] cpu_contention: ")) << opened.summary;

  for (const char* comm : {"pt_data_worker:0", "prometheus-node-exporter", "fluent-bit"}) {
    EXPECT_TRUE(has_contributor(opened, comm))
        << comm << " missing; contributors: " << contributors_of(opened);
  }
  ASSERT_FALSE(opened.contributors.empty());
  EXPECT_EQ(opened.contributors[0].comm, "pt_data_worker:0");  // worst first
  EXPECT_EQ(opened.contributors[0].pid, 3822);
  EXPECT_EQ(opened.contributors[0].cpu_ns, static_cast<std::uint64_t>(kWindow) * 9 / 100);
  for (const char* word : {"taskset", "renice", "persistent_workers"}) {
    EXPECT_NE(opened.recommendation.find(word), std::string::npos)
        << word << " not in:\n" << opened.recommendation;
  }
  for (const char* line : {"renice -n 19 -p 1205", "renice -n 19 -p 1311"}) {
    EXPECT_NE(opened.recommendation.find(line), std::string::npos)
        << line << " not in:\n" << opened.recommendation;
  }
  // The baseline is the calm phase's sync latency.
  EXPECT_DOUBLE_EQ(opened.baseline_p99_s, kCalmSyncS);
  EXPECT_GT(opened.ratio, 100);
  EXPECT_GE(opened.evidence_value("call_runnable_share"), 0.5);

  // Opens in the 2nd window of the contention phase (phase 1), not the 1st; the chain starts
  // at the beginning of the 1st.
  for (const auto& w : run.windows) {
    if (w.phase == 0) {
      EXPECT_TRUE(w.changed.empty()) << "calm window " << w.i;
    }
  }
  const WindowOutcome* first = run.first_change();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->phase, 1u);
  EXPECT_EQ(first->i, 1);
  EXPECT_EQ(opened.opened_ns, first->end_ns - 2 * kWindow);
  EXPECT_EQ(opened.updated_ns, first->end_ns);
  EXPECT_EQ(opened.windows, 2u);
  EXPECT_TRUE(opened.open);

  // Updated every contention window; closed by the 2nd calm window.
  for (const auto& w : run.windows) {
    if (w.phase == 1 && w.i >= 1) {
      ASSERT_EQ(w.changed.size(), 1u) << "contention window " << w.i;
      EXPECT_TRUE(w.changed[0].open);
      EXPECT_EQ(w.changed[0].windows, static_cast<std::uint64_t>(w.i + 1));
    }
    if (w.phase == 2) {
      if (w.i == 1) {
        ASSERT_EQ(w.changed.size(), 1u);
        EXPECT_FALSE(w.changed[0].open);
        EXPECT_EQ(w.changed[0].closed_ns, w.end_ns);
      } else {
        EXPECT_TRUE(w.changed.empty()) << "calm window " << w.i;
      }
    }
  }
  EXPECT_FALSE(last.open);
  EXPECT_EQ(last.windows, 10u);
  EXPECT_EQ(last.opened_ns, opened.opened_ns);
  EXPECT_TRUE(d.engine.open_chains().empty());
}

TEST(ChainScenarios, CpuContentionIsHighNamingFluentBit) {
  ScenarioRun run = run_scenario("cpu-contention");
  ASSERT_EQ(run.ids().size(), 1u);
  const Chain c = run.openings()[0];
  EXPECT_EQ(c.kind, Kind::kCpuContention);
  EXPECT_EQ(c.severity, Severity::kHigh);
  EXPECT_EQ(c.pid, 4242);
  ASSERT_EQ(c.contributors.size(), 1u) << contributors_of(c);
  EXPECT_EQ(c.contributors[0].comm, "fluent-bit");
  EXPECT_EQ(c.contributors[0].cgroup, "/system.slice/fluent-bit.service");
  EXPECT_EQ(c.contributors[0].role, "preemptor, other workload");
  EXPECT_NE(c.recommendation.find("renice -n 19 -p 1311"), std::string::npos) << c.recommendation;
  EXPECT_NE(c.recommendation.find("systemctl set-property fluent-bit.service"), std::string::npos)
      << c.recommendation;
  EXPECT_NE(c.summary.find("preempted by fluent-bit"), std::string::npos) << c.summary;
  EXPECT_FALSE(run.chains()[0].open) << "closed after fluent-bit is done";
}

TEST(ChainScenarios, ColdStartIsReportedOnce) {
  ScenarioRun run = run_scenario("cold-start");
  const auto changes = run.changes();
  ASSERT_EQ(changes.size(), 1u) << "one report, no updates";
  const Chain& c = changes[0];
  EXPECT_EQ(c.kind, Kind::kColdStart);
  EXPECT_EQ(c.severity, Severity::kLow);
  EXPECT_FALSE(c.open);
  EXPECT_EQ(c.closed_ns, c.updated_ns);
  EXPECT_EQ(c.pid, 5150);
  EXPECT_EQ(c.call, "cudaMalloc");
  EXPECT_EQ(c.windows, 1u);
  EXPECT_DOUBLE_EQ(c.evidence_value("worst_first_call_s"), 0.180);
  // The steady p50 is its bucket's bound, capped at the window's worst call (whole ns).
  EXPECT_NEAR(c.evidence_value("steady_p50_s"), bucket_upper(20000), 1e-9);
  EXPECT_NE(c.recommendation.find("persistent_workers"), std::string::npos);
}

TEST(ChainScenarios, MemcpyBottleneckIsMediumOnCudaMemcpy) {
  ScenarioRun run = run_scenario("memcpy-bottleneck");
  ASSERT_EQ(run.ids().size(), 1u);
  const Chain c = run.openings()[0];
  EXPECT_EQ(c.kind, Kind::kMemcpyBound);
  EXPECT_EQ(c.severity, Severity::kMedium);
  EXPECT_EQ(c.pid, 6200);
  EXPECT_EQ(c.call, "cudaMemcpy");
  EXPECT_NEAR(c.evidence_value("copy_wall_share"), 0.38, 1e-9);
  EXPECT_NE(c.recommendation.find("pin_memory=True"), std::string::npos);
  // Opens in the 2nd window, closes 2 windows after pinned copies start.
  EXPECT_TRUE(run.windows[0].changed.empty());
  EXPECT_EQ(run.windows[1].changed.size(), 1u);
  const Chain last = run.chains()[0];
  EXPECT_FALSE(last.open);
  EXPECT_EQ(last.windows, 8u);
  EXPECT_EQ(last.closed_ns, run.windows[9].end_ns);
}

TEST(ChainScenarios, PeriodicSpikeOpensAtTheSecondSpike) {
  ScenarioRun run = run_scenario("periodic-spike");
  ASSERT_EQ(run.ids().size(), 1u);
  // Spikes are in phase 1 windows 3, 7 and 11; the chain opens exactly at window 7.
  const WindowOutcome* first = run.first_change();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->phase, 1u);
  EXPECT_EQ(first->i, 7);
  const Chain& c = first->changed[0];
  EXPECT_EQ(c.kind, Kind::kAllocSpike);
  EXPECT_EQ(c.severity, Severity::kMedium);
  EXPECT_EQ(c.pid, 7300);
  EXPECT_EQ(c.call, "cudaMalloc");
  EXPECT_TRUE(c.open);
  EXPECT_EQ(c.evidence_value("spikes"), 2);
  EXPECT_DOUBLE_EQ(c.evidence_value("period_s"), 4.0);
  EXPECT_DOUBLE_EQ(c.evidence_value("worst_alloc_s"), 0.040);
  EXPECT_DOUBLE_EQ(c.evidence_value("baseline_p50_s"), 15e-6);
  EXPECT_NE(c.recommendation.find("expandable_segments"), std::string::npos);
  // The third spike updates the same chain; the quiet windows between keep it open.
  const Chain last = run.chains()[0];
  EXPECT_TRUE(last.open);
  EXPECT_EQ(last.evidence_value("spikes"), 3);
  EXPECT_EQ(run.windows.back().changed.size(), 1u);
}

TEST(ChainScenarios, GpuStealIsGpuContentionNotCpu) {
  ScenarioRun run = run_scenario("gpu-steal");
  ASSERT_EQ(run.ids().size(), 1u);
  for (const auto& c : run.changes()) EXPECT_NE(c.kind, Kind::kCpuContention) << c.summary;
  const Chain c = run.openings()[0];
  EXPECT_EQ(c.kind, Kind::kGpuContention);
  EXPECT_EQ(c.severity, Severity::kHigh);
  EXPECT_EQ(c.pid, 8100);
  EXPECT_EQ(c.call, "cudaStreamSynchronize");
  ASSERT_FALSE(c.contributors.empty());
  EXPECT_EQ(c.contributors[0].comm, "tritonserver");
  EXPECT_EQ(c.contributors[0].pid, 8400);
  EXPECT_EQ(c.contributors[0].role, "CUDA process, other workload");
  EXPECT_GE(c.ratio, 10);
  EXPECT_NE(c.recommendation.find("tritonserver"), std::string::npos);
  // Opens in the 2nd window with tritonserver; closes after it moves away.
  EXPECT_EQ(run.windows[6].changed.size(), 1u);
  EXPECT_TRUE(run.windows[5].changed.empty());
  const Chain last = run.chains()[0];
  EXPECT_FALSE(last.open);
  EXPECT_EQ(last.windows, 8u);
}

TEST(ChainScenarios, MemoryPressureIsHighThenCriticalOnTheOomKill) {
  ScenarioRun run = run_scenario("memory-pressure");
  ASSERT_EQ(run.ids().size(), 1u) << "one chain from reclaim to OOM kill";
  for (const auto& c : run.changes()) EXPECT_EQ(c.kind, Kind::kMemoryPressure) << c.summary;
  const Chain opened = run.openings()[0];
  EXPECT_EQ(opened.severity, Severity::kHigh) << "medium by reclaim, +1 for the CUDA threads' share";
  EXPECT_EQ(opened.pid, 0) << "a chain about the cgroup";
  EXPECT_NE(opened.identity.cgroup.find("kubepods-burstable-pod6f1c2a3b"), std::string::npos);
  EXPECT_EQ(opened.identity.container_id.substr(0, 12), "116f54c41d04");
  EXPECT_NEAR(opened.evidence_value("reclaim_share"), 0.18, 1e-6);
  EXPECT_NEAR(opened.evidence_value("cuda_reclaim_share"), 0.07, 1e-6);
  EXPECT_NEAR(opened.evidence_value("psi_memory_some_share"), 0.16, 1e-6);
  EXPECT_NEAR(opened.evidence_value("memcg_reclaim_s"), 0.18, 1e-6);
  EXPECT_EQ(opened.evidence_value("direct_reclaim_s", -1), 0);
  EXPECT_EQ(opened.evidence_value("reclaims"), 900);
  EXPECT_TRUE(opened.contributors.empty());
  EXPECT_TRUE(opened.summary.starts_with("[HIGH] memory_pressure: the workload of python3 (PID "
                                         "2400) spent 18% of the window in memcg reclaim"))
      << opened.summary;
  for (const char* word : {"limits: {memory:", "prefetch_factor", "pin_memory"}) {
    EXPECT_NE(opened.recommendation.find(word), std::string::npos)
        << word << " not in:\n" << opened.recommendation;
  }
  const WindowOutcome* first = run.first_change();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->phase, 1u);
  EXPECT_EQ(first->i, 1);

  // The OOM kill of python3 (phase 2): the same chain, critical at once.
  const WindowOutcome* oom = nullptr;
  for (const auto& w : run.windows) {
    if (w.phase == 2) oom = &w;
  }
  ASSERT_NE(oom, nullptr);
  ASSERT_EQ(oom->changed.size(), 1u);
  const Chain& killed = oom->changed[0];
  EXPECT_EQ(killed.id, opened.id);
  EXPECT_EQ(killed.severity, Severity::kCritical);
  EXPECT_EQ(killed.peak, Severity::kCritical);
  ASSERT_EQ(killed.contributors.size(), 1u);
  EXPECT_EQ(killed.contributors[0].comm, "python3");
  EXPECT_EQ(killed.contributors[0].pid, 2400);
  EXPECT_EQ(killed.contributors[0].role, "OOM victim");
  EXPECT_EQ(killed.evidence_value("oom_kills"), 1);
  EXPECT_EQ(killed.evidence_value("oom_kills_cuda"), 1);
  EXPECT_NEAR(killed.evidence_value("reclaim_share"), 0.35, 1e-6);
  EXPECT_TRUE(killed.summary.starts_with(
      "[CRITICAL] memory_pressure: python3 (PID 2400), a CUDA-issuing process, was OOM-killed"))
      << killed.summary;
  EXPECT_NE(killed.recommendation.find("journalctl -k"), std::string::npos);

  // Held critical for oom_hold_windows (6) windows, the kill's included, then closed 2 later.
  for (const auto& w : run.windows) {
    if (w.phase != 3) continue;
    if (w.i < 5) {
      ASSERT_EQ(w.changed.size(), 1u) << "hold window " << w.i;
      EXPECT_EQ(w.changed[0].severity, Severity::kCritical);
      EXPECT_TRUE(w.changed[0].open);
    } else if (w.i == 6) {
      ASSERT_EQ(w.changed.size(), 1u);
      EXPECT_FALSE(w.changed[0].open);
    } else {
      EXPECT_TRUE(w.changed.empty()) << "window " << w.i;
    }
  }
  const Chain last = run.chains()[0];
  EXPECT_FALSE(last.open);
  EXPECT_EQ(last.windows, 14u);
  EXPECT_EQ(last.peak, Severity::kCritical);
}

TEST(ChainScenarios, IoStallIsHighNamingTheDataLoaderWorkers) {
  ScenarioRun run = run_scenario("io-stall");
  ASSERT_EQ(run.ids().size(), 1u);
  for (const auto& c : run.changes()) EXPECT_EQ(c.kind, Kind::kIoStall) << c.summary;
  const Chain c = run.openings()[0];
  EXPECT_EQ(c.severity, Severity::kHigh);
  EXPECT_EQ(c.pid, 0);
  ASSERT_EQ(c.contributors.size(), 4u) << contributors_of(c);
  for (int k = 0; k < 4; k++) {
    EXPECT_EQ(c.contributors[k].comm, "pt_data_worker:" + std::to_string(k));
    EXPECT_EQ(c.contributors[k].pid, 2501 + k);
    EXPECT_EQ(c.contributors[k].role, "I/O submitter");
    EXPECT_EQ(c.contributors[k].count, 24u);
    EXPECT_EQ(c.contributors[k].cpu_ns, 23u * 25000000 + 90000000) << "time in its requests";
  }
  EXPECT_NEAR(c.evidence_value("starvation_share"), 0.46, 1e-5);
  EXPECT_NEAR(c.evidence_value("io_busy_share"), 4 * (23 * 0.025 + 0.090), 1e-6);
  EXPECT_NEAR(c.evidence_value("io_p99_s"), 0.090, 1e-9);
  EXPECT_EQ(c.evidence_value("io_requests"), 96);
  EXPECT_EQ(c.evidence_value("io_bytes"), 96.0 * 131072);
  EXPECT_NE(c.summary.find("waiting on sdb I/O"), std::string::npos) << c.summary;
  for (const char* word : {"num_workers", "iostat -x 1 sdb", "local NVMe"}) {
    EXPECT_NE(c.recommendation.find(word), std::string::npos) << word << " not in:\n"
                                                              << c.recommendation;
  }
  EXPECT_EQ(run.first_change()->phase, 1u);
  EXPECT_EQ(run.first_change()->i, 1);
  const Chain last = run.chains()[0];
  EXPECT_FALSE(last.open) << "closed once the dataset is on local NVMe";
  EXPECT_EQ(last.windows, 8u);
}

TEST(ChainScenarios, NetworkRetransmitIsHighOnAllReduce) {
  ScenarioRun run = run_scenario("network-retransmit");
  ASSERT_EQ(run.ids().size(), 1u);
  for (const auto& c : run.changes()) EXPECT_EQ(c.kind, Kind::kNetworkRetransmit) << c.summary;
  const Chain c = run.openings()[0];
  EXPECT_EQ(c.severity, Severity::kHigh);
  EXPECT_EQ(c.pid, 0);
  EXPECT_EQ(c.call, "ncclAllReduce");
  EXPECT_EQ(c.api, "nccl");
  EXPECT_DOUBLE_EQ(c.baseline_p99_s, 0.004);
  EXPECT_DOUBLE_EQ(c.p99_s, 0.230);
  EXPECT_GE(c.ratio, 3);
  EXPECT_EQ(c.evidence_value("retransmits"), 450);
  EXPECT_EQ(c.evidence_value("retransmits_per_second"), 450);
  EXPECT_EQ(c.evidence_value("ipv4_retransmits"), 450);
  EXPECT_EQ(c.evidence_value("ipv6_retransmits", -1), 0);
  EXPECT_GE(c.evidence_value("call_mean_ratio"), 2);
  EXPECT_TRUE(c.contributors.empty());
  for (const char* word : {"ethtool -S", "NCCL_SOCKET_IFNAME", "MTU"}) {
    EXPECT_NE(c.recommendation.find(word), std::string::npos) << word << " not in:\n"
                                                              << c.recommendation;
  }
  EXPECT_FALSE(run.chains()[0].open);
  EXPECT_EQ(run.chains()[0].windows, 8u);
}

TEST(ChainScenarios, NcclStragglerIsHighOnRankTwoNamingItsPeers) {
  ScenarioRun run = run_scenario("nccl-straggler");
  ASSERT_EQ(run.ids().size(), 1u);
  for (const auto& c : run.changes()) EXPECT_EQ(c.kind, Kind::kNcclStraggler) << c.summary;
  const Chain c = run.openings()[0];
  EXPECT_EQ(c.severity, Severity::kHigh);
  EXPECT_EQ(c.pid, 2702);
  EXPECT_EQ(c.comm, "python3");
  EXPECT_EQ(c.call, "ncclAllReduce");
  EXPECT_EQ(c.api, "nccl");
  EXPECT_DOUBLE_EQ(c.p99_s, 0.018);
  EXPECT_DOUBLE_EQ(c.baseline_p99_s, 0.003) << "the peers' median";
  EXPECT_NEAR(c.ratio, 6, 1e-9);
  ASSERT_EQ(c.contributors.size(), 3u) << contributors_of(c);
  const int peers[] = {2700, 2701, 2703};
  for (int k = 0; k < 3; k++) {
    EXPECT_EQ(c.contributors[k].pid, peers[k]);
    EXPECT_EQ(c.contributors[k].role, "peer rank");
    EXPECT_EQ(c.contributors[k].count, 20u);
  }
  EXPECT_EQ(c.evidence_value("rank"), 2);
  EXPECT_EQ(c.evidence_value("world_size"), 8);
  EXPECT_EQ(c.evidence_value("local_ranks"), 4);
  EXPECT_NEAR(c.evidence_value("mean_s"), 0.018, 1e-9);
  EXPECT_NEAR(c.evidence_value("peers_mean_s"), 0.003, 1e-9);
  EXPECT_NEAR(c.evidence_value("op_blocked_share"), 0.9, 1e-6);
  EXPECT_TRUE(c.summary.starts_with("[HIGH] nccl_straggler: rank 2 of 8, python3 (PID 2702)"))
      << c.summary;
  EXPECT_NE(c.recommendation.find("NCCL_DEBUG=INFO"), std::string::npos);
  EXPECT_NE(c.recommendation.find("nvidia-smi topo -m"), std::string::npos);
  EXPECT_FALSE(run.chains()[0].open);
  EXPECT_EQ(run.chains()[0].windows, 8u);
}

TEST(ChainScenarios, HealthyHasNoChain) {
  Driver d;
  ScenarioRun run = run_scenario("healthy", d);
  EXPECT_EQ(run.windows.size(), 12u);
  EXPECT_TRUE(run.changes().empty()) << run.changes()[0].summary;
  EXPECT_TRUE(d.engine.counts().empty());
}

TEST(ChainScenarios, FiveSecondWindowsGiveTheSameIncident) {
  Driver d(Driver::default_options(), 5 * kS);
  ScenarioRun run = run_scenario("incident", d);
  ASSERT_EQ(run.ids().size(), 1u);
  const Chain c = run.openings()[0];
  EXPECT_EQ(c.kind, Kind::kCpuContention);
  EXPECT_EQ(c.severity, Severity::kCritical);
  EXPECT_EQ(c.opened_ns, kT0 + 6 * 5 * kS);
  EXPECT_FALSE(run.chains()[0].open);
}

TEST(ChainScenarios, HostScenariosGiveTheSameChainsWithFiveSecondWindows) {
  const std::vector<std::tuple<std::string, Kind, Severity>> expected = {
      {"memory-pressure", Kind::kMemoryPressure, Severity::kHigh},
      {"io-stall", Kind::kIoStall, Severity::kHigh},
      {"network-retransmit", Kind::kNetworkRetransmit, Severity::kHigh},
      {"nccl-straggler", Kind::kNcclStraggler, Severity::kHigh}};
  for (const auto& [name, kind, severity] : expected) {
    Driver d(Driver::default_options(), 5 * kS);
    ScenarioRun run = run_scenario(name, d);
    ASSERT_EQ(run.ids().size(), 1u) << name;
    const Chain c = run.openings()[0];
    EXPECT_EQ(c.kind, kind) << name;
    EXPECT_EQ(c.severity, severity) << name;
    EXPECT_FALSE(run.chains()[0].open) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// Synthetic workloads of our own.

struct Load {
  std::uint64_t steps = 20;
  std::uint64_t sync_ns = 7000;
  std::uint64_t tail_ns = 0;
  double tail_share = 0;
  double call_runnable = 0;  // share of every call's time spent runnable off-CPU
  double call_blocked = 0.02;
  double thread_runnable = 0.004;
  double thread_blocked = 0.05;
};

void load(demo::SyntheticHost& h, int pid, std::int64_t w, const Load& l) {
  h.calls(pid, {"cudaLaunchKernel", l.steps * 24, 9000, 0, 0, l.call_runnable, 0});
  h.calls(pid, {"cudaStreamSynchronize", l.steps, l.sync_ns, l.tail_ns, l.tail_share,
                l.call_runnable, l.call_blocked});
  const auto runnable = static_cast<std::uint64_t>(l.thread_runnable * static_cast<double>(w));
  const auto blocked = static_cast<std::uint64_t>(l.thread_blocked * static_cast<double>(w));
  h.offcpu(pid, runnable, blocked, static_cast<std::uint64_t>(w) - runnable - blocked, 40);
}

Load calm() { return Load{}; }

// Contention with `share` of both the call time and the thread time spent runnable.
Load contended(double share) {
  Load l;
  l.sync_ns = 5000000;
  l.call_runnable = share;
  l.thread_runnable = share;
  l.thread_blocked = 0.02;
  return l;
}

constexpr int kPid = 4000;

std::function<void(demo::SyntheticHost&, std::int64_t)> with(const Load& l, int pid = kPid) {
  return [l, pid](demo::SyntheticHost& h, std::int64_t) {
    if (!h.has_process(pid)) h.add_process(kCg, pid, "python3", kT0 - 3600 * kS);
    load(h, pid, kWindow, l);
  };
}

TEST(ChainNegatives, CalmWorkloadStaysSilent) {
  Driver d;
  for (int i = 0; i < 60; i++) EXPECT_TRUE(d.step(with(calm())).empty()) << "window " << i;
  EXPECT_TRUE(d.engine.counts().empty());
  const auto* b = d.engine.baseline(kCg, kPid, call_id("cudaStreamSynchronize"));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->p99.size(), 32u) << "ring capped at baseline_windows";
}

TEST(ChainNegatives, BusyGpuBoundWorkloadStaysSilent) {
  Driver d;
  Load l;
  l.sync_ns = 5000000;
  l.tail_ns = 8000000;
  l.tail_share = 0.05;
  l.call_blocked = 0.95;  // waits for the GPU, asleep
  l.thread_runnable = 0;
  l.thread_blocked = 0.6;
  for (int i = 0; i < 30; i++) EXPECT_TRUE(d.step(with(l)).empty()) << "window " << i;
  EXPECT_TRUE(d.engine.counts().empty());
}

TEST(ChainNegatives, SingleSlowCallOpensNothing) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  d.step([](demo::SyntheticHost& h, std::int64_t) {
    h.calls(kPid, {"cudaLaunchKernel", 480, 9000, 0, 0, 0, 0});
    // 20 syncs, one of them 500 ms, 90% of it runnable.
    h.calls(kPid, {"cudaStreamSynchronize", 20, 7000, 500000000, 0.05, 0.9, 0});
    h.offcpu(kPid, 4000000, 50000000, kWindow - 54000000, 40);
  });
  for (int i = 0; i < 10; i++) d.step(with(calm()));
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
  EXPECT_TRUE(d.engine.counts().empty());
  EXPECT_TRUE(d.engine.open_chains().empty());
}

TEST(ChainNegatives, RunnableJustUnderThresholdsStaysSilent) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  Load l = contended(0.09);  // call share 0.09 < 0.10, thread share 0.09 < 0.20
  l.sync_ns = 20000000;      // 36 ms runnable in calls: far above the 1% floor
  for (int i = 0; i < 20; i++) {
    EXPECT_TRUE(d.step(with(l)).empty()) << "window " << i;
  }
  // Well above the 1%-of-window floor: only the shares keep it silent.
  std::uint64_t runnable = 0, cuda = 0;
  ASSERT_EQ(d.last_view.processes.size(), 1u);
  for (const auto& [id, t] : d.last_view.processes[0].calls) {
    runnable += t.runnable_ns;
    cuda += t.sum_ns;
  }
  EXPECT_GT(runnable, static_cast<std::uint64_t>(kWindow / 100));
  EXPECT_NEAR(static_cast<double>(runnable) / static_cast<double>(cuda), 0.09, 1e-6);
  EXPECT_TRUE(d.engine.counts().empty());

  // The same load at 0.10 does open one (the threshold is inclusive).
  Driver e;
  for (int i = 0; i < 5; i++) e.step(with(calm()));
  Load m = contended(0.101);
  m.sync_ns = 20000000;
  for (int i = 0; i < 3; i++) e.step(with(m));
  ASSERT_EQ(e.engine.open_chains().size(), 1u);
  EXPECT_EQ(e.engine.open_chains()[0].severity, Severity::kMedium);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle.

TEST(ChainLifecycle, LongConditionIsOneChain) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  const std::int64_t start = d.next_end() - kWindow;
  std::string id;
  for (int k = 1; k <= 20; k++) {
    auto changed = d.step(with(contended(0.6)));
    if (k == 1) {
      EXPECT_TRUE(changed.empty()) << "needs open_after = 2 windows";
      continue;
    }
    ASSERT_EQ(changed.size(), 1u) << "window " << k;
    const Chain& c = changed[0];
    if (id.empty()) id = c.id;
    EXPECT_EQ(c.id, id);
    EXPECT_EQ(c.id.size(), 16u);
    EXPECT_EQ(c.id.find_first_not_of("0123456789abcdef"), std::string::npos) << c.id;
    EXPECT_EQ(c.windows, static_cast<std::uint64_t>(k));
    EXPECT_EQ(c.opened_ns, start);
    EXPECT_EQ(c.updated_ns, kT0 + d.windows * kWindow);
    EXPECT_TRUE(c.open);
    EXPECT_EQ(c.severity, Severity::kCritical);
  }
  ASSERT_EQ(d.engine.open_chains().size(), 1u);
  EXPECT_EQ(d.engine.open_chains()[0].id, id);
  // One calm window keeps it open; the second closes it, still the same id.
  EXPECT_TRUE(d.step(with(calm())).empty());
  auto closed = d.step(with(calm()));
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].id, id);
  EXPECT_FALSE(closed[0].open);
  EXPECT_EQ(closed[0].windows, 20u);
  EXPECT_EQ(closed[0].closed_ns, kT0 + d.windows * kWindow);
  EXPECT_EQ(closed[0].updated_ns, start + 20 * kWindow) << "last window the condition held";
  // A new occurrence later is a new chain.
  for (int i = 0; i < 2; i++) d.step(with(contended(0.6)));
  ASSERT_EQ(d.engine.open_chains().size(), 1u);
  EXPECT_NE(d.engine.open_chains()[0].id, id);
}

TEST(ChainLifecycle, EscalationKeepsIdAndSetsPeak) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  std::vector<Chain> seen;
  for (int i = 0; i < 4; i++) {
    auto c = d.step(with(contended(0.15)));
    seen.insert(seen.end(), c.begin(), c.end());
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].severity, Severity::kMedium);
  EXPECT_EQ(seen[0].peak, Severity::kMedium);
  const std::string id = seen[0].id;
  const std::int64_t opened = seen[0].opened_ns;

  auto up = d.step(with(contended(0.6)));
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].id, id);
  EXPECT_EQ(up[0].severity, Severity::kCritical);
  EXPECT_EQ(up[0].peak, Severity::kCritical);
  EXPECT_EQ(up[0].opened_ns, opened);
  EXPECT_EQ(up[0].windows, 5u);

  auto down = d.step(with(contended(0.15)));
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].id, id);
  EXPECT_EQ(down[0].severity, Severity::kMedium);
  EXPECT_EQ(down[0].peak, Severity::kCritical) << "peak is the worst it has been";

  // Counters: total by the severity it opened with, active by the current one.
  d.step(with(contended(0.6)));
  auto counts = d.engine.counts();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].kind, "cpu_contention");
  EXPECT_EQ(counts[0].severity, "critical");
  EXPECT_EQ(counts[0].total, 0u);
  EXPECT_EQ(counts[0].active, 1u);
  EXPECT_EQ(counts[1].severity, "medium");
  EXPECT_EQ(counts[1].total, 1u);
  EXPECT_EQ(counts[1].active, 0u);
}

TEST(ChainLifecycle, ExitedProcessClosesAfterCloseAfter) {
  chains::EngineOptions o = Driver::default_options();
  o.thresholds.close_after = 3;
  Driver d(o);
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  for (int i = 0; i < 3; i++) d.step(with(contended(0.6)));
  ASSERT_EQ(d.engine.open_chains().size(), 1u);
  const std::string id = d.engine.open_chains()[0].id;
  const auto sync = call_id("cudaStreamSynchronize");
  ASSERT_NE(d.engine.baseline(kCg, kPid, sync), nullptr);

  d.host.exit_process(kPid);
  auto nothing = [](demo::SyntheticHost&, std::int64_t) {};
  EXPECT_TRUE(d.step(nothing).empty());
  EXPECT_TRUE(d.step(nothing).empty());
  EXPECT_EQ(d.engine.open_chains().size(), 1u);
  auto closed = d.step(nothing);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].id, id);
  EXPECT_FALSE(closed[0].open);
  EXPECT_EQ(closed[0].closed_ns, kT0 + d.windows * kWindow);
  EXPECT_TRUE(d.engine.open_chains().empty());
  // The process's own baseline went with it; its workload's stays for the next process.
  EXPECT_EQ(d.engine.baseline(kCg, kPid, sync), nullptr);
  ASSERT_NE(d.engine.baseline(kCg, 0, sync), nullptr);
  EXPECT_DOUBLE_EQ(d.engine.baseline(kCg, 0, sync)->median_p99(), kCalmSyncS);
}

TEST(ChainLifecycle, BaselineStaysFrozenDuringIncident) {
  Driver d;
  auto s = demo::make_scenario("incident");
  ASSERT_TRUE(s);
  const auto sync = call_id("cudaStreamSynchronize");
  // Calm phase, then 20 contention windows (the incident phase repeated, as --hold does).
  for (int i = 0; i < s->phases[0].windows; i++) {
    d.step([&](demo::SyntheticHost& h, std::int64_t end) { s->phases[0].step(h, i, end, kWindow); });
  }
  ASSERT_EQ(d.last_view.processes.size(), 1u);
  const std::string train_cg = d.last_view.processes[0].cgroup;
  const auto* before = d.engine.baseline(train_cg, 3821, sync);
  ASSERT_NE(before, nullptr);
  const size_t n = before->p99.size();
  EXPECT_EQ(n, 6u);
  EXPECT_DOUBLE_EQ(before->median_p99(), kCalmSyncS);
  EXPECT_DOUBLE_EQ(before->median_p50(), kCalmSyncS);
  for (int i = 0; i < 20; i++) {
    d.step([&](demo::SyntheticHost& h, std::int64_t end) { s->phases[1].step(h, i, end, kWindow); });
  }
  ASSERT_EQ(d.engine.open_chains().size(), 1u);
  const auto* during = d.engine.baseline(train_cg, 3821, sync);
  ASSERT_NE(during, nullptr);
  EXPECT_EQ(during->p99.size(), n) << "no incident window entered the baseline";
  EXPECT_DOUBLE_EQ(during->median_p99(), kCalmSyncS);
  EXPECT_DOUBLE_EQ(d.engine.baseline(train_cg, 0, sync)->median_p99(), kCalmSyncS);
  EXPECT_DOUBLE_EQ(d.engine.open_chains()[0].baseline_p99_s, kCalmSyncS);
  EXPECT_EQ(d.engine.open_chains()[0].windows, 20u);
}

TEST(ChainCounts, TotalOncePerChainActiveWhileOpen) {
  Driver d;
  auto s = demo::make_scenario("incident");
  ASSERT_TRUE(s);
  std::vector<std::vector<ChainCount>> by_window;
  for (const auto& phase : s->phases) {
    for (int i = 0; i < phase.windows; i++) {
      d.step([&](demo::SyntheticHost& h, std::int64_t end) { phase.step(h, i, end, kWindow); });
      by_window.push_back(d.engine.counts());
    }
  }
  ASSERT_EQ(by_window.size(), 20u);
  for (int k = 0; k < 7; k++) EXPECT_TRUE(by_window[k].empty()) << "window " << k;
  for (int k = 7; k < 20; k++) {
    ASSERT_EQ(by_window[k].size(), 1u) << "window " << k;
    const ChainCount& c = by_window[k][0];
    EXPECT_EQ(c.kind, "cpu_contention");
    EXPECT_EQ(c.severity, "critical");
    EXPECT_EQ(c.total, 1u) << "window " << k;
    EXPECT_EQ(c.active, k < 17 ? 1u : 0u) << "window " << k;
    EXPECT_NE(c.identity.cgroup.find("kubepods-burstable-pod6f1c2a3b"), std::string::npos);
    EXPECT_EQ(c.identity.pod_uid, "6f1c2a3b-9d4e-4f5a-8b6c-7d8e9f0a1b2c");
  }
  // A second incident on the same workload counts a second chain.
  for (int i = 0; i < 3; i++) {
    d.step([&](demo::SyntheticHost& h, std::int64_t end) { s->phases[1].step(h, i, end, kWindow); });
  }
  auto c = d.engine.counts();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].total, 2u);
  EXPECT_EQ(c[0].active, 1u);
}

TEST(ChainCounts, ColdStartCountsButIsNeverActive) {
  Driver d;
  run_scenario("cold-start", d);
  auto c = d.engine.counts();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "cold_start");
  EXPECT_EQ(c[0].severity, "low");
  EXPECT_EQ(c[0].total, 1u);
  EXPECT_EQ(c[0].active, 0u);
  EXPECT_EQ(c[0].identity.cgroup, "/system.slice/inference.service");
}

TEST(ChainPipeline, PublishesCountsOnTheBoardWithoutStore) {
  metrics::SnapshotBoard board;
  chains::PipelineOptions po;
  po.engine.host_cpus = 8;
  chains::Pipeline pipeline(po, board, nullptr);
  demo::SyntheticHost host;
  auto s = demo::make_scenario("incident");
  ASSERT_TRUE(s);
  std::int64_t n = 0;
  std::vector<Chain> changes;
  std::vector<std::uint64_t> active;
  for (const auto& phase : s->phases) {
    for (int i = 0; i < phase.windows; i++) {
      const std::int64_t end = kT0 + (++n) * kWindow;
      phase.step(host, i, end, kWindow);
      auto snap = host.snapshot(
          std::chrono::system_clock::time_point(
              std::chrono::duration_cast<std::chrono::system_clock::duration>(
                  std::chrono::nanoseconds(end))),
          std::chrono::nanoseconds(kWindow));
      auto c = pipeline.window(snap, host.drain_outliers(), store::HostContext{});
      changes.insert(changes.end(), c.begin(), c.end());
      auto cur = board.current();
      ASSERT_EQ(cur.get(), snap.get()) << "the window's snapshot is published";
      EXPECT_FALSE(cur->store.enabled);
      active.push_back(cur->chains.empty() ? 0 : cur->chains[0].active);
      if (!cur->chains.empty()) {
        EXPECT_EQ(cur->chains[0].kind, "cpu_contention");
        EXPECT_EQ(cur->chains[0].severity, "critical");
        EXPECT_EQ(cur->chains[0].total, 1u);
      }
    }
  }
  EXPECT_EQ(active, (std::vector<std::uint64_t>{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                                 1, 0, 0, 0}));
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.front().id, changes.back().id);
  EXPECT_EQ(changes.size(), 10u);  // 9 open updates + the close
  EXPECT_EQ(pipeline.engine().open_chains().size(), 0u);
}

// ---------------------------------------------------------------------------------------------
// OutlierSink.

outlier_event event(std::uint32_t pid, std::uint64_t duration, std::uint32_t call = 1) {
  outlier_event e{};
  e.tgid = pid;
  e.tid = pid;
  e.call_id = call;
  e.duration_ns = duration;
  e.runnable_ns = duration / 2;
  std::strncpy(e.comm, "python3", sizeof(e.comm) - 1);
  return e;
}

TEST(OutlierSink, TwoThreadsDrainExactTotalsAndWorst) {
  constexpr size_t kKeep = 16;
  constexpr std::uint64_t kPerThread = 20000;
  chains::OutlierSink sink(kKeep);
  auto producer = [&](std::uint32_t pid, std::uint64_t offset) {
    for (std::uint64_t i = 0; i < kPerThread; i++) {
      // Distinct durations across both threads: 1000 + 2*i + offset.
      sink.add(event(pid, 1000 + 2 * i + offset, pid == 10 ? 3 : 4));
    }
  };
  std::thread a(producer, 10, 0), b(producer, 20, 1);
  a.join();
  b.join();
  EXPECT_EQ(sink.total(), 2 * kPerThread);
  chains::OutlierWindow w = sink.drain();
  EXPECT_EQ(w.total, 2 * kPerThread);
  ASSERT_EQ(w.by_pid.size(), 2u);
  const auto& p10 = w.by_pid.at(10);
  const auto& p20 = w.by_pid.at(20);
  EXPECT_EQ(p10.count, kPerThread);
  EXPECT_EQ(p20.count, kPerThread);
  EXPECT_EQ(p10.worst_ns, 1000 + 2 * (kPerThread - 1));
  EXPECT_EQ(p20.worst_ns, 1000 + 2 * (kPerThread - 1) + 1);
  EXPECT_EQ(p10.worst_runnable_ns, p10.worst_ns / 2);
  EXPECT_EQ(p10.worst_call_id, 3u);
  EXPECT_EQ(p20.worst_call_id, 4u);
  std::uint64_t runnable10 = 0;
  for (std::uint64_t i = 0; i < kPerThread; i++) runnable10 += (1000 + 2 * i) / 2;
  EXPECT_EQ(p10.runnable_ns, runnable10);

  // The `keep` longest records, longest first: the top 16 of all 40000 durations.
  ASSERT_EQ(w.worst.size(), kKeep);
  const std::uint64_t top = 1000 + 2 * (kPerThread - 1) + 1;
  for (size_t i = 0; i < kKeep; i++) {
    EXPECT_EQ(w.worst[i].duration_ns, top - i) << i;
    EXPECT_EQ(w.worst[i].tgid, (top - i) % 2 ? 20u : 10u) << i;
  }

  // Drained: the next window is empty, the cumulative total stays.
  chains::OutlierWindow again = sink.drain();
  EXPECT_EQ(again.total, 0u);
  EXPECT_TRUE(again.by_pid.empty());
  EXPECT_TRUE(again.worst.empty());
  EXPECT_EQ(sink.total(), 2 * kPerThread);
  sink.add(event(30, 5));
  EXPECT_EQ(sink.total(), 2 * kPerThread + 1);
  EXPECT_EQ(sink.drain().worst.size(), 1u);
}

TEST(OutlierSink, FewerThanKeepAreSortedLongestFirst) {
  chains::OutlierSink sink(8);
  for (std::uint64_t d : {5u, 50u, 1u, 20u, 7u}) sink.add(event(1, d));
  auto w = sink.drain();
  ASSERT_EQ(w.worst.size(), 5u);
  std::vector<std::uint64_t> got;
  for (const auto& e : w.worst) got.push_back(e.duration_ns);
  EXPECT_EQ(got, (std::vector<std::uint64_t>{50, 20, 7, 5, 1}));
  EXPECT_EQ(w.by_pid.at(1).worst_ns, 50u);
}

// ---------------------------------------------------------------------------------------------
// diff_windows.

CallTotals totals(std::uint64_t count, std::uint64_t each_ns, std::uint64_t runnable = 0,
                  std::uint64_t blocked = 0) {
  CallTotals t;
  t.count = count;
  t.sum_ns = count * each_ns;
  t.runnable_ns = runnable;
  t.blocked_ns = blocked;
  t.max_ns = count ? each_ns : 0;
  if (count) t.buckets[trace::bucket_of_ns(each_ns)] = count;
  return t;
}

Snapshot snap_at(std::int64_t end_ns) {
  Snapshot s;
  s.taken = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(end_ns)));
  s.window = std::chrono::nanoseconds(kWindow);
  return s;
}

void add_proc(Snapshot& s, const std::string& cg, int pid, const std::string& comm,
              std::uint32_t call, const CallTotals& t, OffcpuTotals off = {}) {
  Series& ser = s.series[cg];
  ser.identity.cgroup = cg;
  ser.processes.push_back(ProcessCall{pid, call, t});
  ser.process_info[pid] = ProcessInfo{pid, comm, 42, off};
}

const chains::ProcessWindow* find(const chains::WindowView& v, int pid) {
  for (const auto& p : v.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

TEST(DiffWindows, FirstWindowCountsEverything) {
  const auto sync = call_id("cudaStreamSynchronize");
  Snapshot s = snap_at(kT0 + kWindow);
  add_proc(s, kCg, 1, "a", sync, totals(10, 1000, 300, 200), {5, 6, 7, 8});
  chains::WindowView v = chains::diff_windows(nullptr, s);
  EXPECT_EQ(v.end_ns, kT0 + kWindow);
  EXPECT_EQ(v.window_ns, kWindow);
  ASSERT_EQ(v.processes.size(), 1u);
  const auto& p = v.processes[0];
  EXPECT_EQ(p.cgroup, kCg);
  EXPECT_EQ(p.comm, "a");
  EXPECT_EQ(p.start_ns, 42);
  EXPECT_TRUE(p.first_seen);
  ASSERT_EQ(p.calls.count(sync), 1u);
  EXPECT_EQ(p.calls.at(sync).count, 10u);
  EXPECT_EQ(p.calls.at(sync).sum_ns, 10000u);
  EXPECT_EQ(p.cuda_ns(), 10000u);
  EXPECT_EQ(p.offcpu.runnable_ns, 5u);
  EXPECT_EQ(p.offcpu.preemptions, 8u);
}

TEST(DiffWindows, DeltasResetsPreemptorsAndFirstSeen) {
  const auto sync = call_id("cudaStreamSynchronize");
  const auto launch = call_id("cudaLaunchKernel");
  Snapshot a = snap_at(kT0 + kWindow);
  add_proc(a, kCg, 1, "a", sync, totals(10, 1000, 300, 200), {100, 200, 300, 4});
  add_proc(a, kCg, 1, "a", launch, totals(50, 4000), {100, 200, 300, 4});
  add_proc(a, kCg, 2, "b", sync, totals(5, 2000));  // will reset
  add_proc(a, kCg, 4, "idle", sync, totals(7, 1000), {10, 10, 10, 1});
  a.series[kCg].preemptors = {Preemptor{1, 900, "hog", kOtherCg, 1000, 10},
                              Preemptor{1, 901, "gone", kOtherCg, 500, 5}};

  Snapshot b = snap_at(kT0 + 2 * kWindow);
  CallTotals s1 = totals(10, 1000, 300, 200);
  s1.add(totals(6, 1000, 120, 60));
  add_proc(b, kCg, 1, "a", sync, s1, {150, 260, 390, 9});
  add_proc(b, kCg, 1, "a", launch, totals(50, 4000), {150, 260, 390, 9});  // no call delta
  add_proc(b, kCg, 2, "b", sync, totals(3, 8000));     // count went down: restarted counters
  add_proc(b, kCg, 3, "new", sync, totals(2, 3000));   // first seen
  add_proc(b, kCg, 4, "idle", sync, totals(7, 1000), {10, 10, 10, 1});  // no activity
  b.series[kCg].preemptors = {Preemptor{1, 900, "hog", kOtherCg, 1600, 14},
                              Preemptor{1, 901, "gone", kOtherCg, 500, 5},   // no new time
                              Preemptor{1, 902, "fresh", kOtherCg, 700, 3},  // new preemptor
                              Preemptor{4, 903, "x", kOtherCg, 999, 9}};     // victim idle

  chains::WindowView v = chains::diff_windows(&a, b);
  EXPECT_EQ(v.end_ns, kT0 + 2 * kWindow);
  ASSERT_EQ(v.processes.size(), 3u) << "the idle process is left out";
  EXPECT_EQ(find(v, 4), nullptr);

  const auto* p1 = find(v, 1);
  ASSERT_NE(p1, nullptr);
  EXPECT_FALSE(p1->first_seen);
  ASSERT_EQ(p1->calls.size(), 1u) << "calls without activity are left out";
  const CallTotals& d1 = p1->calls.at(sync);
  EXPECT_EQ(d1.count, 6u);
  EXPECT_EQ(d1.sum_ns, 6000u);
  EXPECT_EQ(d1.runnable_ns, 120u);
  EXPECT_EQ(d1.blocked_ns, 60u);
  EXPECT_EQ(d1.buckets[trace::bucket_of_ns(1000)], 6u);
  EXPECT_EQ(p1->offcpu.runnable_ns, 50u);
  EXPECT_EQ(p1->offcpu.blocked_ns, 60u);
  EXPECT_EQ(p1->offcpu.oncpu_ns, 90u);
  EXPECT_EQ(p1->offcpu.preemptions, 5u);
  ASSERT_EQ(p1->preemptors.size(), 2u);
  EXPECT_EQ(p1->preemptors[0].comm, "fresh");  // worst first: 700 > 600
  EXPECT_EQ(p1->preemptors[0].runnable_ns, 700u);
  EXPECT_EQ(p1->preemptors[0].count, 3u);
  EXPECT_EQ(p1->preemptors[1].comm, "hog");
  EXPECT_EQ(p1->preemptors[1].runnable_ns, 600u);
  EXPECT_EQ(p1->preemptors[1].count, 4u);

  const auto* p2 = find(v, 2);
  ASSERT_NE(p2, nullptr);
  EXPECT_FALSE(p2->first_seen);
  const CallTotals& d2 = p2->calls.at(sync);
  EXPECT_EQ(d2.count, 3u) << "a reset takes the new value as the delta";
  EXPECT_EQ(d2.sum_ns, 24000u);
  EXPECT_EQ(d2.max_ns, 8000u);

  const auto* p3 = find(v, 3);
  ASSERT_NE(p3, nullptr);
  EXPECT_TRUE(p3->first_seen);
  EXPECT_EQ(p3->comm, "new");
  EXPECT_EQ(p3->calls.at(sync).count, 2u);
}

TEST(DiffWindows, DeltaFunctions) {
  CallTotals before = totals(10, 1000, 100, 50);
  CallTotals now = before;
  now.add(totals(4, 1000000, 40, 20));
  CallTotals d = chains::delta(now, &before);
  EXPECT_EQ(d.count, 4u);
  EXPECT_EQ(d.sum_ns, 4000000u);
  EXPECT_EQ(d.runnable_ns, 40u);
  EXPECT_EQ(d.blocked_ns, 20u);
  EXPECT_EQ(d.max_ns, 1000000u) << "a new maximum is exact";
  EXPECT_EQ(d.buckets[trace::bucket_of_ns(1000)], 0u);
  EXPECT_EQ(d.buckets[trace::bucket_of_ns(1000000)], 4u);

  // No new maximum: the window's worst is bounded by its top bucket, never above the max.
  CallTotals later = now;
  later.add(totals(3, 1000));
  CallTotals d2 = chains::delta(later, &now);
  EXPECT_EQ(d2.count, 3u);
  EXPECT_GE(d2.max_ns, 1000u);
  EXPECT_LE(d2.max_ns, 2048u);

  CallTotals reset = totals(2, 500);
  CallTotals d3 = chains::delta(reset, &now);
  EXPECT_EQ(d3.count, 2u);
  EXPECT_EQ(d3.sum_ns, 1000u);
  EXPECT_EQ(chains::delta(now, nullptr).count, now.count);

  OffcpuTotals o1{10, 20, 30, 4}, o2{15, 20, 35, 6};
  OffcpuTotals od = chains::delta(o2, &o1);
  EXPECT_EQ(od.runnable_ns, 5u);
  EXPECT_EQ(od.blocked_ns, 0u);
  EXPECT_EQ(od.oncpu_ns, 5u);
  EXPECT_EQ(od.preemptions, 2u);
  OffcpuTotals back = chains::delta(o1, &o2);  // went down: counts from zero
  EXPECT_EQ(back.runnable_ns, 10u);
  EXPECT_EQ(back.preemptions, 4u);
}

// ---------------------------------------------------------------------------------------------
// Host-evidence rules (memory_pressure, io_stall, network_retransmit, nccl_straggler) on
// workloads of our own: kPid trains calmly in kCg, and the host adds the evidence.

using Fill = std::function<void(demo::SyntheticHost&, std::int64_t)>;

// The calm load of kPid plus `extra`.
Fill calm_and(const std::function<void(demo::SyntheticHost&, std::int64_t)>& extra,
              const Load& l = calm()) {
  return [extra, l](demo::SyntheticHost& h, std::int64_t end) {
    with(l)(h, end);
    extra(h, end);
  };
}

std::uint64_t part(double share) { return static_cast<std::uint64_t>(share * kWindow); }

std::vector<Chain> of_kind(const std::vector<Chain>& all, Kind k) {
  std::vector<Chain> out;
  for (const auto& c : all) {
    if (c.kind == k) out.push_back(c);
  }
  return out;
}

TEST(MemoryPressureRule, ReclaimBelowThresholdsStaysSilent) {
  Driver d;
  for (int i = 0; i < 3; i++) d.step(with(calm()));
  for (int i = 0; i < 12; i++) {
    d.step(calm_and([](demo::SyntheticHost& h, std::int64_t) {
      h.reclaim(kCg, 0, part(0.049), part(0.049), 200);  // 4.9% < 5%, CUDA threads in it all
      h.pressure(kCg, PressureTotals{true, 0, 0, part(0.099), 0, 0, 0});  // 9.9% < 10%
    }));
  }
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
  EXPECT_TRUE(d.engine.counts().empty());
}

TEST(MemoryPressureRule, ReclaimOpensMediumAndTheCudaThreadsShareRaisesIt) {
  Driver d;
  for (int i = 0; i < 3; i++) d.step(with(calm()));
  auto reclaim = [](double all, double cuda) {
    return calm_and([=](demo::SyntheticHost& h, std::int64_t) {
      h.reclaim(kCg, 0, part(all), part(cuda), 100);
    });
  };
  EXPECT_TRUE(d.step(reclaim(0.06, 0.01)).empty()) << "open_after = 2";
  auto opened = d.step(reclaim(0.06, 0.01));
  ASSERT_EQ(opened.size(), 1u);
  const Chain& c = opened[0];
  EXPECT_EQ(c.kind, Kind::kMemoryPressure);
  EXPECT_EQ(c.severity, Severity::kMedium);
  EXPECT_EQ(c.pid, 0);
  EXPECT_EQ(c.identity.cgroup, kCg);
  EXPECT_NEAR(c.evidence_value("reclaim_share"), 0.06, 1e-9);
  EXPECT_EQ(c.evidence_value("psi_memory_some_share", -1), -1) << "no PSI known: no PSI evidence";
  EXPECT_NE(c.recommendation.find("systemctl set-property train.service MemoryMax="),
            std::string::npos)
      << c.recommendation;

  auto up = d.step(reclaim(0.06, 0.05));  // the CUDA threads' own reclaim ≥ 5%: one step up
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].id, c.id);
  EXPECT_EQ(up[0].severity, Severity::kHigh);
  auto big = d.step(reclaim(0.30, 0.20));  // high by itself; +1 stays high (critical = OOM)
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].severity, Severity::kHigh);
  EXPECT_TRUE(d.step(with(calm())).empty());
  auto closed = d.step(with(calm()));
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_FALSE(closed[0].open);
}

TEST(MemoryPressureRule, PsiAloneOpensAndDirectReclaimSaysTheNodeRanShort) {
  Driver d;
  // PSI known from the start (a window needs a value before it), no stall yet.
  for (int i = 0; i < 3; i++) {
    d.step(calm_and([](demo::SyntheticHost& h, std::int64_t) {
      h.pressure(kCg, PressureTotals{true, 0, 0, 0, 0, 0, 0});
    }));
  }
  Fill psi = calm_and([](demo::SyntheticHost& h, std::int64_t) {
    h.pressure(kCg, PressureTotals{true, 0, 0, part(0.12), part(0.02), 0, 0});
  });
  d.step(psi);
  auto c = d.step(psi);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].severity, Severity::kMedium);
  EXPECT_NEAR(c[0].evidence_value("psi_memory_some_share"), 0.12, 1e-9);
  EXPECT_TRUE(c[0].summary.ends_with("stalled on memory 12% of the window (PSI memory some)"))
      << c[0].summary;

  Driver e;
  for (int i = 0; i < 3; i++) e.step(with(calm()));
  Fill direct = calm_and([](demo::SyntheticHost& h, std::int64_t) {
    h.reclaim(kCg, part(0.08), 0, 0, 50);
  });
  e.step(direct);
  auto f = e.step(direct);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kMedium);
  EXPECT_NEAR(f[0].evidence_value("direct_reclaim_s"), 0.08, 1e-9);
  EXPECT_NE(f[0].summary.find("direct reclaim"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[0].recommendation.find("free -g"), std::string::npos) << f[0].recommendation;
}

TEST(MemoryPressureRule, OomKillOfTheCudaProcessIsCriticalAtOnce) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  auto killed = d.step([](demo::SyntheticHost& h, std::int64_t end) {
    with(calm())(h, end);
    h.oom_kill(kCg, kPid, "python3", end - kS / 2);
  });
  ASSERT_EQ(killed.size(), 1u) << "an OOM kill opens without waiting for a second window";
  const Chain& c = killed[0];
  EXPECT_EQ(c.kind, Kind::kMemoryPressure);
  EXPECT_EQ(c.severity, Severity::kCritical);
  EXPECT_EQ(c.windows, 1u);
  EXPECT_EQ(c.pid, 0);
  ASSERT_EQ(c.contributors.size(), 1u);
  EXPECT_EQ(c.contributors[0].pid, kPid);
  EXPECT_EQ(c.contributors[0].role, "OOM victim");
  EXPECT_EQ(c.evidence_value("oom_kills_cuda"), 1);
  EXPECT_FALSE(d.host.has_process(kPid));
  // Held for oom_hold_windows (6) windows in all, then closed after close_after (2).
  auto nothing = [](demo::SyntheticHost&, std::int64_t) {};
  for (int i = 1; i < 6; i++) {
    auto held = d.step(nothing);
    ASSERT_EQ(held.size(), 1u) << "hold window " << i;
    EXPECT_EQ(held[0].id, c.id);
    EXPECT_EQ(held[0].severity, Severity::kCritical);
  }
  EXPECT_TRUE(d.step(nothing).empty());
  auto closed = d.step(nothing);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_FALSE(closed[0].open);
  EXPECT_EQ(closed[0].windows, 6u);
  auto counts = d.engine.counts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].kind, "memory_pressure");
  EXPECT_EQ(counts[0].severity, "critical");
  EXPECT_EQ(counts[0].total, 1u);
  EXPECT_EQ(counts[0].active, 0u);
}

TEST(MemoryPressureRule, OomKillOfAnotherProcessOfTheCgroupIsHigh) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  auto killed = d.step(calm_and([](demo::SyntheticHost& h, std::int64_t end) {
    h.oom_kill(kCg, 4100, "pt_data_worker:0", end - kS / 2);
  }));
  ASSERT_EQ(killed.size(), 1u);
  EXPECT_EQ(killed[0].severity, Severity::kHigh);
  ASSERT_EQ(killed[0].contributors.size(), 1u);
  EXPECT_EQ(killed[0].contributors[0].comm, "pt_data_worker:0");
  EXPECT_EQ(killed[0].evidence_value("oom_kills"), 1);
  EXPECT_EQ(killed[0].evidence_value("oom_kills_cuda"), 0);
  EXPECT_TRUE(d.host.has_process(kPid)) << "the training process lives on";
}

TEST(MemoryPressureRule, ChainAboutTheCgroupFreezesItsProcessesBaselines) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  const auto sync = call_id("cudaStreamSynchronize");
  ASSERT_NE(d.engine.baseline(kCg, kPid, sync), nullptr);
  const size_t n = d.engine.baseline(kCg, kPid, sync)->p99.size();
  for (int i = 0; i < 6; i++) {
    d.step(calm_and([](demo::SyntheticHost& h, std::int64_t) {
      h.reclaim(kCg, 0, part(0.3), 0, 100);
    }));
  }
  ASSERT_EQ(d.engine.open_chains().size(), 1u);
  EXPECT_EQ(d.engine.baseline(kCg, kPid, sync)->p99.size(), n);
}

// io_stall: the CUDA thread blocked (almost all of it outside CUDA calls: `starved` of the
// window) and I/O by a DataLoader worker (PID 4101) in the same cgroup.
Fill starved_with_io(double starved, std::uint64_t reads, std::uint64_t read_ns,
                     std::uint64_t tail_ns = 0) {
  Load l = calm();
  l.thread_blocked = starved;
  return calm_and(
      [=](demo::SyntheticHost& h, std::int64_t) {
        h.io(kCg, 4101, "pt_data_worker:0",
             demo::IoMix{"vdb", "read", reads, 65536, read_ns, tail_ns, tail_ns ? 0.1 : 0});
      },
      l);
}

TEST(IoStallRule, StarvationWithoutIoStaysSilent) {
  Driver d;  // a CPU-bound DataLoader: the GPU starves, the disk is idle
  for (int i = 0; i < 15; i++) d.step(starved_with_io(0.6, 0, 0));
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
  ASSERT_EQ(d.last_view.series.count(kCg), 1u);
  // As the collector computes it: blocked time less the blocked time inside calls (2.8 µs).
  EXPECT_NEAR(d.last_view.series.at(kCg).starvation_ratio, 0.6 - 2.8e-6, 1e-9);
}

TEST(IoStallRule, IoWithoutStarvationStaysSilent) {
  Driver d;  // busy, slow reads, but the training loop never waits for them
  for (int i = 0; i < 15; i++) d.step(starved_with_io(0.05, 100, 30000000));
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
  EXPECT_NEAR(d.last_view.series.at(kCg).io_total().sum_ns, 3.0 * kWindow, 1);
}

TEST(IoStallRule, SparseSlowRequestsStaySilent) {
  Driver d;  // one 40 ms request per window: slow, but 4% busy, not what the loop waits for
  for (int i = 0; i < 15; i++) d.step(starved_with_io(0.5, 1, 40000000));
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
}

TEST(IoStallRule, StarvationWithBusyIoOpensMediumThenHigh) {
  Driver d;
  for (int i = 0; i < 3; i++) d.step(with(calm()));
  EXPECT_TRUE(d.step(starved_with_io(0.25, 10, 30000000)).empty());
  auto opened = d.step(starved_with_io(0.25, 10, 30000000));  // 30% busy, p99 30 ms
  ASSERT_EQ(opened.size(), 1u);
  const Chain& c = opened[0];
  EXPECT_EQ(c.kind, Kind::kIoStall);
  EXPECT_EQ(c.severity, Severity::kMedium);
  EXPECT_EQ(c.pid, 0);
  EXPECT_NEAR(c.evidence_value("starvation_share"), 0.25, 1e-5);
  EXPECT_NEAR(c.evidence_value("io_busy_share"), 0.30, 1e-9);
  EXPECT_NEAR(c.evidence_value("io_p99_s"), 0.030, 1e-9);
  ASSERT_EQ(c.contributors.size(), 1u);
  EXPECT_EQ(c.contributors[0].pid, 4101);
  EXPECT_EQ(c.contributors[0].role, "I/O submitter");
  EXPECT_EQ(c.contributors[0].cpu_ns, 300000000u);
  EXPECT_EQ(c.contributors[0].count, 10u);
  // Slow but only 8% busy still counts (p99 ≥ 20 ms with ≥ 5% busy); 45% starved is high.
  auto high = d.step(starved_with_io(0.45, 2, 40000000));
  ASSERT_EQ(high.size(), 1u);
  EXPECT_EQ(high[0].id, c.id);
  EXPECT_EQ(high[0].severity, Severity::kHigh);
  EXPECT_TRUE(d.step(with(calm())).empty());
  ASSERT_EQ(d.step(with(calm())).size(), 1u);
  EXPECT_TRUE(d.engine.open_chains().empty());
}

// network_retransmit: `per_window` IPv4 retransmits of kCg with the sync calls of kPid
// inflated (p99 50 ms against 7 µs) or calm.
Fill retransmitting(std::uint64_t per_window, bool inflated) {
  Load l = calm();
  if (inflated) {
    l.tail_ns = 50000000;
    l.tail_share = 0.1;
    l.call_blocked = 0.9;
  }
  return calm_and([=](demo::SyntheticHost& h,
                      std::int64_t) { h.retransmits(kCg, per_window, 0); },
                  l);
}

TEST(NetworkRetransmitRule, RetransmitsWithoutInflationStaySilent) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  for (int i = 0; i < 10; i++) d.step(retransmitting(5000, false));
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
  EXPECT_EQ(d.last_view.series.at(kCg).retransmits(), 5000u);
}

TEST(NetworkRetransmitRule, InflationWithoutRetransmitsStaysSilent) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  for (int i = 0; i < 10; i++) d.step(retransmitting(0, true));
  for (int i = 0; i < 10; i++) d.step(retransmitting(9, true));  // under 10 in the window
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
}

TEST(NetworkRetransmitRule, RetransmitsWithInflatedSyncOpenMedium) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  EXPECT_TRUE(d.step(retransmitting(20, true)).empty());
  auto opened = d.step(retransmitting(20, true));
  ASSERT_EQ(opened.size(), 1u);
  const Chain& c = opened[0];
  EXPECT_EQ(c.kind, Kind::kNetworkRetransmit);
  EXPECT_EQ(c.severity, Severity::kMedium);
  EXPECT_EQ(c.pid, 0);
  EXPECT_EQ(c.call, "cudaStreamSynchronize");
  EXPECT_DOUBLE_EQ(c.baseline_p99_s, kCalmSyncS);
  EXPECT_DOUBLE_EQ(c.p99_s, 0.050);
  EXPECT_EQ(c.evidence_value("retransmits"), 20);
  EXPECT_EQ(c.evidence_value("retransmits_per_second"), 20);
  EXPECT_EQ(c.evidence_value("call_mean_ratio", -1), -1) << "only NCCL ops compare means";
  EXPECT_NE(c.root_cause.find("IPv4"), std::string::npos) << c.root_cause;
  // 100 retransmits/s and more: high.
  auto high = d.step(retransmitting(100, true));
  ASSERT_EQ(high.size(), 1u);
  EXPECT_EQ(high[0].severity, Severity::kHigh);
}

// nccl_straggler: ranks of one job, each a calm training process with 20 all-reduces a window.
void rank(demo::SyntheticHost& h, const std::string& cg, int pid, int r, int world,
          std::uint64_t op_ns) {
  if (!h.has_process(pid)) h.add_process(cg, pid, "python3", kT0 - 3600 * kS);
  load(h, pid, kWindow, calm());
  h.nccl(pid, demo::NcclMix{"ncclAllReduce", r, world, 20, 1 << 20, op_ns, 0, 0, 0.01, 0.5});
}

Fill two_ranks(std::uint64_t rank0_ns, std::uint64_t rank1_ns, int r0 = 0, int r1 = 1) {
  return [=](demo::SyntheticHost& h, std::int64_t) {
    rank(h, kCg, 5000, r0, 2, rank0_ns);
    rank(h, kOtherCg, 5001, r1, 2, rank1_ns);
  };
}

TEST(NcclStragglerRule, BalancedRanksStaySilent) {
  Driver d;
  for (int i = 0; i < 15; i++) d.step(two_ranks(3000000, 3200000));
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
  const auto* p = find(d.last_view, 5000);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->nccl.size(), 1u);
  EXPECT_EQ(p->nccl.begin()->first.world_size, 2);
  EXPECT_EQ(p->nccl.begin()->second.count, 20u);
}

TEST(NcclStragglerRule, UnderTheRatioOrTheExcessOrWithoutRanksStaysSilent) {
  Driver d;
  for (int i = 0; i < 8; i++) d.step(two_ranks(3000000, 8000000));  // 2.7x < 3x
  for (int i = 0; i < 8; i++) d.step(two_ranks(1000000, 4900000));  // 4.9x, 3.9 ms < 5 ms
  for (int i = 0; i < 8; i++) d.step(two_ranks(3000000, 30000000, -1, -1));  // ranks unknown
  for (int i = 0; i < 8; i++) d.step(two_ranks(3000000, 30000000, 0, 0));  // two jobs' rank 0
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
}

TEST(NcclStragglerRule, SlowRankInAnotherCgroupIsCriticalAtTenTimes) {
  Driver d;
  d.step(two_ranks(3000000, 36000000));
  auto opened = d.step(two_ranks(3000000, 36000000));  // 12x
  ASSERT_EQ(opened.size(), 1u);
  const Chain& c = opened[0];
  EXPECT_EQ(c.kind, Kind::kNcclStraggler);
  EXPECT_EQ(c.severity, Severity::kCritical);
  EXPECT_EQ(c.pid, 5001);
  EXPECT_EQ(c.identity.cgroup, kOtherCg) << "attributed to the slow rank's cgroup";
  ASSERT_EQ(c.contributors.size(), 1u);
  EXPECT_EQ(c.contributors[0].pid, 5000);
  EXPECT_EQ(c.contributors[0].cgroup, kCg);
  EXPECT_EQ(c.contributors[0].role, "peer rank");
  EXPECT_EQ(c.evidence_value("rank"), 1);
  EXPECT_EQ(c.evidence_value("world_size"), 2);
  EXPECT_EQ(c.evidence_value("local_ranks"), 2);
  EXPECT_NEAR(c.evidence_value("mean_ratio"), 12, 1e-9);
  EXPECT_NEAR(c.evidence_value("op_runnable_share"), 0.01, 1e-6);
  EXPECT_NEAR(c.evidence_value("op_blocked_share"), 0.5, 1e-6);
  // 6x: high.
  auto high = d.step(two_ranks(3000000, 18000000));
  ASSERT_EQ(high.size(), 1u);
  EXPECT_EQ(high[0].severity, Severity::kHigh);
  EXPECT_EQ(of_kind(d.all, Kind::kNcclStraggler).size(), d.all.size()) << "no other kind";
}

// ---------------------------------------------------------------------------------------------
// diff_windows: the host evidence of a series.

IoTotals io_totals(std::uint64_t count, std::uint64_t bytes, std::uint64_t each_ns) {
  IoTotals t;
  t.count = count;
  t.bytes = bytes;
  t.sum_ns = count * each_ns;
  t.max_ns = count ? each_ns : 0;
  if (count) t.buckets[trace::bucket_of_ns(each_ns)] = count;
  return t;
}

NcclTotals nccl_totals(std::uint64_t count, std::uint64_t bytes, std::uint64_t each_ns) {
  NcclTotals t;
  t.count = count;
  t.bytes = bytes;
  t.sum_ns = count * each_ns;
  t.max_ns = count ? each_ns : 0;
  if (count) t.buckets[trace::bucket_of_ns(each_ns)] = count;
  return t;
}

TEST(DiffWindows, SeriesEvidenceDeltasVictimsAndResets) {
  const auto sync = call_id("cudaStreamSynchronize");
  const auto allreduce = call_id("ncclAllReduce");
  const IoKey sda{"sda", "read"};
  const NcclKey k{allreduce, 0, 2};
  Snapshot a = snap_at(kT0 + kWindow);
  add_proc(a, kCg, 1, "python3", sync, totals(10, 1000));
  add_proc(a, kCg, 1, "python3", allreduce, totals(5, 2000000));
  Series& sa = a.series[kCg];
  sa.starvation_ratio = 0.1;
  sa.reclaim = ReclaimTotals{100, 2, 300, 4, 50};
  sa.oom_kills = 1;
  sa.oom_victims = {OomKill{7, "worker", false, 111}};
  sa.pressure = PressureTotals{true, 10, 5, 20, 10, 30, 15};
  sa.io[sda] = io_totals(4, 4096, 1000000);
  sa.io_processes = {ProcessIo{1, "python3", sda, io_totals(1, 1024, 1000000)},
                     ProcessIo{9, "worker", sda, io_totals(3, 3072, 1000000)}};
  sa.tcp_retransmits_ipv4 = 5;
  sa.tcp_retransmits_ipv6 = 2;
  sa.nccl[k] = nccl_totals(5, 500, 2000000);
  sa.nccl_processes = {ProcessNccl{1, k, nccl_totals(5, 500, 2000000)}};

  // First window: everything counts, but cumulative pressure is not a window's.
  chains::WindowView v0 = chains::diff_windows(nullptr, a);
  ASSERT_EQ(v0.series.count(kCg), 1u);
  const chains::SeriesWindow& w0 = v0.series.at(kCg);
  EXPECT_EQ(w0.reclaim.memcg_ns, 300u);
  EXPECT_FALSE(w0.pressure.known);
  ASSERT_EQ(w0.new_oom_victims.size(), 1u);
  EXPECT_EQ(w0.oom_kills, 1u);
  EXPECT_EQ(w0.retransmits(), 7u);
  EXPECT_EQ(w0.io.at(sda).count, 4u);
  EXPECT_EQ(w0.sync.count, 10u) << "sync calls merged; the all-reduce is not one";

  Snapshot b = snap_at(kT0 + 2 * kWindow);
  CallTotals s1 = totals(10, 1000);
  s1.add(totals(4, 3000));
  add_proc(b, kCg, 1, "python3", sync, s1);
  add_proc(b, kCg, 1, "python3", allreduce, totals(5, 2000000));
  Series& sb = b.series[kCg];
  sb.starvation_ratio = 0.3;
  sb.reclaim = ReclaimTotals{60, 3, 800, 9, 150};  // direct went down: counts from zero
  sb.oom_kills = 2;
  sb.oom_kills_cuda = 1;
  sb.oom_victims = {OomKill{7, "worker", false, 111}, OomKill{1, "python3", true, 222}};
  sb.pressure = PressureTotals{true, 11, 5, 220, 110, 30, 15};
  IoTotals io_b = io_totals(4, 4096, 1000000);
  io_b.add(io_totals(2, 8192, 8000000));
  sb.io[sda] = io_b;
  IoTotals w9 = io_totals(3, 3072, 1000000);
  w9.add(io_totals(2, 8192, 8000000));
  sb.io_processes = {ProcessIo{1, "python3", sda, io_totals(1, 1024, 1000000)},  // no new I/O
                     ProcessIo{9, "worker", sda, w9}};
  sb.tcp_retransmits_ipv4 = 3;  // went down: counts from zero
  sb.tcp_retransmits_ipv6 = 6;
  NcclTotals n_b = nccl_totals(5, 500, 2000000);
  n_b.add(nccl_totals(3, 300, 9000000));
  sb.nccl[k] = n_b;
  sb.nccl_processes = {ProcessNccl{1, k, n_b}};

  chains::WindowView v = chains::diff_windows(&a, b);
  const chains::SeriesWindow& w = v.series.at(kCg);
  EXPECT_EQ(w.cgroup, kCg);
  EXPECT_DOUBLE_EQ(w.starvation_ratio, 0.3);
  EXPECT_EQ(w.reclaim.direct_ns, 60u);
  EXPECT_EQ(w.reclaim.direct_count, 1u);
  EXPECT_EQ(w.reclaim.memcg_ns, 500u);
  EXPECT_EQ(w.reclaim.memcg_count, 5u);
  EXPECT_EQ(w.reclaim.cuda_ns, 100u);
  EXPECT_EQ(w.oom_kills, 1u);
  EXPECT_EQ(w.oom_kills_cuda, 1u);
  ASSERT_EQ(w.new_oom_victims.size(), 1u) << "only the victim not listed before";
  EXPECT_EQ(w.new_oom_victims[0].pid, 1);
  EXPECT_TRUE(w.new_oom_victims[0].cuda);
  EXPECT_TRUE(w.pressure.known);
  EXPECT_EQ(w.pressure.cpu_some_ns, 1u);
  EXPECT_EQ(w.pressure.memory_some_ns, 200u);
  EXPECT_EQ(w.pressure.memory_full_ns, 100u);
  EXPECT_EQ(w.pressure.io_some_ns, 0u);
  EXPECT_EQ(w.retransmits_ipv4, 3u);
  EXPECT_EQ(w.retransmits_ipv6, 4u);
  ASSERT_EQ(w.io.size(), 1u);
  EXPECT_EQ(w.io.at(sda).count, 2u);
  EXPECT_EQ(w.io.at(sda).bytes, 8192u);
  EXPECT_EQ(w.io.at(sda).sum_ns, 16000000u);
  EXPECT_EQ(w.io.at(sda).max_ns, 8000000u);
  EXPECT_EQ(w.io_total().count, 2u);
  ASSERT_EQ(w.io_processes.size(), 1u) << "processes without new requests are left out";
  EXPECT_EQ(w.io_processes[0].pid, 9);
  EXPECT_EQ(w.io_processes[0].comm, "worker");
  EXPECT_EQ(w.io_processes[0].totals.count, 2u);
  EXPECT_EQ(w.nccl.at(k).count, 3u);
  EXPECT_EQ(w.nccl.at(k).bytes, 300u);
  EXPECT_EQ(w.sync.count, 4u);
  EXPECT_EQ(w.sync.sum_ns, 12000u);

  // Per process: the CUDA process carries its NCCL ops (and would carry its own I/O); the
  // worker that only reads is not a CUDA process of the window.
  ASSERT_EQ(v.processes.size(), 1u);
  const auto& p = v.processes[0];
  EXPECT_EQ(p.pid, 1);
  ASSERT_EQ(p.nccl.count(k), 1u);
  EXPECT_EQ(p.nccl.at(k).count, 3u);
  EXPECT_EQ(p.nccl.at(k).sum_ns, 27000000u);
  EXPECT_TRUE(p.io.empty()) << "no I/O of its own this window";
  EXPECT_EQ(find(v, 9), nullptr);

  // Pressure unknown in either snapshot: unknown in the window.
  Snapshot c = b;
  c.series[kCg].pressure.known = false;
  EXPECT_FALSE(chains::diff_windows(&b, c).series.at(kCg).pressure.known);
  EXPECT_FALSE(chains::diff_windows(&c, b).series.at(kCg).pressure.known);
}

TEST(DiffWindows, HostDeltaFunctionsNeverUnderflow) {
  IoTotals before = io_totals(4, 400, 1000);
  IoTotals now = before;
  now.add(io_totals(2, 100, 5000000));
  IoTotals d = chains::delta(now, &before);
  EXPECT_EQ(d.count, 2u);
  EXPECT_EQ(d.bytes, 100u);
  EXPECT_EQ(d.max_ns, 5000000u);
  EXPECT_EQ(d.buckets[trace::bucket_of_ns(1000)], 0u);
  IoTotals reset = io_totals(1, 10, 1000);
  EXPECT_EQ(chains::delta(reset, &now).count, 1u) << "a reset counts from zero";
  EXPECT_EQ(chains::delta(now, nullptr).count, 6u);

  NcclTotals nb = nccl_totals(3, 30, 1000), nn = nccl_totals(3, 30, 1000);
  nn.add(nccl_totals(1, 5, 1000));
  EXPECT_EQ(chains::delta(nn, &nb).count, 1u);
  EXPECT_EQ(chains::delta(nn, &nb).bytes, 5u);
  EXPECT_EQ(chains::delta(nb, &nn).count, 3u);

  ReclaimTotals r1{10, 1, 20, 2, 5}, r2{5, 1, 25, 3, 6};
  ReclaimTotals rd = chains::delta(r2, &r1);
  EXPECT_EQ(rd.direct_ns, 5u) << "went down: counts from zero";
  EXPECT_EQ(rd.direct_count, 0u);
  EXPECT_EQ(rd.memcg_ns, 5u);
  EXPECT_EQ(rd.cuda_ns, 1u);

  PressureTotals p1{true, 1, 1, 1, 1, 1, 1}, p2{true, 3, 1, 0, 2, 1, 1};
  PressureTotals pd = chains::delta(p2, &p1);
  EXPECT_TRUE(pd.known);
  EXPECT_EQ(pd.cpu_some_ns, 2u);
  EXPECT_EQ(pd.memory_some_ns, 0u);
  EXPECT_EQ(pd.memory_full_ns, 1u);
  EXPECT_FALSE(chains::delta(PressureTotals{}, &p1).known);
}

}  // namespace
}  // namespace stallwatch
