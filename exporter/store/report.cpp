#include "store/report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "store/schema.h"
#include "trace/histogram.h"

namespace stallwatch::store {
namespace {

// SQLite URI filenames treat '?', '#' and '%' specially; everything else may stay as is.
std::string uri_for(const std::string& path, const char* query) {
  std::string out = "file:";
  for (char c : path) {
    if (c == '?' || c == '#' || c == '%') {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += '%';
      out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xf];
      out += kHex[static_cast<unsigned char>(c) & 0xf];
    } else {
      out += c;
    }
  }
  return out + "?" + query;
}

constexpr const char* kTables[] = {"cgroups",      "processes",       "windows",
                                   "call_windows", "process_windows", "preemptor_windows",
                                   "outliers",     "chains"};

// Reads the schema; the first statement is where a WAL reader that cannot set up its -shm
// fails, so the caller looks at err to decide on the immutable fallback.
Result<Ok> check_schema(sqlite3* db, const std::string& path) {
  auto ver = Stmt::prepare(db, "PRAGMA user_version");
  if (!ver) return ver.error();
  if (int rc = ver->step(); rc != SQLITE_ROW) return make_error(db_error(db), rc);
  const std::int64_t v = ver->int64(0);
  auto st = Stmt::prepare(db,
                          "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                          "('cgroups','processes','windows','call_windows','process_windows',"
                          "'preemptor_windows','outliers','chains')");
  if (!st) return st.error();
  if (int rc = st->step(); rc != SQLITE_ROW) return make_error(db_error(db), rc);
  const bool has_tables = st->int64(0) == static_cast<std::int64_t>(std::size(kTables));
  if (v > kSchemaVersion) {
    return make_error(path + " has database schema version " + std::to_string(v) +
                      ", newer than this stallwatch reads (" + std::to_string(kSchemaVersion) +
                      "); use a newer stallwatch");
  }
  if (v == 0 || !has_tables) {
    return make_error(path +
                      " is not a stallwatch database (no stallwatch tables); pass the --db "
                      "that `stallwatch run` writes");
  }
  if (v < kSchemaVersion) {
    return make_error(path + " has database schema version " + std::to_string(v) +
                      ", older than this stallwatch reads (" + std::to_string(kSchemaVersion) +
                      "); run `stallwatch run --db " + path + "` once to upgrade it");
  }
  return Ok{};
}

// A report reads up to a day of rows once: map the file instead of copying every page through
// read(2). Harmless when mmap is unavailable (SQLite then reads as before).
void tune_reader(sqlite3* db) { (void)exec(db, "PRAGMA mmap_size = 1073741824"); }

bool wal_setup_failure(int err) {
  const int primary = err & 0xff;
  return primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY || primary == SQLITE_IOERR;
}

// Normalised --cgroup filter: "" for everything, else "/a/b" without a trailing '/'.
std::string normalise_filter(std::string f) {
  while (!f.empty() && f.back() == '/') f.pop_back();
  if (!f.empty() && f.front() != '/') f.insert(f.begin(), '/');
  return f;
}

// The SQL twin of cgroup_matches, on parameter ?3. '0' is the byte after '/', so the range
// holds exactly the paths that start with "filter/".
std::string cgroup_clause(const char* col) {
  std::string c = col;
  return " AND (?3 = '' OR " + c + " = ?3 OR (" + c + " >= (?3 || '/') AND " + c +
         " < (?3 || '0')))";
}

Result<Stmt> prepare_period(sqlite3* db, const std::string& sql, const ReportQuery& q,
                            const std::string& filter) {
  auto st = Stmt::prepare(db, sql);
  if (!st) return st.error();
  st->bind(1, q.now_ns - q.since_ns).bind(2, q.now_ns).bind(3, std::string_view(filter));
  return st;
}

double null_or(const Stmt& st, int col, double fallback) {
  return st.is_null(col) ? fallback : st.real(col);
}

std::uint64_t u64(const Stmt& st, int col) {
  const std::int64_t v = st.int64(col);
  return v > 0 ? static_cast<std::uint64_t>(v) : 0;
}

// Each GPU over the period, host-wide (a GPU is no cgroup's): readings, the reason that held its
// clock longest, Xid codes counted.
Result<Ok> load_gpus(sqlite3* db, const ReportQuery& q, std::vector<GpuSummary>& out) {
  auto st = prepare_period(
      db,
      "SELECT gpu, max(uuid), max(name), count(*), avg(sm_clock_mhz), min(sm_clock_mhz), "
      "max(sm_clock_max_mhz), avg(held_share), max(temperature_c), max(power_w), "
      "max(power_limit_w), group_concat(xid_codes), min(power_limit_w), "
      "(SELECT l.lost_since_ns FROM gpu_windows l WHERE l.gpu = gpu_windows.gpu AND "
      "l.ts_ns > ?1 AND l.ts_ns <= ?2 ORDER BY l.ts_ns DESC LIMIT 1) FROM gpu_windows "
      "WHERE ts_ns > ?1 AND ts_ns <= ?2 GROUP BY gpu ORDER BY gpu LIMIT 64",
      q, "");
  if (!st) return st.error();
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) {
    GpuSummary g;
    g.gpu = static_cast<unsigned>(st->int64(0));
    g.uuid = st->is_null(1) ? "" : st->text(1);
    g.name = st->is_null(2) ? "" : st->text(2);
    g.windows = u64(*st, 3);
    g.sm_clock_mhz = null_or(*st, 4, -1);
    g.sm_clock_min_mhz = null_or(*st, 5, -1);
    g.sm_clock_max_mhz = null_or(*st, 6, -1);
    g.held_share = null_or(*st, 7, 0);
    g.temperature_max_c = null_or(*st, 8, -1);
    g.power_max_w = null_or(*st, 9, -1);
    g.power_limit_w = null_or(*st, 10, -1);
    g.power_limit_min_w = null_or(*st, 12, -1);
    g.lost_since_ns = st->is_null(13) ? 0 : st->int64(13);
    std::map<int, std::uint64_t> codes;
    if (!st->is_null(11)) {
      const std::string text = st->text(11);
      const char* p = text.data();
      const char* end = p + text.size();
      while (p < end) {
        int code = 0;
        const auto [next, ec] = std::from_chars(p, end, code);
        if (ec == std::errc()) ++codes[code];
        p = std::find(next, end, ',');
        if (p < end) ++p;
      }
    }
    g.xids.assign(codes.begin(), codes.end());
    out.push_back(std::move(g));
  }
  if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
  auto top = prepare_period(
      db,
      "SELECT gpu, top_reason, sum(top_reason_share) FROM gpu_windows "
      "WHERE ts_ns > ?1 AND ts_ns <= ?2 AND top_reason IS NOT NULL "
      "GROUP BY gpu, top_reason ORDER BY gpu, 3 DESC, top_reason",
      q, "");
  if (!top) return top.error();
  while ((rc = top->step()) == SQLITE_ROW) {
    const auto gpu = static_cast<unsigned>(top->int64(0));
    for (auto& g : out) {
      if (g.gpu != gpu || !g.top_reason.empty() || g.windows == 0) continue;
      g.top_reason = top->text(1);
      g.top_reason_share = top->real(2) / static_cast<double>(g.windows);
    }
  }
  if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
  return Ok{};
}

Result<Ok> load_host(sqlite3* db, const ReportQuery& q, HostSummary& h) {
  auto st = prepare_period(
      db,
      "SELECT count(*), min(ts_ns), max(ts_ns), avg(CASE WHEN cpu_busy >= 0 THEN cpu_busy END), "
      "avg(CASE WHEN mem_used >= 0 THEN mem_used END), avg(CASE WHEN load1 >= 0 THEN load1 END), "
      "max(cpus), avg(CASE WHEN swap_used_bytes >= 0 THEN swap_used_bytes END), "
      "avg(CASE WHEN cpu_steal >= 0 THEN cpu_steal END), "
      "avg(CASE WHEN cpu_irq >= 0 THEN cpu_irq END), "
      "avg(probe_pair_emulated_s), avg(probe_pair_stepped_s), max(probe_cost_max), "
      "avg(probe_cost_max) "
      "FROM windows WHERE ts_ns > ?1 AND ts_ns <= ?2",
      q, "");
  if (!st) return st.error();
  if (st->step() != SQLITE_ROW) return make_error(db_error(db));
  h.windows = u64(*st, 0);
  h.first_ns = st->int64(1);
  h.last_ns = st->int64(2);
  h.cpu_busy = null_or(*st, 3, -1);
  h.mem_used = null_or(*st, 4, -1);
  h.load1 = null_or(*st, 5, -1);
  h.cpus = static_cast<int>(st->int64(6));
  h.swap_used_bytes = null_or(*st, 7, -1);
  h.cpu_steal = null_or(*st, 8, -1);
  h.cpu_irq = null_or(*st, 9, -1);
  h.probe_pair_emulated_s = null_or(*st, 10, -1);
  h.probe_pair_stepped_s = null_or(*st, 11, -1);
  h.probe_cost_max = null_or(*st, 12, -1);
  h.probe_cost_mean = null_or(*st, 13, -1);
  if (auto g = load_gpus(db, q, h.gpus); !g) return g.error();
  auto newest = Stmt::prepare(db, "SELECT max(ts_ns) FROM windows");
  if (!newest) return newest.error();
  if (newest->step() != SQLITE_ROW) return make_error(db_error(db));
  h.newest_ns = newest->int64(0);
  return Ok{};
}

Result<Ok> load_json_parts(sqlite3* db, std::vector<ReportChain>& chains,
                           const std::vector<std::pair<std::string, std::string>>& json) {
  auto contrib = Stmt::prepare(
      db,
      "SELECT json_extract(value, '$.comm'), json_extract(value, '$.pid'), "
      "json_extract(value, '$.cgroup'), json_extract(value, '$.role'), "
      "json_extract(value, '$.cpu_ns'), json_extract(value, '$.count'), "
      "json_extract(value, '$.thread') "
      "FROM json_each(CASE WHEN json_valid(?1) THEN ?1 ELSE '[]' END) WHERE type = 'object'");
  if (!contrib) return contrib.error();
  auto evidence = Stmt::prepare(
      db,
      "SELECT key, value FROM json_each(CASE WHEN json_valid(?1) THEN CASE WHEN json_type(?1) = "
      "'object' THEN ?1 ELSE '{}' END ELSE '{}' END) WHERE type IN ('integer', 'real')");
  if (!evidence) return evidence.error();
  for (size_t i = 0; i < chains.size(); i++) {
    contrib->reset();
    contrib->bind(1, std::string_view(json[i].first));
    int rc;
    while ((rc = contrib->step()) == SQLITE_ROW) {
      chains::Contributor c;
      c.comm = contrib->text(0);
      c.pid = static_cast<int>(contrib->int64(1));
      c.cgroup = contrib->text(2);
      c.role = contrib->text(3);
      c.cpu_ns = u64(*contrib, 4);
      c.count = u64(*contrib, 5);
      c.thread = contrib->text(6);
      chains[i].contributors.push_back(std::move(c));
    }
    if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
    evidence->reset();
    evidence->bind(1, std::string_view(json[i].second));
    while ((rc = evidence->step()) == SQLITE_ROW) {
      chains[i].evidence.emplace_back(evidence->text(0), evidence->real(1));
    }
    if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
  }
  return Ok{};
}

// Schema 8 added chains.sites and outlier_sites.
bool has_sites(sqlite3* db) {
  auto v = schema_version(db);
  return v && *v >= 8;
}

// Each process's top sites over the period, from outlier_sites.
Result<Ok> load_process_sites(sqlite3* db, const ReportQuery& q, const std::string& filter,
                              std::vector<ProcessStats>& processes) {
  if (!has_sites(db) || processes.empty()) return Ok{};
  std::map<std::pair<std::string, int>, std::vector<chains::ResolvedSite>> by;
  auto st = prepare_period(db,
                           "SELECT cgroup, pid, frames, count, stalled_ns FROM outlier_sites "
                           "WHERE ts_ns > ?1 AND ts_ns <= ?2" + cgroup_clause("cgroup"),
                           q, filter);
  if (!st) return st.error();
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) {
    auto parsed = chains::sites_from_json("[" + st->text(2) + "]");
    if (parsed.empty()) continue;
    chains::ResolvedSite r;
    r.pid = static_cast<int>(st->int64(1));
    r.site = std::move(parsed[0]);
    r.site.count = u64(*st, 3);
    r.site.stalled_ns = u64(*st, 4);
    by[{st->text(0), r.pid}].push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
  for (auto& p : processes) {
    auto it = by.find({p.cgroup, p.pid});
    if (it != by.end()) p.sites = chains::top_sites(it->second, p.pid, 0, "");
  }
  return Ok{};
}

Result<Ok> load_chains(sqlite3* db, const ReportQuery& q, const std::string& filter,
                       std::vector<ReportChain>& out) {
  auto st = prepare_period(
      db,
      "SELECT id, kind, severity, coalesce(peak, severity), open, cgroup, container_id, pod_uid, "
      "pid, comm, call, api, p50_s, p99_s, baseline_p50_s, baseline_p99_s, ratio, opened_ns, "
      "updated_ns, closed_ns, windows, summary, root_cause, effect, recommendation, contributors, "
      "evidence, " + std::string(has_sites(db) ? "sites" : "NULL") +
          " FROM chains WHERE opened_ns <= ?2 AND (updated_ns > ?1 OR closed_ns > ?1)" +
          cgroup_clause("cgroup"),
      q, filter);
  if (!st) return st.error();
  std::vector<std::pair<std::string, std::string>> json;
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) {
    ReportChain c;
    c.id = st->text(0);
    c.kind = st->text(1);
    c.severity = st->text(2);
    c.peak = st->text(3);
    c.open = st->int64(4) != 0;
    c.cgroup = st->text(5);
    c.container_id = st->text(6);
    c.pod_uid = st->text(7);
    c.pid = static_cast<int>(st->int64(8));
    c.comm = st->text(9);
    c.call = st->text(10);
    c.api = st->text(11);
    c.p50_s = st->real(12);
    c.p99_s = st->real(13);
    c.baseline_p50_s = st->real(14);
    c.baseline_p99_s = st->real(15);
    c.ratio = st->real(16);
    c.opened_ns = st->int64(17);
    c.updated_ns = st->int64(18);
    c.closed_ns = c.open ? 0 : st->int64(19);
    c.windows = u64(*st, 20);
    c.summary = st->text(21);
    c.root_cause = st->text(22);
    c.effect = st->text(23);
    c.recommendation = st->text(24);
    json.emplace_back(st->text(25), st->text(26));
    if (!st->is_null(27)) c.sites = chains::sites_from_json(st->text(27));
    out.push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
  return load_json_parts(db, out, json);
}

struct KeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Small ids for repeated strings (cgroup paths, call names, comms), so that aggregating a day of
// rows hashes integers; SQL GROUP BY over long paths sorts and is several times slower.
class Interner {
 public:
  std::uint32_t id(std::string_view s) {
    if (!names_.empty() && names_[last_] == s) return last_;  // rows come in runs
    auto it = ids_.find(s);
    if (it == ids_.end()) {
      it = ids_.emplace(std::string(s), static_cast<std::uint32_t>(names_.size())).first;
      names_.emplace_back(s);
    }
    return last_ = it->second;
  }
  const std::string& name(std::uint32_t id) const { return names_[id]; }

