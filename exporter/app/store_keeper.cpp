#include "app/store_keeper.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include "common/duration.h"
#include "common/log.h"

namespace stallwatch::app {
namespace {

bool is_corrupt(const Error& e) {
  const int code = e.err & 0xff;
  return e.err > 0 && (code == SQLITE_NOTADB || code == SQLITE_CORRUPT);
}

// PATH (and PATH-wal, PATH-shm) → PATH.corrupt-UNIXTIME...; the new name, or "" on failure.
std::string move_aside(const std::string& path) {
  const std::string to = path + ".corrupt-" + std::to_string(std::time(nullptr));
  if (std::rename(path.c_str(), to.c_str()) != 0) return "";
  for (const char* suffix : {"-wal", "-shm"}) {
    std::error_code ec;
    if (std::filesystem::exists(path + suffix, ec)) {
      std::rename((path + suffix).c_str(), (to + suffix).c_str());
    }
  }
  return to;
}

}  // namespace

StoreKeeper::StoreKeeper(store::StoreOptions options, std::chrono::nanoseconds retry)
    : options_(std::move(options)), retry_(retry) {}

store::Store* StoreKeeper::get(Clock::time_point now) {
  if (store_) {
    const auto st = store_->stats();
    if (st.corrupt) {
      close("a write found the database corrupt");
      const std::string aside = move_aside(options_.path);
      const int err = errno;
      if (aside.empty()) {
        SW_LOG(kError) << "store: " << options_.path
                       << " is corrupt and cannot be moved aside: " << std::strerror(err);
      } else {
        SW_LOG(kWarn) << "store: " << options_.path << " is corrupt: moved it aside to " << aside
                      << " (kept) and starting a new database";
      }
      next_attempt_ = now;
    } else if (st.failing) {
      if (!failing_) failing_since_ = now;
      failing_ = true;
      if (now - failing_since_ >= retry_) {
        close("writes have failed for " + format_duration(retry_));
        next_attempt_ = now;
      }
    } else {
      failing_ = false;
    }
  }
  if (store_ || now < next_attempt_) return store_.get();
  if (!try_open()) next_attempt_ = now + retry_;
  return store_.get();
}

namespace {
void add_counters(StoreStats& to, const StoreStats& s) {
  to.batches_written += s.batches_written;
  to.rows_written += s.rows_written;
  to.batches_dropped += s.batches_dropped;
  to.write_errors += s.write_errors;
  to.rows_pruned += s.rows_pruned;
}
}  // namespace

StoreStats StoreKeeper::stats() const {
  StoreStats out = carried_;
  out.configured = true;
  if (store_) {
    const StoreStats now = store_->stats();
    add_counters(out, now);
    out.enabled = now.enabled;
    out.failing = now.failing;
    out.corrupt = now.corrupt;
    out.queue_size = now.queue_size;
    out.db_bytes = now.db_bytes;
  }
  return out;
}

void StoreKeeper::close(const std::string& why) {
  SW_LOG(kWarn) << "store: closing " << options_.path << ": " << why
                << " (what is queued is written if it can be; the rest is counted as lost)";
  store_->flush();  // what is queued is written or counted before the counters are carried
  add_counters(carried_, store_->stats());
  store_.reset();
  failing_ = false;
}

bool StoreKeeper::try_open() {
  auto opened = store::Store::open(options_);
  if (!opened && is_corrupt(opened.error())) {
    const std::string aside = move_aside(options_.path);
    if (!aside.empty()) {
      SW_LOG(kWarn) << "store: " << opened.error().message << ": moved it aside to " << aside
                    << " (kept) and started a new database";
      opened = store::Store::open(options_);
    }
  }
  if (!opened) {
    const bool repeated = opened.error().message == last_error_;
    last_error_ = opened.error().message;
    if (!repeated) {
      SW_LOG(kError) << "store: " << last_error_;
      SW_LOG(kHint) << "tracing and /metrics go on without the store (stallwatch_store_up 0); "
                    << "retrying every " << format_duration(retry_);
    }
    return false;
  }
  if (!last_error_.empty()) SW_LOG(kInfo) << "store: " << options_.path << " is open again";
  last_error_.clear();
  store_ = std::move(*opened);
  return true;
}

}  // namespace stallwatch::app
