// store/nccl_waits.h (issue #52 item 6): each communicator member's wait per window, written
// from two snapshots' cumulative readings, read back by explain, which says "collectives waiting
// on another node" where a node's ranks waited longer and longer with no cause of its own.
#include "store/nccl_waits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/explain.h"
#include "cli/explain_render.h"
#include "common/json.h"
#include "store/report.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/writer.h"
#include "trace/calls.h"
#include "trace/snapshot.h"

namespace stallwatch::store {
namespace {

constexpr std::int64_t kS = 1'000'000'000;
constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kNow = 1795183391 * kS;  // 2026-11-20 14:03:11 UTC
constexpr std::uint64_t kComm = 0xb0c821da6f9bac56ULL;
const std::string kCommLabel = "0xb0c821da6f9bac56";
const std::string kRank2 = "/jobs/train-7/rank2";
const std::string kRank3 = "/jobs/train-7/rank3";

// One process's cumulative NCCL readings: `wait_ns` inside ncclAllReduce, `ops` of them, as a
// member of kComm with `rank` of 4.
void add_member(Snapshot& snap, const std::string& cgroup, int pid, int rank,
                std::uint64_t wait_ns, std::uint64_t ops, const std::string& job = "train-7") {
  const std::uint32_t reduce = *trace::call_for_symbol("ncclAllReduce", trace::Api::kNccl);
  Series& s = snap.series[cgroup];
  ProcessCall c;
  c.pid = pid;
  c.call_id = reduce;
  c.totals.count = ops;
  c.totals.sum_ns = wait_ns;
  s.processes.push_back(c);
  ProcessNccl n;
  n.pid = pid;
  n.key = NcclKey{reduce, rank, 4};
  n.totals.count = ops;
  s.nccl_processes.push_back(n);
  snap.nccl_members.push_back(
      NcclMember{cgroup, pid, rank, 4, kComm, trace::JobKeys{job, std::to_string(rank), "", "4"}});
}

TEST(NcclWaits, AWindowsRowsAreTheMembersDeltasCappedAndCounted) {
  Snapshot before, now;
  add_member(before, kRank2, 20, 2, 60 * kMs, 100);
  add_member(now, kRank2, 20, 2, 470 * kMs, 200);
  add_member(before, kRank3, 30, 3, 50 * kMs, 100);
  add_member(now, kRank3, 30, 3, 50 * kMs, 100);  // idle this window: no row
  add_member(now, "/jobs/train-7/rank1", 10, 1, 5 * kMs, 7);  // new: counts from zero
  std::uint64_t dropped = 0;
  auto rows = member_rows(&before, now, kMaxNcclMembers, dropped);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(dropped, 0u);
  // nccl_members order; the series map orders the cgroups, members keep theirs.
  EXPECT_EQ(rows[0].cgroup, kRank2);
  EXPECT_EQ(rows[0].pid, 20);
  EXPECT_EQ(rows[0].comm_hash, kComm);
  EXPECT_EQ(rows[0].rank, 2);
  EXPECT_EQ(rows[0].world_size, 4);
  EXPECT_EQ(rows[0].job_id, "train-7");
  EXPECT_EQ(rows[0].wait_ns, 410u * kMs);
  EXPECT_EQ(rows[0].collectives, 100u);
  EXPECT_EQ(rows[1].cgroup, "/jobs/train-7/rank1");
  EXPECT_EQ(rows[1].wait_ns, 5u * kMs);
  EXPECT_EQ(rows[1].collectives, 7u);
  // The first window has no snapshot before it; a cap of 1 keeps the first and counts the rest.
  rows = member_rows(nullptr, now, 1, dropped);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].wait_ns, 470u * kMs);
  EXPECT_EQ(dropped, 2u);