 private:
  std::unordered_map<std::string, std::uint32_t, KeyHash, std::equal_to<>> ids_;
  std::vector<std::string> names_;
  std::uint32_t last_ = 0;
};

std::string_view column_view(const Stmt& st, int col) {
  const unsigned char* t = sqlite3_column_text(st.get(), col);
  return t ? std::string_view(reinterpret_cast<const char*>(t),
                              static_cast<size_t>(sqlite3_column_bytes(st.get(), col)))
           : std::string_view();
}

std::uint64_t proc_key(std::uint32_t cgroup, std::int64_t pid) {
  return static_cast<std::uint64_t>(cgroup) << 32 | static_cast<std::uint32_t>(pid);
}

// Runs a period query and hands each row to `row`.
template <typename F>
Result<Ok> each_row(sqlite3* db, const std::string& sql, const ReportQuery& q,
                    const std::string& filter, F&& row) {
  auto st = prepare_period(db, sql, q, filter);
  if (!st) return st.error();
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) row(*st);
  if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
  return Ok{};
}

Result<Ok> load_traced(sqlite3* db, const ReportQuery& q, const std::string& filter,
                       std::vector<TracedCgroup>& out) {
  Interner cgroups;
  std::vector<TracedCgroup> by;
  std::unordered_set<std::uint64_t> seen;
  auto at = [&](std::string_view cgroup) -> std::pair<std::uint32_t, TracedCgroup&> {
    const std::uint32_t id = cgroups.id(cgroup);
    if (id >= by.size()) by.resize(id + 1);
    return {id, by[id]};
  };
  auto r = each_row(db,
                    "SELECT cgroup, pid FROM process_windows WHERE ts_ns > ?1 AND ts_ns <= ?2" +
                        cgroup_clause("cgroup"),
                    q, filter, [&](const Stmt& st) {
                      auto [id, t] = at(column_view(st, 0));
                      if (seen.insert(proc_key(id, st.int64(1))).second) t.processes++;
                    });
  if (!r) return r.error();
  r = each_row(db,
               "SELECT cgroup, count FROM call_windows WHERE ts_ns > ?1 AND ts_ns <= ?2" +
                   cgroup_clause("cgroup"),
               q, filter,
               [&](const Stmt& st) { at(column_view(st, 0)).second.calls += u64(st, 1); });
  if (!r) return r.error();
  for (std::uint32_t id = 0; id < by.size(); id++) {
    by[id].cgroup = cgroups.name(id);
    out.push_back(std::move(by[id]));
  }
  std::sort(out.begin(), out.end(), [](const TracedCgroup& a, const TracedCgroup& b) {
    return std::tie(b.calls, a.cgroup) < std::tie(a.calls, b.cgroup);
  });
  return Ok{};
}

