// alloc_spike: an allocation call that spikes far above its usual latency, again and again (the
// caching allocator growing or releasing its pool). docs/chains.md.
#include <algorithm>
#include <map>
#include <utility>

#include "chains/call_classes.h"
#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  double ratio = 10;           // the worst allocation this many times the baseline p50
  double min_s = 0.001;        // and at least this long
  size_t memory_windows = 64;  // a second spike within this many windows makes a pattern
  double medium_ratio = 100;   // a spike this large is at least medium
  int min_close_after = 6;     // windows without a spike before the chain closes (at least)
  // A spike that spent at least this share of its excess runnable off-CPU, or whose CPU lost
  // that much time to the hypervisor or interrupts in the window, was the CPU, not the
  // allocator (cpu_contention or cpu_steal names it): not a spike of this kind.
  double contention_share = 0.5;
};

// The process's longest outlier record of `call_id` this window; null when none.
const trace::OutlierRecord* longest_of(const WindowContext& ctx, const ProcessWindow& p,
                                       std::uint32_t call_id) {
  for (const auto& r : ctx.outliers.worst) {  // longest first
    if (static_cast<int>(r.tgid) == p.pid && r.call_id == call_id) return &r;
  }
  return nullptr;
}

Advice advise() {
  Advice out;
  out.command(Command("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
              "grow the caching allocator's pool without a new cudaMalloc per size");
  out.note("warm the allocator: run one step at the largest batch and sequence length first");
  out.note(
      "remove torch.cuda.empty_cache() from the training loop (it returns memory that "
      "cudaMalloc must take again)");
  out.note("pad or bucket variable-length inputs to a few fixed shapes");
  return out;
}

class AllocSpike : public Rule {
 public:
  Kind kind() const override { return Kind::kAllocSpike; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    const WindowView& view = ctx.view;
    const double window = static_cast<double>(view.window_ns);
    for (const auto& [id, t] : p.calls) {
      if (!is_alloc_call(id)) continue;
      CallStat st = stat_of(id, t);
      const Baseline* b = ctx.baseline(p, id);
      double ref = b ? b->median_p50() : (t.count >= ctx.options.thresholds.min_calls ? st.p50 : 0);
      if (ref <= 0) continue;
      const double worst = secs(st.max_ns);
      const double spike_s = std::max(th_.ratio * ref, th_.min_s);
      if (worst < spike_s) continue;
      // Mostly a wait for a CPU: cpu_contention's.
      if (ctx.excess_runnable_share(p, id, t, ref) >= th_.contention_share) continue;
      const auto stolen = ctx.stolen(p);
      if (const trace::OutlierRecord* r = longest_of(ctx, p, id)) {
        // The call itself, as the kernel split it (issue #50): less its wait for a CPU, and less
        // the part of its on-CPU time the hypervisor and interrupts took on its CPUs. What is
        // left must still be a spike; the rest is cpu_contention's or cpu_steal's.
        const double runnable = static_cast<double>(r->runnable_ns);
        const double oncpu = std::max(
            0.0, static_cast<double>(r->duration_ns) - runnable - static_cast<double>(r->blocked_ns));
        const double taken = stolen ? stolen->mean.total() * oncpu : 0;
        const double own_s = (static_cast<double>(r->duration_ns) - runnable - taken) / 1e9;
        if (own_s < spike_s) continue;
      } else if (stolen &&
                 stolen->mean.total() * window >= th_.contention_share * (worst - ref) * 1e9) {
        continue;  // no record to split: its CPU lost that much to steal or interrupts
      }

      auto& spikes = spikes_[{p.cgroup, p.pid}];
      spikes.push_back(view.end_ns);
      const std::int64_t horizon =
          view.end_ns - static_cast<std::int64_t>(th_.memory_windows) * view.window_ns;
      spikes.erase(std::remove_if(spikes.begin(), spikes.end(),
                                  [&](std::int64_t ts) { return ts < horizon; }),
                   spikes.end());
      if (spikes.size() < 2) return;  // one spike is an event, two make a pattern
      const double period = secs(static_cast<std::uint64_t>(spikes.back() - spikes.front())) /
                            static_cast<double>(spikes.size() - 1);
      const double ratio = worst / ref;
      const double time_share = share(static_cast<double>(t.sum_ns), window);

      Finding f;
      f.immediate = true;
      const int period_windows = static_cast<int>(period * 1e9 / window + 0.5);
      f.close_after = std::max(th_.min_close_after, 2 * period_windows + 1);
      Chain& c = f.chain;
      c = ctx.base_chain(kind(), p);
      c.severity = kind_info(kind()).cutoffs.of(time_share);
      if (ratio >= th_.medium_ratio) c.severity = std::max(c.severity, Severity::kMedium);
      set_call(c, st, b);
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
      if (t.alloc_bytes > 0) {
        // What was asked for: "cudaMalloc of 2 GiB, 14 times in 10s".
        c.effect += "; " + std::string(st.name) + " of " +
                    human_bytes(static_cast<double>(t.alloc_bytes) / static_cast<double>(t.count)) +
                    " on average, " + thousands(t.count) + " times in " +
                    human_seconds(window / 1e9) + " (" +
                    human_bytes(static_cast<double>(t.alloc_bytes)) + ")";
        c.evidence.emplace_back("alloc_bytes", static_cast<double>(t.alloc_bytes));
      }
      c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) +
                                    ") spikes " + times(ratio) + " every " + human_seconds(period));
      set_advice(c, advise());
      out.push_back(std::move(f));
      return;
    }
  }

  void forget(const std::string& cgroup, int pid) override { spikes_.erase({cgroup, pid}); }

 private:
  Thresholds th_;
  std::map<std::pair<std::string, int>, std::vector<std::int64_t>> spikes_;  // window ends
};

}  // namespace

std::unique_ptr<Rule> make_alloc_spike_rule() { return std::make_unique<AllocSpike>(); }

}  // namespace stallwatch::chains
