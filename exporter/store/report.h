// The incident report behind `stallwatch explain`: what the store holds about one period, read
// back from the database the daemon writes. Owns the read-only opening of that database (WAL
// reader while the daemon writes; immutable fallback for a copy in a read-only place) and the
// queries; rendering is cli/explain_render.h's.
// The default report reads windows (host context) and chains only; call_windows rows are
// decoded, and their histograms merged, only for the per-process breakdown.
// Thread-safety: plain values and free functions; one connection per thread (sqlite.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chains/chain.h"
#include "chains/memory_growth.h"
#include "common/result.h"
#include "store/nccl_waits.h"
#include "store/sqlite.h"

namespace stallwatch::store {

// A directory of private copies, removed with everything in it when the report closes.
class PrivateDir {
 public:
  explicit PrivateDir(std::string path) : path_(std::move(path)) {}
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct ReportDb {
  std::unique_ptr<PrivateDir> copy;  // set when a private copy is read; outlives `db`
  DbPtr db;
  bool immutable = false;  // opened with immutable=1: the -wal file, if any, was not read
  std::string note;        // one line for stderr when a fallback was used, else empty
};

// Opens PATH read-only (`file:PATH?mode=ro`) and checks that it is a stallwatch database of a
// schema this binary reads. A WAL reader needs the -shm file; where it cannot be created (a
// copy in a directory this user may not write), the database and its -wal are copied to a
// private temporary directory and read there; without a -wal (or when copying fails) the file
// is read with `immutable=1`. Every error is one line naming PATH; a missing file says how to
// create one.
Result<ReportDb> open_report_db(const std::string& path);

struct ReportQuery {
  std::int64_t now_ns = 0;    // unix time the period ends (the wall clock, or fixed in tests)
  std::int64_t since_ns = 0;  // length of the period: it is (now_ns - since_ns, now_ns]
  std::string cgroup;         // "" or "/": everything; else this cgroup and its descendants
  bool per_process = false;
  bool stacks = false;  // explain --stacks: native frames under each site
  // --per-process reads whole 5-minute buckets from the rollups (schema 7); false: every
  // window row (the tests compare the two).
  bool rollups = true;
};

// The windows table over the period. Averages skip windows where the value is unknown.
// One GPU over the period (gpu_windows, schema 10): explain's GPU context. -1: never read.
struct GpuSummary {
  unsigned gpu = 0;
  std::string uuid;  // as stored (escaped by the monitor)
  std::string name;
  std::uint64_t windows = 0;
  double sm_clock_mhz = -1;  // mean of the windows' latest readings
  double sm_clock_min_mhz = -1;
  double sm_clock_max_mhz = -1;  // the GPU's maximum
  double held_share = 0;         // mean over the windows
  std::string top_reason;        // the reason that held it longest; "" when never held
  double top_reason_share = 0;   // of the period's windows, mean
  double temperature_max_c = -1;
  double power_max_w = -1;
  double power_limit_w = -1;      // the largest enforced limit seen
  double power_limit_min_w = -1;  // and the smallest (a limit lowered during the period)
  std::vector<std::pair<int, std::uint64_t>> xids;  // code, errors; by code
  std::int64_t lost_since_ns = 0;  // lost at the period's last window, since; 0: answering
};

struct HostSummary {
  std::string hostname;       // filled by the caller; the database does not record it
  std::uint64_t windows = 0;  // windows that ended in the period
  std::int64_t first_ns = 0;  // ts_ns of the first and last of them
  std::int64_t last_ns = 0;
  std::int64_t newest_ns = 0;  // newest window in the whole database; 0 when it has none
  double cpu_busy = -1;        // 0..1, -1 unknown
  double mem_used = -1;        // 0..1, -1 unknown
  double load1 = -1;
  int cpus = 0;  // 0 unknown
  double swap_used_bytes = -1;
  double cpu_steal = -1;  // 0..1, mean over the CPUs, -1 unknown
  double cpu_irq = -1;
  // stallwatch's own probes (issue #48): a pair's cost by site class, as measured at start
  // (mean over the windows), and the largest share of a workload's CUDA-thread CPU time spent
  // in them, the period's worst window and its mean; -1 unknown.
  double probe_pair_emulated_s = -1;
  double probe_pair_stepped_s = -1;
  double probe_cost_max = -1;
  double probe_cost_mean = -1;
  std::vector<GpuSummary> gpus;  // by index; empty without NVML
};

// A chain row as stored; kind and severities stay strings so that a newer daemon's kinds
// still show.
struct ReportChain {
  std::string id;
  std::string kind;
  std::string severity;
  std::string peak;
  bool open = false;
  std::string cgroup;
  std::string container_id;
  std::string pod_uid;
  std::string pod;  // Kubernetes names of the workload, when the daemon knew them
  std::string pod_namespace;
  std::string container;
  int pid = 0;
  std::string comm;
  std::string call;
  std::string api;
  double p50_s = 0;
  double p99_s = 0;
  double baseline_p50_s = 0;
  double baseline_p99_s = 0;
  double ratio = 0;
  std::int64_t opened_ns = 0;
  std::int64_t updated_ns = 0;
  std::int64_t closed_ns = 0;
  std::uint64_t windows = 0;
  std::string summary;
  std::string root_cause;
  std::string effect;
  std::string recommendation;
  std::vector<chains::Contributor> contributors;  // as stored: worst first
  std::vector<std::pair<std::string, double>> evidence;
  std::vector<chains::CallSite> sites;  // top call sites by stalled time (schema 8+)
};

// What was traced per cgroup in the period: shown when no chain formed, so a quiet report
// still proves that tracing worked.
struct TracedCgroup {
  std::string cgroup;
  std::uint64_t processes = 0;
  std::uint64_t calls = 0;
};

struct CallStats {
  std::string call;
  std::string api;
  std::uint64_t count = 0;
  double p50_s = 0;  // from the histogram merged over the period (upper bucket bounds)
  double p99_s = 0;
  double max_s = 0;
};

struct Preemptor {
  std::string comm;
  int pid = 0;
  std::string cgroup;
  std::uint64_t cpu_ns = 0;  // runnable time of the victim while this task ran
  std::uint64_t count = 0;
};

// Traced GPU memory of a process over the period (memory_windows, schema 6).
struct MemoryStats {
  std::uint64_t allocated = 0;
  std::uint64_t freed = 0;
  std::uint64_t failures = 0;     // out-of-memory returns
  std::uint64_t live_device = 0;  // at its newest window in the period
  std::uint64_t live_managed = 0;
  std::uint64_t live_host = 0;
  std::uint64_t peak = 0;                      // the most it held at a window's end
  std::optional<chains::MemoryGrowth> growth;  // memory_growth: grew with no plateau
  bool any() const { return allocated + freed + failures + peak > 0; }
  std::uint64_t live() const { return live_device + live_managed + live_host; }
};

struct ProcessStats {
  std::string cgroup;
  int pid = 0;
  std::string comm;
  std::vector<CallStats> calls;  // most calls first
  std::uint64_t runnable_ns = 0;
  std::uint64_t blocked_ns = 0;
  std::uint64_t oncpu_ns = 0;
  // window_ns summed over the windows it was active in. Its CUDA-issuing threads' time
  // (thread_ns) is larger when it has several such threads: shares are taken of thread_ns.
  std::uint64_t wall_ns = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t worst_stall_ns = 0;   // longest call or outlier
  std::vector<Preemptor> preemptors;  // most CPU stolen first, at most kTopPreemptors
  MemoryStats memory;
  std::vector<chains::CallSite> sites;  // top call sites of its outliers (schema 8+)
  std::uint64_t offcpu_ns() const { return runnable_ns + blocked_ns; }
  std::uint64_t thread_ns() const { return offcpu_ns() + oncpu_ns; }
};

inline constexpr std::size_t kTopPreemptors = 5;

// Kubernetes names of a cgroup (the cgroups table, schema 3), when the daemon knew them.
struct WorkloadNames {
  std::string pod;
  std::string pod_namespace;
  std::string container;
};

struct Report {
  ReportQuery query;
  std::map<std::string, WorkloadNames> names;  // by cgroup path; empty before schema 3
  HostSummary host;
  // Open before closed, then severity (critical first), then most recently updated.
  std::vector<ReportChain> chains;
  std::vector<TracedCgroup> traced;     // filled only when `chains` is empty
  std::vector<ProcessStats> processes;  // only with query.per_process; most off-CPU first
  // Communicator members whose collectives waited longer and longer with no cause on this
  // node (nccl_waits.h): the rank that holds them back is on another node.
  std::vector<NcclWaitGrowth> nccl_waits;
};

Result<Report> load_report(sqlite3* db, const ReportQuery& query);

// For other readers of the same tables (store/timeline.cpp): runs `sql` with ?1 the period's
// start (exclusive), ?2 its end and ?3 the normalised cgroup filter of `query`, handing each
// row to `row`. `period_cgroup_clause(col)` is the " AND ..." that applies ?3 to a column.
std::string period_cgroup_clause(const char* column);
Result<Ok> each_period_row(sqlite3* db, const std::string& sql, const ReportQuery& query,
                           const std::function<void(const Stmt&)>& row);

// Orders chains as the report shows them (see Report::chains).
void sort_chains(std::vector<ReportChain>& chains);

// SQL-side cgroup filter: true when `path` is `filter` or below it ("" and "/" match all).
bool cgroup_matches(const std::string& filter, const std::string& path);

}  // namespace stallwatch::store