  // Written as one window: the rows exactly, and the count the cap left out on `windows`.
  auto db = open_db(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_MEMORY);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(migrate(db->get()).ok());
  auto writer = BatchWriter::prepare(db->get());
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  WindowBatch b;
  b.end_ns = kNow;
  b.window_ns = 5 * kS;
  b.nccl = rows;
  b.nccl_dropped = dropped;
  ASSERT_TRUE(writer->write({&b, 1}).ok());
  auto st = Stmt::prepare(db->get(),
                          "SELECT ts_ns, cgroup, pid, communicator, rank, world_size, job_id, "
                          "wait_ns, collectives, (SELECT nccl_dropped FROM windows) "
                          "FROM nccl_windows");
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->step(), SQLITE_ROW);
  EXPECT_EQ(st->int64(0), kNow);
  EXPECT_EQ(st->text(1), kRank2);
  EXPECT_EQ(st->int64(2), 20);
  EXPECT_EQ(st->text(3), kCommLabel);
  EXPECT_EQ(st->int64(4), 2);
  EXPECT_EQ(st->int64(5), 4);
  EXPECT_EQ(st->text(6), "train-7");
  EXPECT_EQ(st->int64(7), 470 * kMs);
  EXPECT_EQ(st->int64(8), 200);
  EXPECT_EQ(st->int64(9), 2);
  EXPECT_EQ(st->step(), SQLITE_DONE);
  // Pruned with the other per-window tables.
  std::uint64_t pruned = 0;
  ASSERT_TRUE(prune_by_age(db->get(), kNow + 1, pruned).ok());
  auto left = Stmt::prepare(db->get(), "SELECT count(*) FROM nccl_windows");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->step(), SQLITE_ROW);
  EXPECT_EQ(left->int64(0), 0);
}

// A database with 12 windows of 5 s (the period's last minute) and two ranks of kComm on this
// node, each waiting `early` per collective in the first six windows and `late` in the last six.
class NcclReport : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = open_db(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_MEMORY);
    ASSERT_TRUE(db.ok());
    db_ = std::move(*db);
    ASSERT_TRUE(migrate(db_.get()).ok());
    sql("INSERT INTO processes(pid, start_ns, comm, cgroup, first_seen_ns, last_seen_ns) VALUES "
        "(20, 1, 'python3', '" + kRank2 + "', 1, 1), (30, 1, 'python3', '" + kRank3 + "', 1, 1)");
  }
  void sql(const std::string& s) { ASSERT_TRUE(exec(db_.get(), s).ok()) << s; }
  void ranks(std::int64_t early_ns, std::int64_t late_ns, std::int64_t rank3_late_ns = -1) {
    for (int w = 0; w < 12; w++) {
      const std::int64_t ts = kNow - (11 - w) * 5 * kS;
      sql("INSERT INTO windows(ts_ns, window_ns) VALUES(" + std::to_string(ts) + ", 5000000000)");
      for (int rank : {2, 3}) {
        std::int64_t per = w < 6 ? early_ns : late_ns;
        if (rank == 3 && w >= 6 && rank3_late_ns >= 0) per = rank3_late_ns;
        sql("INSERT INTO nccl_windows VALUES(" + std::to_string(ts) + ", '" +
            (rank == 2 ? kRank2 : kRank3) + "', " + std::to_string(rank * 10) + ", '" +
            kCommLabel + "', " + std::to_string(rank) + ", 4, 'train-7', " +
            std::to_string(per * 100) + ", 100)");
      }
    }
  }
  // Open, or closed at `closed` (opened 10 s before).
  void chain(const std::string& cgroup, const std::string& kind, std::int64_t closed = 0) {
    const std::int64_t opened = closed ? closed - 10 * kS : kNow - 30 * kS;
    sql("INSERT INTO chains(id, kind, severity, open, cgroup, opened_ns, updated_ns, closed_ns, "
        "windows) VALUES('c1', '" + kind + "', 'high', " + (closed ? "0" : "1") + ", '" + cgroup +
        "', " + std::to_string(opened) + ", " + std::to_string(closed ? closed : kNow) + ", " +
        std::to_string(closed) + ", 2)");
  }
  Report report() {
    ReportQuery q;
    q.now_ns = kNow;
    q.since_ns = 3600 * kS;
    auto r = load_report(db_.get(), q);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? std::move(*r) : Report{};
  }
  DbPtr db_;
};

