// cpu_steal: the CUDA-issuing process was on its CPU, by the scheduler's account, while the
// hypervisor (steal: another guest ran on the physical CPU) or interrupts (hard and soft IRQ)
// took that CPU. The scheduler counts that time as the thread's own, so neither off-CPU time nor
// preemptors show it; without this rule it is blamed on the call that happened to be running
// (a 26 ms cudaMalloc read as the allocator growing its pool). Effect first: steal alone is the
// weather of a cloud host (context on /metrics and in explain); a chain needs a call whose
// on-CPU time rose above its baseline by no more than the stolen time can account for, or, for
// interrupts on the process's own CPUs, their share of its calls' on-CPU time (issue #50).
// docs/chains.md.
#include <algorithm>
#include <optional>
#include <string>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  // The CPUs the process may run on lost at least this share of the window, on average.
  double stolen_share = 0.10;
  double min_cuda_share = 0.01;  // and the process spent this share of the window in CUDA calls
  // The effect: a call's on-CPU time at least this many times its usual call time, by at least
  // this share of the window; and the stolen time (over the process's CPUs) at least the
  // excess, so that steal can account for it.
  double oncpu_growth = 1.25;
  double min_excess_share = 0.005;
  // Interrupts alone: the process's CPUs spent at least this share of the window in interrupt
  // handlers (more than in steal), and their estimated share of its calls' on-CPU time is at
  // least min_excess_share of the window.
  double irq_share = 0.20;
};

// The process's longest outlier of the window; null when none.
const trace::OutlierRecord* longest_outlier(const WindowContext& ctx, const ProcessWindow& p) {
  for (const auto& r : ctx.outliers.worst) {  // longest first
    if (static_cast<int>(r.tgid) == p.pid) return &r;
  }
  return nullptr;
}

std::uint64_t oncpu_ns(const trace::OutlierRecord& r) {
  const std::uint64_t off = r.runnable_ns + r.blocked_ns;
  return r.duration_ns > off ? r.duration_ns - off : 0;
}

// `steal`: the hypervisor took most of it, else interrupts; `cpu` the most affected CPU.
Advice advise(const host::CpuStolen& cpu, bool steal) {
  Advice out;
  const std::string n = std::to_string(cpu.cpu);
  if (steal) {
    out.note("the hypervisor ran other work on this VM's CPU " + n +
             ": ask for dedicated vCPUs (a dedicated-host or metal instance type, or vCPUs "
             "pinned to isolated host cores)");
    out.command(Command("grep -E").arg("^cpu[0-9]").words("/proc/stat"),
                "the steal column (8th value) grows on the CPUs the hypervisor takes");
  } else {
    out.command(Command("grep -E").arg("CPU|" + n + ":").words("/proc/interrupts"),
                "which interrupts land on CPU " + n);
    const std::string before = out.text();
    advise_softirq(out, cpu);
    if (out.text() == before) {
      out.note("move them off the training cores: /proc/irq/<N>/smp_affinity_list, or "
               "IRQBALANCE_BANNED_CPUS for irqbalance; or isolate the cores (isolcpus=, "
               "nohz_full=)");
    }
  }
  return out;
}