struct CallAgg {
  std::uint32_t call = 0;
  std::string api;
  std::uint64_t count = 0;
  std::uint64_t max_ns = 0;
  trace::KernelBuckets buckets{};
};

struct PreemptorAgg {
  std::int64_t pid = 0;
  std::uint32_t comm = 0, cgroup = 0;
  std::uint64_t cpu_ns = 0, count = 0;
};

struct ProcAgg {
  ProcessStats stats;
  std::vector<std::pair<std::int64_t, std::uint64_t>> live;  // (ts, live bytes), memory_growth
  std::vector<CallAgg> calls;  // a handful per process: linear search beats hashing
  std::vector<PreemptorAgg> preemptors;
};

// Everything --per-process reads, aggregated per (cgroup, pid) in one pass over each table.
// Call histograms are merged bucket by bucket, so p50/p99 are true quantiles of the period,
// not averages of the windows' quantiles.
// The part of the period that whole rollup buckets cover (schema 7): [first, end) of bucket
// starts, empty when none. A bucket counts when it lies inside the period, the writer rolled up
// all its windows (rollup_meta) and no window of it has been pruned (the oldest window's bucket
// may have lost some).
struct RollupRange {
  std::int64_t first = 0, end = 0;
  bool empty() const { return end <= first; }
};

