#include "chains/rules.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "chains/advice.h"
#include "chains/format.h"
#include "chains/rule_helpers.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::chains {

std::vector<Finding> RuleContext::run() {
  std::vector<Finding> out;
  for (const auto& p : view_.processes) {
    cpu_contention(p, out);
    alloc_spike(p, out);
    cold_start(p, out);
    memcpy_bound(p, out);
    gpu_contention(p, out);
  }
  for (const auto& [label, s] : view_.series) {
    memory_pressure(s, out);
    io_stall(s, out);
    network_retransmit(s, out);
  }
  // An OOM kill keeps its chain going for a while even when its series is gone.
  std::vector<std::string> gone;
  for (const auto& [cgroup, oom] : engine_.ooms_) {
    if (!view_.series.count(cgroup)) gone.push_back(cgroup);
  }
  for (const auto& cgroup : gone) {
    SeriesWindow s;
    s.cgroup = cgroup;
    memory_pressure(s, out);
  }
  nccl_straggler(out);
  forget_exited();
  return out;
}

Chain RuleContext::base_chain(Kind kind, const ProcessWindow& p) const {
  Chain c;
  c.kind = kind;
  auto it = engine_.identities_.find(p.cgroup);
  if (it != engine_.identities_.end()) c.identity = it->second;
  c.identity.cgroup = p.cgroup;
  c.pid = p.pid;
  c.comm = p.comm;
  return c;
}

Chain RuleContext::base_chain(Kind kind, const std::string& cgroup) const {
  Chain c;
  c.kind = kind;
  auto it = engine_.identities_.find(cgroup);
  if (it != engine_.identities_.end()) c.identity = it->second;
  c.identity.cgroup = cgroup;
  return c;
}

std::vector<const ProcessWindow*> RuleContext::cuda_processes(const std::string& cgroup) const {
  std::vector<const ProcessWindow*> out;
  for (const auto& p : view_.processes) {
    if (p.cgroup == cgroup && !p.calls.empty()) out.push_back(&p);
  }
  std::stable_sort(out.begin(), out.end(), [](const ProcessWindow* a, const ProcessWindow* b) {
    return a->cuda_ns() > b->cuda_ns();
  });
  return out;
}

const Baseline* RuleContext::baseline(const ProcessWindow& p, std::uint32_t call_id) const {
  const size_t need = engine_.options_.thresholds.baseline_min_windows;
  for (int pid : {p.pid, 0}) {  // the process's own, else its workload's
    auto it = engine_.baselines_.find({p.cgroup, pid, call_id});
    if (it != engine_.baselines_.end() && it->second.known(need)) return &it->second;
  }
  return nullptr;
}

bool RuleContext::baseline_known(const Baseline* b) const {
  return b && b->known(engine_.options_.thresholds.baseline_min_windows);
}

std::uint64_t RuleContext::worst_stall_ns(const ProcessWindow& p) const {
  std::uint64_t worst = 0;
  for (const auto& [id, t] : p.calls) worst = std::max(worst, t.max_ns);
  auto it = outliers_.by_pid.find(static_cast<std::uint32_t>(p.pid));
  if (it != outliers_.by_pid.end()) worst = std::max(worst, it->second.worst_ns);
  return worst;
}

