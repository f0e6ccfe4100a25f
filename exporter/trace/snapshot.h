// One window's view of everything traced: cumulative since the daemon started, immutable once
// published. The collector builds it; Prometheus, OTLP, the chain engine and the store read it.
// Share it as std::shared_ptr<const Snapshot>; readers never lock.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/cpu_limit.h"
#include "host/gpu_monitor.h"
#include "host/host_sampler.h"
#include "host/pressure.h"
#include "host/self_stats.h"
#include "identity/cgroup_identity.h"
#include "identity/kube_metadata.h"
#include "trace/histogram.h"
#include "trace/nccl_ranks.h"
#include "trace/probe_cost.h"
#include "trace/records.h"

namespace stallwatch {

using host::PressureTotals;   // host/pressure.h
using identity::KubeStats;     // identity/kube_metadata.h

// Cumulative statistics of one call in one series (a cgroup, or the overflow series).
struct CallTotals {
  std::uint64_t count = 0;
  std::uint64_t sum_ns = 0;
  std::uint64_t runnable_ns = 0;  // off-CPU inside the call, waiting for a CPU
  std::uint64_t blocked_ns = 0;   // off-CPU inside the call, sleeping
  std::uint64_t max_ns = 0;
  trace::KernelBuckets buckets{};
  // Memory calls (trace/calls.h MemOp): bytes this allocating call handed out, bytes of them
  // freed since (whichever call freed them), out-of-memory returns, and the size the latest
  // (after add(): the largest) of those asked for. Zero for other calls.
  std::uint64_t alloc_bytes = 0;
  std::uint64_t freed_bytes = 0;
  std::uint64_t alloc_failures = 0;
  std::uint64_t failed_bytes = 0;

  void add(const CallTotals& o);
  // Bytes still held: allocated less freed (0 if a reset made freed the larger).
  std::uint64_t live_bytes() const { return alloc_bytes > freed_bytes ? alloc_bytes - freed_bytes : 0; }
};

struct OffcpuTotals {
  std::uint64_t runnable_ns = 0;
  std::uint64_t blocked_ns = 0;
  std::uint64_t oncpu_ns = 0;
  std::uint64_t preemptions = 0;

  void add(const OffcpuTotals& o);
};

// A task that kept CUDA-issuing threads of a series off the CPU.
struct Preemptor {
  int victim_pid = 0;
  int pid = 0;          // the preempting process (thread group)
  std::string comm;     // its name as it is now (the thread-group leader's comm)
  std::string cgroup;   // the preemptor's cgroup path
  std::uint64_t runnable_ns = 0;
  std::uint64_t count = 0;
  // The name of its thread that took the most, when that differs from comm
  // ("pt_data_worker" in python3, "flb-pipeline" in fluent-bit); else empty.
  std::string thread;
  int ppid = 0;                // its parent process: the victim's own children are its workers
  bool kernel_thread = false;  // ksoftirqd, kworker, migration: no renice advice
  // Where it runs, from the levels of its cgroup the runtime owns: its pod's UID (another
  // container of the victim's pod, or another pod) and its systemd unit; empty when none.
  std::string pod_uid;
  std::string unit;
};

// Per process and call, for the chain engine and explain --per-process (not exported as
// metric labels: pids never become labels).
struct ProcessCall {
  int pid = 0;
  std::uint32_t call_id = 0;
  CallTotals totals;
  // The process exited before this pass: its final totals, here for the one window it ended in
  // (the series' totals hold them in its cgroup's retired totals; the memory it held is gone).
  bool exited = false;
};

// A CUDA-issuing process of a series (never a metric label: explain and the chain engine use it).
struct ProcessInfo {
  int pid = 0;
  std::string comm;
  std::int64_t start_ns = 0;  // unix time the process started; 0 when unknown
  OffcpuTotals offcpu;        // of its CUDA-issuing threads, cumulative
  std::vector<int> cpus;      // CPUs it may run on, read each window; empty when unknown
  std::uint32_t start_tag = 0;  // the BPF maps' key part (host::Procfs::start_tag); 0 unknown
  bool exited = false;          // its last window: the process is gone (ProcessCall::exited)
};

// ---- Host-side evidence (issue 4): memory, block I/O, network, NCCL. All cumulative. ----

// Time the series' tasks spent reclaiming memory (vmscan tracepoints).
struct ReclaimTotals {
  std::uint64_t direct_ns = 0;  // global direct reclaim (the node ran short)
  std::uint64_t direct_count = 0;
  std::uint64_t memcg_ns = 0;   // reclaim forced by the cgroup's own memory limit
  std::uint64_t memcg_count = 0;
  std::uint64_t cuda_ns = 0;    // part of the two above spent by CUDA-issuing threads

