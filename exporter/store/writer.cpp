#include "store/writer.h"

#include <limits>
#include <utility>

#include "common/json.h"
#include "store/schema.h"
#include "trace/calls.h"
#include "trace/nccl_ranks.h"

namespace stallwatch::store {
namespace {

constexpr const char* kWindowSql =
    "INSERT INTO windows(ts_ns, window_ns, cpu_busy, mem_used, load1, cpus, swap_used_bytes, "
    "cpu_steal, cpu_irq, nccl_dropped, probe_pair_emulated_s, probe_pair_stepped_s, "
    "probe_cost_max) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) "
    "ON CONFLICT(ts_ns) DO UPDATE "
    "SET window_ns = excluded.window_ns, cpu_busy = excluded.cpu_busy, "
    "mem_used = excluded.mem_used, load1 = excluded.load1, cpus = excluded.cpus, "
    "swap_used_bytes = excluded.swap_used_bytes, cpu_steal = excluded.cpu_steal, "
    "cpu_irq = excluded.cpu_irq, nccl_dropped = excluded.nccl_dropped, "
    "probe_pair_emulated_s = excluded.probe_pair_emulated_s, "
    "probe_pair_stepped_s = excluded.probe_pair_stepped_s, "
    "probe_cost_max = excluded.probe_cost_max";

constexpr const char* kCgroupSql =
    "INSERT INTO cgroups(path, container_id, pod_uid, runtime, qos, systemd_unit, slurm_job, "
    "slurm_step, first_seen_ns, last_seen_ns, pod, namespace, container) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11, ?12) "
    "ON CONFLICT(path) DO UPDATE SET container_id = excluded.container_id, "
    // A window before the API server named the pod must not forget names learnt earlier.
    "pod = coalesce(excluded.pod, cgroups.pod), "
    "namespace = coalesce(excluded.namespace, cgroups.namespace), "
    "container = coalesce(excluded.container, cgroups.container), "
    "pod_uid = excluded.pod_uid, runtime = excluded.runtime, qos = excluded.qos, "
    "systemd_unit = excluded.systemd_unit, slurm_job = excluded.slurm_job, "
    "slurm_step = excluded.slurm_step, "
    "first_seen_ns = min(cgroups.first_seen_ns, excluded.first_seen_ns), "
    "last_seen_ns = max(cgroups.last_seen_ns, excluded.last_seen_ns)";

constexpr const char* kProcessSql =
    "INSERT INTO processes(pid, start_ns, comm, cgroup, first_seen_ns, last_seen_ns) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT(pid, start_ns) DO UPDATE SET "
    "comm = excluded.comm, cgroup = excluded.cgroup, "
    "first_seen_ns = min(processes.first_seen_ns, excluded.first_seen_ns), "
    "last_seen_ns = max(processes.last_seen_ns, excluded.last_seen_ns)";

constexpr const char* kProcessWindowSql =
    "INSERT INTO process_windows(ts_ns, cgroup, pid, runnable_ns, blocked_ns, oncpu_ns, "
    "preemptions) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)";

constexpr const char* kCallWindowSql =
    "INSERT INTO call_windows(ts_ns, cgroup, pid, call, api, count, sum_ns, runnable_ns, "
    "blocked_ns, max_ns, buckets) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

constexpr const char* kPreemptorSql =
    "INSERT INTO preemptor_windows(ts_ns, cgroup, victim_pid, pid, comm, preemptor_cgroup, "
    "runnable_ns, count, thread, kernel_thread) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

constexpr const char* kInflightSql =
    "INSERT INTO inflight_windows(ts_ns, cgroup, pid, tid, thread, call, api, age_ns, "
    "runnable_ns, blocked_ns, preemptions, on_cpu, rank, world_size) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

constexpr const char* kNcclSql =
    "INSERT INTO nccl_windows(ts_ns, cgroup, pid, communicator, rank, world_size, job_id, "
    "wait_ns, collectives) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

constexpr const char* kMemorySql =
    "INSERT INTO memory_windows(ts_ns, cgroup, pid, allocated, freed, failures, live_device, "
    "live_managed, live_host) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

// Rollups (schema 7): the window's numbers added to its 5-minute bucket.
constexpr const char* kCallRollupSql =
    "INSERT INTO call_rollups(bucket_ns, cgroup, pid, call, api, count, max_ns, buckets) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(bucket_ns, cgroup, pid, call) DO UPDATE "
    "SET count = count + excluded.count, max_ns = max(max_ns, excluded.max_ns), "
    "buckets = sw_add_buckets(buckets, excluded.buckets)";

constexpr const char* kProcessRollupSql =
    "INSERT INTO process_rollups(bucket_ns, cgroup, pid, runnable_ns, blocked_ns, oncpu_ns, "
    "preemptions, wall_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
    "ON CONFLICT(bucket_ns, cgroup, pid) DO UPDATE SET "
    "runnable_ns = runnable_ns + excluded.runnable_ns, "
    "blocked_ns = blocked_ns + excluded.blocked_ns, oncpu_ns = oncpu_ns + excluded.oncpu_ns, "
    "preemptions = preemptions + excluded.preemptions, wall_ns = wall_ns + excluded.wall_ns";

constexpr const char* kPreemptorRollupSql =
    "INSERT INTO preemptor_rollups(bucket_ns, cgroup, victim_pid, pid, comm, preemptor_cgroup, "
    "runnable_ns, count) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
    "ON CONFLICT(bucket_ns, cgroup, victim_pid, pid, comm, preemptor_cgroup) DO UPDATE SET "
    "runnable_ns = runnable_ns + excluded.runnable_ns, count = count + excluded.count";

// The first rollup written to a database without windows makes its bucket the first complete
// one.
constexpr const char* kRollupStartSql =
    "UPDATE rollup_meta SET since_ns = ?1 WHERE since_ns IS NULL";

// sw_add_buckets(a, b): the bucket-wise sum of two encoded histograms (schema.h encoding).
void add_buckets_fn(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
  trace::KernelBuckets sum{};
  for (int i = 0; i < argc; i++) {
    const auto* p = static_cast<const char*>(sqlite3_value_blob(argv[i]));
    const int n = sqlite3_value_bytes(argv[i]);
    if (!p || n <= 0) continue;
    const auto b = decode_buckets(std::string(p, static_cast<size_t>(n)));
    for (size_t k = 0; k < sum.size(); k++) sum[k] += b[k];
  }
  const std::string out = encode_buckets(sum);
  sqlite3_result_blob(ctx, out.data(), static_cast<int>(out.size()), SQLITE_TRANSIENT);
}

std::int64_t bucket_of(std::int64_t ts) { return (ts - 1) / kRollupNs * kRollupNs; }

constexpr const char* kOutlierSql =
    "INSERT INTO outliers(ts_ns, cgroup, pid, tid, comm, call, api, duration_ns, runnable_ns, "
    "blocked_ns, preemptions) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

constexpr const char* kSiteSql =
    "INSERT INTO outlier_sites(ts_ns, cgroup, pid, comm, call, api, count, stalled_ns, site, "
    "function, file, line, folded, frames) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
    "?12, ?13, ?14)";

constexpr const char* kGpuSql =
    "INSERT OR REPLACE INTO gpu_windows(ts_ns, gpu, uuid, name, sm_clock_mhz, sm_clock_max_mhz, "
    "held_share, held_clock_mhz, top_reason, top_reason_share, temperature_c, power_w, "
    "power_limit_w, xids, xid_codes, lost_since_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
    "?10, ?11, ?12, ?13, ?14, ?15, ?16)";

constexpr const char* kChainSql =
    "INSERT INTO chains(id, kind, severity, peak, open, cgroup, container_id, pod_uid, pid, "
    "comm, call, api, p50_s, p99_s, baseline_p50_s, baseline_p99_s, ratio, opened_ns, "
    "updated_ns, closed_ns, windows, summary, root_cause, effect, recommendation, contributors, "
    "evidence, sites) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
    "?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28) ON CONFLICT(id) DO UPDATE SET "
    "kind = excluded.kind, severity = excluded.severity, peak = excluded.peak, "
    "open = excluded.open, cgroup = excluded.cgroup, container_id = excluded.container_id, "
    "pod_uid = excluded.pod_uid, pid = excluded.pid, comm = excluded.comm, "
    "call = excluded.call, api = excluded.api, p50_s = excluded.p50_s, p99_s = excluded.p99_s, "
    "baseline_p50_s = excluded.baseline_p50_s, baseline_p99_s = excluded.baseline_p99_s, "
    "ratio = excluded.ratio, opened_ns = excluded.opened_ns, updated_ns = excluded.updated_ns, "
    "closed_ns = excluded.closed_ns, windows = excluded.windows, summary = excluded.summary, "
    "root_cause = excluded.root_cause, effect = excluded.effect, "
    "recommendation = excluded.recommendation, contributors = excluded.contributors, "
    "evidence = excluded.evidence, sites = excluded.sites";

// SQLite integers are signed; counters past INT64_MAX (never in practice) saturate.
std::int64_t i64(std::uint64_t v) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(v > kMax ? kMax : v);
}

// Optional text: NULL when empty, so `IS NULL` finds what is unknown.
void bind_opt(Stmt& st, int i, const std::string& v) {
  if (v.empty()) {
    st.bind_null(i);
  } else {
    st.bind(i, std::string_view(v));
  }
}

// Host context and baselines: NULL when unknown (negative, resp. zero).
void bind_known(Stmt& st, int i, double v, bool known) {
  if (known) {
    st.bind(i, v);
  } else {
    st.bind_null(i);
  }
}

// A count or reading that is -1 when unknown.
void bind_int_known(Stmt& st, int i, int v) {
  if (v >= 0) {
    st.bind(i, std::int64_t{v});
  } else {
    st.bind_null(i);
  }
}

}  // namespace

