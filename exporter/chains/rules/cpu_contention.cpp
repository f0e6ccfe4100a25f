// cpu_contention: the CUDA-issuing thread was runnable but off-CPU (waiting for a CPU) for a
// large share of its call time or of its wall time; names the preemptors. docs/chains.md.
#include <algorithm>
#include <charconv>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "common/strings.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  double call_share = 0.10;        // runnable share of the CUDA call time
  double thread_share = 0.20;      // or of the CUDA threads' wall time
  double min_window_share = 0.01;  // and runnable time ≥ this share of the window
  // A contributor gets a Fix line when it took at least this share of the process's runnable
  // wait over the chain's life (docs/chains.md "Advice only where it helps").
  double material_share = 0.05;
};

constexpr size_t kMaxContributors = 10;

// Who a preemptor is to the process it kept waiting, and where it runs: the same container
// (cgroup), another container of the job's pod, another pod, a system service. The order is
// the precedence. `pod_uid` is the victim's pod (empty outside Kubernetes).
std::string role_of(const Preemptor& pre, const ProcessWindow& p, const std::string& pod_uid) {
  if (pre.pid == p.pid) return "preemptor, same process";        // its own threads
  if (pre.kernel_thread) return "preemptor, kernel thread";      // ksoftirqd, kworker, ...
  if (pre.ppid == p.pid) return "preemptor, worker of the job";  // DataLoader workers
  if (pre.cgroup == p.cgroup) return "preemptor, same workload";
  if (!pre.pod_uid.empty() && pre.pod_uid == pod_uid) return "preemptor, same pod";
  if (!pre.pod_uid.empty()) return "preemptor, another pod";
  if (pre.unit.ends_with(".service")) return "preemptor, system service";
  return "preemptor, other workload";
}

bool is(const Contributor& k, std::string_view role) { return k.role == role; }

// This window's preemptors added to those of the chain's earlier windows (same process and
// role), heaviest first: the culprit is the one that took the most over the whole stall, not
// in its latest window.
std::vector<Contributor> accumulate(const Chain* before, const ProcessWindow& p,
                                    const std::string& pod_uid) {
  std::vector<Contributor> out;
  if (before) out = before->contributors;
  for (const auto& pre : p.preemptors) {
    const std::string role = role_of(pre, p, pod_uid);
    auto it = std::find_if(out.begin(), out.end(), [&](const Contributor& k) {
      return k.pid == pre.pid && k.role == role;
    });
    if (it == out.end()) {
      out.push_back(Contributor{pre.comm, pre.pid, pre.cgroup, role, 0, 0, pre.thread});
      it = out.end() - 1;
    }
    it->comm = pre.comm;  // as it is named now
    if (!pre.thread.empty()) it->thread = pre.thread;
    it->cpu_ns += pre.runnable_ns;
    it->count += pre.count;
  }
  std::stable_sort(out.begin(), out.end(), [](const Contributor& a, const Contributor& b) {
    return a.cpu_ns > b.cpu_ns;
  });
  if (out.size() > kMaxContributors) out.resize(kMaxContributors);
  return out;
}

double evidence_of(const Chain* c, std::string_view name) {
  if (!c) return 0;
  for (const auto& [n, v] : c->evidence) {
    if (n == name) return v;
  }
  return 0;
}

std::string names_of(const std::vector<const Contributor*>& ks) {
  std::string out;
  for (const auto* k : ks) {
    if (!out.empty()) out += ", ";
    out += k->thread.empty() ? k->comm : k->thread;
  }
  return out;
}

