// Unit tests of the chain engine's host-evidence rules (memory_pressure, io_stall,
// network_retransmit, nccl_straggler in rules*.cpp) driven window by window through the demo's
// synthetic host at fixed timestamps: the host demo scenarios produce exactly their chains (with
// 1 s and 5 s windows), each rule has its positives, thresholds and negatives on workloads of
// our own, and diff_windows computes a series' host-evidence deltas without underflow. The
// shared helpers are in chain_test_support.h.
// No root, no GPU.
#include <gtest/gtest.h>

#include <set>

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "chain_test_support.h"
#include "chains/chain.h"
#include "chains/engine.h"
#include "chains/window.h"
#include "trace/snapshot.h"
#include "demo/synthetic.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch {
namespace {

using namespace chaintest;

// ---------------------------------------------------------------------------------------------
// The host demo scenarios, phase by phase.

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
  EXPECT_NEAR(c.evidence_value("io_in_flight"), 4 * (23 * 0.025 + 0.090), 1e-6);
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

// nccl-hang: three of four local ranks wait in ncclAllReduce for rank 2, which never enters
// it. One critical call_hang per waiting rank, each naming rank 2; they open once the open
// call is 5 s old (the demo's threshold) and close when the job restarts.
TEST(ChainScenarios, NcclHangNamesTheRankThatNeverEntered) {
  chains::EngineOptions o = Driver::default_options();
  o.hang_threshold_ns = 5 * kS;  // as `demo` runs it
  for (std::int64_t window : {kS, 5 * kS}) {
    Driver d(o, window);
    ScenarioRun run = run_scenario("nccl-hang", d);
    ASSERT_EQ(run.ids().size(), 3u) << window;
    std::set<int> pids;
    for (const Chain& c : run.openings()) {
      EXPECT_EQ(c.kind, Kind::kCallHang);
      EXPECT_EQ(c.severity, Severity::kCritical);
      EXPECT_EQ(c.call, "ncclAllReduce");
      EXPECT_EQ(c.api, "nccl");
      EXPECT_GE(c.evidence_value("inflight_s"), 5.0);
      EXPECT_EQ(c.evidence_value("world_size"), 4);
      ASSERT_EQ(c.contributors.size(), 1u);
      EXPECT_EQ(c.contributors[0].pid, 2802);
      EXPECT_EQ(c.contributors[0].role, "rank 2, not in the collective");
      EXPECT_NE(c.summary.find("rank 2 (PID 2802) has not entered it"), std::string::npos) << c.summary;
      pids.insert(c.pid);
    }
    EXPECT_EQ(pids, (std::set<int>{2800, 2801, 2803}));
    for (const Chain& c : run.chains()) EXPECT_FALSE(c.open) << "closed once the job restarts";
  }
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
// Host-evidence rules (memory_pressure, io_stall, network_retransmit, nccl_straggler) on
// workloads of our own: kPid trains calmly in kCg, and the host adds the evidence (calm_and(),
// part(), of_kind() in chain_test_support.h).

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

// Issue 36, effect first: a DataLoader's cgroup-mate reclaims 30 % of the window and PSI says
// 40 %, but the CUDA thread neither reclaims nor waits, and its calls keep their latency. The
// reclaim and pressure families show it; no chain.
TEST(MemoryPressureRule, ReclaimThatSlowsNothingIsNoChain) {
  Driver d;
  for (int i = 0; i < 3; i++) {
    d.step(calm_and([](demo::SyntheticHost& h, std::int64_t) {
      h.pressure(kCg, PressureTotals{true, 0, 0, 0, 0, 0, 0});
    }));
  }
  for (int i = 0; i < 8; i++) {
    d.step(calm_and([](demo::SyntheticHost& h, std::int64_t) {
      h.reclaim(kCg, 0, part(0.30), 0, 900);
      h.pressure(kCg, PressureTotals{true, 0, 0, part(0.40), part(0.1), 0, 0});
    }));
  }
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
  // The same reclaim with syncs at 3x their usual time: a chain, with the slowdown as evidence.
  for (int i = 0; i < 2; i++) {
    Load slow = calm();
    slow.sync_ns = 21000;
    d.step(calm_and([](demo::SyntheticHost& h, std::int64_t) {
      h.reclaim(kCg, 0, part(0.30), 0, 900);
      h.pressure(kCg, PressureTotals{true, 0, 0, part(0.40), part(0.1), 0, 0});
    }, slow));
  }
  const auto c = of_kind(d.all, Kind::kMemoryPressure);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_GE(c[0].evidence_value("call_slowdown"), 1.5);
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
  EXPECT_NE(c.recommendation.find("systemctl set-property train.service 'MemoryMax=<more>'"),
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
  // The effect: the GPU starves (the CUDA thread blocked outside its calls) while the
  // workload stalls on memory.
  Load starving = calm();
  starving.thread_blocked = 0.3;
  Fill psi = calm_and([](demo::SyntheticHost& h, std::int64_t) {
    h.pressure(kCg, PressureTotals{true, 0, 0, part(0.12), part(0.02), 0, 0});
  }, starving);
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
    h.reclaim(kCg, part(0.08), 0, part(0.01), 50);  // the CUDA thread reclaims 1 % itself
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
      h.reclaim(kCg, 0, part(0.3), part(0.02), 100);  // the CUDA thread reclaims too: an effect
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
  EXPECT_NEAR(c.evidence_value("io_in_flight"), 0.30, 1e-9);
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
// diff_windows: the host evidence of a series (io_totals(), nccl_totals() in
// chain_test_support.h).

TEST(DiffWindows, SeriesEvidenceDeltasVictimsAndResets) {
  const auto sync = call_id("cudaStreamSynchronize");
  const auto allreduce = call_id("ncclAllReduce");
  const IoKey sda{"sda", "read"};
  const NcclKey k{allreduce, 0, 2};
  Snapshot a = snap_at(kT0 + kWindow);
  add_proc(a, kCg, 1, "python3", sync, totals(10, 1000));
  add_proc(a, kCg, 1, "python3", allreduce, totals(5, 2000000));
  Series& sa = a.series[kCg];
  // The window computes starvation from the CUDA threads' off-CPU counters (blocked outside
  // calls / wall time); no call blocked here: 100 of 1000 ns, then 300 of 1000 ns.
  sa.offcpu = OffcpuTotals{0, 100, 900, 0};
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
  EXPECT_DOUBLE_EQ(w0.starvation_ratio, 0.1);
  EXPECT_DOUBLE_EQ(w0.blocked_ratio, 0.1);
  EXPECT_DOUBLE_EQ(w0.runnable_ratio, 0);

  Snapshot b = snap_at(kT0 + 2 * kWindow);
  CallTotals s1 = totals(10, 1000);
  s1.add(totals(4, 3000));
  add_proc(b, kCg, 1, "python3", sync, s1);
  add_proc(b, kCg, 1, "python3", allreduce, totals(5, 2000000));
  Series& sb = b.series[kCg];
  sb.offcpu = OffcpuTotals{0, 400, 1600, 0};
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
