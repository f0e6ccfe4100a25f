// Issue 36: the CPU rules are effect first. cpu_steal needs calls that got slower on-CPU, not
// steal alone (a cloud VM's weather); cpu_throttle names the workload's own CPU limit where the
// kernel throttled it while its CUDA calls waited for a CPU, and cpu_contention keeps only the
// wait throttling does not explain. Driven window by window through the demo's synthetic host.
// No root, no GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chain_test_support.h"

namespace stallwatch {
namespace {

using namespace chaintest;

std::vector<host::CpuStolen> stolen_everywhere(double steal) {
  std::vector<host::CpuStolen> cpus;
  for (int c = 0; c < 4; c++) cpus.push_back({c, steal, 0.01});
  return cpus;
}

// 30 % steal on every CPU for 10 windows while the job's calls keep their latency: context,
// no chain (the fresh-clone failure of issue 36).
TEST(CpuSteal, StealWithoutSlowerCallsIsNoChain) {
  Load busy = calm();
  busy.sync_ns = 5000000;  // 10 % of the window in syncs: enough CUDA time to matter
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(busy));
  for (int i = 0; i < 10; i++) {
    d.step([busy](demo::SyntheticHost& h, std::int64_t end) {
      with(busy)(h, end);
      h.cpu_stolen(stolen_everywhere(0.30));
    });
  }
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
}

// A slow allocator under steal: the slow calls sleep (blocked), their on-CPU time did not grow.
TEST(CpuSteal, BlockedSlowCallsAreNotSteal) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  for (int i = 0; i < 6; i++) {
    d.step([](demo::SyntheticHost& h, std::int64_t end) {
      with(calm())(h, end);
      h.calls(kPid, {"cudaStreamSynchronize", 20, 7000, 30000000, 0.2, 0, 0.98});
      h.cpu_stolen(stolen_everywhere(0.20));
    });
  }
  EXPECT_TRUE(of_kind(d.all, Kind::kCpuSteal).empty()) << d.all[0].summary;
}

// The same steal with syncs whose on-CPU time grew: a cpu_steal chain with the growth in its
// evidence.
TEST(CpuSteal, OnCpuGrowthUnderStealIsAChain) {
  Driver d;
  for (int i = 0; i < 5; i++) d.step(with(calm()));
  for (int i = 0; i < 4; i++) {
    d.step([](demo::SyntheticHost& h, std::int64_t end) {
      Load l = calm();
      l.tail_ns = 12000000;
      l.tail_share = 0.1;
      l.call_blocked = 0;
      with(l)(h, end);
      h.cpu_stolen(stolen_everywhere(0.30));
    });
  }
  const auto steal = of_kind(d.all, Kind::kCpuSteal);
  ASSERT_FALSE(steal.empty());
  EXPECT_EQ(d.all.size(), steal.size()) << d.all[0].summary;
  EXPECT_EQ(steal[0].call, "cudaStreamSynchronize");
  EXPECT_GE(steal[0].evidence_value("oncpu_growth"), 1.25);
  EXPECT_NE(steal[0].root_cause.find("its usual time on-CPU"), std::string::npos)
      << steal[0].root_cause;
}

