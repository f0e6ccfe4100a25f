#include "chains/window.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <set>
#include <tuple>

#include "chains/call_classes.h"
#include "trace/histogram.h"

namespace stallwatch::chains {
namespace {

// The window's deltas of a map of totals, keeping the keys active in the window.
template <typename K, typename T>
std::map<K, T> active_deltas(const std::map<K, T>& now, const std::map<K, T>* before) {
  std::map<K, T> out;
  for (const auto& [key, t] : now) {
    const T* old = nullptr;
    if (before) {
      auto it = before->find(key);
      if (it != before->end()) old = &it->second;
    }
    T d = delta(t, old);
    if (d.count > 0) out.emplace(key, d);
  }
  return out;
}

const Series* find_series(const Snapshot* snap, const std::string& label) {
  if (!snap) return nullptr;
  auto it = snap->series.find(label);
  return it == snap->series.end() ? nullptr : &it->second;
}

// The series' host evidence; `procs` are its CUDA processes of this window.
SeriesWindow series_window(const std::string& label, const Series& s, const Series* before,
                           const std::map<int, ProcessWindow>& procs) {
  SeriesWindow w;
  w.cgroup = label;
  // Off-CPU ratios of the CUDA-issuing threads. Starvation is their blocked time less the
  // blocked time inside calls, which can exceed it within one window (the two are counted at
  // different moments): then none of it is outside.
  const OffcpuTotals off = delta(s.offcpu, before ? &before->offcpu : nullptr);
  std::uint64_t in_calls = 0, in_calls_before = 0;
  for (const auto& [call, t] : s.calls) in_calls += t.blocked_ns;
  if (before) {
    for (const auto& [call, t] : before->calls) in_calls_before += t.blocked_ns;
  }
  const std::uint64_t blocked_in_calls = counter_delta(in_calls, in_calls_before);
  const std::uint64_t outside =
      off.blocked_ns > blocked_in_calls ? off.blocked_ns - blocked_in_calls : 0;
  const std::uint64_t wall = off.runnable_ns + off.blocked_ns + off.oncpu_ns;
  if (wall > 0) {
    const auto whole = static_cast<double>(wall);
    w.runnable_ratio = static_cast<double>(off.runnable_ns) / whole;
    w.blocked_ratio = static_cast<double>(off.blocked_ns) / whole;
    w.starvation_ratio = static_cast<double>(outside) / whole;
  }
  w.reclaim = delta(s.reclaim, before ? &before->reclaim : nullptr);
  w.oom_kills = counter_delta(s.oom_kills, before ? before->oom_kills : 0);
  w.oom_kills_cuda = counter_delta(s.oom_kills_cuda, before ? before->oom_kills_cuda : 0);
  std::set<std::tuple<int, std::int64_t>> known_victims;
  if (before) {
    for (const auto& v : before->oom_victims) known_victims.insert({v.pid, v.at_ns});
  }
  for (const auto& v : s.oom_victims) {
    if (!known_victims.count({v.pid, v.at_ns})) w.new_oom_victims.push_back(v);
  }
  // Cumulative pressure covers the cgroup's whole life: without a previous value there is no
  // window to speak of.
  w.pressure = delta(s.pressure, before ? &before->pressure : nullptr);
  if (!before) w.pressure = PressureTotals{};
  // The CPU limit as it is now, with the window's throttling; known only when both snapshots
  // read it.
  if (before && s.cpu_limit.known && before->cpu_limit.known) {
    const host::CpuLimitTotals& b = before->cpu_limit;
    w.cpu_limit = s.cpu_limit;
    w.cpu_limit.periods = counter_delta(s.cpu_limit.periods, b.periods);
    w.cpu_limit.throttled_periods = counter_delta(s.cpu_limit.throttled_periods, b.throttled_periods);
    w.cpu_limit.throttled_ns = counter_delta(s.cpu_limit.throttled_ns, b.throttled_ns);
  }
  w.io = active_deltas(s.io, before ? &before->io : nullptr);
  std::map<std::pair<int, IoKey>, const IoTotals*> old_io;
  if (before) {
    for (const auto& p : before->io_processes) old_io[{p.pid, p.key}] = &p.totals;
  }
  for (const auto& p : s.io_processes) {
    auto it = old_io.find({p.pid, p.key});
    IoTotals d = delta(p.totals, it == old_io.end() ? nullptr : it->second);
    if (d.count == 0) continue;
    w.io_processes.push_back(ProcessIo{p.pid, p.comm, p.key, d});
  }
  w.retransmits_ipv4 =
      counter_delta(s.tcp_retransmits_ipv4, before ? before->tcp_retransmits_ipv4 : 0);
  w.retransmits_ipv6 =
      counter_delta(s.tcp_retransmits_ipv6, before ? before->tcp_retransmits_ipv6 : 0);
  w.nccl = active_deltas(s.nccl, before ? &before->nccl : nullptr);
  for (const auto& [pid, p] : procs) {
    for (const auto& [id, t] : p.calls) {
      if (is_sync_call(id)) w.sync.add(t);
    }
  }
  return w;
}

}  // namespace

double probe_pair_seconds(const Snapshot& snap, std::uint32_t call_id) {
  const trace::TrapCost& emulated = snap.trap_cost_emulated;
  const trace::TrapCost& stepped = snap.trap_cost_stepped;
  if (!emulated.measured && !stepped.measured) return 0;
  // A class the start could not price costs what the other one does.
  const double emulated_pair = emulated.measured ? emulated.entry_seconds + emulated.return_seconds
                                                 : stepped.entry_seconds + stepped.return_seconds;
  const double stepped_pair = stepped.measured ? stepped.entry_seconds + stepped.return_seconds
                                               : emulated_pair;
  const bool is_stepped = call_id < snap.stepped_calls.size() && snap.stepped_calls[call_id];
  return is_stepped ? stepped_pair : emulated_pair;
}

bool is_cycled_call(std::uint32_t call_id) {
  const auto calls = trace::all_calls();
  return call_id < calls.size() && calls[call_id].kernel_launch;
}

double probe_cost_ratio(const Snapshot& snap, const std::map<int, ProcessWindow>& procs) {
  if (!snap.trap_cost_emulated.measured && !snap.trap_cost_stepped.measured) return 0;
  double cost = 0, cpu = 0;
  for (const auto& [pid, p] : procs) {
    cpu += static_cast<double>(p.offcpu.oncpu_ns) * 1e-9;
    for (const auto& [id, t] : p.calls) {
      cost += static_cast<double>(t.count) * probe_pair_seconds(snap, id);
    }
  }
  // The traps run on the calling thread's CPU time: the share cannot pass 1 but for the
  // estimate's own error.
  return cpu > 0 ? std::min(1.0, cost / cpu) : 0;
}

std::uint64_t ProcessWindow::cuda_ns() const {
  std::uint64_t sum = 0;
  for (const auto& [id, t] : calls) sum += t.sum_ns;
  return sum;
}

std::uint64_t MemoryWindow::live_total() const {
  std::uint64_t sum = 0;
  for (auto b : live) sum += b;
  return sum;
}

IoTotals SeriesWindow::io_total() const {
  IoTotals all;
  for (const auto& [key, t] : io) all.add(t);
  return all;
}

// Both maps are ordered by label: one merge pass, no lookups.
void set_window_ratios(Snapshot& snap, const WindowView& view) {
  auto w = view.series.begin();
  for (auto& [label, s] : snap.series) {
    while (w != view.series.end() && w->first < label) ++w;
    if (w == view.series.end()) break;
    if (w->first != label) continue;
    s.runnable_ratio = w->second.runnable_ratio;
    s.blocked_ratio = w->second.blocked_ratio;
    s.starvation_ratio = w->second.starvation_ratio;
    s.probe_cost_ratio = w->second.probe_cost_ratio;
    s.launch_duty = w->second.launch_duty;
  }
}

namespace {

// The GPUs' window: each GPU's cumulative totals less the previous snapshot's (by index; a GPU
// that was not there before counts from zero), and the Xid errors read since.
void gpu_window(const Snapshot* previous, const Snapshot& current, WindowView& v) {
  const host::GpuSnapshot& now = current.gpu;
  v.process_gpus = now.process_gpus;
  const std::uint64_t last_seq = previous && !previous->gpu.xids.empty()
                                     ? previous->gpu.xids.back().seq
                                     : 0;
  for (const auto& x : now.xids) {
    if (x.seq > last_seq) v.new_xids.push_back(x);
  }
  if (now.stale) return;
  for (size_t i = 0; i < now.gpus.size(); ++i) {
    const host::GpuTotals& t = now.gpus[i];
    const host::GpuTotals* b =
        previous && i < previous->gpu.gpus.size() ? &previous->gpu.gpus[i] : nullptr;
    GpuWindow w;
    w.last = t.last;
    w.lost_since_ns = t.lost ? t.lost_since_ns : 0;
    w.sampled_ns = counter_delta(t.sampled_ns, b ? b->sampled_ns : 0);
    w.held_ns = counter_delta(t.held_ns, b ? b->held_ns : 0);
    for (size_t k = 0; k < w.reason_ns.size(); ++k) {
      w.reason_ns[k] = counter_delta(t.reason_ns[k], b ? b->reason_ns[k] : 0);
    }
    const double clock_ns = t.held_clock_mhz_ns - (b ? b->held_clock_mhz_ns : 0);
    if (w.held_ns > 0 && clock_ns > 0) w.held_clock_mhz = clock_ns / static_cast<double>(w.held_ns);
    v.gpus.push_back(std::move(w));
  }
}

}  // namespace

namespace {

// The share of the window `pid`'s launch probes were attached: 1 less the off time the
// discovery reported since the previous snapshot, over the window. At least 1 % (the budget
// never cycles below 5 %; a share under that is the two clocks' disagreement).
double launch_duty(const Snapshot* previous, const Snapshot& current, int pid) {
  auto now = current.launch_off_ns.find(pid);
  if (now == current.launch_off_ns.end() || current.window.count() <= 0) return 1;
  std::uint64_t before = 0;
  if (previous) {
    if (auto it = previous->launch_off_ns.find(pid); it != previous->launch_off_ns.end()) {
      before = it->second;
    }
  }
  const double off = static_cast<double>(counter_delta(now->second, before));
  return std::clamp(1 - off / static_cast<double>(current.window.count()), 0.01, 1.0);
}

// A call's window totals times `factor` (rounded): counts and times, not the longest call.
CallTotals scaled(const CallTotals& t, double factor) {
  auto x = [factor](std::uint64_t v) {
    return static_cast<std::uint64_t>(std::llround(static_cast<double>(v) * factor));
  };
  CallTotals out = t;
  out.count = 0;
  for (auto& b : out.buckets) {
    b = x(b);
    out.count += b;
  }
  out.sum_ns = x(t.sum_ns);
  out.runnable_ns = x(t.runnable_ns);
  out.blocked_ns = x(t.blocked_ns);
  return out;
}

}  // namespace

WindowView diff_windows(const Snapshot* previous, const Snapshot& current) {
  WindowView v;
  v.end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 current.taken.time_since_epoch())
                 .count();
  v.window_ns = current.window.count();
  // Every series, and the labels of processes that exited with their cgroup (no series left):
  // their last window still has process rows (trace::ExitedProcesses).
  static const Series kNoSeries;
  static const ExitedProcesses kNoneExited;
  std::set<std::string> labels;
  for (const auto& [label, s] : current.series) labels.insert(label);
  for (const auto& [label, e] : current.exited) labels.insert(label);
  for (const std::string& label : labels) {
    const auto found = current.series.find(label);
    const bool in_series = found != current.series.end();
    const Series& s = in_series ? found->second : kNoSeries;
    const auto ended = current.exited.find(label);
    const ExitedProcesses& gone = ended != current.exited.end() ? ended->second : kNoneExited;
    const Series* before = find_series(previous, label);
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
    std::map<int, MemoryWindow> memory;
    std::map<int, std::uint64_t> worst_failures;
    auto each_call = [&](auto&& fn) {
      for (const auto& pc : s.processes) fn(pc);
      for (const auto& pc : gone.calls) fn(pc);
    };
    each_call([&](const ProcessCall& pc) {
      auto it = old_calls.find({pc.pid, pc.call_id});
      CallTotals d = delta(pc.totals, it == old_calls.end() ? nullptr : it->second);
      if (trace::is_allocating_call(pc.call_id)) {
        MemoryWindow& m = memory[pc.pid];
        m.allocated += d.alloc_bytes;
        m.freed += d.freed_bytes;
        m.failures += d.alloc_failures;
        // An exited process's last window keeps what it held at its end (the rules read its
        // growth up to there; the memory itself went with it).
        m.live[static_cast<size_t>(trace::mem_kind(pc.call_id))] += pc.totals.live_bytes();
        if (d.alloc_failures > 0) {
          m.failed_bytes = std::max(m.failed_bytes, d.failed_bytes);
          if (d.alloc_failures > worst_failures[pc.pid]) {
            worst_failures[pc.pid] = d.alloc_failures;
            m.failed_call = pc.call_id;
          }
        }
      }
      if (d.count == 0 && d.sum_ns == 0) return;
      ProcessWindow& p = proc(pc.pid);
      p.calls[pc.call_id] = d;
    });
    for (auto& [pid, m] : memory) {
      auto pit = procs.find(pid);
      if (pit != procs.end()) pit->second.memory = m;
    }
    std::map<std::pair<int, NcclKey>, const NcclTotals*> old_nccl;
    if (before) {
      for (const auto& pn : before->nccl_processes) old_nccl[{pn.pid, pn.key}] = &pn.totals;
    }
    for (const auto& pn : s.nccl_processes) {
      auto it = old_nccl.find({pn.pid, pn.key});
      NcclTotals d = delta(pn.totals, it == old_nccl.end() ? nullptr : it->second);
      if (d.count == 0) continue;
      proc(pn.pid).nccl[pn.key].add(d);  // an NCCL process issues CUDA work: it belongs here
    }
    auto info_of = [&](int pid) -> const ProcessInfo* {
      if (auto it = s.process_info.find(pid); it != s.process_info.end()) return &it->second;
      if (auto it = gone.info.find(pid); it != gone.info.end()) return &it->second;
      return nullptr;
    };
    for (const auto* infos : {&s.process_info, &gone.info}) {
      for (const auto& [pid, info] : *infos) {
        const ProcessInfo* old = nullptr;
        if (before) {
          auto it = before->process_info.find(pid);
          if (it != before->process_info.end()) old = &it->second;
        }
        OffcpuTotals d = delta(info.offcpu, old ? &old->offcpu : nullptr);
        if (!procs.count(pid) && d.runnable_ns + d.blocked_ns + d.oncpu_ns == 0) continue;
        proc(pid).offcpu = d;
      }
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
        d.count = counter_delta(pre.count, it->second->count);
      }
      if (d.runnable_ns == 0) continue;
      auto pit = procs.find(pre.victim_pid);
      if (pit == procs.end()) continue;  // victim idle this window
      pit->second.preemptors.push_back(std::move(d));
    }
    // Processes that exited: their rows go to the store (v.ended), never to the rules.
    for (auto it = procs.begin(); it != procs.end();) {
      if (s.process_info.count(it->first) || !gone.info.count(it->first)) {
        ++it;
        continue;
      }
      ProcessWindow& p = it->second;
      if (const ProcessInfo* info = info_of(it->first)) {
        p.comm = info->comm;
        p.start_ns = info->start_ns;
      }
      p.first_seen = !seen_before.count(it->first);
      v.ended.push_back(std::move(p));
      it = procs.erase(it);
    }
    if (!in_series) continue;  // the cgroup went with its processes: their rows only
    SeriesWindow sw = series_window(label, s, before, procs);
    // What the traps cost as they fired, then the launches of cycled processes scaled to
    // estimates of all of them (the rules, the store and the budget read those).
    sw.probe_cost_ratio = probe_cost_ratio(current, procs);
    for (auto& [pid, p] : procs) {
      p.launch_duty = launch_duty(previous, current, pid);
      if (p.launch_duty >= 1) continue;
      sw.launch_duty = std::min(sw.launch_duty, p.launch_duty);
      for (auto& [id, t] : p.calls) {
        if (is_cycled_call(id)) t = scaled(t, 1 / p.launch_duty);
      }
    }
    sw.probe_cost_unbudgeted_ratio =
        sw.launch_duty < 1 ? probe_cost_ratio(current, procs) : sw.probe_cost_ratio;
    // I/O of the CUDA processes themselves; other submitters (DataLoader workers) are only in
    // the series' list, so the per-process tables keep holding CUDA-issuing processes.
    for (const auto& pio : sw.io_processes) {
      auto pit = procs.find(pio.pid);
      if (pit != procs.end()) pit->second.io[pio.key].add(pio.totals);
    }
    v.series.emplace(label, std::move(sw));
    for (auto& [pid, p] : procs) {
      if (const ProcessInfo* info = info_of(pid)) {
        p.comm = info->comm;
        p.start_ns = info->start_ns;
        p.cpus = info->cpus;
      }
      p.first_seen = !seen_before.count(pid);
      std::sort(p.preemptors.begin(), p.preemptors.end(),
                [](const Preemptor& a, const Preemptor& b) {
                  return a.runnable_ns != b.runnable_ns ? a.runnable_ns > b.runnable_ns : a.pid < b.pid;
                });
      v.processes.push_back(std::move(p));
    }
  }
  gpu_window(previous, current, v);
  return v;
}

}  // namespace stallwatch::chains