// Fix lines only for what took a material share of the wait (`material_ns`), and only what
// helps for each kind of preemptor: no renice for kernel threads or the job's own threads.
// Names here are already escaped (one printable line, escape_name); a unit that enters a
// command is shell-quoted.
Advice advise(const Chain& c, int host_cpus, std::uint64_t material_ns,
              const std::vector<host::CpuStolen>& cpus) {
  std::vector<const Contributor*> outsiders, kernel, workers, own;
  for (const auto& k : c.contributors) {
    if (k.cpu_ns == 0 || k.cpu_ns < material_ns) continue;
    if (is(k, "preemptor, kernel thread")) {
      kernel.push_back(&k);
    } else if (is(k, "preemptor, worker of the job")) {
      workers.push_back(&k);
    } else if (is(k, "preemptor, same process")) {
      own.push_back(&k);
    } else {
      outsiders.push_back(&k);
    }
  }
  Advice out;
  const std::string spare = std::to_string(host_cpus >= 2 ? host_cpus - 1 : 0);
  if (!outsiders.empty()) {
    if (host_cpus >= 3) {
      const std::string mine = "0-" + std::to_string(host_cpus - 2);
      out.command(Command("taskset -acp").arg(mine).number(c.pid),
                  "pin " + c.comm + " and its threads to cores " + mine);
    } else {
      out.command(Command("taskset -acp 0").number(c.pid), "pin " + c.comm + " to core 0");
    }
  }
  size_t shown = 0;
  for (const auto* k : outsiders) {
    if (shown++ == 3) break;
    out.command(Command("renice -n 19 -p")
                    .number(k->pid)
                    .then(Command("taskset -acp").arg(spare).number(k->pid)),
                "lower " + k->comm + " and keep it off the training cores");
    const std::string unit = last_component(k->cgroup);
    if (is(*k, "preemptor, system service") && unit.ends_with(".service")) {
      out.command(Command("systemctl set-property")
                      .arg(unit)
                      .words("CPUWeight=20")
                      .arg("AllowedCPUs=" + spare),
                  "make it last for " + unit);
    } else if (k->cgroup == c.identity.cgroup) {
      out.note(k->comm + " runs in the job's own cgroup but is not its child: move it out (a "
               "sidecar of its own) or give the job the cores both need");
    } else if (is(*k, "preemptor, same pod")) {
      out.note(k->comm + " runs in another container of the job's pod (" + k->cgroup +
               "): give that container a CPU limit of its own, or move it to a pod of its own");
    } else if (is(*k, "preemptor, another pod")) {
      out.note(k->comm + " runs in another pod (" + k->cgroup +
               "): lower its CPU limit, or schedule it away from the GPU nodes");
    }
  }
  if (!workers.empty()) {
    out.code("DataLoader(num_workers=<free cores - 1>, persistent_workers=True)",
             "workers of the same job compete with the CUDA-issuing thread");
  }
  if (!kernel.empty()) {
    // ksoftirqd/N runs the softirqs CPU N deferred: name the kind (the one raised most there)
    // and what moves it.
    const host::CpuStolen* softirq = nullptr;
    for (const auto* k : kernel) {
      const std::string& name = k->thread.empty() ? k->comm : k->thread;
      if (!name.starts_with("ksoftirqd/")) continue;
      int n = -1;
      const char* digits = name.data() + 10;
      const auto [end, ec] = std::from_chars(digits, name.data() + name.size(), n);
      if (ec != std::errc() || end != name.data() + name.size()) continue;
      for (const auto& cpu : cpus) {
        if (cpu.cpu == n && !cpu.top_softirq.empty()) softirq = &cpu;
      }
      if (softirq) break;
    }
    if (softirq) {
      out.note("kernel threads (" + names_of(kernel) + ") took the CPU: deferred interrupt work, " +
               softirq_text(*softirq));
      advise_softirq(out, *softirq);
    } else {
      out.note("kernel threads (" + names_of(kernel) +
               ") took the CPU: steer interrupts off the training cores (/proc/irq/*/smp_affinity, "
               "irqbalance) or isolate them (isolcpus=, nohz_full=)");
    }
  }
  if (!own.empty()) {
    out.note(c.comm + "'s own threads (" + names_of(own) +
             ") compete with its CUDA-issuing thread: give it more cores");
  }
  if (!c.identity.pod_uid.empty()) {
    out.code("resources: {requests: {cpu: \"6\"}, limits: {cpu: \"6\"}}",
             "Guaranteed QoS with integer CPUs: the static CPU manager gives exclusive cores");
  }
  if (outsiders.empty() && kernel.empty() && workers.empty() && own.empty()) {
    out.command(Command("stallwatch explain --per-process --since 15m"),
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
    const RunnableCalls calls = runnable_calls(p);
    if (!calls.worst) return;
    std::uint64_t runnable = calls.runnable_ns;
    const std::uint64_t cuda = calls.cuda_ns;
    const CallTotals* worst = calls.worst;
    const std::uint32_t worst_id = calls.worst_id;
    // The wait the workload's own CPU limit explains is cpu_throttle's; contention keeps the
    // rest (docs/chains.md#cpu_throttle).
    const auto throttle = ctx.throttle(p);
    const double kept = throttle ? 1.0 - throttle->explained : 1.0;
    runnable = static_cast<std::uint64_t>(static_cast<double>(runnable) * kept);
    const auto thread_runnable =
        static_cast<std::uint64_t>(static_cast<double>(p.offcpu.runnable_ns) * kept);
    const std::uint64_t thread_ns = p.offcpu.runnable_ns + p.offcpu.blocked_ns + p.offcpu.oncpu_ns;
    const double call_share = share(static_cast<double>(runnable), static_cast<double>(cuda));
    const double thread_share =
        share(static_cast<double>(thread_runnable), static_cast<double>(thread_ns));
    const double floor = th_.min_window_share * window;
    const bool by_calls = call_share >= th_.call_share && static_cast<double>(runnable) >= floor;
    const bool by_threads =
        thread_share >= th_.thread_share && static_cast<double>(thread_runnable) >= floor;
    if (!by_calls && !by_threads) return;

    const double s = std::max(call_share, thread_share);
    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(s);
    CallStat st = stat_of(worst_id, *worst);
    const Baseline* b = ctx.baseline(p, worst_id);
    set_call(c, st, b);
    const Chain* before = ctx.current_chain ? ctx.current_chain(kind(), p.cgroup, p.pid) : nullptr;
    c.contributors = accumulate(before, p, c.identity.pod_uid);
    // The process's runnable wait over the chain's windows: what the contributors' stolen
    // time is part of.
    const double chain_runnable = evidence_of(before, "chain_runnable_s") + secs(thread_runnable);
    const std::uint64_t stall = ctx.worst_stall_ns(p);
    c.evidence = {{"call_runnable_share", call_share},
                  {"thread_runnable_share", thread_share},
                  {"runnable_in_calls_s", secs(runnable)},
                  {"cuda_time_s", secs(cuda)},
                  {"offcpu_runnable_s", secs(p.offcpu.runnable_ns)},
                  {"offcpu_blocked_s", secs(p.offcpu.blocked_ns)},
                  {"thread_time_s", secs(thread_ns)},
                  {"preemptions", static_cast<double>(p.offcpu.preemptions)},
                  {"worst_stall_s", secs(stall)},
                  {"chain_runnable_s", chain_runnable}};
    if (throttle) c.evidence.emplace_back("throttle_explained_share", throttle->explained);
    c.root_cause = p.comm + " (PID " + std::to_string(p.pid) + ") was runnable but off-CPU for " +
                   percent(call_share) + " of its CUDA call time (" + human_ns(runnable) + " of " +
                   human_ns(cuda) + ") and " + percent(thread_share) +
                   " of its CUDA threads' time" +
                   (throttle ? " beyond the " + percent(throttle->explained) +
                                   " of its wait its own CPU limit explains"
                             : std::string()) +
                   "; " + thousands(p.offcpu.preemptions) +
                   " preemptions, worst stall " + human_ns(stall);
    // The culprit: the heaviest preemptor that is not the process's own thread, if any.
    const Contributor* top = nullptr;
    for (const auto& k : c.contributors) {
      if (!is(k, "preemptor, same process")) {
        top = &k;
        break;
      }
    }
    if (!top && !c.contributors.empty()) top = &c.contributors[0];
    if (!top) {
      c.root_cause += "; the preempting tasks were not identified";
    } else {
      c.root_cause += "; top preemptor " + top->comm + (top->thread.empty() ? "" : " thread " + top->thread) +
                      " (PID " + std::to_string(top->pid) + ") took " + human_ns(top->cpu_ns) +
                      (before ? " since the chain began" : "");
    }
    c.effect = effect_text(st, b);
    c.summary = summary_of(
        c,
        c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) + ") waited for a CPU " +
            percent(s) + " of the time" +
            (top ? ", preempted by " + top->comm : std::string()));
    set_advice(c, advise(c, ctx.options.host_cpus,
                         static_cast<std::uint64_t>(th_.material_share * chain_runnable * 1e9),
                         ctx.snap.cpu_stolen));
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_cpu_contention_rule() { return std::make_unique<CpuContention>(); }

}  // namespace stallwatch::chains
