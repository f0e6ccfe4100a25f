// The cost budget's arithmetic (issue #48 item 4): the duty plan_launch_duty gives each workload
// from one window, and diff_windows scaling a cycled process's launches back to estimates of all
// of them while pricing the traps as they fired. The duty cycling itself, on real uprobes, is
// tests/privileged/cost_budget_test.cpp.
#include <gtest/gtest.h>

#include "chain_test_support.h"
#include "chains/budget.h"

namespace stallwatch {
namespace {

using namespace chaintest;

constexpr double kPair = 0.8e-6;  // entry 0.5 µs + return 0.3 µs: every site emulated

Snapshot priced(std::int64_t end_ns) {
  Snapshot s = snap_at(end_ns);
  s.trap_cost_emulated = {0.5e-6, 0.3e-6, true};
  s.cost_budget = 0.01;
  return s;
}

OffcpuTotals oncpu(std::uint64_t ns) {
  OffcpuTotals o;
  o.oncpu_ns = ns;
  return o;
}

TEST(CostBudget, CyclesOnlyTheLaunchBoundWorkload) {
  const auto launch = call_id("cuLaunchKernel");
  const auto sync = call_id("cudaStreamSynchronize");
  Snapshot s = priced(kT0 + kWindow);
  // 1 s on the CPU: 100,000 launches and 1,000 synchronizes cost 8.08 % of it in traps.
  add_proc(s, kCg, 1, "trainer", launch, totals(100000, 4000), oncpu(kWindow));
  add_proc(s, kCg, 1, "trainer", sync, totals(1000, 7000), oncpu(kWindow));
  // A calm neighbour: 100 launches, 0.008 %.
  add_proc(s, kOtherCg, 2, "calm", launch, totals(100, 4000), oncpu(kWindow));
  const chains::WindowView v = chains::diff_windows(nullptr, s);

  const chains::DutyPlan plan = chains::plan_launch_duty(v, s, 0.01);
  ASSERT_EQ(plan.duty.size(), 1u) << "the calm workload is not cycled";
  // (1 % of 1 s - 1,000 synchronizes' 0.8 ms) / 100,000 launches' 80 ms
  EXPECT_NEAR(plan.duty.at(1), (0.01 - 1000 * kPair) / (100000 * kPair), 1e-9);
  ASSERT_EQ(plan.series.size(), 1u);
  EXPECT_EQ(plan.series[0].cgroup, kCg);
  EXPECT_NEAR(plan.series[0].unbudgeted, 101000 * kPair, 1e-9);
  EXPECT_FALSE(plan.series[0].over);
  EXPECT_FALSE(plan.series[0].others_over);

  EXPECT_TRUE(chains::plan_launch_duty(v, s, 0).duty.empty()) << "--cost-budget 0: none";
  EXPECT_TRUE(chains::plan_launch_duty(v, s, 0.1).duty.empty()) << "8 % is within 10 %";
}

TEST(CostBudget, OtherCallsOverTheBudgetLeaveLaunchesAtTheFloor) {
  const auto launch = call_id("cuLaunchKernel");
  const auto sync = call_id("cudaStreamSynchronize");
  Snapshot s = priced(kT0 + kWindow);
  // 20,000 synchronizes alone cost 1.6 %: never cycled, so the launches go to the floor.
  add_proc(s, kCg, 1, "trainer", launch, totals(50000, 4000), oncpu(kWindow));
  add_proc(s, kCg, 1, "trainer", sync, totals(20000, 7000), oncpu(kWindow));
  const chains::WindowView v = chains::diff_windows(nullptr, s);
  const chains::DutyPlan plan = chains::plan_launch_duty(v, s, 0.01);
  ASSERT_EQ(plan.duty.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.duty.at(1), chains::kMinDuty);
  ASSERT_EQ(plan.series.size(), 1u);
  EXPECT_TRUE(plan.series[0].over);
  EXPECT_TRUE(plan.series[0].others_over);
}

TEST(CostBudget, NoLaunchesNothingToCycle) {
  const auto sync = call_id("cudaStreamSynchronize");
  Snapshot s = priced(kT0 + kWindow);
  add_proc(s, kCg, 1, "trainer", sync, totals(50000, 7000), oncpu(kWindow));  // 4 %
  const chains::WindowView v = chains::diff_windows(nullptr, s);
  const chains::DutyPlan plan = chains::plan_launch_duty(v, s, 0.01);
  EXPECT_TRUE(plan.duty.empty());
  EXPECT_TRUE(plan.series.empty());
}

TEST(CostBudget, CycledLaunchesAreScaledAndThePlanHoldsItsPoint) {
  const auto launch = call_id("cuLaunchKernel");
  const auto sync = call_id("cudaStreamSynchronize");
  Snapshot a = priced(kT0 + kWindow);
  add_proc(a, kCg, 1, "trainer", launch, totals(10000, 4000), oncpu(kWindow));
  add_proc(a, kCg, 1, "trainer", sync, totals(1000, 7000), oncpu(kWindow));
  a.launch_off_ns[1] = 0;
  // The next second: probes attached a quarter of it; 25,000 launches seen of ~100,000.
  Snapshot b = priced(kT0 + 2 * kWindow);
  add_proc(b, kCg, 1, "trainer", launch, totals(35000, 4000), oncpu(2 * kWindow));
  add_proc(b, kCg, 1, "trainer", sync, totals(2000, 7000), oncpu(2 * kWindow));
  b.launch_off_ns[1] = 750'000'000;
  const chains::WindowView v = chains::diff_windows(&a, b);
  const auto* p = find(v, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_DOUBLE_EQ(p->launch_duty, 0.25);
  EXPECT_EQ(p->calls.at(launch).count, 100000u) << "25,000 seen at a duty of 25 %";
  EXPECT_EQ(p->calls.at(launch).sum_ns, 100000u * 4000);
  EXPECT_EQ(p->calls.at(launch).max_ns, 4000u) << "the longest call is not scaled";
  EXPECT_EQ(p->calls.at(sync).count, 1000u) << "synchronizes are never cycled";
  const chains::SeriesWindow& sw = v.series.at(kCg);
  EXPECT_DOUBLE_EQ(sw.launch_duty, 0.25);
  EXPECT_NEAR(sw.probe_cost_ratio, 26000 * kPair, 1e-9) << "what the traps cost as they fired";
  EXPECT_NEAR(sw.probe_cost_unbudgeted_ratio, 101000 * kPair, 1e-9);

  // The estimate asks for the same duty as an uncycled window would: no drift.
  const chains::DutyPlan plan = chains::plan_launch_duty(v, b, 0.01);
  EXPECT_NEAR(plan.duty.at(1), (0.01 - 1000 * kPair) / (100000 * kPair), 1e-9);

  // Published for /metrics.
  chains::set_window_ratios(b, v);
  EXPECT_DOUBLE_EQ(b.series.at(kCg).launch_duty, 0.25);

  // A window in which the cycled process's launches were never seen (its on-phase fell
  // outside): no evidence that it is within the budget; the duty held holds.
  Snapshot c = priced(kT0 + 3 * kWindow);
  add_proc(c, kCg, 1, "trainer", launch, totals(35000, 4000), oncpu(3 * kWindow));
  add_proc(c, kCg, 1, "trainer", sync, totals(3000, 7000), oncpu(3 * kWindow));
  c.launch_off_ns[1] = 1'750'000'000;
  const chains::WindowView quiet = chains::diff_windows(&b, c);
  EXPECT_DOUBLE_EQ(find(quiet, 1)->launch_duty, 0.01);
  EXPECT_TRUE(chains::plan_launch_duty(quiet, c, 0.01).duty.empty()) << "nothing held";
  const chains::DutyPlan kept = chains::plan_launch_duty(quiet, c, 0.01, plan.duty);
  ASSERT_EQ(kept.duty.size(), 1u);
  EXPECT_DOUBLE_EQ(kept.duty.at(1), plan.duty.at(1));

  // A process never cycled keeps duty 1 and its counts as seen.
  add_proc(b, kOtherCg, 2, "calm", launch, totals(10, 4000), oncpu(kWindow));
  const chains::WindowView w = chains::diff_windows(&a, b);
  EXPECT_DOUBLE_EQ(find(w, 2)->launch_duty, 1);
  EXPECT_EQ(find(w, 2)->calls.at(launch).count, 10u);
  EXPECT_DOUBLE_EQ(w.series.at(kOtherCg).launch_duty, 1);
}

}  // namespace
}  // namespace stallwatch