class CpuSteal : public Rule {
 public:
  Kind kind() const override { return Kind::kCpuSteal; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    const auto stolen = ctx.stolen(p);
    if (!stolen || p.calls.empty()) return;
    const host::CpuStolen& mean = stolen->mean;
    const host::CpuStolen& cpu = stolen->worst;
    const double window = static_cast<double>(ctx.view.window_ns);
    const std::uint64_t cuda = p.cuda_ns();
    if (share(static_cast<double>(cuda), window) < th_.min_cuda_share) return;
    if (mean.total() < th_.stolen_share) return;
    // The effect, and whether the stolen time can account for it: a call's on-CPU time grown
    // above its baseline by no more than the stolen time.
    std::optional<WindowContext::OnCpuGrowth> grew = ctx.oncpu_growth(p);
    if (grew && (grew->ratio < th_.oncpu_growth ||
                 static_cast<double>(grew->excess_ns) < th_.min_excess_share * window ||
                 mean.total() * window * mean.cpu < static_cast<double>(grew->excess_ns))) {
      grew.reset();
    }
    // Or, for interrupts on the process's own CPUs (issue #50), whatever the baseline (a job
    // that started under the load has none that is calm): the interrupt handlers ran inside its
    // calls' on-CPU time in proportion to their share of those CPUs. Steal keeps the effect
    // test alone (the weather of a cloud host).
    std::uint32_t id = 0;
    std::uint64_t call_oncpu = 0, all_oncpu = 0;
    for (const auto& [cid, t] : p.calls) {
      const std::uint64_t off = t.runnable_ns + t.blocked_ns;
      const std::uint64_t on = t.sum_ns > off ? t.sum_ns - off : 0;
      all_oncpu += on;
      if (on > call_oncpu) {
        call_oncpu = on;
        id = cid;
      }
    }
    const double irq_in_calls_ns = mean.irq * static_cast<double>(all_oncpu);
    const bool by_irq = mean.irq >= th_.irq_share && mean.irq > mean.steal &&
                        irq_in_calls_ns >= th_.min_excess_share * window;
    if (!grew && !by_irq) return;
    if (grew) id = grew->call_id;
    const double stolen_s = mean.total() * window / 1e9;
    const trace::OutlierRecord* slow = longest_outlier(ctx, p);
    if (slow && slow->call_id != id) slow = nullptr;
    const double slow_oncpu_s = slow ? secs(oncpu_ns(*slow)) : 0;

    const CallTotals& t = p.calls.at(id);
    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(mean.total());
    CallStat st = stat_of(id, t);
    const Baseline* b = ctx.baseline(p, id);
    set_call(c, st, b);
    const std::string where = mean.cpu == 1 ? "CPU " + std::to_string(cpu.cpu)
                                            : "the " + std::to_string(mean.cpu) + " CPUs";
    const std::string irqs = softirq_text(cpu);
    const std::string what = mean.steal >= mean.irq
                                 ? "the hypervisor (steal)"
                                 : "interrupts" + (irqs.empty() ? std::string() : ", " + irqs);
    c.evidence = {{"cpus", static_cast<double>(mean.cpu)},
                  {"steal_share", mean.steal},
                  {"irq_share", mean.irq},
                  {"worst_cpu", static_cast<double>(cpu.cpu)},
                  {"worst_cpu_share", cpu.total()},
                  {"stolen_s", stolen_s},
                  {"oncpu_growth", grew ? grew->ratio : 0},
                  {"oncpu_excess_s", grew ? secs(grew->excess_ns) : 0},
                  {"calls_oncpu_s", secs(all_oncpu)},
                  {"irq_in_calls_s", irq_in_calls_ns / 1e9},
                  {"slow_call_oncpu_s", slow_oncpu_s},
                  {"cuda_time_s", secs(cuda)}};
    c.root_cause = where + " " + process_text(p.comm, p.pid) + " may run on lost " +
                   percent(mean.total()) + " of the window on average (" +
                   human_seconds(stolen_s) + " per CPU) to " + what + ": steal " +
                   percent(mean.steal) + ", interrupts " + percent(mean.irq) + ", CPU " +
                   std::to_string(cpu.cpu) + " the most (" + percent(cpu.total()) +
                   "); the scheduler counts that time as the thread's own";
    if (grew) {
      c.root_cause += ", and " + std::string(call_name(id)) + " spent " + times(grew->ratio) +
                      " its usual time on-CPU (" + human_seconds(secs(grew->excess_ns)) +
                      " more this window)";
    } else {
      c.root_cause += ": of the " + human_seconds(secs(all_oncpu)) +
                      " its CUDA calls ran on-CPU this window, about " +
                      human_seconds(irq_in_calls_ns / 1e9) + " went to interrupt handlers";
    }
    if (slow && slow_oncpu_s > 0) {
      c.root_cause += "; its slowest call took " + human_ns(slow->duration_ns) + " with " +
                      human_seconds(slow_oncpu_s) + " of it on-CPU and nothing to wait for";
    }
    c.effect = effect_text(st, b);
    c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) +
                                  "): " + where + " lost " + percent(mean.total()) + " to " +
                                  what);
    set_advice(c, advise(cpu, mean.steal >= mean.irq));
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_cpu_steal_rule() { return std::make_unique<CpuSteal>(); }

}  // namespace stallwatch::chains