Result<RollupRange> rollup_range(sqlite3* db, const ReportQuery& q) {
  RollupRange out;
  if (!q.rollups) return out;
  auto st = Stmt::prepare(db, "SELECT (SELECT since_ns FROM rollup_meta), "
                              "(SELECT min(ts_ns) FROM windows)");
  if (!st) return st.error();
  if (st->step() != SQLITE_ROW) return make_error(db_error(db));
  if (st->is_null(0) || st->is_null(1)) return out;
  const std::int64_t start = q.now_ns - q.since_ns;  // the period is (start, now]
  auto ceil_to = [](std::int64_t v) {
    const std::int64_t b = v / kRollupNs * kRollupNs;
    return b < v ? b + kRollupNs : b;
  };
  const std::int64_t oldest = st->int64(1);
  out.first = std::max({st->int64(0), ceil_to(start), (oldest - 1) / kRollupNs * kRollupNs + kRollupNs});
  out.end = q.now_ns / kRollupNs * kRollupNs;  // B < end ⟺ B + kRollupNs <= now
  return out;
}

// (a, b] as a query of the same filter.
ReportQuery slice(const ReportQuery& q, std::int64_t a, std::int64_t b) {
  ReportQuery s = q;
  s.now_ns = b;
  s.since_ns = b - a;
  return s;
}

