// gpu_contention: a process's synchronisations slow down against its baseline while other CUDA
// processes are active and nothing on the host explains it, nor a GPU clock held down
// (gpu_throttle). docs/chains.md.
#include <algorithm>
#include <set>

#include "chains/call_classes.h"
#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  double ratio = 3;  // sync p99 against its baseline p99 (and p50 at least doubled)
  double p50_ratio = 2;
  double host_call_share = 0.05;    // no host cause: runnable share of call time below this
  double host_thread_share = 0.10;  // and of the CUDA threads' time below this
  double held_gpu_share = 0.20;     // no GPU of the process held its clock down this share
};

Advice advise(const Chain& c) {
  Advice out;
  out.code("CUDA_VISIBLE_DEVICES=<gpu>",
           "give each job its own GPU (in Kubernetes: an nvidia.com/gpu limit per pod)");
  out.note(
      "or share it on purpose: MIG partitions (nvidia-smi mig) on A100/H100, or MPS for "
      "cooperating processes");
  if (!c.contributors.empty()) {
    const auto& k = c.contributors.front();
    out.note("move " + k.comm + " (PID " + std::to_string(k.pid) + ", " + k.cgroup +
             ") to another GPU or node");
  }
  return out;
}

class GpuContention : public Rule {
 public:
  Kind kind() const override { return Kind::kGpuContention; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    // Other CUDA processes that may share its GPU: where the process-to-GPU mapping knows both
    // and their GPUs differ (eight ranks on eight GPUs), the other cannot be the cause.
    std::vector<const ProcessWindow*> others;
    std::set<unsigned> shared;
    std::size_t elsewhere = 0;
    for (const auto& q : ctx.view.processes) {
      if (q.pid == p.pid || q.calls.empty()) continue;
      const auto gpus = ctx.shared_gpus(p.pid, q.pid);
      if (gpus && gpus->empty()) {
        ++elsewhere;
        continue;
      }
      if (gpus) shared.insert(gpus->begin(), gpus->end());
      others.push_back(&q);
    }
    if (others.empty()) return;
    // Its GPU's clock held down: gpu_throttle's to explain, not the other processes'.
    if (ctx.held_gpu(p, th_.held_gpu_share)) return;
    std::uint64_t runnable = 0;
    for (const auto& [id, t] : p.calls) runnable += t.runnable_ns;
    const std::uint64_t thread_ns = p.offcpu.runnable_ns + p.offcpu.blocked_ns + p.offcpu.oncpu_ns;
    const double call_share =
        share(static_cast<double>(runnable), static_cast<double>(p.cuda_ns()));
    const double thread_share =
        share(static_cast<double>(p.offcpu.runnable_ns), static_cast<double>(thread_ns));
    if (call_share >= th_.host_call_share || thread_share >= th_.host_thread_share) return;

    const CallTotals* worst = nullptr;
    std::uint32_t worst_id = 0;
    double worst_ratio = 0;
    for (const auto& [id, t] : p.calls) {
      if (!is_sync_call(id) || t.count < ctx.options.thresholds.min_calls) continue;
      const Baseline* b = ctx.baseline(p, id);
      if (!b || b->median_p99() <= 0) continue;
      CallStat st = stat_of(id, t);
      const double ratio = st.p99 / b->median_p99();
      const bool p50_up = st.p50 >= th_.p50_ratio * b->median_p50();
      if (ratio >= th_.ratio && p50_up && ratio > worst_ratio) {
        worst = &t;
        worst_id = id;
        worst_ratio = ratio;
      }
    }
    if (!worst) return;

    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(worst_ratio);
    CallStat st = stat_of(worst_id, *worst);
    const Baseline* b = ctx.baseline(p, worst_id);
    set_call(c, st, b);
    std::sort(others.begin(), others.end(), [](const ProcessWindow* a, const ProcessWindow* b) {
      return a->cuda_ns() > b->cuda_ns();
    });
    std::uint64_t other_calls = 0;
    for (const auto* q : others) {
      std::uint64_t calls = 0;
      for (const auto& [id, t] : q->calls) calls += t.count;
      other_calls += calls;
      if (c.contributors.size() < 5) {
        const auto gpus = ctx.shared_gpus(p.pid, q->pid);
        std::string role =
            q->cgroup == p.cgroup ? "CUDA process, same workload" : "CUDA process, other workload";
        if (gpus) role += ", same GPU";
        c.contributors.push_back(Contributor{q->comm, q->pid, q->cgroup, std::move(role),
                                             q->cuda_ns(), calls, {}});
      }
    }
    c.evidence = {{"other_cuda_processes", static_cast<double>(others.size())},
                  {"other_cuda_calls", static_cast<double>(other_calls)},
                  {"call_runnable_share", call_share},
                  {"thread_runnable_share", thread_share}};
    if (elsewhere > 0) {
      c.evidence.push_back({"cuda_processes_on_other_gpus", static_cast<double>(elsewhere)});
    }
    std::string on_gpu;
    for (unsigned g : shared) on_gpu += (on_gpu.empty() ? " on GPU " : ", ") + std::to_string(g);
    c.root_cause = std::to_string(others.size()) + " other CUDA process" +
                   (others.size() == 1 ? "" : "es") + on_gpu + " (" + c.contributors[0].comm +
                   " PID " +
                   std::to_string(c.contributors[0].pid) + " first) issued " +
                   thousands(other_calls) + " CUDA calls in the window while " + p.comm + " (PID " +
                   std::to_string(p.pid) +
                   ") waited on the GPU; no host-side cause: it was runnable off-CPU only " +
                   percent(call_share) + " of its call time";
    c.effect = effect_text(st, b);
    c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) + ") " +
                                  times(worst_ratio) + " slower while " +
                                  std::to_string(others.size()) + " other CUDA process" +
                                  (others.size() == 1 ? " shares" : "es share") + " the GPU");
    set_advice(c, advise(c));
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_gpu_contention_rule() { return std::make_unique<GpuContention>(); }

}  // namespace stallwatch::chains
