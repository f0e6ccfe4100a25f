// cpu_contention: the CUDA-issuing thread was runnable but off-CPU (waiting for a CPU) for a
// large share of its call time or of its wall time; names the preemptors. docs/chains.md.
#include <algorithm>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  double call_share = 0.10;        // runnable share of the CUDA call time
  double thread_share = 0.20;      // or of the CUDA threads' wall time
  double min_window_share = 0.01;  // and runnable time ≥ this share of the window
};

std::string advise(const Chain& c, int host_cpus) {
  std::string out;
  const std::string pid = std::to_string(c.pid);
  if (host_cpus >= 3) {
    const std::string mine = "0-" + std::to_string(host_cpus - 2);
    out += advice_line("taskset -acp " + mine + " " + pid,
                       "pin " + c.comm + " and its threads to cores " + mine);
  } else {
    out += advice_line("taskset -acp 0 " + pid, "pin " + c.comm + " to core 0");
  }
  const std::string spare = std::to_string(host_cpus >= 2 ? host_cpus - 1 : 0);
  bool same_workload = false;
  size_t shown = 0;
  for (const auto& k : c.contributors) {
    if (k.cgroup == c.identity.cgroup) {
      same_workload = true;
      continue;
    }
    if (shown++ == 3) break;
    const std::string kp = std::to_string(k.pid);
    out += advice_line("renice -n 19 -p " + kp + "; taskset -acp " + spare + " " + kp,
                       "lower " + k.comm + " and keep it off the training cores");
    const std::string unit = last_component(k.cgroup);
    if (unit.ends_with(".service")) {
      out += advice_line("systemctl set-property " + unit + " CPUWeight=20 AllowedCPUs=" + spare,
                         "make it last for " + unit);
    } else if (in_kubepods(k.cgroup)) {
      out += "# " + k.comm + " runs in another pod: lower its CPU limit, or schedule it away\n";
    }
  }
  if (same_workload) {
    out += advice_line("DataLoader(num_workers=<free cores - 1>, persistent_workers=True)",
                       "workers of the same job compete with the CUDA-issuing thread");
  }
  if (in_kubepods(c.identity.cgroup)) {
    out += advice_line(
        "resources: {requests: {cpu: \"6\"}, limits: {cpu: \"6\"}}",
        "Guaranteed QoS with integer CPUs: the static CPU manager gives exclusive cores");
  }
  if (c.contributors.empty()) {
    out += advice_line("stallwatch explain --per-process --since 15m",
                       "find what else runs on the workload's CPUs (top -H also helps)");
  }
  return out;
}

class CpuContention : public Rule {
 public:
  Kind kind() const override { return Kind::kCpuContention; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    const double window = static_cast<double>(ctx.view.window_ns);
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
    const double floor = th_.min_window_share * window;
    const bool by_calls = call_share >= th_.call_share && static_cast<double>(runnable) >= floor;
    const bool by_threads =
        thread_share >= th_.thread_share && static_cast<double>(p.offcpu.runnable_ns) >= floor;
    if (!by_calls && !by_threads) return;

    const double s = std::max(call_share, thread_share);
    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(s);
    CallStat st = stat_of(worst_id, *worst);
    const Baseline* b = ctx.baseline(p, worst_id);
    set_call(c, st, b);
    for (const auto& pre : p.preemptors) {
      if (c.contributors.size() == 10) break;  // as many as the snapshot keeps
      c.contributors.push_back(Contributor{
          pre.comm, pre.pid, pre.cgroup,
          pre.cgroup == p.cgroup ? "preemptor, same workload" : "preemptor, other workload",
          pre.runnable_ns, pre.count});
    }
    const std::uint64_t stall = ctx.worst_stall_ns(p);
    c.evidence = {{"call_runnable_share", call_share},
                  {"thread_runnable_share", thread_share},
                  {"runnable_in_calls_s", secs(runnable)},
                  {"cuda_time_s", secs(cuda)},
                  {"offcpu_runnable_s", secs(p.offcpu.runnable_ns)},
                  {"offcpu_blocked_s", secs(p.offcpu.blocked_ns)},
                  {"thread_time_s", secs(thread_ns)},
                  {"preemptions", static_cast<double>(p.offcpu.preemptions)},
                  {"worst_stall_s", secs(stall)}};
    c.root_cause = p.comm + " (PID " + std::to_string(p.pid) + ") was runnable but off-CPU for " +
                   percent(call_share) + " of its CUDA call time (" + human_ns(runnable) + " of " +
                   human_ns(cuda) + ") and " + percent(thread_share) +
                   " of its CUDA threads' time; " + thousands(p.offcpu.preemptions) +
                   " preemptions, worst stall " + human_ns(stall);
    if (c.contributors.empty()) {
      c.root_cause += "; the preempting tasks were not identified";
    } else {
      c.root_cause += "; top preemptor " + c.contributors[0].comm + " (PID " +
                      std::to_string(c.contributors[0].pid) + ") took " +
                      human_ns(c.contributors[0].cpu_ns);
    }
    c.effect = effect_text(st, b);
    c.summary = summary_of(
        c,
        c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) + ") waited for a CPU " +
            percent(s) + " of the time" +
            (c.contributors.empty() ? std::string() : ", preempted by " + c.contributors[0].comm));
    c.recommendation = advise(c, ctx.options.host_cpus);
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_cpu_contention_rule() { return std::make_unique<CpuContention>(); }

}  // namespace stallwatch::chains