// The workload's CPU limit throttles it in 8 of 10 periods while its syncs wait for a CPU:
// cpu_throttle, and no cpu_contention (nothing else took the CPU).
TEST(CpuThrottle, OwnLimitIsThrottleNotContention) {
  ScenarioRun run = run_scenario("cpu-throttle");
  ASSERT_EQ(run.ids().size(), 1u) << "exactly one chain";
  const Chain opened = run.openings()[0];
  EXPECT_EQ(opened.kind, Kind::kCpuThrottle);
  EXPECT_EQ(opened.severity, Severity::kHigh);
  EXPECT_EQ(opened.pid, 6120);
  EXPECT_EQ(opened.evidence_value("limit_cores"), 2);
  EXPECT_EQ(opened.evidence_value("throttled_periods"), 8);
  EXPECT_EQ(opened.evidence_value("periods"), 10);
  EXPECT_DOUBLE_EQ(opened.evidence_value("explained_share"), 1);
  EXPECT_NE(opened.root_cause.find("CPU limit of 2 CPUs"), std::string::npos) << opened.root_cause;
  EXPECT_NE(opened.recommendation.find("drop limits.cpu"), std::string::npos)
      << opened.recommendation;
  EXPECT_EQ(opened.recommendation.find("taskset"), std::string::npos) << opened.recommendation;
  const WindowOutcome* first = run.first_change();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->phase, 1u);
  EXPECT_EQ(first->i, 1) << "opens on the second throttled window";
  EXPECT_FALSE(run.chains()[0].open) << "closed once the limit is dropped";
}

// A systemd unit's CPUQuota= throttles it: the advice is set-property on that unit, quoted.
TEST(CpuThrottle, SystemdUnitGetsCpuQuotaAdvice) {
  Driver d;
  for (int i = 0; i < 4; i++) d.step(with(calm()));
  for (int i = 0; i < 3; i++) {
    d.step([](demo::SyntheticHost& h, std::int64_t end) {
      with(contended(0.4))(h, end);
      h.cpu_limit(kCg, 0.3, 10, 9, part(0.5));
    });
  }
  const auto t = of_kind(d.all, Kind::kCpuThrottle);
  ASSERT_FALSE(t.empty());
  EXPECT_TRUE(of_kind(d.all, Kind::kCpuContention).empty()) << d.all[0].summary;
  EXPECT_NE(t[0].recommendation.find("systemctl set-property train.service CPUQuota="),
            std::string::npos)
      << t[0].recommendation;
  EXPECT_EQ(t[0].severity, Severity::kHigh);  // 40 % of the call time, all of it explained
}

// Throttled, but the CUDA calls did not wait (the limit bit the job's other threads): no chain.
TEST(CpuThrottle, ThrottlingWithoutWaitingCallsIsNoChain) {
  Driver d;
  for (int i = 0; i < 4; i++) d.step(with(calm()));
  for (int i = 0; i < 6; i++) {
    d.step([](demo::SyntheticHost& h, std::int64_t end) {
      with(calm())(h, end);
      h.cpu_limit(kCg, 1.0, 10, 6, part(0.3));
    });
  }
  EXPECT_TRUE(d.all.empty()) << d.all[0].summary;
}

// A limit and a tenant on the same core: throttling explains a third of the wait, a hog the
// rest. Both chains, each with its part: cpu_throttle for the limit, cpu_contention naming
// the hog.
TEST(CpuThrottle, LimitAndTenantAreSplit) {
  Driver d;
  for (int i = 0; i < 4; i++) d.step(with(calm()));
  for (int i = 0; i < 4; i++) {
    d.step([](demo::SyntheticHost& h, std::int64_t end) {
      with(contended(0.6))(h, end);
      h.cpu_limit(kCg, 0.5, 10, 5, part(0.2));
      h.preempted_by(kPid, 7001, "fluent-bit", kOtherCg, part(0.4), 300);
    });
  }
  const auto t = of_kind(d.all, Kind::kCpuThrottle);
  const auto c = of_kind(d.all, Kind::kCpuContention);
  ASSERT_FALSE(t.empty());
  ASSERT_FALSE(c.empty());
  EXPECT_NEAR(t[0].evidence_value("explained_share"), 1.0 / 3, 1e-9);
  EXPECT_EQ(c[0].contributors[0].comm, "fluent-bit");
  EXPECT_NEAR(c[0].evidence_value("throttle_explained_share"), 1.0 / 3, 1e-9);
  // Contention's share is what throttling leaves: 60 % × 2/3 of the call time.
  EXPECT_NEAR(c[0].evidence_value("call_runnable_share"), 0.4, 0.01);
}

}  // namespace
}  // namespace stallwatch
