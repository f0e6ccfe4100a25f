#include "store/schema.h"

#include <array>

#include "store/sqlite.h"

namespace stallwatch::store {
namespace {

// Step i takes version i to version i + 1. Never edit a shipped step: add one.
constexpr std::array<const char*, kSchemaVersion> kSteps = {
    // 0 → 1: the first schema.
    R"sql(
CREATE TABLE cgroups(
  path TEXT PRIMARY KEY, container_id TEXT, pod_uid TEXT, runtime TEXT, qos TEXT,
  systemd_unit TEXT, slurm_job TEXT, slurm_step TEXT,
  first_seen_ns INTEGER NOT NULL, last_seen_ns INTEGER NOT NULL);
CREATE TABLE processes(
  pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, comm TEXT, cgroup TEXT,
  first_seen_ns INTEGER NOT NULL, last_seen_ns INTEGER NOT NULL,
  PRIMARY KEY(pid, start_ns));
CREATE TABLE windows(ts_ns INTEGER PRIMARY KEY, window_ns INTEGER NOT NULL);
CREATE TABLE call_windows(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL, call TEXT NOT NULL,
  api TEXT NOT NULL, count INTEGER NOT NULL, sum_ns INTEGER NOT NULL,
  runnable_ns INTEGER NOT NULL, blocked_ns INTEGER NOT NULL, max_ns INTEGER NOT NULL,
  buckets BLOB);
CREATE INDEX call_windows_ts ON call_windows(ts_ns);
CREATE TABLE process_windows(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL,
  runnable_ns INTEGER NOT NULL, blocked_ns INTEGER NOT NULL, oncpu_ns INTEGER NOT NULL,
  preemptions INTEGER NOT NULL);
CREATE INDEX process_windows_ts ON process_windows(ts_ns);
CREATE TABLE preemptor_windows(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, victim_pid INTEGER NOT NULL,
  pid INTEGER NOT NULL, comm TEXT, preemptor_cgroup TEXT,
  runnable_ns INTEGER NOT NULL, count INTEGER NOT NULL);
CREATE INDEX preemptor_windows_ts ON preemptor_windows(ts_ns);
CREATE TABLE outliers(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,
  comm TEXT, call TEXT NOT NULL, api TEXT NOT NULL, duration_ns INTEGER NOT NULL,
  runnable_ns INTEGER NOT NULL, blocked_ns INTEGER NOT NULL, preemptions INTEGER NOT NULL);
CREATE INDEX outliers_ts ON outliers(ts_ns);
CREATE TABLE chains(
  id TEXT PRIMARY KEY, kind TEXT NOT NULL, severity TEXT NOT NULL, open INTEGER NOT NULL,
  cgroup TEXT NOT NULL, pid INTEGER, comm TEXT, call TEXT, api TEXT,
  p50_s REAL, p99_s REAL, baseline_p50_s REAL, baseline_p99_s REAL, ratio REAL,
  opened_ns INTEGER NOT NULL, updated_ns INTEGER NOT NULL, closed_ns INTEGER NOT NULL,
  windows INTEGER NOT NULL, summary TEXT, root_cause TEXT, effect TEXT, recommendation TEXT,
  contributors TEXT, evidence TEXT);
)sql",
    // 1 → 2: system context per window; peak severity and workload identity on chains.
    R"sql(
ALTER TABLE windows ADD COLUMN cpu_busy REAL;
ALTER TABLE windows ADD COLUMN mem_used REAL;
ALTER TABLE windows ADD COLUMN load1 REAL;
ALTER TABLE windows ADD COLUMN cpus INTEGER;
ALTER TABLE windows ADD COLUMN swap_used_bytes INTEGER;
ALTER TABLE chains ADD COLUMN peak TEXT;
ALTER TABLE chains ADD COLUMN container_id TEXT;
ALTER TABLE chains ADD COLUMN pod_uid TEXT;
UPDATE chains SET peak = severity WHERE peak IS NULL;
CREATE INDEX chains_updated ON chains(updated_ns);
)sql",
    // 2 → 3: Kubernetes names of workloads, from the API server (NULL when not known).
    R"sql(
ALTER TABLE cgroups ADD COLUMN pod TEXT;
ALTER TABLE cgroups ADD COLUMN namespace TEXT;
ALTER TABLE cgroups ADD COLUMN container TEXT;
)sql",
    // 3 → 4: preemptors' thread names and kernel threads (NULL in rows written before).
    R"sql(
