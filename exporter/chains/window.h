// One window's activity per process and per series: the difference of two consecutive cumulative
// snapshots. The chain engine decides from it and the store writes it, so both see the same
// numbers. Pure; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trace/calls.h"
#include "trace/snapshot.h"

namespace stallwatch::chains {

// GPU memory of a process in the window (trace/calls.h memory calls).
struct MemoryWindow {
  std::uint64_t allocated = 0;     // bytes, this window
  std::uint64_t freed = 0;
  std::uint64_t failures = 0;      // out-of-memory returns, this window
  std::uint64_t failed_bytes = 0;  // the largest request that failed (when failures > 0)
  std::uint32_t failed_call = 0;   // the call that failed most (when failures > 0)
  std::array<std::uint64_t, trace::kMemKinds> live{};  // held at the window's end, by MemKind
  std::uint64_t live_total() const;
};

// A CUDA-issuing process of a series (it made CUDA or NCCL calls, or its CUDA threads ran).
struct ProcessWindow {
  std::string cgroup;  // the series label
  int pid = 0;
  std::string comm;
  std::int64_t start_ns = 0;
  std::vector<int> cpus;                       // CPUs it may run on; empty when unknown
  bool first_seen = false;                     // not in the previous snapshot
  std::map<std::uint32_t, CallTotals> calls;   // call id → this window's delta (count > 0)
  OffcpuTotals offcpu;                         // this window's delta
  std::vector<Preemptor> preemptors;           // this window's delta, worst first
  std::map<NcclKey, NcclTotals> nccl;          // NCCL ops by (op, rank, world size), count > 0
  std::map<IoKey, IoTotals> io;                // block I/O it submitted itself, count > 0
  MemoryWindow memory;                         // traced GPU memory
  // Share of the window its launch probes were attached (the cost budget cycles them; 1 when
  // not). `calls` holds its kernel launches scaled by 1 / launch_duty: estimates of all its
  // launches (the latency buckets keep their shape: the sample is taken in time, not by
  // latency).
  double launch_duty = 1;
  std::uint64_t cuda_ns() const;               // time inside CUDA calls this window
};

// The host-side evidence of one series (a cgroup) in the window.
struct SeriesWindow {
  std::string cgroup;
  // Shares of the CUDA-issuing threads' wall time in the window: runnable, blocked, and blocked
  // outside any CUDA call (the GPU starving between steps). 0 without thread time.
  double runnable_ratio = 0;
  double blocked_ratio = 0;
  double starvation_ratio = 0;
  // Estimated share of the CUDA-issuing threads' on-CPU time spent in stallwatch's probes:
  // each call times its site class's measured entry + return cost (trace/probe_cost.h), over
  // their on-CPU time. 0 when the cost was not measured or the threads did not run.
  double probe_cost_ratio = 0;
  // The same share had every launch trapped (the launch counts scaled back up): what the
  // workload would pay without the cost budget, which decides its duty (chains/budget.h).
  double probe_cost_unbudgeted_ratio = 0;
  double launch_duty = 1;  // the least ProcessWindow::launch_duty of its processes
  ReclaimTotals reclaim;                   // this window's delta
  std::uint64_t oom_kills = 0;             // this window's delta, all processes
  std::uint64_t oom_kills_cuda = 0;        // of which CUDA-issuing
  std::vector<OomKill> new_oom_victims;    // victims listed now and not before, oldest first
  PressureTotals pressure;                 // delta; known only when both snapshots knew it
  // The CPU limit as now, its periods and throttling as this window's delta; known only when
  // both snapshots knew it (host/cpu_limit.h).
  host::CpuLimitTotals cpu_limit;
  std::map<IoKey, IoTotals> io;            // this window's delta, count > 0
  std::vector<ProcessIo> io_processes;     // delta per (pid, device, op), count > 0; any process
  std::uint64_t retransmits_ipv4 = 0;      // delta
  std::uint64_t retransmits_ipv6 = 0;
  std::map<NcclKey, NcclTotals> nccl;      // this window's delta, count > 0
  CallTotals sync;  // the CUDA processes' synchronisation calls (rules.h), merged

  std::uint64_t retransmits() const { return retransmits_ipv4 + retransmits_ipv6; }
  IoTotals io_total() const;  // all devices and ops merged
};

// One GPU in the window (host/gpu_monitor.h): the time its SM clock was held down, by reason.
struct GpuWindow {
  host::GpuReading last;         // its latest reading
  std::uint64_t sampled_ns = 0;  // time the window's samples cover
  std::uint64_t held_ns = 0;     // of which with the SM clock held down
  std::array<std::uint64_t, host::kClockReasons.size()> reason_ns{};  // kClockReasons order
  double held_clock_mhz = 0;     // the mean SM clock while held; 0 when never held
  std::int64_t lost_since_ns = 0;  // unix time NVML first called it lost; 0 while it answers
  double held_share() const {
    return sampled_ns ? static_cast<double>(held_ns) / static_cast<double>(sampled_ns) : 0;
  }
};

struct WindowView {
  std::int64_t end_ns = 0;     // unix time the window ended
  std::int64_t window_ns = 0;  // its length
  std::vector<ProcessWindow> processes;  // by (cgroup, pid); only processes active this window
  // Processes that exited since the last window: their last rows, for the store only (the rules
  // never judge a window a process ended in, as before the store kept them).
  std::vector<ProcessWindow> ended;
  std::map<std::string, SeriesWindow> series;  // by cgroup label; every series of the snapshot
  // The GPUs (by NVML index; empty without NVML, or while its readings are stale), the Xid
  // errors logged this window, and which GPUs each CUDA process uses.
  std::vector<GpuWindow> gpus;
  std::vector<host::XidEvent> new_xids;
  std::map<int, std::vector<unsigned>> process_gpus;
};

// `previous` may be null (the first window: everything cumulative counts as this window,
// except pressure, which is unknown until two snapshots had it).
WindowView diff_windows(const Snapshot* previous, const Snapshot& current);

// SeriesWindow::probe_cost_ratio of the processes of one series: the snapshot carries the
// measured costs and which calls sit on single-stepped sites.
double probe_cost_ratio(const Snapshot& snap, const std::map<int, ProcessWindow>& procs);
// What one call's probe pair costs here: its site class's measured entry + return (a class
// the start could not price costs what the other does); 0 when nothing was measured.
double probe_pair_seconds(const Snapshot& snap, std::uint32_t call_id);
// Whether a call is a kernel launch: the probes the cost budget may cycle.
bool is_cycled_call(std::uint32_t call_id);

// The totals' window arithmetic (trace/snapshot.h), also under this namespace.
using ::stallwatch::counter_delta;
using ::stallwatch::delta;

// Copies each series' window ratios (runnable, blocked, starvation) from `view` into `snap`,
// the gauges /metrics and OTLP export: the window step computes them, once, for `run` and
// `demo` alike.
void set_window_ratios(Snapshot& snap, const WindowView& view);

}  // namespace stallwatch::chains
