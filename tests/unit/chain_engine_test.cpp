// Unit tests of the chain engine (chains/engine.h, chains/rules/, window.h, outliers.h) driven
// window by window through the demo's synthetic host at fixed timestamps: every CPU/GPU demo
// scenario produces exactly its chain, quiet workloads produce none, chains keep one identity
// for their whole life, baselines stay frozen during an incident, the counters behind
// stallwatch_chains_total / stallwatch_chain_active follow their documented semantics, the
// pipeline publishes them, OutlierSink drains exact totals, and diff_windows computes per-process
// deltas. The host-evidence rules are in chain_host_rules_test.cpp; the shared helpers in
// chain_test_support.h.
// No root, no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chain_test_support.h"
#include "chains/chain.h"
#include "chains/engine.h"
#include "chains/outliers.h"
#include "app/pipeline.h"
#include "chains/window.h"
#include "trace/snapshot.h"
#include "demo/scenarios.h"
#include "demo/synthetic.h"
#include "host/nvml.h"
#include "metrics/http_server.h"
#include "store/records.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch {
namespace {

using namespace chaintest;

// ---------------------------------------------------------------------------------------------
// The demo scenarios, phase by phase.

TEST(ChainScenarios, AllScenariosExist) {
  const auto names = demo::scenario_names();
  EXPECT_EQ(names, (std::vector<std::string>{"incident", "cpu-contention", "cold-start",
                                             "memcpy-bottleneck", "periodic-spike", "gpu-steal",
                                             "memory-pressure", "io-stall", "network-retransmit",
                                             "nccl-straggler", "nccl-hang", "cpu-steal", "cpu-throttle", "cuda-oom",
                                             "graph-recapture", "gpu-throttle", "gpu-xid",
                                             "healthy"}));
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
  // Summed over the chain's windows: it opens on its second window of contention.
  EXPECT_EQ(opened.contributors[0].cpu_ns, 2 * static_cast<std::uint64_t>(kWindow) * 9 / 100);
  EXPECT_EQ(opened.contributors[0].role, "preemptor, worker of the job");
  for (const char* word : {"taskset", "renice", "persistent_workers"}) {  // outsiders and workers
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
  EXPECT_EQ(c.contributors[0].role, "preemptor, system service");
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

// The gpu-steal scenario on a two-GPU node whose process-to-GPU mapping is known: with the
// inference server on the job's GPU it is named (as sharing that GPU); on the other GPU it
// cannot be the cause, and no gpu_contention opens (eight ranks on eight GPUs, one slowing for
// its own reasons, never blame the other seven).
TEST(ChainScenarios, GpuContentionNamesOnlyProcessesOnTheSameGpu) {
  for (const bool same_gpu : {true, false}) {
    SCOPED_TRACE(same_gpu ? "same GPU" : "other GPU");
    auto s = demo::make_scenario("gpu-steal");
    ASSERT_TRUE(s.has_value());
    Driver d;
    for (const auto& phase : s->phases) {
      for (int i = 0; i < phase.windows; i++) {
        d.step([&](demo::SyntheticHost& h, std::int64_t end) {
          phase.step(h, i, end, d.window_ns);
          for (unsigned g : {0u, 1u}) {
            host::GpuReading r;
            r.index = g;
            r.pids_known = true;
            if (g == 0) r.pids.push_back(8100);
            if ((g == 0) == same_gpu) r.pids.push_back(8400);
            h.gpu(r, 0, d.window_ns);
          }
        });
      }
    }
    std::vector<Chain> opened;  // each chain's first report
    for (const auto& c : d.all) {
      const bool seen = std::any_of(opened.begin(), opened.end(),
                                    [&](const Chain& o) { return o.id == c.id; });
      if (!seen) opened.push_back(c);
    }
    if (!same_gpu) {
      EXPECT_TRUE(opened.empty()) << opened.front().summary;
      continue;
    }
    ASSERT_EQ(opened.size(), 1u);
    EXPECT_EQ(opened[0].kind, Kind::kGpuContention);
    ASSERT_FALSE(opened[0].contributors.empty());
    EXPECT_EQ(opened[0].contributors[0].pid, 8400);
    EXPECT_EQ(opened[0].contributors[0].role, "CUDA process, other workload, same GPU");
    EXPECT_NE(opened[0].root_cause.find("1 other CUDA process on GPU 0 (tritonserver PID 8400"),
              std::string::npos)
        << opened[0].root_cause;
  }
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

// Issue #16: on-CPU stalls on a CPU the hypervisor takes are cpu_steal, named with the CPU;
// the 600x cudaMalloc spikes of the same windows are not an alloc_spike.
TEST(ChainScenarios, CpuStealIsNamedAndNotBlamedOnTheAllocator) {
  ScenarioRun run = run_scenario("cpu-steal");
  ASSERT_EQ(run.ids().size(), 1u) << "exactly one chain";
  const Chain opened = run.openings()[0];
  EXPECT_EQ(opened.kind, Kind::kCpuSteal);
  EXPECT_EQ(opened.severity, Severity::kHigh);
  EXPECT_EQ(opened.pid, 5150);
  EXPECT_EQ(opened.evidence_value("cpus"), 4);
  EXPECT_DOUBLE_EQ(opened.evidence_value("steal_share"), 0.295);
  EXPECT_EQ(opened.evidence_value("worst_cpu"), 3);
  EXPECT_NE(opened.root_cause.find("CPU 3 the most (37%)"), std::string::npos) << opened.root_cause;
  EXPECT_NE(opened.recommendation.find("dedicated vCPUs"), std::string::npos);
  const WindowOutcome* first = run.first_change();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->phase, 1u);
  EXPECT_EQ(first->i, 1) << "opens on the second window of steal";
  const Chain last = run.chains()[0];
  EXPECT_FALSE(last.open);
}

// Seen on an H100 host: one of the job's 8 CPUs serves the GPU's interrupts (16-20% irq) while
// the job trains at full speed. Where the thread ran is not known: the mean over its CPUs
// (2.5%) is what it can have lost, and that is no cause.
TEST(ChainNegatives, OneBusyInterruptCpuOfManyStaysSilent) {
  Driver d;
  for (int i = 0; i < 20; i++) {
    d.step([](demo::SyntheticHost& h, std::int64_t end) {
      with(calm())(h, end);
      h.calls(kPid, {"cudaMemcpyAsync", 40, 15000, 2000000, 0.1, 0, 0});  // on-CPU spin-waits
      std::vector<host::CpuStolen> cpus;
      for (int c = 0; c < 8; c++) cpus.push_back({c, 0.0, c == 2 ? 0.20 : 0.0});
      h.cpu_stolen(cpus);
    });
  }
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
}

// Issue #16: a chain's numbers hold together, in every scenario and every window: shares in
// 0..1, and a cpu_contention chain's contributors took no more than the runnable time the
// process waited over the chain's windows.
TEST(ChainProperties, NumbersHoldTogether) {
  for (const auto& name : demo::scenario_names()) {
    ScenarioRun run = run_scenario(name);
    for (const Chain& c : run.changes()) {
      for (const auto& [key, v] : c.evidence) {
        if (key.find("share") == std::string::npos) continue;
        EXPECT_GE(v, 0) << name << " " << key;
        EXPECT_LE(v, 1) << name << " " << key;
      }
      if (c.kind != Kind::kCpuContention) continue;
      std::uint64_t taken = 0;
      for (const auto& k : c.contributors) taken += k.cpu_ns;
      EXPECT_LE(static_cast<double>(taken), c.evidence_value("chain_runnable_s") * 1e9 * 1.000001)
          << name << ": contributors " << taken << " ns";
    }
  }
}

// Issue #16: Fix lines only for material contributors, never a renice of a kernel thread.
TEST(ChainAdvice, KernelThreadsAndSmallContributorsGetNoCommand) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  for (int i = 0; i < 3; i++) {
    d.step([](demo::SyntheticHost& h, std::int64_t end) {
      with(contended(0.40))(h, end);
      const auto w = static_cast<std::uint64_t>(kWindow);
      h.preempted_by(kPid, 900, "fluent-bit", "/system.slice/fluent-bit.service", w * 25 / 100, 40);
      h.preempted_by(kPid, 14, "ksoftirqd/0", "/", w * 12 / 100, 30, 2, /*kernel_thread=*/true);
      h.preempted_by(kPid, 901, "tiny-agent", "/system.slice/tiny.service", w / 100, 3);  // 2.5%
    });
  }
  ASSERT_EQ(d.engine.open_chains().size(), 1u);
  const Chain c = d.engine.open_chains()[0];
  EXPECT_EQ(c.kind, Kind::kCpuContention);
  EXPECT_NE(c.recommendation.find("renice -n 19 -p 900;"), std::string::npos) << c.recommendation;
  EXPECT_EQ(c.recommendation.find("-p 14"), std::string::npos) << c.recommendation;
  EXPECT_EQ(c.recommendation.find("901"), std::string::npos) << c.recommendation;
  EXPECT_NE(c.recommendation.find("# kernel threads (ksoftirqd/0)"), std::string::npos)
      << c.recommendation;
  bool kthread_role = false;
  for (const auto& k : c.contributors) kthread_role |= k.role == "preemptor, kernel thread";
  EXPECT_TRUE(kthread_role);
}

// Issue #39: a GPU at its power cap under a GPU-bound job is one medium gpu_throttle chain,
// opened in the capped phase and closed after it; the hot GPU whose job did not slow is none,
// and gpu_contention stands down.
TEST(ChainScenarios, GpuThrottleNamesThePowerCapAndOnlyTheJobThatSlowed) {
  ScenarioRun run = run_scenario("gpu-throttle");
  ASSERT_EQ(run.ids().size(), 1u) << "exactly one chain";
  const Chain opened = run.openings()[0];
  EXPECT_EQ(opened.kind, Kind::kGpuThrottle);
  EXPECT_EQ(opened.severity, Severity::kMedium);
  EXPECT_EQ(opened.pid, 3100);
  EXPECT_EQ(opened.call, "cudaStreamSynchronize");
  EXPECT_NE(opened.root_cause.find("GPU 0 (GPU-5f3c9e1a"), std::string::npos) << opened.root_cause;
  EXPECT_NE(opened.root_cause.find("sw_power_cap 85%"), std::string::npos) << opened.root_cause;
  EXPECT_NE(opened.root_cause.find("1200 MHz instead of 1980"), std::string::npos);
  EXPECT_NE(opened.recommendation.find("nvidia-smi -i 0 -pl"), std::string::npos)
      << opened.recommendation;
  const WindowOutcome* first = run.first_change();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->phase, 1u);
  EXPECT_EQ(first->i, 1) << "opens in the capped phase's second window";
  const Chain last = run.chains()[0];
  EXPECT_FALSE(last.open) << "closes once the limit is restored";
}

// An Xid 79 under a job whose synchronize then hangs: a critical gpu_xid at once, then a
// call_hang that names the Xid; gpu_xid closes once call_hang has taken over.
TEST(ChainScenarios, GpuXidOpensAtOnceAndTheHangNamesIt) {
  chains::EngineOptions o = Driver::default_options();
  o.hang_threshold_ns = 5 * kS;  // as `demo` runs it
  Driver d(o, kS);
  ScenarioRun run = run_scenario("gpu-xid", d);
  const auto opened = run.openings();
  ASSERT_EQ(opened.size(), 2u);
  EXPECT_EQ(opened[0].kind, Kind::kGpuXid);
  EXPECT_EQ(opened[0].severity, Severity::kCritical);
  EXPECT_EQ(opened[0].pid, 3200);
  EXPECT_NE(opened[0].summary.find("Xid 79 (GPU has fallen off the bus) on GPU 0"),
            std::string::npos)
      << opened[0].summary;
  EXPECT_EQ(opened[1].kind, Kind::kCallHang);
  EXPECT_NE(opened[1].summary.find("(Xid 79)"), std::string::npos) << opened[1].summary;
  EXPECT_NE(opened[1].root_cause.find("a fault that needs a GPU reset"), std::string::npos);
  const WindowOutcome* first = run.first_change();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->phase, 1u);
  EXPECT_EQ(first->i, 0) << "an Xid opens its chain in the window it was read";
  for (const auto& c : run.chains()) {
    if (c.kind == Kind::kGpuXid) {
      EXPECT_FALSE(c.open) << "call_hang took over";
    } else {
      EXPECT_TRUE(c.open);
    }
  }
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

// ---------------------------------------------------------------------------------------------
// Synthetic workloads of our own (Load, with(), contended() in chain_test_support.h).

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

// Issue #16: cudaMalloc slowed 3000x because the thread waited for a CPU inside it (the
// kernel's split says runnable) is CPU contention, not the allocator: no alloc_spike, while
// the same spikes spent on-CPU or blocked in the driver are one.
TEST(ChainNegatives, MallocSpikesThatWaitedForACpuAreNoAllocSpike) {
  for (const double runnable : {0.9, 0.0}) {
    Driver d;
    for (int i = 0; i < 5; i++) d.step(with(calm()));
    for (int i = 0; i < 12; i++) {
      d.step([&](demo::SyntheticHost& h, std::int64_t end) {
        with(calm())(h, end);
        const bool spike = i % 4 == 3;
        h.calls(kPid, {"cudaMalloc", 6, 15000, spike ? 40000000u : 0u, spike ? 1.0 / 6 : 0,
                       runnable, runnable > 0 ? 0.0 : 0.8});
      });
    }
    bool alloc_spike = false;
    for (const auto& c : d.all) alloc_spike |= c.kind == Kind::kAllocSpike;
    EXPECT_EQ(alloc_spike, runnable == 0.0) << "runnable share " << runnable;
  }
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

// Seen on an H100: a training loop ended while the hog went on, and the chain's last window (the
// loop's exit: one synchronize, 2 ms of CUDA time) became its root and effect ("off-CPU for 0%
// of its CUDA call time (0 of 2ms)", "calls per window fell 99.4%"). Such a window keeps the
// texts of the contention itself; the chain's windows and time still move on.
TEST(ChainLifecycle, AWindowOfAProcessLeavingKeepsTheContentionsTexts) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  Chain before;
  for (int i = 0; i < 3; i++) {
    auto c = d.step(with(contended(0.6)));
    if (!c.empty()) before = c[0];
  }
  ASSERT_FALSE(before.id.empty());
  Load leaving = contended(0.6);
  leaving.steps = 1;  // a twentieth of the calls: its last step
  auto last = d.step(with(leaving));
  ASSERT_EQ(last.size(), 1u) << "the contention still holds in that window";
  EXPECT_EQ(last[0].id, before.id);
  EXPECT_EQ(last[0].windows, before.windows + 1);
  EXPECT_EQ(last[0].updated_ns, before.updated_ns + kWindow);
  EXPECT_EQ(last[0].root_cause, before.root_cause);
  EXPECT_EQ(last[0].effect, before.effect);
  EXPECT_EQ(last[0].summary, before.summary);
  EXPECT_EQ(last[0].evidence, before.evidence);
  EXPECT_DOUBLE_EQ(last[0].p99_s, before.p99_s);
  // A full window again takes its own texts.
  Load worse = contended(0.8);
  auto next = d.step(with(worse));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NE(next[0].root_cause, before.root_cause);
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
  app::PipelineOptions po;
  po.engine.host_cpus = 8;
  app::Pipeline pipeline(po, board, nullptr);
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

trace::OutlierRecord event(std::uint32_t pid, std::uint64_t duration, std::uint32_t call = 1) {
  trace::OutlierRecord e{};
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
// diff_windows (totals(), snap_at(), add_proc(), find() in chain_test_support.h).

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

Preemptor pre(int victim, int pid, std::string comm, std::string cgroup, std::uint64_t ns,
              std::uint64_t count) {
  Preemptor p;
  p.victim_pid = victim;
  p.pid = pid;
  p.comm = std::move(comm);
  p.cgroup = std::move(cgroup);
  p.runnable_ns = ns;
  p.count = count;
  return p;
}

TEST(DiffWindows, DeltasResetsPreemptorsAndFirstSeen) {
  const auto sync = call_id("cudaStreamSynchronize");
  const auto launch = call_id("cudaLaunchKernel");
  Snapshot a = snap_at(kT0 + kWindow);
  add_proc(a, kCg, 1, "a", sync, totals(10, 1000, 300, 200), {100, 200, 300, 4});
  add_proc(a, kCg, 1, "a", launch, totals(50, 4000), {100, 200, 300, 4});
  add_proc(a, kCg, 2, "b", sync, totals(5, 2000));  // will reset
  add_proc(a, kCg, 4, "idle", sync, totals(7, 1000), {10, 10, 10, 1});
  a.series[kCg].preemptors = {pre(1, 900, "hog", kOtherCg, 1000, 10),
                              pre(1, 901, "gone", kOtherCg, 500, 5)};

  Snapshot b = snap_at(kT0 + 2 * kWindow);
  CallTotals s1 = totals(10, 1000, 300, 200);
  s1.add(totals(6, 1000, 120, 60));
  add_proc(b, kCg, 1, "a", sync, s1, {150, 260, 390, 9});
  add_proc(b, kCg, 1, "a", launch, totals(50, 4000), {150, 260, 390, 9});  // no call delta
  add_proc(b, kCg, 2, "b", sync, totals(3, 8000));     // count went down: restarted counters
  add_proc(b, kCg, 3, "new", sync, totals(2, 3000));   // first seen
  add_proc(b, kCg, 4, "idle", sync, totals(7, 1000), {10, 10, 10, 1});  // no activity
  b.series[kCg].preemptors = {pre(1, 900, "hog", kOtherCg, 1600, 14),
                              pre(1, 901, "gone", kOtherCg, 500, 5),   // no new time
                              pre(1, 902, "fresh", kOtherCg, 700, 3),  // new preemptor
                              pre(4, 903, "x", kOtherCg, 999, 9)};     // victim idle

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

}  // namespace
}  // namespace stallwatch