std::string contributors_json(const std::vector<chains::Contributor>& contributors) {
  Json out = Json::array();
  for (const auto& c : contributors) {
    out.push_back({{"comm", c.comm},
                   {"pid", c.pid},
                   {"cgroup", c.cgroup},
                   {"role", c.role},
                   {"cpu_ns", c.cpu_ns},
                   {"count", c.count}});
    if (!c.thread.empty()) out.back()["thread"] = c.thread;
  }
  return dump_json(out);
}

std::string evidence_json(const std::vector<std::pair<std::string, double>>& evidence) {
  Json out = Json::object();
  for (const auto& [name, value] : evidence) out[name] = json_value(value);
  return dump_json(out);
}

Result<BatchWriter> BatchWriter::prepare(sqlite3* db) {
  BatchWriter w;
  w.db_ = db;
  if (int rc = sqlite3_create_function_v2(db, "sw_add_buckets", 2,
                                          SQLITE_UTF8 | SQLITE_DETERMINISTIC, nullptr,
                                          add_buckets_fn, nullptr, nullptr, nullptr);
      rc != SQLITE_OK) {
    return make_error(db_error(db), rc);
  }
  const std::pair<Stmt*, const char*> all[] = {
      {&w.windows_, kWindowSql},          {&w.cgroups_, kCgroupSql},
      {&w.processes_, kProcessSql},       {&w.process_windows_, kProcessWindowSql},
      {&w.call_windows_, kCallWindowSql}, {&w.preemptors_, kPreemptorSql},
      {&w.outliers_, kOutlierSql},        {&w.chains_, kChainSql},
      {&w.sites_, kSiteSql},              {&w.gpus_, kGpuSql},
      {&w.inflight_, kInflightSql},       {&w.memory_, kMemorySql},
      {&w.nccl_, kNcclSql},
      {&w.call_rollups_, kCallRollupSql}, {&w.process_rollups_, kProcessRollupSql},
      {&w.preemptor_rollups_, kPreemptorRollupSql}, {&w.rollup_start_, kRollupStartSql},
  };
  for (const auto& [stmt, sql] : all) {
    auto st = Stmt::prepare(db, sql);
    if (!st) return st.error();
    *stmt = std::move(*st);
  }
  return w;
}

