#include "chains/rule_helpers.h"

#include "common/strings.h"

#include <algorithm>
#include <cctype>

#include "chains/call_classes.h"
#include "chains/format.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::chains {

std::string_view call_name(std::uint32_t id) {
  auto calls = trace::all_calls();
  return id < calls.size() ? calls[id].name : std::string_view();
}

CallStat stat_of(std::uint32_t id, const CallTotals& t) {
  CallStat s;
  s.id = id;
  auto calls = trace::all_calls();
  if (id < calls.size()) {
    s.name = calls[id].name;
    s.api = trace::api_name(calls[id].api);
  }
  s.count = t.count;
  s.sum_ns = t.sum_ns;
  s.runnable_ns = t.runnable_ns;
  s.max_ns = t.max_ns;
  s.p50 = trace::quantile_seconds(t.buckets, 0.50, t.max_ns);
  s.p99 = trace::quantile_seconds(t.buckets, 0.99, t.max_ns);
  return s;
}

bool is_sync_call(std::uint32_t id) { return trace::call_class(id) == trace::CallClass::kSync; }
bool is_alloc_call(std::uint32_t id) { return trace::call_class(id) == trace::CallClass::kAlloc; }
bool is_copy_call(std::uint32_t id) { return trace::call_class(id) == trace::CallClass::kCopy; }

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string effect_text(const CallStat& s, const Baseline* b) {
  const double before = b ? b->median_calls() : 0;
  const double now = static_cast<double>(s.count);
  if (before > 0 && now < 0.9 * before) {
    return std::string(s.name) + " calls per window fell " + percent(1 - now / before) +
           " from the baseline (" + thousands(static_cast<std::uint64_t>(before + 0.5)) + " → " +
           thousands(s.count) + "): the job is that much slower";
  }
  return thousands(s.count) + " " + std::string(s.name) + " calls in the window, " +
         human_seconds(static_cast<double>(s.sum_ns) / 1e9) + " inside them";
}

void set_call(Chain& c, const CallStat& s, const Baseline* b) {
  c.call = std::string(s.name);
  c.api = std::string(s.api);
  c.p50_s = s.p50;
  c.p99_s = s.p99;
  if (b) {
    c.baseline_p50_s = b->median_p50();
    c.baseline_p99_s = b->median_p99();
    c.ratio = share(s.p99, c.baseline_p99_s);
  }
}

RunnableCalls runnable_calls(const ProcessWindow& p) {
  RunnableCalls r;
  for (const auto& [id, t] : p.calls) {
    r.runnable_ns += t.runnable_ns;
    r.cuda_ns += t.sum_ns;
    if (!r.worst || t.runnable_ns > r.worst->runnable_ns ||
        (t.runnable_ns == r.worst->runnable_ns && t.sum_ns > r.worst->sum_ns)) {
      r.worst = &t;
      r.worst_id = id;
    }
  }
  return r;
}

std::string summary_of(const Chain& c, const std::string& rest) {
  return "[" + upper(severity_name(c.severity)) + "] " + std::string(kind_name(c.kind)) + ": " +
         rest;
}

std::string process_text(const std::string& comm, int pid) {
  return (comm.empty() ? std::string("PID ") : comm + " (PID ") + std::to_string(pid) +
         (comm.empty() ? "" : ")");
}

std::string workload_of(const Chain& c) {
  if (!c.identity.container_id.empty()) return "container " + c.identity.container_id.substr(0, 12);
  if (!c.identity.systemd_unit.empty()) return escape_line(c.identity.systemd_unit);
  return escape_line(c.identity.cgroup);
}

std::string process_or_workload(const ProcessWindow* p, const Chain& c) {
  return p ? process_text(p->comm, p->pid) : workload_of(c);
}

Severity step_up(Severity s) {
  return s >= Severity::kHigh ? s : static_cast<Severity>(static_cast<int>(s) + 1);
}

std::string softirq_text(const host::CpuStolen& cpu) {
  if (cpu.top_softirq.empty()) return "";
  return "softirq " + cpu.top_softirq + " on CPU " + std::to_string(cpu.cpu) + " (" +
         percent(cpu.top_softirq_share) + " of the softirqs raised there)";
}

void advise_softirq(Advice& out, const host::CpuStolen& cpu) {
  const std::string& v = cpu.top_softirq;
  const std::string n = std::to_string(cpu.cpu);
  if (v == "NET_RX" || v == "NET_TX") {
    out.note("network packets are processed on CPU " + n +
             ": clear it from each /sys/class/net/<dev>/queues/rx-<N>/rps_cpus mask (RPS) and "
             "from the NIC's IRQ affinity (/proc/irq/<N>/smp_affinity_list; "
             "IRQBALANCE_BANNED_CPUS for irqbalance)");
  } else if (v == "BLOCK") {
    out.note("block I/O completions run on CPU " + n +
             ": move the NVMe queues' interrupts off it (/proc/irq/<N>/smp_affinity_list)");
  } else if (v == "TIMER" || v == "HRTIMER" || v == "SCHED" || v == "RCU") {
    out.note("timers and scheduler ticks run on CPU " + n +
             ": isolate the training cores (nohz_full=, rcu_nocbs=, isolcpus=)");
  }
}

void set_advice(Chain& c, const Advice& a) {
  c.recommendation = a.text();
  c.commands = a.commands();
}

std::string last_component(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool in_kubepods(std::string_view cgroup) { return cgroup.find("kubepods") != cgroup.npos; }

}  // namespace stallwatch::chains