// Everything --per-process reads, aggregated per (cgroup, pid) in one pass over each table.
// Call histograms are merged bucket by bucket, so p50/p99 are true quantiles of the period,
// not averages of the windows' quantiles. Whole 5-minute buckets inside the period come from the
// rollups (schema 7), the edges from the windows: the same sums with ~60x fewer rows.
Result<Ok> load_processes(sqlite3* db, const ReportQuery& q, const std::string& filter,
                          std::vector<ProcessStats>& out) {
  Interner cgroups, names;
  std::unordered_map<std::uint64_t, ProcAgg> procs;
  auto proc = [&](const Stmt& st, int cgroup_col, int pid_col) -> ProcAgg& {
    return procs[proc_key(cgroups.id(column_view(st, cgroup_col)), st.int64(pid_col))];
  };
  auto range = rollup_range(db, q);
  if (!range) return range.error();
  // The raw parts of the period, and the rollup buckets as the (a, b] the statements take.
  std::vector<ReportQuery> raw, rolled;
  const std::int64_t start = q.now_ns - q.since_ns;
  if (range->empty()) {
    raw.push_back(q);
  } else {
    if (range->first > start) raw.push_back(slice(q, start, range->first));
    if (q.now_ns > range->end) raw.push_back(slice(q, range->end, q.now_ns));
    rolled.push_back(slice(q, range->first - 1, range->end - 1));  // first <= B < end
  }
  auto process_row = [&](const Stmt& st) {
    ProcessStats& p = proc(st, 0, 1).stats;
    p.runnable_ns += u64(st, 2);
    p.blocked_ns += u64(st, 3);
    p.preemptions += u64(st, 4);
    p.wall_ns += u64(st, 5);
    p.oncpu_ns += u64(st, 6);
  };
  auto call_row = [&](const Stmt& st) {
    ProcAgg& p = proc(st, 0, 1);
    const std::uint32_t call = names.id(column_view(st, 2));
    auto it = std::find_if(p.calls.begin(), p.calls.end(),
                           [&](const CallAgg& c) { return c.call == call; });
    if (it == p.calls.end()) {
      p.calls.push_back(CallAgg{call, st.text(3), 0, 0, {}});
      it = p.calls.end() - 1;
    }
    it->count += u64(st, 4);
    it->max_ns = std::max(it->max_ns, u64(st, 5));
    const auto b = decode_buckets(st.blob(6));
    for (size_t k = 0; k < b.size(); k++) it->buckets[k] += b[k];
  };
  auto preemptor_row = [&](const Stmt& st) {
    ProcAgg& p = proc(st, 0, 1);
    const std::int64_t pid = st.int64(2);
    const std::uint32_t comm = names.id(column_view(st, 3));
    const std::uint32_t cg = cgroups.id(column_view(st, 4));
    auto it = std::find_if(p.preemptors.begin(), p.preemptors.end(), [&](const PreemptorAgg& a) {
      return a.pid == pid && a.comm == comm && a.cgroup == cg;
    });
    if (it == p.preemptors.end()) {
      p.preemptors.push_back(PreemptorAgg{pid, comm, cg, 0, 0});
      it = p.preemptors.end() - 1;
    }
    it->cpu_ns += u64(st, 5);
    it->count += u64(st, 6);
  };
  Result<Ok> r = Ok{};
  for (const auto& part : raw) {
    r = each_row(db,
                 "SELECT p.cgroup, p.pid, p.runnable_ns, p.blocked_ns, p.preemptions, "
                 "w.window_ns, p.oncpu_ns "
                 "FROM process_windows p LEFT JOIN windows w ON w.ts_ns = p.ts_ns "
                 "WHERE p.ts_ns > ?1 AND p.ts_ns <= ?2" +
                     cgroup_clause("p.cgroup"),
                 part, filter, process_row);
    if (!r) return r.error();
    r = each_row(db,
                 "SELECT cgroup, pid, call, api, count, max_ns, buckets FROM call_windows "
                 "WHERE ts_ns > ?1 AND ts_ns <= ?2" +
                     cgroup_clause("cgroup"),
                 part, filter, call_row);
    if (!r) return r.error();
    r = each_row(db,
                 "SELECT cgroup, victim_pid, pid, comm, preemptor_cgroup, runnable_ns, count "
                 "FROM preemptor_windows WHERE ts_ns > ?1 AND ts_ns <= ?2" +
                     cgroup_clause("cgroup"),
                 part, filter, preemptor_row);
    if (!r) return r.error();
  }
  for (const auto& part : rolled) {
    r = each_row(db,
                 "SELECT cgroup, pid, runnable_ns, blocked_ns, preemptions, wall_ns, oncpu_ns "
                 "FROM process_rollups WHERE bucket_ns > ?1 AND bucket_ns <= ?2" +
                     cgroup_clause("cgroup"),
                 part, filter, process_row);
    if (!r) return r.error();
    r = each_row(db,
                 "SELECT cgroup, pid, call, api, count, max_ns, buckets FROM call_rollups "
                 "WHERE bucket_ns > ?1 AND bucket_ns <= ?2" +
                     cgroup_clause("cgroup"),
                 part, filter, call_row);
    if (!r) return r.error();
    r = each_row(db,
                 "SELECT cgroup, victim_pid, pid, comm, preemptor_cgroup, runnable_ns, count "
                 "FROM preemptor_rollups WHERE bucket_ns > ?1 AND bucket_ns <= ?2" +
                     cgroup_clause("cgroup"),
                 part, filter, preemptor_row);
    if (!r) return r.error();
  }
  r = each_row(
      db,
      "SELECT cgroup, pid, max(duration_ns) FROM outliers WHERE ts_ns > ?1 AND ts_ns <= ?2" +
          cgroup_clause("cgroup") + " GROUP BY cgroup, pid",
      q, filter, [&](const Stmt& st) {
        const std::int64_t pid = st.int64(1);
        const std::string_view cgroup = column_view(st, 0);
        for (auto& [key, agg] : procs) {
          if (static_cast<std::uint32_t>(key) != static_cast<std::uint32_t>(pid)) continue;
          if (!cgroup.empty() && cgroups.name(static_cast<std::uint32_t>(key >> 32)) != cgroup) {
            continue;
          }
          agg.stats.worst_stall_ns = std::max(agg.stats.worst_stall_ns, u64(st, 2));
        }
      });
  if (!r) return r.error();

  // GPU memory (schema 6).
  {
    r = each_row(db,
                 "SELECT cgroup, pid, ts_ns, allocated, freed, failures, live_device, "
                 "live_managed, live_host FROM memory_windows WHERE ts_ns > ?1 AND ts_ns <= ?2" +
                     cgroup_clause("cgroup") + " ORDER BY ts_ns",
                 q, filter, [&](const Stmt& st) {
                   ProcAgg& p = proc(st, 0, 1);
                   MemoryStats& m = p.stats.memory;
                   m.allocated += u64(st, 3);
                   m.freed += u64(st, 4);
                   m.failures += u64(st, 5);
                   m.live_device = u64(st, 6);
                   m.live_managed = u64(st, 7);
                   m.live_host = u64(st, 8);
                   m.peak = std::max(m.peak, m.live());
                   p.live.emplace_back(st.int64(2), m.live());
                 });
    if (!r) return r.error();
  }

  // comm: the newest processes row of that pid, preferring one in the same cgroup.
  std::map<std::pair<std::string, int>, std::string> exact;
  std::map<int, std::string> by_pid;
  r = each_row(db,
               "SELECT cgroup, pid, comm FROM processes WHERE last_seen_ns > ?1 AND "
               "first_seen_ns <= ?2 AND comm IS NOT NULL ORDER BY last_seen_ns",
               q, filter, [&](const Stmt& st) {
                 const int pid = static_cast<int>(st.int64(1));
                 exact[{st.text(0), pid}] = st.text(2);
                 by_pid[pid] = st.text(2);
               });
  if (!r) return r.error();

  for (auto& [key, agg] : procs) {
    ProcessStats& p = agg.stats;
    p.memory.growth = chains::memory_growth(agg.live);
    p.cgroup = cgroups.name(static_cast<std::uint32_t>(key >> 32));
    p.pid = static_cast<int>(static_cast<std::uint32_t>(key));
    if (auto it = exact.find({p.cgroup, p.pid}); it != exact.end()) {
      p.comm = it->second;
    } else if (auto it2 = by_pid.find(p.pid); it2 != by_pid.end()) {
      p.comm = it2->second;
    }
    for (const auto& a : agg.calls) {
      p.calls.push_back(CallStats{
          names.name(a.call), a.api, a.count, trace::quantile_seconds(a.buckets, 0.50, a.max_ns),
          trace::quantile_seconds(a.buckets, 0.99, a.max_ns), static_cast<double>(a.max_ns) / 1e9});
      p.worst_stall_ns = std::max(p.worst_stall_ns, a.max_ns);
    }
    std::sort(p.calls.begin(), p.calls.end(), [](const CallStats& a, const CallStats& b) {
      return std::tie(b.count, a.call) < std::tie(a.count, b.call);
    });
    for (const auto& a : agg.preemptors) {
      p.preemptors.push_back(Preemptor{names.name(a.comm), static_cast<int>(a.pid),
                                       cgroups.name(a.cgroup), a.cpu_ns, a.count});
    }
    std::sort(p.preemptors.begin(), p.preemptors.end(), [](const Preemptor& a, const Preemptor& b) {
      return std::tie(b.cpu_ns, b.count, a.pid) < std::tie(a.cpu_ns, a.count, b.pid);
    });
    if (p.preemptors.size() > kTopPreemptors) p.preemptors.resize(kTopPreemptors);
    out.push_back(std::move(p));
  }
  auto calls_of = [](const ProcessStats& p) {
    std::uint64_t n = 0;
    for (const auto& c : p.calls) n += c.count;
    return n;
  };
  std::sort(out.begin(), out.end(), [&](const ProcessStats& a, const ProcessStats& b) {
    return std::make_tuple(b.offcpu_ns(), calls_of(b), a.pid, a.cgroup) <
           std::make_tuple(a.offcpu_ns(), calls_of(a), b.pid, b.cgroup);
  });
  return Ok{};
}