void RuleContext::cpu_contention(const ProcessWindow& p, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  const double window = static_cast<double>(view_.window_ns);
  std::uint64_t runnable = 0, cuda = 0;
  const CallTotals* worst = nullptr;
  std::uint32_t worst_id = 0;
  for (const auto& [id, t] : p.calls) {
    runnable += t.runnable_ns;
    cuda += t.sum_ns;
    bool better = !worst || t.runnable_ns > worst->runnable_ns ||
                  (t.runnable_ns == worst->runnable_ns && t.sum_ns > worst->sum_ns);
    if (better) {
      worst = &t;
      worst_id = id;
    }
  }
  if (!worst) return;
  const std::uint64_t thread_ns = p.offcpu.runnable_ns + p.offcpu.blocked_ns + p.offcpu.oncpu_ns;
  const double call_share = share(static_cast<double>(runnable), static_cast<double>(cuda));
  const double thread_share =
      share(static_cast<double>(p.offcpu.runnable_ns), static_cast<double>(thread_ns));
  const double floor = th.cpu_min_window_share * window;
  const bool by_calls = call_share >= th.cpu_call_share && static_cast<double>(runnable) >= floor;
  const bool by_threads =
      thread_share >= th.cpu_thread_share && static_cast<double>(p.offcpu.runnable_ns) >= floor;
  if (!by_calls && !by_threads) return;

  const double s = std::max(call_share, thread_share);
  Finding f;
  Chain& c = f.chain;
  c = base_chain(Kind::kCpuContention, p);
  c.severity = s >= 0.50   ? Severity::kCritical
               : s >= 0.25 ? Severity::kHigh
               : s >= 0.10 ? Severity::kMedium
                           : Severity::kLow;
  CallStat st = stat_of(worst_id, *worst);
  const Baseline* b = baseline(p, worst_id);
  set_call(c, st, b, baseline_known(b));
  for (const auto& pre : p.preemptors) {
    if (c.contributors.size() == 10) break;  // as many as the snapshot keeps
    c.contributors.push_back(Contributor{pre.comm, pre.pid, pre.cgroup,
                                         pre.cgroup == p.cgroup ? "preemptor, same workload"
                                                                : "preemptor, other workload",
                                         pre.runnable_ns, pre.count});
  }
  const std::uint64_t stall = worst_stall_ns(p);
  c.evidence = {{"call_runnable_share", call_share},
                {"thread_runnable_share", thread_share},
                {"runnable_in_calls_s", secs(runnable)},
                {"cuda_time_s", secs(cuda)},
                {"offcpu_runnable_s", secs(p.offcpu.runnable_ns)},
                {"offcpu_blocked_s", secs(p.offcpu.blocked_ns)},
                {"thread_time_s", secs(thread_ns)},
                {"preemptions", static_cast<double>(p.offcpu.preemptions)},
                {"worst_stall_s", secs(stall)}};
  c.root_cause = p.comm + " (PID " + std::to_string(p.pid) +
                 ") was runnable but off-CPU for " + percent(call_share) +
                 " of its CUDA call time (" + human_ns(runnable) + " of " + human_ns(cuda) +
                 ") and " + percent(thread_share) + " of its CUDA threads' time; " +
                 thousands(p.offcpu.preemptions) + " preemptions, worst stall " + human_ns(stall);
  if (c.contributors.empty()) {
    c.root_cause += "; the preempting tasks were not identified";
  } else {
    c.root_cause += "; top preemptor " + c.contributors[0].comm + " (PID " +
                    std::to_string(c.contributors[0].pid) + ") took " +
                    human_ns(c.contributors[0].cpu_ns);
  }
  c.effect = effect_text(st, b, baseline_known(b));
  c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) +
                                ") waited for a CPU " + percent(s) + " of the time" +
                                (c.contributors.empty() ? std::string()
                                                        : ", preempted by " + c.contributors[0].comm));
  c.recommendation = advise_cpu_contention(c, engine_.options_.host_cpus);
  out.push_back(std::move(f));
}

