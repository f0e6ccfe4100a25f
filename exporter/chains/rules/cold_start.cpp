// cold_start: the first CUDA calls of a process that started after the daemon, against the
// same calls once warm; reported once. docs/chains.md.
#include <map>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  double ratio = 20;     // the first window's worst call against the steady p50
  double min_s = 0.010;  // and at least this long
};

Advice advise() {
  Advice out;
  out.note("warm up before serving or timing: run a few untimed iterations after start");
  out.code("DataLoader(persistent_workers=True)",
           "keep processes alive between epochs and jobs instead of paying start-up again");
  out.command(Command("export CUDA_MODULE_LOADING=LAZY"),
              "load only the kernels used (the default in recent CUDA releases)");
  return out;
}

class ColdStart : public Rule {
 public:
  Kind kind() const override { return Kind::kColdStart; }

  // The first window of a new process is kept until `baseline_min_windows` later windows have
  // shown its steady latency.
  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    auto it = pending_.find(p.pid);
    if (it == pending_.end()) {
      const bool started_after_us =
          p.start_ns > 0 && p.start_ns >= ctx.first_window_ns - ctx.view.window_ns;
      if (p.first_seen && started_after_us && !p.calls.empty()) {
        pending_[p.pid] = Pending{p.cgroup, p.calls, 0};
      }
      return;
    }
    Pending& pending = it->second;
    if (++pending.later_windows < static_cast<int>(ctx.options.thresholds.baseline_min_windows))
      return;
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
    const bool any = first != nullptr;
    pending_.erase(it);
    if (!any) return;
    const Baseline* b = ctx.baseline(p, first_id);
    double steady = b ? b->median_p50() : 0;
    if (steady <= 0) {
      auto now = p.calls.find(first_id);
      if (now == p.calls.end()) return;
      steady = stat_of(first_id, now->second).p50;
    }
    const double worst = secs(first_totals.max_ns);
    if (steady <= 0 || worst < th_.min_s || worst < th_.ratio * steady) return;
    // First calls that mostly waited for a CPU were slowed by contention, not by a cold start.
    if (share(static_cast<double>(first_totals.runnable_ns),
              static_cast<double>(first_totals.sum_ns)) >= 0.5) {
      return;
    }

    CallStat st = stat_of(first_id, first_totals);
    Finding f;
    f.once = true;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(0);
    set_call(c, st, b);
    c.baseline_p50_s = steady;
    c.ratio = worst / steady;  // the first window's worst call against steady p50
    c.evidence = {{"first_window_cuda_s", secs(first_cuda)},
                  {"first_window_calls", static_cast<double>(first_calls)},
                  {"worst_first_call_s", worst},
                  {"steady_p50_s", steady}};
    c.root_cause = "the first CUDA calls of " + p.comm + " (PID " + std::to_string(p.pid) +
                   ") took " + human_ns(first_cuda) + " in its first window: " + c.call +
                   " up to " + human_seconds(worst) + " against " + human_seconds(steady) +
                   " once warm (" + times(c.ratio) + ")";
    c.effect =
        "a one-time start-up cost (context creation, module loading, allocator warm-up) "
        "over " +
        thousands(first_calls) + " calls; steady state is normal";
    c.summary = summary_of(c, p.comm + " (PID " + std::to_string(p.pid) + ") paid " +
                                  human_ns(first_cuda) + " of CUDA start-up; " + c.call + " " +
                                  times(c.ratio) + " its steady latency at first");
    set_advice(c, advise());
    out.push_back(std::move(f));
  }

  void forget(const std::string& cgroup, int pid) override {
    auto it = pending_.find(pid);
    if (it != pending_.end() && it->second.cgroup == cgroup) pending_.erase(it);
  }

 private:
  struct Pending {
    std::string cgroup;
    std::map<std::uint32_t, CallTotals> first;  // first window's calls
    int later_windows = 0;
  };
  Thresholds th_;
  std::map<int, Pending> pending_;  // by pid
};

}  // namespace

std::unique_ptr<Rule> make_cold_start_rule() { return std::make_unique<ColdStart>(); }

}  // namespace stallwatch::chains