int severity_rank(const std::string& s) {
  auto sev = chains::severity_from_name(s);
  return sev ? static_cast<int>(*sev) : -1;
}

// One snapshot for every query, so a report read while the daemon writes is consistent.
class ReadTransaction {
 public:
  explicit ReadTransaction(sqlite3* db) : db_(db) { ok_ = exec(db_, "BEGIN").ok(); }
  ~ReadTransaction() {
    if (ok_) (void)exec(db_, "COMMIT");
  }
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;

 private:
  sqlite3* db_;
  bool ok_ = false;
};

}  // namespace

std::string period_cgroup_clause(const char* column) { return cgroup_clause(column); }

Result<Ok> each_period_row(sqlite3* db, const std::string& sql, const ReportQuery& query,
                           const std::function<void(const Stmt&)>& row) {
  return each_row(db, sql, query, normalise_filter(query.cgroup), row);
}

bool cgroup_matches(const std::string& filter, const std::string& path) {
  const std::string f = normalise_filter(filter);
  if (f.empty() || path == f) return true;
  return path.size() > f.size() && path.compare(0, f.size(), f) == 0 && path[f.size()] == '/';
}

void sort_chains(std::vector<ReportChain>& chains) {
  std::sort(chains.begin(), chains.end(), [](const ReportChain& a, const ReportChain& b) {
    const auto ka = std::make_tuple(a.open, severity_rank(a.severity), a.updated_ns);
    const auto kb = std::make_tuple(b.open, severity_rank(b.severity), b.updated_ns);
    if (ka != kb) return ka > kb;
    return a.id < b.id;
  });
}