Result<Ok> BatchWriter::done(Stmt& st) {
  int rc = st.step();
  st.reset();
  if (rc != SQLITE_DONE) return make_error(db_error(db_), sqlite3_extended_errcode(db_));
  return Ok{};
}

Result<Ok> BatchWriter::write(std::span<const WindowBatch> batches) {
  if (batches.empty()) return Ok{};
  auto r = exec(db_, "BEGIN IMMEDIATE");
  if (!r) return make_error(r.error().message, sqlite3_extended_errcode(db_));
  for (const auto& b : batches) {
    r = write_one(b);
    if (!r) break;
  }
  if (r) {
    r = exec(db_, "COMMIT");
    if (!r) r = make_error(r.error().message, sqlite3_extended_errcode(db_));
  }
  if (!r && !sqlite3_get_autocommit(db_)) (void)exec(db_, "ROLLBACK");
  return r;
}

Result<Ok> BatchWriter::write_one(const WindowBatch& b) {
  const std::int64_t ts = b.end_ns;
  const HostContext& h = b.host;
  windows_.bind(1, ts).bind(2, b.window_ns);
  bind_known(windows_, 3, h.cpu_busy, h.cpu_busy >= 0);
  bind_known(windows_, 4, h.mem_used, h.mem_used >= 0);
  bind_known(windows_, 5, h.load1, h.load1 >= 0);
  if (h.cpus > 0) {
    windows_.bind(6, std::int64_t{h.cpus});
  } else {
    windows_.bind_null(6);
  }
  if (h.swap_used_bytes >= 0) {
    windows_.bind(7, h.swap_used_bytes);
  } else {
    windows_.bind_null(7);
  }
  bind_known(windows_, 8, h.cpu_steal, h.cpu_steal >= 0);
  bind_known(windows_, 9, h.cpu_irq, h.cpu_irq >= 0);
  if (b.nccl_dropped > 0) {
    windows_.bind(10, i64(b.nccl_dropped));
  } else {
    windows_.bind_null(10);
  }
  const ProbeCostRow& pc = b.probe_cost;
  bind_known(windows_, 11, pc.pair_emulated_s, pc.pair_emulated_s >= 0);
  bind_known(windows_, 12, pc.pair_stepped_s, pc.pair_stepped_s >= 0);
  bind_known(windows_, 13, pc.workload_max, pc.workload_max >= 0);
  if (auto r = done(windows_); !r) return r;

  for (const auto& id : b.cgroups) {
    cgroups_.bind(1, std::string_view(id.cgroup));
    bind_opt(cgroups_, 2, id.container_id);
    bind_opt(cgroups_, 3, id.pod_uid);
    bind_opt(cgroups_, 4, id.runtime);
    bind_opt(cgroups_, 5, id.qos);
    bind_opt(cgroups_, 6, id.systemd_unit);
    bind_opt(cgroups_, 7, id.slurm_job);
    bind_opt(cgroups_, 8, id.slurm_step);
    cgroups_.bind(9, ts);
    bind_opt(cgroups_, 10, id.pod);
    bind_opt(cgroups_, 11, id.pod_namespace);
    bind_opt(cgroups_, 12, id.container);
    if (auto r = done(cgroups_); !r) return r;
  }

  const auto calls = trace::all_calls();
  const std::int64_t bucket = bucket_of(ts);
  if (!b.processes.empty()) {
    rollup_start_.bind(1, bucket);
    if (auto r = done(rollup_start_); !r) return r;
  }
  for (const auto& p : b.processes) {
    const std::int64_t pid = p.pid;
    processes_.bind(1, pid).bind(2, p.start_ns);
    bind_opt(processes_, 3, p.comm);
    processes_.bind(4, std::string_view(p.cgroup)).bind(5, ts);
    if (auto r = done(processes_); !r) return r;

    process_windows_.bind(1, ts).bind(2, std::string_view(p.cgroup)).bind(3, pid);
    process_windows_.bind(4, i64(p.offcpu.runnable_ns)).bind(5, i64(p.offcpu.blocked_ns));
    process_windows_.bind(6, i64(p.offcpu.oncpu_ns)).bind(7, i64(p.offcpu.preemptions));
    if (auto r = done(process_windows_); !r) return r;
    process_rollups_.bind(1, bucket).bind(2, std::string_view(p.cgroup)).bind(3, pid);
    process_rollups_.bind(4, i64(p.offcpu.runnable_ns)).bind(5, i64(p.offcpu.blocked_ns));
    process_rollups_.bind(6, i64(p.offcpu.oncpu_ns)).bind(7, i64(p.offcpu.preemptions));
    process_rollups_.bind(8, b.window_ns);
    if (auto r = done(process_rollups_); !r) return r;

    for (const auto& [call_id, t] : p.calls) {
      if (call_id >= calls.size()) continue;  // a newer BPF object than this table: no name
      const auto& info = calls[call_id];
      call_windows_.bind(1, ts).bind(2, std::string_view(p.cgroup)).bind(3, pid);
      call_windows_.bind(4, info.name).bind(5, trace::api_name(info.api));
      call_windows_.bind(6, i64(t.count)).bind(7, i64(t.sum_ns)).bind(8, i64(t.runnable_ns));
      call_windows_.bind(9, i64(t.blocked_ns)).bind(10, i64(t.max_ns));
      const std::string blob = encode_buckets(t.buckets);
      call_windows_.bind_blob(11, blob);
      if (auto r = done(call_windows_); !r) return r;
      call_rollups_.bind(1, bucket).bind(2, std::string_view(p.cgroup)).bind(3, pid);
      call_rollups_.bind(4, info.name).bind(5, trace::api_name(info.api));
      call_rollups_.bind(6, i64(t.count)).bind(7, i64(t.max_ns)).bind_blob(8, blob);
      if (auto r = done(call_rollups_); !r) return r;
    }

    // GPU memory: rows of processes that allocated, freed or failed, or hold memory.
    if (const auto& m = p.memory; m.allocated + m.freed + m.failures + m.live_total() > 0) {
      memory_.bind(1, ts).bind(2, std::string_view(p.cgroup)).bind(3, pid);
      memory_.bind(4, i64(m.allocated)).bind(5, i64(m.freed)).bind(6, i64(m.failures));
      memory_.bind(7, i64(m.live[static_cast<size_t>(trace::MemKind::kDevice)]));
      memory_.bind(8, i64(m.live[static_cast<size_t>(trace::MemKind::kManaged)]));
      memory_.bind(9, i64(m.live[static_cast<size_t>(trace::MemKind::kHost)]));
      if (auto r = done(memory_); !r) return r;
    }

    for (const auto& pr : p.preemptors) {
      preemptors_.bind(1, ts).bind(2, std::string_view(p.cgroup));
      preemptors_.bind(3, std::int64_t{pr.victim_pid}).bind(4, std::int64_t{pr.pid});
      bind_opt(preemptors_, 5, pr.comm);
      bind_opt(preemptors_, 6, pr.cgroup);
      preemptors_.bind(7, i64(pr.runnable_ns)).bind(8, i64(pr.count));
      bind_opt(preemptors_, 9, pr.thread);
      preemptors_.bind(10, std::int64_t{pr.kernel_thread ? 1 : 0});
      if (auto r = done(preemptors_); !r) return r;
      preemptor_rollups_.bind(1, bucket).bind(2, std::string_view(p.cgroup));
      preemptor_rollups_.bind(3, std::int64_t{pr.victim_pid}).bind(4, std::int64_t{pr.pid});
      preemptor_rollups_.bind(5, std::string_view(pr.comm));
      preemptor_rollups_.bind(6, std::string_view(pr.cgroup));
      preemptor_rollups_.bind(7, i64(pr.runnable_ns)).bind(8, i64(pr.count));
      if (auto r = done(preemptor_rollups_); !r) return r;
    }
  }

  for (const auto& c : b.inflight) {
    inflight_.bind(1, ts).bind(2, std::string_view(c.cgroup));
    inflight_.bind(3, std::int64_t{c.pid}).bind(4, std::int64_t{c.tid});
    bind_opt(inflight_, 5, c.thread);
    inflight_.bind(6, std::string_view(c.call)).bind(7, std::string_view(c.api));
    inflight_.bind(8, i64(c.age_ns)).bind(9, i64(c.runnable_ns)).bind(10, i64(c.blocked_ns));
    inflight_.bind(11, std::int64_t{c.preemptions}).bind(12, std::int64_t{c.on_cpu ? 1 : 0});
    if (c.world_size > 0) {
      inflight_.bind(13, std::int64_t{c.rank}).bind(14, std::int64_t{c.world_size});
    } else {
      inflight_.bind_null(13).bind_null(14);
    }
    if (auto r = done(inflight_); !r) return r;
  }

  for (const auto& n : b.nccl) {
    nccl_.bind(1, ts).bind(2, std::string_view(n.cgroup)).bind(3, std::int64_t{n.pid});
    nccl_.bind(4, trace::comm_label(n.comm_hash));
    nccl_.bind(5, std::int64_t{n.rank}).bind(6, std::int64_t{n.world_size});
    bind_opt(nccl_, 7, n.job_id);
    nccl_.bind(8, i64(n.wait_ns)).bind(9, i64(n.collectives));
    if (auto r = done(nccl_); !r) return r;
  }

  for (const auto& o : b.outliers) {
    outliers_.bind(1, o.ts_ns).bind(2, std::string_view(o.cgroup));
    outliers_.bind(3, std::int64_t{o.pid}).bind(4, std::int64_t{o.tid});
    bind_opt(outliers_, 5, o.comm);
    outliers_.bind(6, std::string_view(o.call)).bind(7, std::string_view(o.api));
    outliers_.bind(8, i64(o.duration_ns)).bind(9, i64(o.runnable_ns));
    outliers_.bind(10, i64(o.blocked_ns)).bind(11, std::int64_t{o.preemptions});
    if (auto r = done(outliers_); !r) return r;
  }

  for (const auto& s : b.sites) {
    sites_.bind(1, b.end_ns).bind(2, std::string_view(s.cgroup)).bind(3, std::int64_t{s.pid});
    bind_opt(sites_, 4, s.comm);
    sites_.bind(5, std::string_view(s.site.call));
    bind_opt(sites_, 6, s.api);
    sites_.bind(7, i64(s.site.count)).bind(8, i64(s.site.stalled_ns));
    sites_.bind(9, s.site.text());
    const chains::SiteFrame* top = s.site.user_frame();
    if (top) {
      bind_opt(sites_, 10, top->function);
      bind_opt(sites_, 11, top->python ? top->file : top->module);
      if (top->line > 0) {
        sites_.bind(12, std::int64_t{top->line});
      } else {
        sites_.bind_null(12);
      }
    } else {
      sites_.bind_null(10).bind_null(11).bind_null(12);
    }
    sites_.bind(13, s.site.folded());
    sites_.bind(14, dump_json(chains::sites_to_json({s.site})[0]));
    if (auto r = done(sites_); !r) return r;
  }

  for (const auto& g : b.gpus) {
    gpus_.bind(1, b.end_ns).bind(2, std::int64_t{g.gpu});
    bind_opt(gpus_, 3, g.uuid);
    bind_opt(gpus_, 4, g.name);
    bind_int_known(gpus_, 5, g.sm_clock_mhz);
    bind_int_known(gpus_, 6, g.sm_clock_max_mhz);
    gpus_.bind(7, g.held_share);
    bind_known(gpus_, 8, g.held_clock_mhz, g.held_clock_mhz >= 0);
    bind_opt(gpus_, 9, g.top_reason);
    bind_known(gpus_, 10, g.top_reason_share, !g.top_reason.empty());
    bind_int_known(gpus_, 11, g.temperature_c);
    bind_known(gpus_, 12, g.power_w, g.power_w >= 0);
    bind_known(gpus_, 13, g.power_limit_w, g.power_limit_w >= 0);
    gpus_.bind(14, static_cast<std::int64_t>(g.xid_codes.size()));
    std::string codes;
    for (int x : g.xid_codes) codes += (codes.empty() ? "" : ",") + std::to_string(x);
    bind_opt(gpus_, 15, codes);
    if (g.lost_since_ns > 0) {
      gpus_.bind(16, g.lost_since_ns);
    } else {
      gpus_.bind_null(16);
    }
    if (auto r = done(gpus_); !r) return r;
  }

  for (const auto& c : b.chains) {
    if (auto r = write_chain(c); !r) return r;
  }
  return Ok{};
}

