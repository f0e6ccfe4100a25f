// Internals of the chain store (store.h), split out so each file holds one concern:
// writer.cpp turns WindowBatch values into rows (one transaction, prepared statements reused);
// retention.cpp deletes by age and by size and measures the database.
// Not thread-safe: everything here runs on the store's writer thread (or before it starts).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/records.h"
#include "store/sqlite.h"

namespace stallwatch::store {

class BatchWriter {
 public:
  // Prepares every statement once; `db` must be at kSchemaVersion and outlive the writer.
  static Result<BatchWriter> prepare(sqlite3* db);

  // Writes all batches in one BEGIN IMMEDIATE … COMMIT; rolls back on any error. The error's
  // `err` is SQLite's extended result code (SQLITE_FULL & 0xff for a full disk or database).
  Result<Ok> write(std::span<const WindowBatch> batches);

 private:
  Result<Ok> write_one(const WindowBatch& b);
  Result<Ok> write_chain(const chains::Chain& c);
  Result<Ok> done(Stmt& st);

  sqlite3* db_ = nullptr;
  Stmt windows_, cgroups_, processes_, process_windows_, call_windows_, preemptors_, outliers_,
      memory_, call_rollups_, process_rollups_, preemptor_rollups_, rollup_start_,
      inflight_, chains_;
  Stmt sites_, gpus_, nccl_;
};

// JSON texts of chains.contributors and chains.evidence (docs/store.md).
std::string contributors_json(const std::vector<chains::Contributor>& contributors);
std::string evidence_json(const std::vector<std::pair<std::string, double>>& evidence);

// page_count * page_size of the main database plus the size of the -wal file.
std::uint64_t database_bytes(sqlite3* db, const std::string& path);

// Deletes rows older than `cutoff_ns` (unix ns) from every time-keyed table; closed chains by
// closed_ns, open chains never. Adds the rows deleted to `rows`.
Result<Ok> prune_by_age(sqlite3* db, std::int64_t cutoff_ns, std::uint64_t& rows);

// Why prune_by_size runs.
enum class SizePrune {
  kAtLimit,    // retention: only once the database (with its WAL) has reached max_bytes
  kWriteFull,  // a write did not fit (--max-db): now, and at least a tenth of the live bytes
  kDiskFull,   // a write did not fit on the file system: as kWriteFull, but at most the
               // oldest tenth of the windows
};

// Deletes the oldest windows of data (then the oldest closed chains) until the live pages fit
// in 90 % of `max_bytes` (and, unless kAtLimit, in 90 % of what they were). Then returns the
// freed pages to the file system, `vacuum_step_bytes` of them at a time (incremental_vacuum,
// TRUNCATE checkpoint; 0: all at once), so that a full disk needs room for one step only.
// Adds the rows deleted to `rows`.
Result<Ok> prune_by_size(sqlite3* db, const std::string& path, std::uint64_t max_bytes,
                         SizePrune why, std::uint64_t vacuum_step_bytes, std::uint64_t& rows);

// Rows in `windows` (0 on error).
std::uint64_t window_count(sqlite3* db);

// Caps the main database at `max_bytes` (PRAGMA max_page_count), so SQLite itself reports
// SQLITE_FULL before the file passes --max-db; the writer then prunes and retries.
void apply_page_limit(sqlite3* db, std::uint64_t max_bytes);

}  // namespace stallwatch::store
