// The database schema (docs/store.md documents every table) and its migrations. The version
// lives in PRAGMA user_version; migrate() takes a database of any older version to `target`,
// each step in its own transaction, so an interrupted upgrade leaves the previous version.
// Also the compact encoding of histogram buckets stored in call_windows.buckets.
#pragma once

#include <cstdint>

#include <sqlite3.h>

#include <string>

#include "common/result.h"
#include "trace/histogram.h"

namespace stallwatch::store {

inline constexpr int kSchemaVersion = 13;
// Length of a rollup bucket (schema 7): call_rollups, process_rollups, preemptor_rollups.
inline constexpr std::int64_t kRollupNs = 300'000'000'000;

// 0 for an empty database.
Result<int> schema_version(sqlite3* db);

// Brings the database to `target` (default: current). A database newer than this binary
// knows is refused with a message that says to upgrade stallwatch.
Result<Ok> migrate(sqlite3* db, int target = kSchemaVersion);

// Nonzero kernel buckets as (index byte, LEB128 count) pairs.
std::string encode_buckets(const trace::KernelBuckets& b);
trace::KernelBuckets decode_buckets(const std::string& blob);  // malformed tail ignored

}  // namespace stallwatch::store
