// NCCL communicator members in the store (schema 12, issue #52 item 6): what each member of a
// communicator on this node waited for its collectives, per window, so that explain can say
// "this node's ranks wait for a rank elsewhere" on the node that has no host cause of its own.
// - Writing: member_rows() turns two snapshots' cumulative member readings (trace::nccl_ranks)
//   into one window's deltas, capped at kMaxNcclMembers rows (the rest counted).
// - Reading: judge_nccl_waits() decides, from the period's rows and chains, which communicators
//   of this node had their waits grow with no local cause; load_nccl_waits() reads the rows.
// Pure functions apart from load_nccl_waits (one connection per thread, sqlite.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/sqlite.h"

namespace stallwatch {
struct Snapshot;
}  // namespace stallwatch

namespace stallwatch::store {

struct ReportChain;
struct ReportQuery;

// One member of one communicator over one window (the nccl_windows table).
struct NcclMemberRow {
  std::string cgroup;  // series label, as the other per-window tables name the workload
  int pid = 0;
  std::uint64_t comm_hash = 0;
  int rank = -1;
  int world_size = -1;
  std::string job_id;              // trace::job_id_of: bounded and escaped; "" when none
  std::uint64_t wait_ns = 0;       // this window: time in NCCL ops and synchronizes
  std::uint64_t collectives = 0;   // this window: NCCL ops of this rank and size
};

// Rows written per window at most; a node runs a handful of ranks, each in a few communicators.
inline constexpr std::size_t kMaxNcclMembers = 256;

// The window's rows: each member of `now` (cumulative) less its reading in `before` (null for
// the first window; a member not in it, or whose counters went back, counts from zero). Members
// that neither waited nor ran a collective in the window are left out. At most `cap` rows, in
// member order; `dropped` gets how many were left out for the cap.
std::vector<NcclMemberRow> member_rows(const Snapshot* before, const Snapshot& now,
                                       std::size_t cap, std::uint64_t& dropped);

// One window of one member, as read back.
struct NcclWindow {
  std::int64_t ts_ns = 0;
  std::string cgroup;
  int pid = 0;
  std::string comm;  // the process name (processes table), escaped by the writer; may be ""
  std::uint64_t comm_hash = 0;
  int rank = -1;
  int world_size = -1;
  std::string job_id;
  std::uint64_t wait_ns = 0;
  std::uint64_t collectives = 0;
};

// A member whose wait per collective grew over the period, on a node where nothing explains it:
// the rank that holds its collectives back is on another node.
struct NcclWaitGrowth {
  std::string cgroup;
  int pid = 0;
  std::string comm;
  std::string comm_label;  // "0x" + 16 hex digits: the `comm` label of /metrics
  int rank = -1;
  int world_size = -1;
  std::string job_id;
  std::uint64_t windows = 0;         // windows of the period in which it ran collectives
  std::uint64_t before_windows = 0;  // the earliest third of them
  std::uint64_t after_windows = 0;   // the latest third
  double before_s = 0;               // wait per collective over the earliest third
  double after_s = 0;                // and over the latest third
  std::uint64_t collectives = 0;     // over the period
};

// When a member's wait grew (docs/cli.md, "Collectives waiting on another node"): over the
// windows in which it ran collectives (at least kGrowthMinWindows), the wait per collective of
// the latest third is at least kGrowthRatio times that of the earliest third and at least
// kGrowthMinNs more.
inline constexpr std::size_t kGrowthMinWindows = 6;
inline constexpr double kGrowthRatio = 2.0;
inline constexpr std::uint64_t kGrowthMinNs = 1'000'000;

// The members to report, by communicator then rank. Communicator hash 0 (ncclCommInitAll: one
// process holds every rank, so the straggler is local) is never reported. A communicator is
// reported only when every one of its members on this node that ran collectives in at least
// kGrowthMinWindows windows grew (a member whose wait did not grow may be the straggler: it
// arrives last and waits least), and no chain on the workload of any of them was open during
// their latest windows (a local cause speaks for itself). Every kind counts but nccl_straggler
// and call_hang (symptoms: the wait itself, as the straggler alert reads them); a chain that
// closed before the latest third began (a brief contention while the job was calm) explains
// nothing that grew.
std::vector<NcclWaitGrowth> judge_nccl_waits(const std::vector<NcclWindow>& rows,
                                             const std::vector<ReportChain>& chains);

// The period's nccl_windows rows of the query's cgroups, oldest first.
Result<Ok> load_nccl_windows(sqlite3* db, const ReportQuery& q, const std::string& filter,
                             std::vector<NcclWindow>& out);

}  // namespace stallwatch::store
