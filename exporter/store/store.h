// The chain store: one SQLite database (docs/store.md) that keeps every window's per-process
// call and off-CPU deltas, preemptors, outliers, host context and the causal chains, so
// `explain` and `query` can answer after the fact.
// Owns the database file and one writer thread. Callers hand over WindowBatch values with
// enqueue(), which never blocks on SQLite: a bounded queue in front of the writer drops the new
// batch (and counts it) when the writer falls behind. The writer commits everything queued in
// one transaction, applies retention (age, then size) every prune_interval, and survives full
// disks and write errors (counted, logged at most once a minute).
// Crash safety: WAL with synchronous=NORMAL; a kill -9 loses at most the last transactions,
// never the database's integrity.
// Thread-safety: enqueue, flush, stats and prune_now may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "trace/snapshot.h"
#include "store/records.h"

namespace stallwatch::store {

struct StoreOptions {
  std::string path;                                                 // database file
  std::uint64_t max_bytes = 2ull << 30;                             // --max-db (2 GiB)
  std::chrono::nanoseconds retention = std::chrono::hours(24 * 7);  // --retention
  size_t queue_batches = 256;  // bounded queue; when full the new batch is dropped and counted
  std::chrono::nanoseconds prune_interval = std::chrono::seconds(60);
};

class Store {
 public:
  // Creates the file (and missing parent directories, mode 0750) if needed, sets WAL,
  // synchronous=NORMAL, auto_vacuum=INCREMENTAL (before the first table), migrates to
  // kSchemaVersion and starts the writer thread. Errors are one line naming the path and the
  // fix.
  static Result<std::unique_ptr<Store>> open(const StoreOptions& options);
  ~Store();  // writes what is queued, stops the thread, checkpoints
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Never blocks the caller (only a short mutex); false (and counted) when the queue is full.
  bool enqueue(WindowBatch batch);
  // Blocks until everything enqueued so far is committed (or failed and counted).
  void flush();
  StoreStats stats() const;  // enabled = true
  // Runs retention (age, then size) now, on the writer thread, after what is queued.
  Result<Ok> prune_now();

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stallwatch::store