PrivateDir::~PrivateDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

Result<DbPtr> open_checked(const std::string& uri, const std::string& path) {
  auto db = open_db(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX);
  if (!db) return db.error();
  if (auto r = check_schema(db->get(), path); !r) return r.error();
  tune_reader(db->get());
  return db;
}

// PATH and PATH-wal copied into a fresh directory under $TMPDIR, where SQLite can create the
// -shm it needs to read the -wal.
Result<ReportDb> open_private_copy(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string tmpl = (fs::temp_directory_path(ec) / "stallwatch-explain.XXXXXX").string();
  if (ec || ::mkdtemp(tmpl.data()) == nullptr) {
    return make_error("cannot create a private directory in " + tmpl, errno);
  }
  ReportDb out;
  out.copy = std::make_unique<PrivateDir>(tmpl);
  const std::string copy = tmpl + "/stallwatch.db";
  fs::copy_file(path, copy, ec);
  if (!ec) fs::copy_file(path + "-wal", copy + "-wal", ec);
  if (ec) return make_error("cannot copy " + path + " to " + tmpl + ": " + ec.message());
  auto db = open_checked(uri_for(copy, "mode=ro"), path);
  if (!db) return db.error();
  out.db = std::move(*db);
  return out;
}

}  // namespace

Result<ReportDb> open_report_db(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return make_error("no database at " + path +
                            "; start `stallwatch run` (or `stallwatch demo "
                            "incident --db " +
                            path + "`) or pass --db",
                        ENOENT);
    }
    return make_error("cannot read database " + path + ": " + std::strerror(errno), errno);
  }
  if (S_ISDIR(st.st_mode)) {
    return make_error(path + " is a directory; pass the database file with --db", EISDIR);
  }
  auto db = open_checked(uri_for(path, "mode=ro"), path);
  if (db) {
    ReportDb out;
    out.db = std::move(*db);
    return out;
  }
  if (!wal_setup_failure(db.error().err)) return db.error();
  // The WAL reader could not set up its -shm here (read-only directory or copy).
  const std::string why = db.error().message;
  struct stat wal {};
  const bool has_wal =
      ::stat((path + "-wal").c_str(), &wal) == 0 && S_ISREG(wal.st_mode) && wal.st_size > 0;
  std::string copy_failed;
  if (has_wal) {
    auto copy = open_private_copy(path);
    if (copy) {
      copy->note = "note: read a private copy of " + path + " and its -wal (" + why + ")";
      return copy;
    }
    copy_failed = copy.error().message;
  }
  // Without a -wal the main file is all there is: read it as it is.
  auto imm = open_checked(uri_for(path, "immutable=1"), path);
  if (!imm) return imm.error();
  ReportDb out;
  out.db = std::move(*imm);
  out.immutable = true;
  out.note = "note: " + path + " opened as immutable (" + why + ")";
  if (has_wal) {
    out.note += "; the " + std::to_string((wal.st_size + 1023) / 1024) + " KiB in " + path +
                "-wal were not read (" + copy_failed + "): copy both files to a writable directory";
  }
  return out;
}