void RuleContext::alloc_spike(const ProcessWindow& p, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  const double window = static_cast<double>(view_.window_ns);
  for (const auto& [id, t] : p.calls) {
    if (!is_alloc_call(id)) continue;
    CallStat st = stat_of(id, t);
    const Baseline* b = baseline(p, id);
    const bool known = baseline_known(b);
    double ref = known ? b->median_p50() : (t.count >= th.min_calls ? st.p50 : 0);
    if (ref <= 0) continue;
    const double worst = secs(st.max_ns);
    if (worst < std::max(th.alloc_ratio * ref, th.alloc_min_s)) continue;

    auto& spikes = engine_.alloc_spikes_[{p.cgroup, p.pid}];
    spikes.push_back(view_.end_ns);
    const std::int64_t horizon =
        view_.end_ns - static_cast<std::int64_t>(th.alloc_memory_windows) * view_.window_ns;
    spikes.erase(std::remove_if(spikes.begin(), spikes.end(),
                                [&](std::int64_t ts) { return ts < horizon; }),
                 spikes.end());
    if (spikes.size() < 2) return;  // one spike is an event, two make a pattern
    const double period =
        secs(static_cast<std::uint64_t>(spikes.back() - spikes.front())) /
        static_cast<double>(spikes.size() - 1);
    const double ratio = worst / ref;
    const double time_share = share(static_cast<double>(t.sum_ns), window);

    Finding f;
    f.immediate = true;
    const int period_windows = static_cast<int>(period * 1e9 / window + 0.5);
    f.close_after = std::max(6, 2 * period_windows + 1);
    Chain& c = f.chain;
    c = base_chain(Kind::kAllocSpike, p);
    c.severity = time_share >= 0.20                 ? Severity::kHigh
                 : (time_share >= 0.05 || ratio >= 100) ? Severity::kMedium
                                                     : Severity::kLow;
    set_call(c, st, b, known);
    c.baseline_p50_s = ref;
    c.ratio = ratio;  // for alloc_spike: worst allocation against the baseline p50
    c.evidence = {{"spikes", static_cast<double>(spikes.size())},
                  {"period_s", period},
                  {"worst_alloc_s", worst},
                  {"baseline_p50_s", ref},
                  {"alloc_time_share", time_share}};
    c.root_cause = st.name.empty() ? std::string() : std::string(st.name);
    c.root_cause += " in " + p.comm + " (PID " + std::to_string(p.pid) + ") spikes to " +
                    human_seconds(worst) + " (" + times(ratio) + " its usual " +
                    human_seconds(ref) + ") every " + human_seconds(period) + " (" +
                    std::to_string(spikes.size()) +
                    " spikes): the allocator is growing or releasing its pool";
    c.effect = human_seconds(secs(t.sum_ns)) + " spent allocating in the latest spike window (" +
               percent(time_share) + " of it); the GPU idles while the allocation blocks";
    c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) +
                                  ") spikes " + times(ratio) + " every " + human_seconds(period));
    c.recommendation = advise_alloc_spike(c);
    out.push_back(std::move(f));
    return;
  }
}

void RuleContext::cold_start(const ProcessWindow& p, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  auto it = engine_.cold_.find(p.pid);
  if (it == engine_.cold_.end()) {
    const bool started_after_us =
        p.start_ns > 0 && p.start_ns >= engine_.first_window_ns_ - view_.window_ns;
    if (p.first_seen && started_after_us && !p.calls.empty()) {
      engine_.cold_[p.pid] = Engine::ColdPending{p.cgroup, p.calls, 0};
    }
    return;
  }
  Engine::ColdPending& pending = it->second;
  if (++pending.later_windows < static_cast<int>(th.baseline_min_windows)) return;
  const CallTotals* first = nullptr;
  std::uint32_t first_id = 0;
  std::uint64_t first_cuda = 0, first_calls = 0;
  for (const auto& [id, t] : pending.first) {
    first_cuda += t.sum_ns;
    first_calls += t.count;
    if (!first || t.max_ns > first->max_ns) {
      first = &t;
      first_id = id;
    }
  }
  CallTotals first_totals = first ? *first : CallTotals{};
  std::map<std::uint32_t, CallTotals> first_calls_map = std::move(pending.first);
  engine_.cold_.erase(it);
  if (!first) return;
  const Baseline* b = baseline(p, first_id);
  double steady = baseline_known(b) ? b->median_p50() : 0;
  if (steady <= 0) {
    auto now = p.calls.find(first_id);
    if (now == p.calls.end()) return;
    steady = stat_of(first_id, now->second).p50;
  }
  const double worst = secs(first_totals.max_ns);
  if (steady <= 0 || worst < th.cold_min_s || worst < th.cold_ratio * steady) return;

  CallStat st = stat_of(first_id, first_totals);
  Finding f;
  f.once = true;
  Chain& c = f.chain;
  c = base_chain(Kind::kColdStart, p);
  c.severity = Severity::kLow;
  set_call(c, st, b, baseline_known(b));
  c.baseline_p50_s = steady;
  c.ratio = worst / steady;  // for cold_start: the first window's worst call against steady p50
  c.evidence = {{"first_window_cuda_s", secs(first_cuda)},
                {"first_window_calls", static_cast<double>(first_calls)},
                {"worst_first_call_s", worst},
                {"steady_p50_s", steady}};
  c.root_cause = "the first CUDA calls of " + p.comm + " (PID " + std::to_string(p.pid) +
                 ") took " + human_ns(first_cuda) + " in its first window: " + c.call +
                 " up to " + human_seconds(worst) + " against " + human_seconds(steady) +
                 " once warm (" + times(c.ratio) + ")";
  c.effect = "a one-time start-up cost (context creation, module loading, allocator warm-up) "
             "over " + thousands(first_calls) + " calls; steady state is normal";
  c.summary = summary_of(c, p.comm + " (PID " + std::to_string(p.pid) + ") paid " +
                                human_ns(first_cuda) + " of CUDA start-up; " + c.call + " " +
                                times(c.ratio) + " its steady latency at first");
  c.recommendation = advise_cold_start(c);
  out.push_back(std::move(f));
}

