#include "chains/window.h"

#include "trace/histogram.h"

#include <algorithm>
#include <chrono>
#include <tuple>

namespace stallwatch::chains {
namespace {

std::uint64_t sub(std::uint64_t now, std::uint64_t before) { return now >= before ? now - before : now; }

}  // namespace

std::uint64_t ProcessWindow::cuda_ns() const {
  std::uint64_t sum = 0;
  for (const auto& [id, t] : calls) sum += t.sum_ns;
  return sum;
}

CallTotals delta(const CallTotals& now, const CallTotals* before) {
  if (!before || now.count < before->count) return now;
  CallTotals d;
  d.count = now.count - before->count;
  d.sum_ns = sub(now.sum_ns, before->sum_ns);
  d.runnable_ns = sub(now.runnable_ns, before->runnable_ns);
  d.blocked_ns = sub(now.blocked_ns, before->blocked_ns);
  for (size_t k = 0; k < d.buckets.size(); k++) {
    d.buckets[k] = sub(now.buckets[k], before->buckets[k]);
  }
  // The window's worst call: exact when it set a new maximum, else the top bucket's bound.
  if (now.max_ns > before->max_ns) {
    d.max_ns = now.max_ns;
  } else {
    for (size_t k = d.buckets.size(); k-- > 0;) {
      if (d.buckets[k] == 0) continue;
      const auto bound = static_cast<std::uint64_t>(trace::bucket_upper_seconds(static_cast<unsigned>(k)) * 1e9);
      d.max_ns = std::min<std::uint64_t>(now.max_ns, bound);
      break;
    }
  }
  return d;
}

OffcpuTotals delta(const OffcpuTotals& now, const OffcpuTotals* before) {
  if (!before) return now;
  return OffcpuTotals{sub(now.runnable_ns, before->runnable_ns),
                      sub(now.blocked_ns, before->blocked_ns), sub(now.oncpu_ns, before->oncpu_ns),
                      sub(now.preemptions, before->preemptions)};
}

WindowView diff_windows(const Snapshot* previous, const Snapshot& current) {
  WindowView v;
  v.end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 current.taken.time_since_epoch())
                 .count();
  v.window_ns = current.window.count();
  for (const auto& [label, s] : current.series) {
    const Series* before = nullptr;
    if (previous) {
      auto it = previous->series.find(label);
      if (it != previous->series.end()) before = &it->second;
    }
    std::map<int, ProcessWindow> procs;
    auto proc = [&](int pid) -> ProcessWindow& {
      auto [it, fresh] = procs.try_emplace(pid);
      if (fresh) {
        it->second.cgroup = label;
        it->second.pid = pid;
      }
      return it->second;
    };
    std::map<std::pair<int, std::uint32_t>, const CallTotals*> old_calls;
    std::map<int, bool> seen_before;
    if (before) {
      for (const auto& pc : before->processes) {
        old_calls[{pc.pid, pc.call_id}] = &pc.totals;
        seen_before[pc.pid] = true;
      }
    }
    for (const auto& pc : s.processes) {
      auto it = old_calls.find({pc.pid, pc.call_id});
      CallTotals d = delta(pc.totals, it == old_calls.end() ? nullptr : it->second);
      if (d.count == 0 && d.sum_ns == 0) continue;
      ProcessWindow& p = proc(pc.pid);
      p.calls[pc.call_id] = d;
    }
    for (const auto& [pid, info] : s.process_info) {
      const ProcessInfo* old = nullptr;
      if (before) {
        auto it = before->process_info.find(pid);
        if (it != before->process_info.end()) old = &it->second;
      }
      OffcpuTotals d = delta(info.offcpu, old ? &old->offcpu : nullptr);
      if (!procs.count(pid) && d.runnable_ns + d.blocked_ns + d.oncpu_ns == 0) continue;
      proc(pid).offcpu = d;
    }
    std::map<std::pair<int, int>, const Preemptor*> old_pre;
    if (before) {
      for (const auto& p : before->preemptors) old_pre[{p.victim_pid, p.pid}] = &p;
    }
    for (const auto& pre : s.preemptors) {
      auto it = old_pre.find({pre.victim_pid, pre.pid});
      Preemptor d = pre;
      if (it != old_pre.end() && pre.runnable_ns >= it->second->runnable_ns) {
        d.runnable_ns -= it->second->runnable_ns;
        d.count = sub(pre.count, it->second->count);
      }
      if (d.runnable_ns == 0) continue;
      auto pit = procs.find(pre.victim_pid);
      if (pit == procs.end()) continue;  // victim idle this window
      pit->second.preemptors.push_back(std::move(d));
    }
    for (auto& [pid, p] : procs) {
      auto it = s.process_info.find(pid);
      if (it != s.process_info.end()) {
        p.comm = it->second.comm;
        p.start_ns = it->second.start_ns;
      }
      p.first_seen = !seen_before.count(pid);
      std::sort(p.preemptors.begin(), p.preemptors.end(),
                [](const Preemptor& a, const Preemptor& b) {
                  return a.runnable_ns != b.runnable_ns ? a.runnable_ns > b.runnable_ns : a.pid < b.pid;
                });
      v.processes.push_back(std::move(p));
    }
  }
  return v;
}

}  // namespace stallwatch::chains