  void add(const ReclaimTotals& o);
};

// A process of the series killed by the OOM killer (oom/mark_victim).
struct OomKill {
  int pid = 0;
  std::string comm;
  bool cuda = false;          // it was a CUDA-issuing process
  std::int64_t at_ns = 0;     // unix time
};

// Block requests submitted by the series' tasks, from submission to completion.
struct IoKey {
  std::string device;  // kernel name, e.g. nvme0n1, vda, loop3; "MAJ:MIN" when unknown
  std::string op;      // read, write, flush, discard, other
  auto operator<=>(const IoKey&) const = default;
};

struct IoTotals {
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::uint64_t sum_ns = 0;
  std::uint64_t max_ns = 0;
  trace::KernelBuckets buckets{};

  void add(const IoTotals& o);
};

// Block I/O of one process of the series (explain and the chain engine name the submitter).
struct ProcessIo {
  int pid = 0;
  std::string comm;
  IoKey key;
  IoTotals totals;
};

// NCCL operations by op and the communicator's rank and size (-1: not learned yet).
struct NcclKey {
  std::uint32_t call_id = 0;  // trace/calls.h; the `op` label is the call's name
  int rank = -1;
  int world_size = -1;
  auto operator<=>(const NcclKey&) const = default;
};

struct NcclTotals {
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;  // count × element size as passed to the call
  std::uint64_t sum_ns = 0;
  std::uint64_t max_ns = 0;
  trace::KernelBuckets buckets{};

  void add(const NcclTotals& o);
};

struct ProcessNccl {
  int pid = 0;
  NcclKey key;
  NcclTotals totals;
};

// The cumulative, mergeable part of a series: what the evidence sources read from the kernel's
// maps, and what outlives a process (its retired map entries) or a vanished cgroup that shared
// the series' label. add() merges all of it; the collector retires through it, once.
// A call that has not returned, as the kernel held it at the end of the window (bpf/sched.h
// struct inflight_call): what hangs is seen while it hangs.
struct InflightCall {
  int pid = 0;
  int tid = 0;
  std::string thread;          // the thread's name, escaped (common/strings.h escape_name)
  std::uint32_t call_id = 0;   // trace/calls.h
  int depth = 0;               // 0: the thread's outermost open call
  std::uint64_t age_ns = 0;    // since its entry
  std::uint64_t runnable_ns = 0;  // off-CPU so far, waiting for a CPU
  std::uint64_t blocked_ns = 0;   // off-CPU so far, sleeping
  std::uint32_t preemptions = 0;
  bool on_cpu = false;         // the thread holds a CPU now
  int rank = -1;               // an NCCL op's rank and world size, when its communicator is known
  int world_size = -1;
};

// A communicator a CUDA process holds (bpf nccl_comms): which ranks of which world size live on
// this host, so a rank that never entered a collective its peers hang in can be named.
struct NcclMember {
  std::string cgroup;  // the series label
  int pid = 0;
  int rank = -1;
  int world_size = -1;
  std::uint64_t comm_hash = 0;  // NCCL's commHash (trace/nccl_ranks.h); 0 unknown
  trace::JobKeys job;           // from the process's environment, read once
};

struct SeriesTotals {
  std::map<std::uint32_t, CallTotals> calls;  // by call id (trace/calls.h)
  OffcpuTotals offcpu;
  ReclaimTotals reclaim;
  std::uint64_t oom_kills = 0;           // cumulative, CUDA-issuing and other processes
  std::uint64_t oom_kills_cuda = 0;      // of which CUDA-issuing
  std::vector<OomKill> oom_victims;      // the latest, at most kMaxOomVictims, oldest first
  std::map<IoKey, IoTotals> io;
  std::uint64_t tcp_retransmits_ipv4 = 0;
  std::uint64_t tcp_retransmits_ipv6 = 0;
  std::map<NcclKey, NcclTotals> nccl;