void RuleContext::memcpy_bound(const ProcessWindow& p, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  std::uint64_t copy = 0;
  const CallTotals* top = nullptr;
  std::uint32_t top_id = 0;
  for (const auto& [id, t] : p.calls) {
    if (!is_copy_call(id)) continue;
    copy += t.sum_ns;
    if (!top || t.sum_ns > top->sum_ns) {
      top = &t;
      top_id = id;
    }
  }
  const std::uint64_t cuda = p.cuda_ns();
  if (!top || cuda == 0) return;
  const double cuda_share = share(static_cast<double>(copy), static_cast<double>(cuda));
  const double wall_share =
      std::min(1.0, share(static_cast<double>(copy), static_cast<double>(view_.window_ns)));
  if (cuda_share < th.memcpy_cuda_share || wall_share < th.memcpy_wall_share) return;

  Finding f;
  Chain& c = f.chain;
  c = base_chain(Kind::kMemcpyBound, p);
  c.severity = wall_share >= 0.60   ? Severity::kHigh
               : wall_share >= 0.30 ? Severity::kMedium
                                    : Severity::kLow;
  CallStat st = stat_of(top_id, *top);
  const Baseline* b = baseline(p, top_id);
  set_call(c, st, b, baseline_known(b));
  c.evidence = {{"copy_cuda_share", cuda_share},
                {"copy_wall_share", wall_share},
                {"copy_time_s", secs(copy)},
                {"cuda_time_s", secs(cuda)}};
  c.root_cause = "copies take " + percent(cuda_share) + " of " + p.comm + " (PID " +
                 std::to_string(p.pid) + ")'s CUDA time and " + percent(wall_share) +
                 " of wall time (" + human_ns(copy) + " in the window); " + c.call +
                 " is the largest";
  c.effect = effect_text(st, b, baseline_known(b)) + "; the GPU waits for data instead of computing";
  c.summary = summary_of(c, p.comm + " (PID " + std::to_string(p.pid) + ") spends " +
                                percent(wall_share) + " of wall time in host↔device copies");
  c.recommendation = advise_memcpy_bound(c);
  out.push_back(std::move(f));
}