ALTER TABLE preemptor_windows ADD COLUMN thread TEXT;
ALTER TABLE preemptor_windows ADD COLUMN kernel_thread INTEGER;
)sql",
    // 4 → 5: calls still open at the end of a window (issue #21: hangs seen while they hang).
    R"sql(
CREATE TABLE inflight_windows(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,
  thread TEXT, call TEXT NOT NULL, api TEXT NOT NULL, age_ns INTEGER NOT NULL,
  runnable_ns INTEGER NOT NULL, blocked_ns INTEGER NOT NULL, preemptions INTEGER NOT NULL,
  on_cpu INTEGER NOT NULL, rank INTEGER, world_size INTEGER);
CREATE INDEX inflight_windows_ts ON inflight_windows(ts_ns);
)sql",
    // 5 → 6: GPU memory per process and window (issue #20): bytes allocated and freed, out of
    // memory returns, and what it held at the window's end by kind.
    R"sql(
CREATE TABLE memory_windows(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL,
  allocated INTEGER NOT NULL, freed INTEGER NOT NULL, failures INTEGER NOT NULL,
  live_device INTEGER NOT NULL, live_managed INTEGER NOT NULL, live_host INTEGER NOT NULL);
CREATE INDEX memory_windows_ts ON memory_windows(ts_ns);
)sql",
    // 6 → 7: per-process rollups of 5 minutes (issue #19), summed by the writer as windows
    // arrive, so explain --per-process over a day reads ~300 rows per process and call instead
    // of ~17,000. A bucket B holds the windows that end in (B, B + 5 min]. rollup_meta.since_ns:
    // the first bucket that holds all its windows (NULL: none written yet; set at the first
    // write when the database has no windows, else at the bucket after the newest one now).
    R"sql(
CREATE TABLE call_rollups(
  bucket_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL, call TEXT NOT NULL,
  api TEXT NOT NULL, count INTEGER NOT NULL, max_ns INTEGER NOT NULL, buckets BLOB,
  PRIMARY KEY(bucket_ns, cgroup, pid, call)) WITHOUT ROWID;
CREATE TABLE process_rollups(
  bucket_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL,
  runnable_ns INTEGER NOT NULL, blocked_ns INTEGER NOT NULL, oncpu_ns INTEGER NOT NULL,
  preemptions INTEGER NOT NULL, wall_ns INTEGER NOT NULL,
  PRIMARY KEY(bucket_ns, cgroup, pid)) WITHOUT ROWID;
CREATE TABLE preemptor_rollups(
  bucket_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, victim_pid INTEGER NOT NULL,
  pid INTEGER NOT NULL, comm TEXT NOT NULL, preemptor_cgroup TEXT NOT NULL,
  runnable_ns INTEGER NOT NULL, count INTEGER NOT NULL,
  PRIMARY KEY(bucket_ns, cgroup, victim_pid, pid, comm, preemptor_cgroup)) WITHOUT ROWID;
CREATE TABLE rollup_meta(since_ns INTEGER);
INSERT INTO rollup_meta SELECT ((max(ts_ns) - 1) / 300000000000 + 1) * 300000000000 FROM windows;
)sql",
    // 7 → 8: call sites (issue #17). chains.sites: the chain's top sites as JSON (docs/store.md);
    // outlier_sites: per window, the outliers of each process, call and stack, with the
    // innermost frame's function, file and line and the folded stack `stallwatch stacks` reads.
    R"sql(
ALTER TABLE chains ADD COLUMN sites TEXT;
CREATE TABLE outlier_sites(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL, comm TEXT,
  call TEXT NOT NULL, api TEXT, count INTEGER NOT NULL, stalled_ns INTEGER NOT NULL,
  site TEXT NOT NULL, function TEXT, file TEXT, line INTEGER, folded TEXT NOT NULL,
  frames TEXT NOT NULL);
CREATE INDEX outlier_sites_ts ON outlier_sites(ts_ns);
)sql",
    // 8 → 9: the VM's weather per window (issue 36): the mean share of the CPUs' time taken by
    // the hypervisor (steal) and by interrupts. Context for explain, not a cause by itself.
    R"sql(
ALTER TABLE windows ADD COLUMN cpu_steal REAL;
ALTER TABLE windows ADD COLUMN cpu_irq REAL;
)sql",
    // 9 → 10: each GPU per window (issue 39's readings as context for explain): its latest SM
    // clock against its maximum, the share of the window its clock was held down and the
    // reason that held it most, temperature, power against the limit, and the window's Xid
    // codes ("79,13", one per error).
    R"sql(
