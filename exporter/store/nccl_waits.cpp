#include "store/nccl_waits.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "store/report.h"
#include "trace/nccl_ranks.h"
#include "trace/snapshot.h"

namespace stallwatch::store {
namespace {

using MemberKey = std::tuple<std::string, int, std::uint64_t, int, int>;

MemberKey key_of(const trace::NcclRank& r) {
  return {r.cgroup, r.pid, r.comm_hash, r.rank, r.world_size};
}

std::uint64_t delta(std::uint64_t now, std::uint64_t before) {
  return now >= before ? now - before : now;  // went back: a new process under an old pid
}

// Wait per collective of `windows` (seconds); 0 without collectives.
double per_collective(const std::vector<const NcclWindow*>& windows, size_t from, size_t to) {
  std::uint64_t wait = 0, n = 0;
  for (size_t i = from; i < to; i++) {
    wait += windows[i]->wait_ns;
    n += windows[i]->collectives;
  }
  return n ? static_cast<double>(wait) / static_cast<double>(n) / 1e9 : 0;
}

}  // namespace

std::vector<NcclMemberRow> member_rows(const Snapshot* before, const Snapshot& now,
                                       std::size_t cap, std::uint64_t& dropped) {
  std::map<MemberKey, const trace::NcclRank*> prev;
  std::vector<trace::NcclRank> prev_ranks;
  if (before) prev_ranks = trace::nccl_ranks(*before);
  for (const auto& r : prev_ranks) prev.emplace(key_of(r), &r);
  std::vector<NcclMemberRow> out;
  std::set<MemberKey> seen;  // a member listed twice (two reads of one communicator) counts once
  for (const trace::NcclRank& r : trace::nccl_ranks(now)) {
    if (!seen.insert(key_of(r)).second) continue;
    std::uint64_t wait = r.wait_ns, ops = r.collectives;
    if (auto it = prev.find(key_of(r)); it != prev.end()) {
      wait = delta(r.wait_ns, it->second->wait_ns);
      ops = delta(r.collectives, it->second->collectives);
    }
    if (wait == 0 && ops == 0) continue;
    if (out.size() == cap) {
      dropped++;
      continue;
    }
    const auto s = now.series.find(r.cgroup);
    const std::string job =
        s == now.series.end() ? r.job.job_id : trace::job_id_of(r.job, s->second.identity);
    out.push_back({r.cgroup, r.pid, r.comm_hash, r.rank, r.world_size, job, wait, ops});
  }
  return out;
}

std::vector<NcclWaitGrowth> judge_nccl_waits(const std::vector<NcclWindow>& rows,
                                             const std::vector<ReportChain>& chains) {
  // Each member's windows with collectives, oldest first.
  using Key = std::tuple<std::uint64_t, int, std::string, int, int>;  // comm, rank, cgroup, pid, size
  std::map<Key, std::vector<const NcclWindow*>> members;
  for (const NcclWindow& w : rows) {
    if (w.comm_hash == 0 || w.collectives == 0) continue;
    members[{w.comm_hash, w.rank, w.cgroup, w.pid, w.world_size}].push_back(&w);
  }
  // Per communicator: where its members' latest windows begin (the end of the window before a
  // member's last third; a member with too few windows: its first), and its local workloads.
  struct Comm {
    std::int64_t late_from = std::numeric_limits<std::int64_t>::max();
    std::set<std::string> cgroups;
    bool vetoed = false;  // a member did not grow, or a local chain speaks
    std::vector<NcclWaitGrowth> grown;
  };
  std::map<std::uint64_t, Comm> comms;
  for (auto& [key, windows] : members) {
    Comm& c = comms[std::get<0>(key)];
    std::stable_sort(windows.begin(), windows.end(),
                     [](const NcclWindow* a, const NcclWindow* b) { return a->ts_ns < b->ts_ns; });
    const size_t n = windows.size(), third = n / 3;
    c.cgroups.insert(std::get<2>(key));
    c.late_from = std::min(c.late_from, n >= kGrowthMinWindows ? windows[n - third - 1]->ts_ns
                                                              : windows.front()->ts_ns);
    if (n < kGrowthMinWindows) continue;
    const double before = per_collective(windows, 0, third);
    const double after = per_collective(windows, n - third, n);
    if (after < kGrowthRatio * before || (after - before) * 1e9 < kGrowthMinNs) {
      c.vetoed = true;
      continue;
    }
    const NcclWindow& last = *windows.back();
    NcclWaitGrowth g;
    g.cgroup = last.cgroup;
    g.pid = last.pid;
    g.comm = last.comm;
    g.comm_label = trace::comm_label(std::get<0>(key));
    g.rank = last.rank;
    g.world_size = last.world_size;
    for (auto it = windows.rbegin(); it != windows.rend() && g.job_id.empty(); ++it) {
      g.job_id = (*it)->job_id;
    }
    g.windows = n;
    g.before_windows = g.after_windows = third;
    g.before_s = before;
    g.after_s = after;
    for (const NcclWindow* w : windows) g.collectives += w->collectives;
    c.grown.push_back(std::move(g));
  }
  // A chain on one of the communicator's local workloads that was open while the waits were
  // high is a local cause. nccl_straggler and call_hang are the wait itself (the straggler
  // alert reads them so too), and a chain that closed before the latest windows (a brief
  // contention while the job was calm) explains nothing that grew.
  for (const ReportChain& ch : chains) {
    if (ch.kind == "call_hang" || ch.kind == "nccl_straggler") continue;
    for (auto& [hash, c] : comms) {
      if (c.cgroups.count(ch.cgroup) && (ch.open || ch.closed_ns > c.late_from)) c.vetoed = true;
    }
  }
  std::vector<NcclWaitGrowth> out;
  for (auto& [hash, c] : comms) {
    if (c.vetoed) continue;
    for (auto& g : c.grown) out.push_back(std::move(g));
  }
  return out;
}

Result<Ok> load_nccl_windows(sqlite3* db, const ReportQuery& q, const std::string& filter,
                             std::vector<NcclWindow>& out) {
  auto st = Stmt::prepare(
      db,
      "SELECT n.ts_ns, n.cgroup, n.pid, (SELECT p.comm FROM processes p WHERE p.pid = n.pid AND "
      "p.cgroup = n.cgroup ORDER BY p.last_seen_ns DESC LIMIT 1), n.communicator, n.rank, "
      "n.world_size, n.job_id, n.wait_ns, n.collectives FROM nccl_windows n "
      "WHERE n.ts_ns > ?1 AND n.ts_ns <= ?2" +
          period_cgroup_clause("n.cgroup") + " ORDER BY n.ts_ns");
  if (!st) return st.error();
  st->bind(1, q.now_ns - q.since_ns).bind(2, q.now_ns).bind(3, std::string_view(filter));
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) {
    NcclWindow w;
    w.ts_ns = st->int64(0);
    w.cgroup = st->text(1);
    w.pid = static_cast<int>(st->int64(2));
    w.comm = st->text(3);
    // The label's 16 hex digits; anything else (never written) reads as 0 and is skipped.
    const std::string label = st->text(4);
    if (label.size() == 18 && label.starts_with("0x")) {
      w.comm_hash = std::strtoull(label.c_str() + 2, nullptr, 16);
    }
    w.rank = static_cast<int>(st->int64(5));
    w.world_size = static_cast<int>(st->int64(6));
    w.job_id = st->text(7);
    w.wait_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(st->int64(8), 0));
    w.collectives = static_cast<std::uint64_t>(std::max<std::int64_t>(st->int64(9), 0));
    out.push_back(std::move(w));
  }
  if (rc != SQLITE_DONE) return make_error(db_error(db), rc);
  return Ok{};
}

}  // namespace stallwatch::store