TEST_F(NcclReport, WaitsThatGrewWithNoLocalCauseNameTheCommunicatorAndTheJob) {
  ranks(600'000, 4'100'000);  // 0.6 ms, then 4.1 ms per collective
  Report r = report();
  r.host.hostname = "node-b";
  ASSERT_EQ(r.nccl_waits.size(), 2u);
  const NcclWaitGrowth& g = r.nccl_waits[0];
  EXPECT_EQ(g.comm_label, kCommLabel);
  EXPECT_EQ(g.job_id, "train-7");
  EXPECT_EQ(g.rank, 2);
  EXPECT_EQ(g.world_size, 4);
  EXPECT_EQ(g.pid, 20);
  EXPECT_EQ(g.comm, "python3");
  EXPECT_EQ(g.cgroup, kRank2);
  EXPECT_EQ(g.windows, 12u);
  EXPECT_EQ(g.before_windows, 4u);
  EXPECT_EQ(g.after_windows, 4u);
  EXPECT_DOUBLE_EQ(g.before_s, 0.0006);
  EXPECT_DOUBLE_EQ(g.after_s, 0.0041);
  EXPECT_EQ(g.collectives, 1200u);
  EXPECT_EQ(r.nccl_waits[1].rank, 3);

  const std::string text = cli::render_explain_text(r);
  const std::string want =
      "\nCollectives waiting on another node (last 1h): communicator 0xb0c821da6f9bac56, job "
      "train-7\n"
      "  rank 2 of 4, python3 PID 20 in /jobs/train-7/rank2: waited 4.1ms per collective in its "
      "last 4 windows against 600µs in its first 4 (6.8x; 1,200 collectives in 12 windows)\n"
      "  rank 3 of 4, python3 PID 30 in /jobs/train-7/rank3: waited 4.1ms per collective in its "
      "last 4 windows against 600µs in its first 4 (6.8x; 1,200 collectives in 12 windows)\n"
      "  No host cause on this node: the rank that holds these collectives back is on another "
      "node. Look at `stallwatch:nccl_rank_straggler_score{comm=\"0xb0c821da6f9bac56\"}` (or the "
      "StallwatchNcclStraggler alert) across nodes, and run explain on the node it names.\n";
  EXPECT_NE(text.find(want), std::string::npos) << text;

  const Json j = Json::parse(cli::render_explain_json(r));
  ASSERT_EQ(j["nccl_waits"].size(), 2u);
  const Json& w = j["nccl_waits"][0];
  EXPECT_EQ(w["comm"], kCommLabel);
  EXPECT_EQ(w["job_id"], "train-7");
  EXPECT_EQ(w["rank"], 2);
  EXPECT_EQ(w["world_size"], 4);
  EXPECT_EQ(w["cgroup"], kRank2);
  EXPECT_EQ(w["pid"], 20);
  EXPECT_EQ(w["process"], "python3");
  EXPECT_EQ(w["windows"], 12);
  EXPECT_EQ(w["collectives"], 1200);
  EXPECT_EQ(w["before_windows"], 4);
  EXPECT_EQ(w["after_windows"], 4);
  EXPECT_DOUBLE_EQ(w["wait_per_collective_before_seconds"].get<double>(), 0.0006);
  EXPECT_DOUBLE_EQ(w["wait_per_collective_after_seconds"].get<double>(), 0.0041);
  EXPECT_EQ(w["look_at"], "stallwatch:nccl_rank_straggler_score{comm=\"0xb0c821da6f9bac56\"}");
}

TEST_F(NcclReport, WaitsThatDidNotGrowSayNothing) {
  ranks(600'000, 1'100'000);  // under 2x
  EXPECT_TRUE(report().nccl_waits.empty());
}

TEST_F(NcclReport, SmallWaitsThatDoubledSayNothing) {
  ranks(100'000, 900'000);  // 9x, but 0.8 ms more per collective: under the 1 ms floor
  EXPECT_TRUE(report().nccl_waits.empty());
}

TEST_F(NcclReport, ALocalChainOnTheWorkloadSpeaksInstead) {
  ranks(600'000, 4'100'000);
  chain(kRank2, "cpu_contention");
  const Report r = report();
  EXPECT_TRUE(r.nccl_waits.empty());
  EXPECT_EQ(cli::render_explain_text(r).find("Collectives waiting"), std::string::npos);
  EXPECT_TRUE(Json::parse(cli::render_explain_json(r))["nccl_waits"].empty());
}

TEST_F(NcclReport, AChainOnAPeerOfTheSameCommunicatorOnThisNodeSpeaksInstead) {
  ranks(600'000, 4'100'000);
  chain(kRank3, "cpu_contention");
  EXPECT_TRUE(report().nccl_waits.empty());
}

TEST_F(NcclReport, AChainThatClosedBeforeTheWaitsGrewExplainsNothing) {
  ranks(600'000, 4'100'000);
  chain(kRank3, "cpu_contention", kNow - 40 * kS);  // calm phase: the last third ends 20 s in
  EXPECT_EQ(report().nccl_waits.size(), 2u);
}

TEST_F(NcclReport, AChainThatClosedDuringTheLatestWindowsSpeaks) {
  ranks(600'000, 4'100'000);
  chain(kRank3, "cpu_contention", kNow - 10 * kS);
  EXPECT_TRUE(report().nccl_waits.empty());
}

TEST_F(NcclReport, AHangIsTheWaitItselfNotACause) {
  ranks(600'000, 4'100'000);
  chain(kRank2, "call_hang");
  EXPECT_EQ(report().nccl_waits.size(), 2u);
}

TEST_F(NcclReport, ALocalStragglerChainIsTheWaitItselfNotACause) {
  // The node's nccl_straggler compares the time local ranks spend in their ops: where the op
  // itself waits, it names a rank that waited (docs/fleet.md, Limits).
  ranks(600'000, 4'100'000);
  chain(kRank2, "nccl_straggler");
  EXPECT_EQ(report().nccl_waits.size(), 2u);
}

TEST_F(NcclReport, ALocalPeerThatDidNotGrowMayBeTheStragglerSoNothingIsSaid) {
  ranks(600'000, 4'100'000, 600'000);  // rank 3 arrives last: it waits as little as before
  EXPECT_TRUE(report().nccl_waits.empty());
}

TEST_F(NcclReport, TooFewWindowsAndNcclCommInitAllSayNothing) {
  for (int w = 0; w < 5; w++) {  // under kGrowthMinWindows
    const std::int64_t ts = kNow - (4 - w) * 5 * kS;
    sql("INSERT INTO nccl_windows VALUES(" + std::to_string(ts) + ", '" + kRank2 +
        "', 20, '" + kCommLabel + "', 2, 4, NULL, " + std::to_string(w < 2 ? 60 * kMs : 900 * kMs) +
        ", 100)");
  }
  EXPECT_TRUE(report().nccl_waits.empty());
  for (int w = 0; w < 12; w++) {  // one process holds every rank: the straggler is local
    const std::int64_t ts = kNow - (11 - w) * 5 * kS;
    sql("INSERT INTO nccl_windows VALUES(" + std::to_string(ts) + ", '" + kRank3 +
        "', 30, '0x0000000000000000', 0, 2, NULL, " +
        std::to_string(w < 6 ? 60 * kMs : 900 * kMs) + ", 100)");
  }
  EXPECT_TRUE(report().nccl_waits.empty());
}

TEST_F(NcclReport, HostStringsAreEscapedAndAnUnknownJobSaysSo) {
  const std::string evil = "/jobs/ev\x1b[31mil";
  for (int w = 0; w < 6; w++) {
    const std::int64_t ts = kNow - (5 - w) * 5 * kS;
    sql("INSERT INTO windows(ts_ns, window_ns) VALUES(" + std::to_string(ts) + ", 5000000000)");
    sql("INSERT INTO nccl_windows VALUES(" + std::to_string(ts) + ", '" + evil + "', 40, '" +
        kCommLabel + "', 1, 2, NULL, " + std::to_string(w < 3 ? 60 * kMs : 900 * kMs) + ", 100)");
  }
  sql("INSERT INTO processes(pid, start_ns, comm, cgroup, first_seen_ns, last_seen_ns) VALUES "
      "(40, 1, 'py\nthon', '" + evil + "', 1, 1)");
  const Report r = report();
  ASSERT_EQ(r.nccl_waits.size(), 1u);
  const std::string text = cli::render_explain_text(r);
  EXPECT_NE(text.find("communicator 0xb0c821da6f9bac56, job not known\n  rank 1 of 2, py\\nthon "
                      "PID 40 in /jobs/ev\\x1b[31mil: waited 9ms per collective in its last 2 "
                      "windows against 600µs in its first 2 (15.0x; 600 collectives in 6 "
                      "windows)\n"),
            std::string::npos)
      << text;
  EXPECT_TRUE(Json::parse(cli::render_explain_json(r))["nccl_waits"][0]["job_id"].is_null());
}

}  // namespace
}  // namespace stallwatch::store
