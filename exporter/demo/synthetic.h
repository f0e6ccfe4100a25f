// A synthetic host for `stallwatch demo` and the chain unit tests: processes in cgroups that
// make CUDA and NCCL calls, get preempted and go off-CPU, reclaim memory, get OOM-killed, submit
// block I/O and retransmit TCP segments, accumulated exactly as the kernel side would
// (cumulative log2 histograms, per-process off-CPU, preemptors, per-cgroup counters), turned
// into the same Snapshot the collector builds. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chains/outliers.h"
#include "trace/snapshot.h"

namespace stallwatch::demo {

// One batch of calls of one kind in a window.
struct CallMix {
  std::string_view call;        // a name from trace/calls.cpp, e.g. "cudaStreamSynchronize"
  std::uint64_t count = 0;
  std::uint64_t typical_ns = 0;  // most calls take this long
  std::uint64_t tail_ns = 0;     // the slow ones (0: none)
  double tail_share = 0;         // share of calls that are slow
  double runnable_share = 0;     // share of the call time spent runnable off-CPU
  double blocked_share = 0;      // share of the call time spent blocked off-CPU
};

// One batch of block requests of one process on one device.
struct IoMix {
  std::string device;  // kernel name, e.g. "nvme0n1", "sdb"
  std::string op = "read";
  std::uint64_t count = 0;
  std::uint64_t bytes_each = 0;
  std::uint64_t typical_ns = 0;  // most requests take this long, submission to completion
  std::uint64_t tail_ns = 0;     // the slow ones (0: none)
  double tail_share = 0;
};

// One batch of NCCL ops of one rank (also counted as calls, as the kernel side does).
struct NcclMix {
  std::string_view op;  // e.g. "ncclAllReduce"
  int rank = -1;
  int world_size = -1;
  std::uint64_t count = 0;
  std::uint64_t bytes_each = 0;
  std::uint64_t typical_ns = 0;
  std::uint64_t tail_ns = 0;
  double tail_share = 0;
  double runnable_share = 0;  // of the op time, off-CPU waiting for a CPU
  double blocked_share = 0;   // of the op time, off-CPU sleeping
};

class SyntheticHost {
 public:
  using Renamer = std::function<std::string(const std::string&)>;
  // Every cgroup path and comm handed to the methods below goes through these first (the tests
  // of issue #35 give each rule hostile host strings this way); unset, names stay as given.
  void rename_with(Renamer cgroup, Renamer comm) {
    rename_cgroup_ = std::move(cgroup);
    rename_comm_ = std::move(comm);
  }

  void add_process(const std::string& cgroup, int pid, const std::string& comm,
                   std::int64_t start_ns);
  void exit_process(int pid);
  bool has_process(int pid) const { return procs_.count(pid) > 0; }