void RuleContext::gpu_contention(const ProcessWindow& p, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  std::vector<const ProcessWindow*> others;
  for (const auto& q : view_.processes) {
    if (q.pid != p.pid && !q.calls.empty()) others.push_back(&q);
  }
  if (others.empty()) return;
  std::uint64_t runnable = 0;
  for (const auto& [id, t] : p.calls) runnable += t.runnable_ns;
  const std::uint64_t thread_ns = p.offcpu.runnable_ns + p.offcpu.blocked_ns + p.offcpu.oncpu_ns;
  const double call_share =
      share(static_cast<double>(runnable), static_cast<double>(p.cuda_ns()));
  const double thread_share =
      share(static_cast<double>(p.offcpu.runnable_ns), static_cast<double>(thread_ns));
  if (call_share >= th.cpu_call_share / 2 || thread_share >= th.cpu_thread_share / 2) return;

  const CallTotals* worst = nullptr;
  std::uint32_t worst_id = 0;
  double worst_ratio = 0;
  for (const auto& [id, t] : p.calls) {
    if (!is_sync_call(id) || t.count < th.min_calls) continue;
    const Baseline* b = baseline(p, id);
    if (!baseline_known(b) || b->median_p99() <= 0) continue;
    CallStat st = stat_of(id, t);
    const double ratio = st.p99 / b->median_p99();
    const bool p50_up = st.p50 >= 2 * b->median_p50();
    if (ratio >= th.gpu_ratio && p50_up && ratio > worst_ratio) {
      worst = &t;
      worst_id = id;
      worst_ratio = ratio;
    }
  }
  if (!worst) return;

  Finding f;
  Chain& c = f.chain;
  c = base_chain(Kind::kGpuContention, p);
  c.severity = worst_ratio >= 10 ? Severity::kHigh : Severity::kMedium;
  CallStat st = stat_of(worst_id, *worst);
  set_call(c, st, baseline(p, worst_id), true);
  std::sort(others.begin(), others.end(), [](const ProcessWindow* a, const ProcessWindow* b) {
    return a->cuda_ns() > b->cuda_ns();
  });
  std::uint64_t other_calls = 0;
  for (const auto* q : others) {
    std::uint64_t calls = 0;
    for (const auto& [id, t] : q->calls) calls += t.count;
    other_calls += calls;
    if (c.contributors.size() < 5) {
      c.contributors.push_back(Contributor{
          q->comm, q->pid, q->cgroup,
          q->cgroup == p.cgroup ? "CUDA process, same workload" : "CUDA process, other workload",
          q->cuda_ns(), calls});
    }
  }
  c.evidence = {{"other_cuda_processes", static_cast<double>(others.size())},
                {"other_cuda_calls", static_cast<double>(other_calls)},
                {"call_runnable_share", call_share},
                {"thread_runnable_share", thread_share}};
  c.root_cause = std::to_string(others.size()) + " other CUDA process" +
                 (others.size() == 1 ? "" : "es") + " (" + c.contributors[0].comm + " PID " +
                 std::to_string(c.contributors[0].pid) + " first) issued " +
                 thousands(other_calls) + " CUDA calls in the window while " + p.comm +
                 " (PID " + std::to_string(p.pid) + ") waited on the GPU; no host-side cause: it " +
                 "was runnable off-CPU only " + percent(call_share) + " of its call time";
  c.effect = effect_text(st, baseline(p, worst_id), true);
  c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) + ") " +
                                times(worst_ratio) + " slower while " +
                                std::to_string(others.size()) + " other CUDA process" +
                                (others.size() == 1 ? " shares" : "es share") + " the GPU");
  c.recommendation = advise_gpu_contention(c);
  out.push_back(std::move(f));
}

void RuleContext::forget_exited() {
  // OOM kills hold their severity for oom_hold_windows windows, this one included.
  const auto hold =
      static_cast<std::uint64_t>(std::max(1, engine_.options_.thresholds.oom_hold_windows));
  for (auto it = engine_.ooms_.begin(); it != engine_.ooms_.end();) {
    it = engine_.window_index_ + 1 >= it->second.window + hold ? engine_.ooms_.erase(it)
                                                               : std::next(it);
  }
  for (auto it = engine_.cold_.begin(); it != engine_.cold_.end();) {
    auto s = snap_.series.find(it->second.cgroup);
    bool alive = s != snap_.series.end() && s->second.process_info.count(it->first);
    it = alive ? std::next(it) : engine_.cold_.erase(it);
  }
  for (auto it = engine_.alloc_spikes_.begin(); it != engine_.alloc_spikes_.end();) {
    auto s = snap_.series.find(it->first.first);
    bool alive = s != snap_.series.end() && s->second.process_info.count(it->first.second);
    it = alive ? std::next(it) : engine_.alloc_spikes_.erase(it);
  }
}

}  // namespace stallwatch::chains
