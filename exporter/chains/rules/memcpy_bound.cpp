// memcpy_bound: host↔device copies take most of the process's CUDA time and much of its wall
// time. docs/chains.md.
#include <algorithm>

#include "chains/call_classes.h"
#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  double cuda_share = 0.30;  // copies' share of CUDA time
  double wall_share = 0.20;  // and of wall time
};

Advice advise() {
  Advice out;
  out.code("DataLoader(pin_memory=True); batch.to('cuda', non_blocking=True)",
           "page-locked buffers and asynchronous copies");
  out.note("overlap copies with compute: prefetch the next batch on a separate torch.cuda.Stream");
  out.note(
      "shrink transfers: copy uint8/fp16 and convert on the GPU; move preprocessing to "
      "the GPU (NVIDIA DALI)");
  out.note("avoid per-step .item() / .cpu() calls that copy results back synchronously");
  return out;
}

class MemcpyBound : public Rule {
 public:
  Kind kind() const override { return Kind::kMemcpyBound; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    // Time in copies less the time they waited for a CPU inside (that is cpu_contention's).
    std::uint64_t copy = 0;
    const CallTotals* top = nullptr;
    std::uint32_t top_id = 0;
    for (const auto& [id, t] : p.calls) {
      if (!is_copy_call(id)) continue;
      copy += t.sum_ns - std::min(t.sum_ns, t.runnable_ns);
      if (!top || t.sum_ns > top->sum_ns) {
        top = &t;
        top_id = id;
      }
    }
    const std::uint64_t cuda = p.cuda_ns();
    if (!top || cuda == 0) return;
    const double cuda_share = share(static_cast<double>(copy), static_cast<double>(cuda));
    const double wall_share =
        std::min(1.0, share(static_cast<double>(copy), static_cast<double>(ctx.view.window_ns)));
    if (cuda_share < th_.cuda_share || wall_share < th_.wall_share) return;

    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(wall_share);
    CallStat st = stat_of(top_id, *top);
    const Baseline* b = ctx.baseline(p, top_id);
    set_call(c, st, b);
    c.evidence = {{"copy_cuda_share", cuda_share},
                  {"copy_wall_share", wall_share},
                  {"copy_time_s", secs(copy)},
                  {"cuda_time_s", secs(cuda)}};
    c.root_cause = "copies take " + percent(cuda_share) + " of " + p.comm + " (PID " +
                   std::to_string(p.pid) + ")'s CUDA time and " + percent(wall_share) +
                   " of wall time (" + human_ns(copy) + " in the window); " + c.call +
                   " is the largest";
    c.effect = effect_text(st, b) + "; the GPU waits for data instead of computing";
    c.summary = summary_of(c, p.comm + " (PID " + std::to_string(p.pid) + ") spends " +
                                  percent(wall_share) + " of wall time in host↔device copies");
    set_advice(c, advise());
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_memcpy_bound_rule() { return std::make_unique<MemcpyBound>(); }

}  // namespace stallwatch::chains