CREATE TABLE gpu_windows(
  ts_ns INTEGER NOT NULL, gpu INTEGER NOT NULL, uuid TEXT, name TEXT, sm_clock_mhz INTEGER,
  sm_clock_max_mhz INTEGER, held_share REAL NOT NULL, held_clock_mhz REAL, top_reason TEXT,
  top_reason_share REAL, temperature_c INTEGER, power_w REAL, power_limit_w REAL,
  xids INTEGER NOT NULL, xid_codes TEXT,
  PRIMARY KEY(ts_ns, gpu)) WITHOUT ROWID;
)sql",
    // 10 → 11: when a GPU was first seen lost (NVML_ERROR_GPU_IS_LOST; issue #50), NULL while
    // it answers: explain says "lost since" instead of its last clocks.
    R"sql(
ALTER TABLE gpu_windows ADD COLUMN lost_since_ns INTEGER;
)sql",
    // 11 → 12: NCCL communicator members per window (issue #52 item 6): each member's wait for
    // its collectives and its collective count over the window, with its communicator's label
    // (as /metrics' `comm`) and job, so explain on a node whose ranks wait for another node's
    // rank names the communicator and the job. windows.nccl_dropped: members left out for the
    // per-window cap (NULL: none).
    R"sql(
CREATE TABLE nccl_windows(
  ts_ns INTEGER NOT NULL, cgroup TEXT NOT NULL, pid INTEGER NOT NULL,
  communicator TEXT NOT NULL, rank INTEGER NOT NULL, world_size INTEGER NOT NULL, job_id TEXT,
  wait_ns INTEGER NOT NULL, collectives INTEGER NOT NULL);
CREATE INDEX nccl_windows_ts ON nccl_windows(ts_ns);
ALTER TABLE windows ADD COLUMN nccl_dropped INTEGER;
)sql",
    // 12 → 13: what stallwatch's probes cost here (issue #48 item 3), for explain's System
    // context: a probe pair (entry + return) on an emulated and on a single-stepped site as the
    // daemon measured them at start, and the largest share of a workload's CUDA-thread CPU time
    // spent in the probes that window (NULL: not measured, or no workload ran).
    R"sql(
ALTER TABLE windows ADD COLUMN probe_pair_emulated_s REAL;
ALTER TABLE windows ADD COLUMN probe_pair_stepped_s REAL;
ALTER TABLE windows ADD COLUMN probe_cost_max REAL;
)sql",
};

}  // namespace

Result<int> schema_version(sqlite3* db) {
  auto st = Stmt::prepare(db, "PRAGMA user_version");
  if (!st) return st.error();
  if (st->step() != SQLITE_ROW) return make_error(db_error(db));
  return static_cast<int>(st->int64(0));
}

Result<Ok> migrate(sqlite3* db, int target) {
  auto v = schema_version(db);
  if (!v) return v.error();
  if (*v > kSchemaVersion) {
    return make_error("database schema version " + std::to_string(*v) +
                      " is newer than this stallwatch understands (" +
                      std::to_string(kSchemaVersion) + "); upgrade stallwatch or use another --db");
  }
  for (int from = *v; from < target; from++) {
    std::string sql = std::string("BEGIN IMMEDIATE;") + kSteps[static_cast<size_t>(from)] +
                      "PRAGMA user_version = " + std::to_string(from + 1) + ";COMMIT;";
    auto r = exec(db, sql);
    if (!r) {
      (void)exec(db, "ROLLBACK");
      return make_error("migrating the database schema from version " + std::to_string(from) +
                            ": " + r.error().message,
                        r.error().err);
    }
  }
  return Ok{};
}

std::string encode_buckets(const trace::KernelBuckets& b) {
  std::string out;
  for (size_t k = 0; k < b.size(); k++) {
    if (b[k] == 0) continue;
    out.push_back(static_cast<char>(k));
    std::uint64_t v = b[k];
    do {
      std::uint8_t byte = v & 0x7f;
      v >>= 7;
      if (v) byte |= 0x80;
      out.push_back(static_cast<char>(byte));
    } while (v);
  }
  return out;
}

trace::KernelBuckets decode_buckets(const std::string& blob) {
  trace::KernelBuckets b{};
  size_t i = 0;
  while (i < blob.size()) {
    auto k = static_cast<std::uint8_t>(blob[i++]);
    std::uint64_t v = 0;
    int shift = 0;
    bool done = false;
    while (i < blob.size() && shift < 64) {
      auto byte = static_cast<std::uint8_t>(blob[i++]);
      v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      shift += 7;
      if (!(byte & 0x80)) {
        done = true;
        break;
      }
    }
    if (!done || k >= b.size()) break;
    b[k] = v;
  }
  return b;
}

}  // namespace stallwatch::store
