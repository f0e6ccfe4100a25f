#include "demo/synthetic.h"

#include <algorithm>
#include <cstring>

#include "identity/cgroup_identity.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::demo {
namespace {

std::uint32_t call_id(std::string_view name) {
  auto calls = trace::all_calls();
  for (std::uint32_t i = 0; i < calls.size(); i++) {
    if (calls[i].name == name) return i;
  }
  return 0;
}

void add_calls(CallTotals& t, std::uint64_t n, std::uint64_t ns) {
  if (n == 0) return;
  t.count += n;
  t.sum_ns += n * ns;
  t.buckets[trace::bucket_of_ns(ns)] += n;
  t.max_ns = std::max(t.max_ns, ns);
}

}  // namespace

void SyntheticHost::add_process(const std::string& cgroup, int pid, const std::string& comm,
                                std::int64_t start_ns) {
  Proc& p = procs_[pid];
  p.cgroup = cgroup;
  p.comm = comm;
  p.start_ns = start_ns;
}

void SyntheticHost::exit_process(int pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  for (const auto& [id, t] : it->second.calls) retired_[it->second.cgroup][id].add(t);
  procs_.erase(it);
}

void SyntheticHost::calls(int pid, const CallMix& mix) {
  auto it = procs_.find(pid);
  if (it == procs_.end() || mix.count == 0) return;
  const std::uint32_t id = call_id(mix.call);
  CallTotals& t = it->second.calls[id];
  const std::uint64_t before = t.sum_ns;
  std::uint64_t slow = mix.tail_ns ? static_cast<std::uint64_t>(
                                         static_cast<double>(mix.count) * mix.tail_share + 0.5)
                                   : 0;
  slow = std::min(slow, mix.count);
  add_calls(t, mix.count - slow, mix.typical_ns);
  add_calls(t, slow, mix.tail_ns);
  const double spent = static_cast<double>(t.sum_ns - before);
  t.runnable_ns += static_cast<std::uint64_t>(spent * mix.runnable_share);
  t.blocked_ns += static_cast<std::uint64_t>(spent * mix.blocked_share);
  // The ring buffer sees calls of 1 ms and more one by one; send a few, as a real host would.
  const std::uint64_t slowest = slow ? mix.tail_ns : mix.typical_ns;
  const std::uint64_t over = slow ? slow : (mix.typical_ns >= 1000000 ? mix.count : 0);
  if (slowest < 1000000) return;
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(over, 16); i++) {
    outlier_event e{};
    e.ts_ns = static_cast<__u64>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    e.tgid = static_cast<__u32>(pid);
    e.tid = static_cast<__u32>(pid);
    e.call_id = id;
    e.duration_ns = slowest;
    e.runnable_ns = static_cast<__u64>(static_cast<double>(slowest) * mix.runnable_share);
    e.blocked_ns = static_cast<__u64>(static_cast<double>(slowest) * mix.blocked_share);
    e.preemptions = mix.runnable_share > 0 ? 3 : 0;
    std::strncpy(e.comm, it->second.comm.c_str(), sizeof(e.comm) - 1);
    outliers_.add(e);
  }
}

void SyntheticHost::offcpu(int pid, std::uint64_t runnable_ns, std::uint64_t blocked_ns,
                           std::uint64_t oncpu_ns, std::uint64_t preemptions) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  it->second.offcpu.add(OffcpuTotals{runnable_ns, blocked_ns, oncpu_ns, preemptions});
}

void SyntheticHost::preempted_by(int victim, int pid, const std::string& comm,
                                 const std::string& cgroup, std::uint64_t runnable_ns,
                                 std::uint64_t count) {
  auto it = procs_.find(victim);
  if (it == procs_.end()) return;
  Preemptor& p = it->second.preemptors[pid];
  p.victim_pid = victim;
  p.pid = pid;
  p.comm = comm;
  p.cgroup = cgroup;
  p.runnable_ns += runnable_ns;
  p.count += count;
}

std::shared_ptr<Snapshot> SyntheticHost::snapshot(std::chrono::system_clock::time_point taken,
                                                  std::chrono::nanoseconds window) {
  auto snap = std::make_shared<Snapshot>();
  snap->sequence = ++sequence_;
  snap->taken = taken;
  snap->window = window;
  for (const auto& [pid, p] : procs_) {
    Series& s = snap->series[p.cgroup];
    for (const auto& [id, t] : p.calls) {
      s.calls[id].add(t);
      s.processes.push_back(ProcessCall{pid, id, t});
    }
    s.offcpu.add(p.offcpu);
    s.process_info[pid] = ProcessInfo{pid, p.comm, p.start_ns, p.offcpu};
    for (const auto& [ppid, pre] : p.preemptors) s.preemptors.push_back(pre);
  }
  for (const auto& [cgroup, calls] : retired_) {
    Series& s = snap->series[cgroup];
    for (const auto& [id, t] : calls) s.calls[id].add(t);
  }
  for (auto& [label, s] : snap->series) {
    s.identity = identity::parse_cgroup_path(label);
    s.identity.cgroup = label;
    std::sort(s.preemptors.begin(), s.preemptors.end(),
              [](const Preemptor& a, const Preemptor& b) { return a.runnable_ns > b.runnable_ns; });
    if (s.preemptors.size() > 10) s.preemptors.resize(10);
    OffcpuTotals& prev = previous_offcpu_[label];
    const double r = static_cast<double>(s.offcpu.runnable_ns - prev.runnable_ns);
    const double b = static_cast<double>(s.offcpu.blocked_ns - prev.blocked_ns);
    const double on = static_cast<double>(s.offcpu.oncpu_ns - prev.oncpu_ns);
    if (r + b + on > 0) {
      s.runnable_ratio = r / (r + b + on);
      s.blocked_ratio = b / (r + b + on);
    }
    prev = s.offcpu;
  }
  std::uint64_t processes = 0;
  for (const auto& [label, s] : snap->series) processes += s.process_info.size();
  snap->traced_processes = processes;
  snap->attached_libraries = 2;
  snap->attached_probes = 2 * trace::all_calls().size();
  snap->outliers = outliers_.total();
  snap->ready = true;
  return snap;
}

}  // namespace stallwatch::demo
