// Keeps the chain store open for `run` without letting it stop tracing (issue #15): the store
// may fail, tracing and /metrics may not. A database that is not SQLite or is corrupt is moved
// aside (renamed to PATH.corrupt-UNIXTIME, with its -wal and -shm; never deleted) and a new one
// is started; any other failure to open (read-only or full file system, a newer schema,
// permissions) leaves the store off, says so once in the log and in stallwatch_store_up, and is
// retried every `retry` until it works. During a run the same holds: a write that finds the
// database corrupt closes it, moves it aside and starts a new one at once; writes that keep
// failing for `retry` (a file system remounted read-only, a file replaced under us) close the
// store, which is then reopened like at start. Not thread-safe: the window loop calls it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "store/store.h"

namespace stallwatch::app {

class StoreKeeper {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StoreKeeper(store::StoreOptions options,
                       std::chrono::nanoseconds retry = std::chrono::seconds(60));

  // The store, opened now if it is closed and an attempt is due; null while it cannot be.
  store::Store* get(Clock::time_point now = Clock::now());
  bool up() const { return store_ != nullptr; }
  // The store's counters for the daemon's life: those of stores closed and reopened since start
  // are carried, so the exported counters never go back (issue #51). configured is true.
  StoreStats stats() const;
  const std::string& last_error() const { return last_error_; }

 private:
  bool try_open();
  void close(const std::string& why);
  store::StoreOptions options_;
  std::chrono::nanoseconds retry_;
  std::unique_ptr<store::Store> store_;
  Clock::time_point next_attempt_{};
  Clock::time_point failing_since_{};  // when the open store's writes started failing
  bool failing_ = false;
  std::string last_error_;
  StoreStats carried_;  // counters of the stores closed so far
};

}  // namespace stallwatch::app
