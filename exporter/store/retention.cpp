// Retention of the chain store: by age (every time-keyed table) and by size (oldest windows of
// data first, closed chains last; open chains are never deleted).
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "store/schema.h"
#include "store/writer.h"

namespace stallwatch::store {
namespace {

// The tables whose rows are one window's data, keyed by ts_ns (ts_ns-indexed).
constexpr std::array<const char*, 10> kWindowTables = {
    "call_windows",   "process_windows", "preemptor_windows", "outliers",     "inflight_windows",
    "memory_windows", "outlier_sites",   "gpu_windows",       "nccl_windows", "windows"};

// The rollup tables (schema 7): a bucket goes once every window in it has gone (a bucket B
// holds the windows that end in (B, B + kRollupNs]).
constexpr std::array<const char*, 3> kRollupTables = {"call_rollups", "process_rollups",
                                                      "preemptor_rollups"};

// DELETE statements of every window-keyed table, ?1 the cutoff: rows before it go.
std::vector<std::string> window_deletes() {
  std::vector<std::string> sqls;
  for (const char* table : kWindowTables) {
    sqls.push_back(std::string("DELETE FROM ") + table + " WHERE ts_ns < ?1");
  }
  for (const char* table : kRollupTables) {
    sqls.push_back(std::string("DELETE FROM ") + table + " WHERE bucket_ns < ?1 - " +
                   std::to_string(kRollupNs));
  }
  return sqls;
}

Result<std::int64_t> pragma_int(sqlite3* db, const char* pragma) {
  auto st = Stmt::prepare(db, std::string("PRAGMA ") + pragma);
  if (!st) return st.error();
  if (st->step() != SQLITE_ROW) return make_error(db_error(db), sqlite3_extended_errcode(db));
  return st->int64(0);
}

Result<std::int64_t> query_int(sqlite3* db, const std::string& sql, std::int64_t bind = 0,
                               bool has_bind = false) {
  auto st = Stmt::prepare(db, sql);
  if (!st) return st.error();
  if (has_bind) st->bind(1, bind);
  int rc = st->step();
  if (rc == SQLITE_DONE) return std::int64_t{-1};
  if (rc != SQLITE_ROW) return make_error(db_error(db), sqlite3_extended_errcode(db));
  return st->is_null(0) ? std::int64_t{-1} : st->int64(0);
}

// Runs `sqls` (each with ?1 bound to `bind`) in one transaction, adding the rows changed.
Result<Ok> delete_in_transaction(sqlite3* db, const std::vector<std::string>& sqls,
                                 std::int64_t bind, std::uint64_t& rows) {
  auto r = exec(db, "BEGIN IMMEDIATE");
  if (!r) return make_error(r.error().message, sqlite3_extended_errcode(db));
  std::uint64_t changed = 0;
  for (const auto& sql : sqls) {
    auto st = Stmt::prepare(db, sql);
    if (!st) {
      r = st.error();
      break;
    }
    st->bind(1, bind);
    if (st->step() != SQLITE_DONE) {
      r = make_error(db_error(db), sqlite3_extended_errcode(db));
      break;
    }
    changed += static_cast<std::uint64_t>(sqlite3_changes(db));
  }
  if (r) {
    r = exec(db, "COMMIT");
    if (!r) r = make_error(r.error().message, sqlite3_extended_errcode(db));
  }
  if (!r) {
    if (!sqlite3_get_autocommit(db)) (void)exec(db, "ROLLBACK");
    return r;
  }
  rows += changed;
  return Ok{};
}

// Bytes the database will take once its free pages are vacuumed away.
Result<std::uint64_t> live_bytes(sqlite3* db) {
  auto pages = pragma_int(db, "page_count");
  if (!pages) return pages.error();
  auto free_pages = pragma_int(db, "freelist_count");
  if (!free_pages) return free_pages.error();
  auto page_size = pragma_int(db, "page_size");
  if (!page_size) return page_size.error();
  return static_cast<std::uint64_t>(std::max<std::int64_t>(*pages - *free_pages, 0) * *page_size);
}

enum class Checkpoint { kComplete, kBusy, kFailed };

// Copies the WAL into the main file and empties it. kBusy: a reader holding an old snapshot
// kept it partial (not an error, a later one finishes it); kFailed: no room to write it (a full
// disk) or another error.
Checkpoint checkpoint_truncate(sqlite3* db) {
  auto st = Stmt::prepare(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  if (!st || st->step() != SQLITE_ROW) return Checkpoint::kFailed;
  return st->int64(0) == 0 ? Checkpoint::kComplete : Checkpoint::kBusy;
}

// Returns the free pages to the file system: incremental_vacuum moves pages from the end of the
// file into the free ones (through the WAL) and the checkpoint after it truncates the main file
// and empties the WAL. A step at a time (`step_bytes`, 0: all at once) so that a full disk only
// needs room for one step's WAL: the reserve that store.cpp releases.
Result<Ok> give_back_free_pages(sqlite3* db, std::uint64_t step_bytes) {
  auto page_size = pragma_int(db, "page_size");
  if (!page_size) return page_size.error();
  const std::int64_t step =
      step_bytes == 0 ? 0
                      : std::max<std::int64_t>(static_cast<std::int64_t>(step_bytes) /
                                                   std::max<std::int64_t>(*page_size, 512),
                                               16);
  // What the WAL holds first (the deletes rewrote pages in place), so the steps start on an
  // empty one.
  Checkpoint last = checkpoint_truncate(db);
  // Bounded: each step frees `step` pages, or all that are left.
  for (int i = 0; i < 1'000'000 && last != Checkpoint::kFailed; i++) {
    auto free_pages = pragma_int(db, "freelist_count");
    if (!free_pages) return free_pages.error();
    if (*free_pages <= 0) break;
    // A reader holds the WAL (the file cannot shrink now anyway): the rest in one go, so the
    // pages at least leave page_count, which --max-db counts.
    const bool whole = step == 0 || last == Checkpoint::kBusy;
    const std::string sql = whole ? std::string("PRAGMA incremental_vacuum")
                                  : "PRAGMA incremental_vacuum(" + std::to_string(step) + ")";
    if (auto r = exec(db, sql); !r) {
      return make_error(r.error().message, sqlite3_extended_errcode(db));
    }
    last = checkpoint_truncate(db);
    if (whole) break;
  }
  // kFailed: the free pages stay in the file, where the next writes reuse them.
  return Ok{};
}

}  // namespace

std::uint64_t database_bytes(sqlite3* db, const std::string& path) {
  std::uint64_t bytes = 0;
  auto pages = pragma_int(db, "page_count");
  auto page_size = pragma_int(db, "page_size");
  if (pages && page_size) bytes = static_cast<std::uint64_t>(*pages * *page_size);
  struct stat st {};
  if (::stat((path + "-wal").c_str(), &st) == 0) bytes += static_cast<std::uint64_t>(st.st_size);
  return bytes;
}

std::uint64_t window_count(sqlite3* db) {
  auto n = query_int(db, "SELECT count(*) FROM windows");
  return n && *n > 0 ? static_cast<std::uint64_t>(*n) : 0;
}

void apply_page_limit(sqlite3* db, std::uint64_t max_bytes) {
  auto page_size = pragma_int(db, "page_size");
  if (!page_size || *page_size <= 0) return;
  // SQLite keeps the limit at the current size when asked for less; prune_by_size re-applies it.
  std::uint64_t pages =
      std::max<std::uint64_t>(max_bytes / static_cast<std::uint64_t>(*page_size), 1);
  (void)pragma_int(db, ("max_page_count = " + std::to_string(pages)).c_str());
}

Result<Ok> prune_by_age(sqlite3* db, std::int64_t cutoff_ns, std::uint64_t& rows) {
  std::vector<std::string> sqls = window_deletes();
  sqls.emplace_back("DELETE FROM chains WHERE open = 0 AND closed_ns < ?1");
  sqls.emplace_back("DELETE FROM processes WHERE last_seen_ns < ?1");
  sqls.emplace_back("DELETE FROM cgroups WHERE last_seen_ns < ?1");
  return delete_in_transaction(db, sqls, cutoff_ns, rows);
}

Result<Ok> prune_by_size(sqlite3* db, const std::string& path, std::uint64_t max_bytes,
                         SizePrune why, std::uint64_t vacuum_step_bytes, std::uint64_t& rows) {
  const bool force = why != SizePrune::kAtLimit;
  // At max_bytes, not only past it: max_page_count stops the main file exactly there.
  if (!force && database_bytes(db, path) < max_bytes) return Ok{};
  auto target = static_cast<std::uint64_t>(static_cast<double>(max_bytes) * 0.9);
  if (force) {
    // A write found no room: the disk may be full long before --max-db. A tenth of what the
    // database holds goes (the oldest windows first), so the pages it frees take the new ones.
    auto live = live_bytes(db);
    if (!live) return live.error();
    target = std::min(target, static_cast<std::uint64_t>(static_cast<double>(*live) * 0.9));
  }
  // The disk is full: at most the oldest tenth of the windows. In a small database the pages of
  // the schema are most of the live bytes, and 90 % of them would take nearly every window; on
  // the disk it is the room of the WAL, which the checkpoint gives back, that the writes need.
  std::int64_t windows_left = std::numeric_limits<std::int64_t>::max();
  if (why == SizePrune::kDiskFull) {
    auto windows = query_int(db, "SELECT count(*) FROM windows");
    if (!windows) return windows.error();
    if (*windows > 0) windows_left = (*windows + 9) / 10;
  }
  // Bounded: each round deletes at least one window (or one chunk of closed chains).
  for (int round = 0; round < 1000; round++) {
    auto live = live_bytes(db);
    if (!live) return live.error();
    if (*live <= target) break;
    // The share of the data to drop, plus a little so rounds converge quickly.
    const double share = std::min(1.0, 1.0 - static_cast<double>(target) / *live + 0.02);

    auto windows = query_int(db, "SELECT count(*) FROM windows");
    if (!windows) return windows.error();
    std::int64_t boundary = -1;
    if (*windows > 0) {
      if (windows_left <= 0) break;
      auto n = static_cast<std::int64_t>(std::ceil(static_cast<double>(*windows) * share));
      // At most 1/32 of the windows per transaction keeps the WAL of one round small (it is
      // checkpointed between rounds); more rounds follow while the live size is over target.
      n = std::clamp<std::int64_t>(n, 1, std::max<std::int64_t>(*windows / 32, 1));
      n = std::min(n, windows_left);
      windows_left -= n;
      // Everything before the n-th oldest window's successor goes, stray rows older than the
      // oldest window (outliers end inside a window) included.
      auto next =
          query_int(db, "SELECT ts_ns FROM windows ORDER BY ts_ns LIMIT 1 OFFSET ?1", n, true);
      if (!next) return next.error();
      boundary = *next >= 0 ? *next : std::numeric_limits<std::int64_t>::max();
    } else {
      // No windows rows left: whatever rows remain in the other tables go at once.
      std::string any = "SELECT 1 WHERE 0";
      for (const char* table : kWindowTables)
        any += std::string(" OR EXISTS(SELECT 1 FROM ") + table + ")";
      for (const char* table : kRollupTables)
        any += std::string(" OR EXISTS(SELECT 1 FROM ") + table + ")";
      auto rest = query_int(db, any);
      if (!rest) return rest.error();
      if (*rest == 1) boundary = std::numeric_limits<std::int64_t>::max();
    }
    if (boundary >= 0) {
      if (auto r = delete_in_transaction(db, window_deletes(), boundary, rows); !r) return r;
      // Into the main file (in place) now, so the next round reuses the WAL instead of growing
      // it: on a full disk only the reserve's room is there.
      (void)pragma_int(db, "wal_checkpoint(PASSIVE)");
      continue;
    }
    // Only chains (and the cgroups and processes tables) are left: the oldest closed chains go.
    auto closed = query_int(db, "SELECT count(*) FROM chains WHERE open = 0");
    if (!closed) return closed.error();
    if (*closed <= 0) break;  // open chains are never deleted
    auto n = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::ceil(static_cast<double>(*closed) * share)), 1, *closed);
    if (auto r = delete_in_transaction(
            db,
            {"DELETE FROM chains WHERE rowid IN (SELECT rowid FROM chains WHERE open = 0 "
             "ORDER BY closed_ns LIMIT ?1)"},
            n, rows);
        !r) {
      return r;
    }
    (void)pragma_int(db, "wal_checkpoint(PASSIVE)");
  }
  return give_back_free_pages(db, vacuum_step_bytes);
}

}  // namespace stallwatch::store