// Kubernetes names of every cgroup that has them; nothing from a database older than schema 3.
Result<Ok> load_names(sqlite3* db, std::map<std::string, WorkloadNames>& out) {
  auto has = Stmt::prepare(db, "SELECT count(*) FROM pragma_table_info('cgroups') WHERE name = 'pod'");
  if (!has) return has.error();
  if (has->step() != SQLITE_ROW) return make_error(db_error(db));
  if (has->int64(0) == 0) return Ok{};
  auto st = Stmt::prepare(
      db, "SELECT path, pod, namespace, container FROM cgroups WHERE pod IS NOT NULL");
  if (!st) return st.error();
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) {
    out[st->text(0)] = WorkloadNames{st->text(1), st->text(2), st->text(3)};
  }
  if (rc != SQLITE_DONE) return make_error(db_error(db));
  return Ok{};
}

Result<Report> load_report(sqlite3* db, const ReportQuery& query) {
  Report r;
  r.query = query;
  const std::string filter = normalise_filter(query.cgroup);
  r.query.cgroup = filter;
  ReadTransaction txn(db);
  if (auto x = load_host(db, query, r.host); !x) return x.error();
  if (auto x = load_chains(db, query, filter, r.chains); !x) return x.error();
  if (auto x = load_names(db, r.names); !x) return x.error();
  for (auto& c : r.chains) {
    if (auto it = r.names.find(c.cgroup); it != r.names.end()) {
      c.pod = it->second.pod;
      c.pod_namespace = it->second.pod_namespace;
      c.container = it->second.container;
    }
  }
  sort_chains(r.chains);
  {
    std::vector<NcclWindow> nccl;
    if (auto x = load_nccl_windows(db, query, filter, nccl); !x) return x.error();
    r.nccl_waits = judge_nccl_waits(nccl, r.chains);
  }
  if (r.chains.empty()) {
    if (auto x = load_traced(db, query, filter, r.traced); !x) return x.error();
  }
  if (query.per_process) {
    if (auto x = load_processes(db, query, filter, r.processes); !x) return x.error();
    if (auto x = load_process_sites(db, query, filter, r.processes); !x) return x.error();
  }
  return r;
}

}  // namespace stallwatch::store
