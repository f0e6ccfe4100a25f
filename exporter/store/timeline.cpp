#include "store/timeline.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "store/schema.h"
#include "trace/histogram.h"

namespace stallwatch::store {
namespace {

std::uint64_t u64(const Stmt& st, int col) {
  const std::int64_t v = st.int64(col);
  return v > 0 ? static_cast<std::uint64_t>(v) : 0;
}

// ?4: the pid filter (0: all).
std::string pid_clause(const char* column) {
  return std::string(" AND (?4 = 0 OR ") + column + " = ?4)";
}

}  // namespace

Result<Timeline> load_timeline(sqlite3* db, const TimelineQuery& q) {
  Timeline t;
  t.from_ns = q.period.now_ns - q.period.since_ns;
  t.to_ns = q.period.now_ns;
  std::map<int, TimelineProcess> procs;
  auto note_process = [&](int pid, const std::string& cgroup) {
    auto& p = procs[pid];
    p.pid = pid;
    if (p.cgroup.empty()) p.cgroup = cgroup;
  };
  auto run = [&](const std::string& sql, const std::function<void(const Stmt&)>& row) {
    return each_period_row(db, sql, q.period, row);
  };
  // each_period_row binds ?1..?3 and prepares the statement itself: the pid filter is spelled
  // into the SQL (an integer, never text from outside).
  const std::string pid = std::to_string(q.pid);
  auto with_pid = [&](std::string sql) {
    for (size_t p; (p = sql.find("?4")) != std::string::npos;) sql.replace(p, 2, pid);
    return sql;
  };

  auto r = run(with_pid("SELECT ts_ns, cgroup, pid, tid, comm, call, api, duration_ns, "
                        "runnable_ns, blocked_ns, preemptions FROM outliers "
                        "WHERE ts_ns > ?1 AND ts_ns <= ?2" +
                        period_cgroup_clause("cgroup") + pid_clause("pid") + " ORDER BY ts_ns"),
               [&](const Stmt& st) {
                 if (t.calls.size() >= q.max_calls) {
                   ++t.calls_left_out;
                   return;
                 }
                 TimelineCall c;
                 c.end_ns = st.int64(0);
                 c.pid = static_cast<int>(st.int64(2));
                 c.tid = static_cast<int>(st.int64(3));
                 c.thread = st.text(4);
                 c.call = st.text(5);
                 c.api = st.text(6);
                 c.start_ns = c.end_ns - static_cast<std::int64_t>(u64(st, 7));
                 c.runnable_ns = u64(st, 8);
                 c.blocked_ns = u64(st, 9);
                 c.preemptions = u64(st, 10);
                 note_process(c.pid, st.text(1));
                 t.calls.push_back(std::move(c));
               });
  if (!r) return r.error();
  std::stable_sort(t.calls.begin(), t.calls.end(), [](const TimelineCall& a, const TimelineCall& b) {
    return a.start_ns < b.start_ns;
  });

  r = run(with_pid("SELECT p.ts_ns, w.window_ns, p.cgroup, p.pid, p.runnable_ns, p.blocked_ns, "
                   "p.oncpu_ns FROM process_windows p JOIN windows w ON w.ts_ns = p.ts_ns "
                   "WHERE p.ts_ns > ?1 AND p.ts_ns <= ?2" +
                   period_cgroup_clause("p.cgroup") + pid_clause("p.pid") + " ORDER BY p.ts_ns"),
          [&](const Stmt& st) {
            const int pid = static_cast<int>(st.int64(3));
            const double runnable = static_cast<double>(u64(st, 4));
            const double blocked = static_cast<double>(u64(st, 5));
            const double total = runnable + blocked + static_cast<double>(u64(st, 6));
            if (total <= 0) return;
            const std::int64_t start = st.int64(0) - st.int64(1);
            note_process(pid, st.text(2));
            t.samples.push_back({pid, "off-CPU runnable", CounterUnit::kRatio, start, runnable / total});
            t.samples.push_back({pid, "off-CPU blocked", CounterUnit::kRatio, start, blocked / total});
          });
  if (!r) return r.error();

  r = run(with_pid("SELECT c.ts_ns, w.window_ns, c.cgroup, c.pid, c.call, c.count, c.max_ns, "
                   "c.buckets FROM call_windows c JOIN windows w ON w.ts_ns = c.ts_ns "
                   "WHERE c.ts_ns > ?1 AND c.ts_ns <= ?2 AND c.call LIKE '%Synchronize%'" +
                   period_cgroup_clause("c.cgroup") + pid_clause("c.pid") + " ORDER BY c.ts_ns"),
          [&](const Stmt& st) {
            if (u64(st, 5) == 0) return;
            const int pid = static_cast<int>(st.int64(3));
            const double p99 = trace::quantile_seconds(decode_buckets(st.blob(7)), 0.99, u64(st, 6));
            note_process(pid, st.text(2));
            t.samples.push_back({pid, "p99 " + st.text(4), CounterUnit::kNanoseconds,
                                 st.int64(0) - st.int64(1), p99 * 1e9});
          });
  if (!r) return r.error();
  std::stable_sort(t.samples.begin(), t.samples.end(),
                   [](const TimelineSample& a, const TimelineSample& b) { return a.ts_ns < b.ts_ns; });

  // Each GPU's clock, held share and power per window (host-wide: no cgroup or pid filter).
  r = run("SELECT g.ts_ns - w.window_ns, g.gpu, g.name, g.sm_clock_mhz, g.held_share, g.power_w "
          "FROM gpu_windows g JOIN windows w ON w.ts_ns = g.ts_ns "
          "WHERE g.ts_ns > ?1 AND g.ts_ns <= ?2 ORDER BY g.ts_ns, g.gpu",
          [&](const Stmt& st) {
            const std::int64_t start = st.int64(0);
            const auto gpu = static_cast<unsigned>(st.int64(1));
            if (!st.is_null(2)) t.gpu_names[gpu] = st.text(2);
            if (!st.is_null(3)) {
              t.gpu_samples.push_back({gpu, "SM clock", CounterUnit::kMegahertz, start,
                                       st.real(3)});
            }
            t.gpu_samples.push_back({gpu, "clock held", CounterUnit::kRatio, start, st.real(4)});
            if (!st.is_null(5)) {
              t.gpu_samples.push_back({gpu, "power", CounterUnit::kWatts, start, st.real(5)});
            }
          });
  if (!r) return r.error();

  ReportQuery rq = q.period;
  rq.per_process = false;
  auto report = load_report(db, rq);
  if (!report) return report.error();
  for (auto& c : report->chains) {
    if (q.pid != 0 && c.pid != q.pid) continue;
    if (c.pid != 0) note_process(c.pid, c.cgroup);
    t.chains.push_back(std::move(c));
  }

  // Names: the newest processes row of each pid.
  r = run("SELECT pid, comm FROM processes WHERE last_seen_ns > ?1 AND first_seen_ns <= ?2 "
          "AND comm IS NOT NULL ORDER BY last_seen_ns",
          [&](const Stmt& st) {
            auto it = procs.find(static_cast<int>(st.int64(0)));
            if (it != procs.end()) it->second.comm = st.text(1);
          });
  if (!r) return r.error();
  for (auto& [pid, p] : procs) t.processes.push_back(std::move(p));
  return t;
}

}  // namespace stallwatch::store
