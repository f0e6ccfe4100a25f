// cpu_throttle: the CUDA-issuing threads waited for a CPU inside their calls because the
// workload's own CPU limit (CFS bandwidth: Kubernetes limits.cpu, systemd CPUQuota=, docker
// --cpus) ran out in the period, not because anything else took the CPU. The kernel counts it
// in the limited cgroup's cpu.stat (nr_throttled, throttled time): a direct measurement, read
// per window (host/cpu_limit.h). Effect first: the calls' runnable wait is the effect, the
// throttled time what explains it; cpu_contention keeps the part it does not explain.
// docs/chains.md#cpu_throttle.
#include <algorithm>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "common/strings.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  // The runnable wait throttling explains, as a share of the CUDA call time or of the CUDA
  // threads' wall time (cpu_contention's cutoffs, on the explained part only), and at least
  // this share of the window.
  double call_share = 0.10;
  double thread_share = 0.20;
  double min_window_share = 0.01;
};

std::string cores_text(double cores) { return short_number(cores) + (cores == 1 ? " CPU" : " CPUs"); }

// Advice that fits where the limit comes from. Host-derived words are shell-quoted where they
// enter a command and escaped where they are shown.
Advice advise(const Chain& c, const host::CpuLimitTotals& l) {
  Advice out;
  const std::string cores = cores_text(l.limit_cores);
  const identity::Identity& id = c.identity;
  if (!id.pod_uid.empty()) {
    const std::string who = id.pod.empty() ? "the pod" : id.pod_namespace + "/" + id.pod;
    if (!id.pod.empty()) {
      out.command(Command("kubectl -n")
                      .arg(id.pod_namespace)
                      .words("get pod")
                      .arg(id.pod)
                      .words("-o")
                      .arg("jsonpath={.spec.containers[*].resources}"),
                  "the limits.cpu of " + who + " (" + cores + ")");
    }
    out.code("resources: {requests: {cpu: \"N\"}}",
             "drop limits.cpu and keep the request (or raise the limit above the "
             "launch and data-loading threads' peak): " + who + " is throttled at " + cores);
    return out;
  }
  const std::string unit = last_component(l.limited_at);
  if (unit.ends_with(".service") || unit.ends_with(".scope") || unit.ends_with(".slice")) {
    out.command(Command("systemctl set-property").arg(unit).words("CPUQuota="),
                "remove the limit of " + unit + " (" + cores +
                    "), or set CPUQuota= above its peak (100% per CPU)");
    return out;
  }
  if (l.v1) {
    out.command(Command("echo -1").to_file(l.limited_dir + "/cpu.cfs_quota_us"),
                "remove the limit (" + cores + "), or write a larger quota");
  } else {
    out.command(Command("echo max").to_file(l.limited_dir + "/cpu.max"),
                "remove the limit (" + cores + "), or write a larger quota");
  }
  return out;
}

class CpuThrottle : public Rule {
 public:
  Kind kind() const override { return Kind::kCpuThrottle; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    const auto throttle = ctx.throttle(p);
    if (!throttle || throttle->explained <= 0) return;
    const host::CpuLimitTotals& l = *throttle->limit;
    const double window = static_cast<double>(ctx.view.window_ns);
    const RunnableCalls calls = runnable_calls(p);
    if (!calls.worst) return;
    const std::uint64_t runnable = calls.runnable_ns, cuda = calls.cuda_ns;
    const CallTotals* worst = calls.worst;
    const std::uint32_t worst_id = calls.worst_id;
    // The effect: the part of the calls' (and threads') runnable wait throttling explains.
    const double explained = throttle->explained;
    const double in_calls = static_cast<double>(runnable) * explained;
    const double in_threads = static_cast<double>(p.offcpu.runnable_ns) * explained;
    const std::uint64_t thread_ns = p.offcpu.runnable_ns + p.offcpu.blocked_ns + p.offcpu.oncpu_ns;
    const double call_share = share(in_calls, static_cast<double>(cuda));
    const double thread_share = share(in_threads, static_cast<double>(thread_ns));
    const double floor = th_.min_window_share * window;
    const bool by_calls = call_share >= th_.call_share && in_calls >= floor;
    const bool by_threads = thread_share >= th_.thread_share && in_threads >= floor;
    if (!by_calls && !by_threads) return;

    const double s = std::max(call_share, thread_share);
    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(s);
    CallStat st = stat_of(worst_id, *worst);
    const Baseline* b = ctx.baseline(p, worst_id);
    set_call(c, st, b);
    const std::uint64_t stall = ctx.worst_stall_ns(p);
    const double periods_per_s = share(static_cast<double>(l.throttled_periods), window / 1e9);
    c.evidence = {{"limit_cores", l.limit_cores},
                  {"quota_s", static_cast<double>(l.quota_us) / 1e6},
                  {"period_s", static_cast<double>(l.period_us) / 1e6},
                  {"periods", static_cast<double>(l.periods)},
                  {"throttled_periods", static_cast<double>(l.throttled_periods)},
                  {"throttled_s", secs(l.throttled_ns)},
                  {"explained_share", explained},
                  {"call_throttled_share", call_share},
                  {"thread_throttled_share", thread_share},
                  {"runnable_in_calls_s", secs(runnable)},
                  {"offcpu_runnable_s", secs(p.offcpu.runnable_ns)},
                  {"cuda_time_s", secs(cuda)},
                  {"worst_stall_s", secs(stall)},
                  {"cgroup_v1", l.v1 ? 1.0 : 0.0}};
    const std::string file = l.v1 ? "cpu.cfs_quota_us " + std::to_string(l.quota_us) + " per " +
                                        std::to_string(l.period_us) + "µs"
                                  : "cpu.max " + std::to_string(l.quota_us) + " " +
                                        std::to_string(l.period_us);
    c.root_cause = "the workload's CPU limit of " + cores_text(l.limit_cores) + " (" + file +
                   " at " + escape_name(l.limited_at) + ") ran out: the kernel throttled it in " +
                   thousands(l.throttled_periods) + " of " + thousands(l.periods) +
                   " periods this window (" + human_ns(l.throttled_ns) +
                   " throttled), which explains " + percent(explained) + " of the " +
                   human_ns(p.offcpu.runnable_ns) + " " + process_text(p.comm, p.pid) +
                   " was runnable but off-CPU; its CUDA calls waited for a CPU " +
                   percent(call_share) + " of their time because of it, worst stall " +
                   human_ns(stall);
    c.effect = effect_text(st, b);
    c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) +
                                  ") throttled by its own CPU limit (" +
                                  cores_text(l.limit_cores) + ", " +
                                  short_number(periods_per_s) + " throttled periods/s)");
    set_advice(c, advise(c, l));
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_cpu_throttle_rule() { return std::make_unique<CpuThrottle>(); }

}  // namespace stallwatch::chains