  void calls(int pid, const CallMix& mix);
  void offcpu(int pid, std::uint64_t runnable_ns, std::uint64_t blocked_ns, std::uint64_t oncpu_ns,
              std::uint64_t preemptions);
  // This window's per-CPU time taken by the hypervisor and interrupts (the next snapshot's).
  void cpu_stolen(std::vector<host::CpuStolen> cpus) { stolen_ = std::move(cpus); }
  // `ppid` is the preemptor's parent (the victim's pid for its DataLoader workers);
  // `kernel_thread` marks ksoftirqd, kworker and the like.
  void preempted_by(int victim, int pid, const std::string& comm, const std::string& cgroup,
                    std::uint64_t runnable_ns, std::uint64_t count, int ppid = 0,
                    bool kernel_thread = false);
  // GPU memory of `pid` through allocating `call` this window: bytes handed out, bytes of them
  // freed, and out-of-memory returns (of `failed_bytes` each).
  void memory(int pid, std::string_view call, std::uint64_t allocated, std::uint64_t freed,
              std::uint64_t failures = 0, std::uint64_t failed_bytes = 0);
  // NCCL ops of a CUDA process (`pid` from add_process).
  void nccl(int pid, const NcclMix& mix);
  // A call of `pid` named `call` still open at the end of this window (cleared after the next
  // snapshot); `open` gives the rest (call_id is set from the name).
  void inflight(int pid, std::string_view call, const InflightCall& open);
  // Block I/O submitted by any process of `cgroup` (a DataLoader worker need not issue CUDA).
  void io(const std::string& cgroup, int pid, const std::string& comm, const IoMix& mix);
  // Reclaim by the cgroup's tasks; `cuda_ns` is the part of it spent by CUDA-issuing threads.
  void reclaim(const std::string& cgroup, std::uint64_t direct_ns, std::uint64_t memcg_ns,
               std::uint64_t cuda_ns, std::uint64_t reclaims);
  // The OOM killer kills `pid` of `cgroup`; a CUDA process (add_process) exits with it.
  void oom_kill(const std::string& cgroup, int pid, const std::string& comm, std::int64_t at_ns);
  // Adds stall time to the cgroup's PSI (and makes it known).
  void pressure(const std::string& cgroup, const PressureTotals& add);
  void retransmits(const std::string& cgroup, std::uint64_t ipv4, std::uint64_t ipv6);
  // The cgroup's CPU limit (cores = quota / period at `limited_at`, a cgroup v2 cpu.max) and
  // this window's periods and throttling, added to its cpu.stat counters.
  void cpu_limit(const std::string& cgroup, double cores, std::uint64_t periods,
                 std::uint64_t throttled_periods, std::uint64_t throttled_ns);

  // A GPU as NVML would read it this window (index, ids, clocks, reasons, temperature, power,
  // compute processes: `state.last`'s fields), its SM clock held down `held_share` of the
  // window by `state.last.reasons` at `state.last.sm_clock_mhz`; added to its totals.
  void gpu(const host::GpuReading& reading, double held_share, std::int64_t window_ns);
  // An Xid the driver logged on GPU `gpu` (its PCI address from gpu()) at `at_ns` (unix).
  void xid(unsigned gpu, int code, const std::string& text, std::int64_t at_ns, int pid = 0);
  // The cumulative snapshot at `taken`, covering the window just ended. As the collector's, it
  // carries no window ratios: the window step (chains/window.h) computes them.
  std::shared_ptr<Snapshot> snapshot(std::chrono::system_clock::time_point taken,
                                     std::chrono::nanoseconds window);
  // Outlier records of the slow calls since the last drain (as the ring buffer would send).
  // Each (process, call) with slow calls gets a synthetic call site (a training script's line,
  // chosen by the call's class), as SiteResolver would name a real one.
  chains::OutlierWindow drain_outliers();

 private:
  Renamer rename_cgroup_, rename_comm_;
  std::vector<host::CpuStolen> stolen_;
  host::GpuSnapshot gpus_;
  struct Proc {
    std::string cgroup;
    std::string comm;
    std::int64_t start_ns = 0;
    std::map<std::uint32_t, CallTotals> calls;
    OffcpuTotals offcpu;
    std::map<int, Preemptor> preemptors;  // by preemptor pid
    std::map<NcclKey, NcclTotals> nccl;
    std::vector<InflightCall> inflight;  // this window's
  };
  struct IoProc {
    std::string cgroup;
    std::string comm;
    std::map<IoKey, IoTotals> io;
  };
  // Per-cgroup counters, and what exited processes left in them (the kernel's maps keep it).
  // Per cgroup: the kernel's per-cgroup counters (reclaim, OOM kills, retransmits) and what
  // exited processes left in it, as the collector keeps them (trace/snapshot.h SeriesTotals).
  struct Cgroup {
    SeriesTotals totals;
    PressureTotals pressure;
    host::CpuLimitTotals cpu_limit;
  };

  std::map<int, Proc> procs_;
  std::map<int, IoProc> io_procs_;
  std::map<std::string, Cgroup> cgroups_;
  chains::OutlierSink outliers_{256};
  // Outliers this window per (pid, call id): count and stalled time, for drain_outliers' sites.
  std::map<std::pair<int, std::uint32_t>, std::pair<std::uint64_t, std::uint64_t>> slow_;
  std::uint64_t sequence_ = 0;
};

}  // namespace stallwatch::demo
