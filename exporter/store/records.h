// What one window gives the store: the batch the writer thread commits in one transaction.
// Built by the run loop (or the demo) from the window view, the chain engine's changes, the
// outlier records and the host context. Plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chains/chain.h"
#include "chains/window.h"
#include "host/host_sampler.h"
#include "identity/cgroup_identity.h"
#include "store/nccl_waits.h"

namespace stallwatch::store {

using HostContext = host::HostContext;

// One outlier record of the ring buffer, with names resolved.
struct Outlier {
  std::int64_t ts_ns = 0;  // unix time the call ended
  std::string cgroup;      // series label
  int pid = 0;
  int tid = 0;
  std::string comm;
  std::string call;
  std::string api;
  std::uint64_t duration_ns = 0;
  std::uint64_t runnable_ns = 0;
  std::uint64_t blocked_ns = 0;
  std::uint32_t preemptions = 0;
};

// A call still open at the end of the window (trace::InflightCall with names resolved).
struct Inflight {
  std::string cgroup;  // series label
  int pid = 0;
  int tid = 0;
  std::string thread;
  std::string call;
  std::string api;
  std::uint64_t age_ns = 0;
  std::uint64_t runnable_ns = 0;
  std::uint64_t blocked_ns = 0;
  std::uint32_t preemptions = 0;
  bool on_cpu = false;
  int rank = -1;  // NCCL; -1: none or unknown (stored as NULL)
  int world_size = -1;
};

// The outliers of one process, call and stack in a window (outlier_sites).
struct SiteRow {
  std::string cgroup;
  int pid = 0;
  std::string comm;
  std::string api;
  chains::CallSite site;  // share unused
};

// One GPU over one window (gpu_windows), as the window view saw it (chains/window.h): context
// for explain. Strings come escaped from the GPU monitor. -1: not read.
struct GpuRow {
  unsigned gpu = 0;  // NVML index
  std::string uuid;
  std::string name;
  int sm_clock_mhz = -1;  // the window's latest reading
  int sm_clock_max_mhz = -1;
  double held_share = 0;       // of the sampled time, clock held down (host::held_reasons)
  double held_clock_mhz = -1;  // mean SM clock while held
  std::string top_reason;      // kClockReasons name that held it longest; "" when never held
  double top_reason_share = 0;
  int temperature_c = -1;
  double power_w = -1;
  double power_limit_w = -1;
  std::vector<int> xid_codes;      // Xid errors read this window on this GPU, in order
  std::int64_t lost_since_ns = 0;  // unix time it was first seen lost; 0 while it answers
};

// What stallwatch's own probes cost in one window (windows.probe_*): -1 when not known.
struct ProbeCostRow {
  double pair_emulated_s = -1;  // a probe pair on a site the kernel emulates, measured at start
  double pair_stepped_s = -1;   // on a single-stepped site
  double workload_max = -1;     // the largest SeriesWindow::probe_cost_ratio of the window
};

struct WindowBatch {
  std::int64_t end_ns = 0;  // unix time the window ended: the rows' ts_ns
  std::int64_t window_ns = 0;
  HostContext host;
  std::vector<identity::Identity> cgroups;       // series seen this window
  std::vector<chains::ProcessWindow> processes;  // this window's deltas (window.h)
  std::vector<Outlier> outliers;                 // worst first, bounded by the caller
  std::vector<chains::Chain> chains;             // opened, updated or closed this window
  std::vector<Inflight> inflight;                // calls open at the window's end
  std::vector<SiteRow> sites;                    // call sites of the window's outliers
  std::vector<GpuRow> gpus;                      // empty without NVML
  std::vector<NcclMemberRow> nccl;               // communicator members' waits (nccl_waits.h)
  std::uint64_t nccl_dropped = 0;                // members left out for kMaxNcclMembers
  ProbeCostRow probe_cost;

  size_t rows() const;
};

}  // namespace stallwatch::store