  void add(const SeriesTotals& o);  // victims are appended (the holder sorts and bounds them)
  // Nothing that gives a series of its own (off-CPU time alone does not: it comes with calls).
  bool empty() const;
};

inline constexpr size_t kMaxOomVictims = 16;

// A process that exited during the window after CUDA allocations of it returned out of memory
// (an uncaught torch.cuda.OutOfMemoryError ends the process before the next window sees it).
struct ExitedAllocFailure {
  int pid = 0;
  std::string comm;
  std::uint32_t call_id = 0;       // trace/calls.h
  std::uint64_t failures = 0;      // over the process's life
  std::uint64_t failed_bytes = 0;  // what the latest failure asked for
};

// Everything about one exported series of workloads (one cgroup, or the overflow fold): the
// sources' cumulative totals, and what is known of the live processes now.
struct Series : SeriesTotals {
  identity::Identity identity;        // identity.cgroup is the `cgroup` label
  // The cgroup's directory under the cgroup2 mount, as the kernel names it (the label escapes
  // and bounds it); "" for the overflow series or a path too long to open by name.
  std::string cgroup_dir;
  // Window ratios (window.h computes them; the pipeline fills them before publishing).
  double runnable_ratio = 0;  // share of the CUDA-issuing threads' time spent runnable, last window
  double blocked_ratio = 0;
  // Share of the CUDA-issuing threads' wall time, last window, spent blocked outside any CUDA
  // call: the host making the GPU wait between steps (stallwatch_gpu_starvation_ratio).
  double starvation_ratio = 0;
  // Estimated share of the CUDA-issuing threads' CPU time, last window, spent in stallwatch's
  // probes: calls × the measured trap cost of their site class (stallwatch_workload_probe_cost_ratio).
  double probe_cost_ratio = 0;
  // Share of the last window its processes' launch probes were attached (the cost budget
  // duty-cycles them; 1 when not cycled): their launch counts are scaled by it, the least of
  // its processes (stallwatch_probe_duty_ratio).
  double launch_duty = 1;
  std::vector<ProcessCall> processes;
  std::map<int, ProcessInfo> process_info;  // by pid, live processes only
  std::vector<Preemptor> preemptors;  // every one the kernel's map holds, top first
  PressureTotals pressure;
  // The CPU limit of its CUDA-issuing processes' cpu cgroup and ancestors, and their
  // throttling, cumulative (trace/cpu_limit_source.cpp); known = false when not read.
  host::CpuLimitTotals cpu_limit;
  std::vector<ProcessIo> io_processes;   // live processes only
  std::vector<ProcessNccl> nccl_processes;  // live processes only
  std::vector<InflightCall> inflight;  // open calls of live processes now, oldest first
  std::vector<ExitedAllocFailure> exited_alloc_failures;  // exited during this window
};

// Cumulative totals of one window: `now` less `before` (null: nothing before, so all of `now`).
// The one reset rule: a counter that went down was reset (a process or cgroup gone and back, a
// map entry recreated) and counts from zero, so its window value is `now`, as Prometheus'
// rate() reads a reset. A histogram whose count went down is taken whole.
std::uint64_t counter_delta(std::uint64_t now, std::uint64_t before);
CallTotals delta(const CallTotals& now, const CallTotals* before);
OffcpuTotals delta(const OffcpuTotals& now, const OffcpuTotals* before);
IoTotals delta(const IoTotals& now, const IoTotals* before);
NcclTotals delta(const NcclTotals& now, const NcclTotals* before);
ReclaimTotals delta(const ReclaimTotals& now, const ReclaimTotals* before);
// Pressure totals cover the cgroup's whole life: without a known value before, no window.
PressureTotals delta(const PressureTotals& now, const PressureTotals* before);

// Label value of the series that holds cgroups past --max-cgroups.
inline constexpr const char* kOverflowCgroup = "_overflow";
// Label value of the series that holds cgroups whose path cannot be found (removed before the
// daemon resolved them, or in a hierarchy it cannot see): not the cap's series (issue #51).
inline constexpr const char* kUnknownCgroup = "_unknown";
// Either of the two: a series with no identity of its own.
inline bool is_pooled_cgroup(std::string_view label) {
  return label == kOverflowCgroup || label == kUnknownCgroup;
}

// Chain counters of one (kind, severity, workload) for stallwatch_chains_total / _chain_active.
struct ChainCount {
  std::string kind;
  std::string severity;
  identity::Identity identity;
  std::uint64_t total = 0;   // chains opened with this severity, cumulative
  std::uint64_t active = 0;  // open now with this severity
  // The process names the open chains blame first (their top contributor apart from the
  // workload's own process): stallwatch_chain_culprit_info. Bounded by the open chains.
  std::vector<std::string> culprits;
};

// Self-metrics of the SQLite store (all zero when no store is configured).
struct StoreStats {
  bool configured = false;  // a --db was given (stallwatch_store_up is exported)
  bool enabled = false;     // and the store is open now (stallwatch_store_up 1)
  bool failing = false;     // its last write or prune failed (stallwatch_store_up 0)
  bool corrupt = false;     // a write found the database corrupt: it is to be moved aside
  std::uint64_t batches_written = 0;
  std::uint64_t rows_written = 0;
  std::uint64_t batches_dropped = 0;  // queue full: the writer fell behind
  std::uint64_t write_errors = 0;
  std::uint64_t rows_pruned = 0;
  std::uint64_t queue_size = 0;
  std::uint64_t db_bytes = 0;
};

// What the /metrics listener turned away or cut since start (metrics/http_server.h
// HttpCounters); `run` only. Floods show here (issue #35).
struct HttpStats {
  bool enabled = false;
  std::uint64_t refused_per_address = 0;  // connections refused at accept: the address's share
  std::uint64_t over_cap = 0;             // requests answered 503: --web.max-connections
  std::uint64_t header_deadline = 0;      // closed at the header or keep-alive deadline
  std::uint64_t request_deadline = 0;     // reset: the response not taken within the deadline
  std::uint64_t evicted = 0;              // cut to let another address in under the cap
  std::uint64_t login_throttled = 0;      // answered 429 without bcrypt
  std::uint64_t login_denied = 0;         // answered 401 after bcrypt
};

// Self-metrics of the OTLP push (metrics/otlp/delivery.h), cumulative; disabled without
// --otlp-endpoint.
struct OtlpStats {
  bool enabled = false;
  // by "signal/result": result is "success" or "failure" (one per HTTP attempt)
  std::map<std::string, std::uint64_t> requests;
  // by reason: throttled (429), unavailable (502/503/504), rejected (other 4xx),
  // server_error (other 5xx), timeout, connection (refused, reset, closed without an answer, TLS)
  std::map<std::string, std::uint64_t> failures;
  // by reason: queue_full, retries_exhausted, rejected (non-retryable answer), partial_success
  // (points the receiver reported as rejected in a 2xx answer), shutdown
  std::map<std::string, std::uint64_t> points_dropped;
  std::uint64_t points_sent = 0;     // points in requests answered 2xx (minus partial rejections)
  std::uint64_t queue_requests = 0;  // now
  std::uint64_t queue_bytes = 0;     // now, uncompressed
};

// The processes of a series that exited since the last pass: their final totals, for the one
// window they ended in (the series' own totals hold them among its cgroup's retired totals), so
// that the store, explain and export count a job shorter than a window (issue #51).
struct ExitedProcesses {
  std::vector<ProcessCall> calls;      // exited = true
  std::map<int, ProcessInfo> info;     // exited = true; offcpu is final
};

struct Snapshot {
  std::uint64_t sequence = 0;  // 1 for the first window, +1 each window
  std::chrono::system_clock::time_point taken{};
  std::chrono::nanoseconds window{};
  std::map<std::string, Series> series;  // by `cgroup` label
  // The label of every cgroup id the sources met this window, those gone during it included:
  // outlier records (which carry the id) of a process that has already exited still find
  // their series.
  std::map<std::uint64_t, std::string> cgroup_labels;
  std::map<std::string, ExitedProcesses> exited;  // by series label
  std::array<std::uint64_t, trace::kLostSources> lost{};  // cumulative, by enum sw_lost_source
  std::array<std::uint64_t, trace::kLruMaps> evicted{};  // cumulative, by enum sw_lru_map
  std::vector<NcclMember> nccl_members;  // communicators of live processes now
  std::string node;  // this node's name (--kube-node, $NODE_NAME, the hostname): job info
  std::optional<host::SelfStats> self;   // the daemon's own process (`run` only)
  std::uint64_t outliers = 0;            // outlier records received, cumulative
  std::uint64_t traced_processes = 0;    // processes mapping a traced library now
  std::uint64_t attached_libraries = 0;  // library files with probes now
  std::uint64_t attached_probes = 0;     // uprobe + uretprobe links now
  std::uint64_t emulated_probes = 0;     // of those, on an instruction the kernel emulates
  // What one probe costs here by class, measured at start (trace/probe_cost.h; `run` only).
  trace::TrapCost trap_cost_emulated, trap_cost_stepped;
  std::vector<bool> stepped_calls;  // by call id: some file probes it on a single-stepped site
  double cost_budget = 0;  // --cost-budget: share of a workload's CUDA-thread CPU time (0: none)
  // Per process the cost budget cycled: ns its launch probes were detached, cumulative
  // (trace/discovery.h). A process not listed was never cycled.
  std::map<int, std::uint64_t> launch_off_ns;
  std::uint64_t libraries_refused = 0;   // library files not traced: --max-libraries reached
  std::uint64_t discovery_dropped = 0;   // library-mapping events dropped in user space
  std::uint64_t thread_failures = 0;     // steps a thread lost to an exception (common/guard.h)
  // Every BPF program of the object and whether it is loaded (Tracer::program_states; `run`).
  std::vector<std::pair<std::string, bool>> bpf_programs;
  bool ready = false;                    // probes attached; /healthz answers 200
  std::vector<ChainCount> chains;        // filled by the chain engine before publishing
  StoreStats store;                      // filled from the store before publishing
  OtlpStats otlp;                        // filled from the OTLP pusher before publishing
  HttpStats http;                        // filled from the listener before publishing (run)
  KubeStats kube;                        // filled from the Kubernetes metadata before publishing
  // Per CPU, the window's time taken by the hypervisor and by interrupts (host/host_sampler.h);
  // filled by the pipeline before the chain engine sees the window. Empty when unknown.
  std::vector<host::CpuStolen> cpu_stolen;
  // The GPUs' own state, cumulative, and which GPUs the CUDA processes use
  // (host/gpu_monitor.h); filled by `run` before the chain engine sees the window. Empty
  // without NVML.
  host::GpuSnapshot gpu;
};

}  // namespace stallwatch