Result<Ok> BatchWriter::write_chain(const chains::Chain& c) {
  Stmt& st = chains_;
  st.bind(1, std::string_view(c.id)).bind(2, chains::kind_name(c.kind));
  st.bind(3, chains::severity_name(c.severity)).bind(4, chains::severity_name(c.peak));
  st.bind(5, std::int64_t{c.open ? 1 : 0}).bind(6, std::string_view(c.identity.cgroup));
  bind_opt(st, 7, c.identity.container_id);
  bind_opt(st, 8, c.identity.pod_uid);
  if (c.pid > 0) {
    st.bind(9, std::int64_t{c.pid});
  } else {
    st.bind_null(9);
  }
  bind_opt(st, 10, c.comm);
  bind_opt(st, 11, c.call);
  bind_opt(st, 12, c.api);
  st.bind(13, c.p50_s).bind(14, c.p99_s);
  bind_known(st, 15, c.baseline_p50_s, c.baseline_p50_s > 0);
  bind_known(st, 16, c.baseline_p99_s, c.baseline_p99_s > 0);
  bind_known(st, 17, c.ratio, c.ratio > 0);
  st.bind(18, c.opened_ns).bind(19, c.updated_ns).bind(20, c.closed_ns);
  st.bind(21, i64(c.windows));
  bind_opt(st, 22, c.summary);
  bind_opt(st, 23, c.root_cause);
  bind_opt(st, 24, c.effect);
  bind_opt(st, 25, c.recommendation);
  st.bind(26, contributors_json(c.contributors)).bind(27, evidence_json(c.evidence));
  if (c.sites.empty()) {
    st.bind_null(28);
  } else {
    st.bind(28, dump_json(chains::sites_to_json(c.sites)));
  }
  return done(st);
}

}  // namespace stallwatch::store
