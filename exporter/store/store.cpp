#include "store/store.h"

#include "common/guard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/size.h"
#include "store/reserve.h"
#include "store/schema.h"
#include "store/writer.h"

namespace stallwatch::store {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Old databases without incremental auto-vacuum are converted with VACUUM when at most this
// big; bigger ones keep working (freed pages are reused) but never shrink on disk.
constexpr std::uint64_t kMaxVacuumConversionBytes = 256ull << 20;

std::string reason_of(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
      return "permission denied";
    case EROFS:
      return "read-only file system";
    case EISDIR:
      return "is a directory";
    case ENOSPC:
      return "no space left on device";
    case ENOTDIR:
      return "a component of the path is not a directory";
    default: {
      std::string s = std::strerror(err);
      if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
      return s;
    }
  }
}

std::string fix_of(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
      return "run as root or pass --db PATH in a writable directory";
    case EROFS:
      return "pass --db PATH on a writable file system";
    case EISDIR:
      return "pass --db with a file name, not a directory";
    case ENOSPC:
      return "free disk space or pass --db PATH on another file system";
    default:
      return "pass --db PATH in a writable directory";
  }
}

Error cannot_write(const std::string& what, int err) {
  return make_error("cannot write " + what + ": " + reason_of(err) + "; " + fix_of(err), err);
}

// An SQLite failure while opening: the OS error when there is one, else SQLite's message.
Error open_failure(sqlite3* db, const std::string& path, const Error& e) {
  const int sys = sqlite3_system_errno(db);
  if (sys != 0 && sys != ENOENT) return cannot_write(path, sys);
  const int code = e.err != 0 ? e.err : sqlite3_extended_errcode(db);
  if ((code & 0xff) == SQLITE_NOTADB) {
    return make_error(path + " is not a SQLite database; pass --db with another path", code);
  }
  return make_error("cannot open the database: " + e.message + "; pass --db with another path",
                    code);
}

// mkdir -p of the database's directory, mode 0750 for what is created.
Result<Ok> make_parents(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::filesystem::path cur;
  for (const auto& part : dir) {
    cur /= part;
    if (::mkdir(cur.c_str(), 0750) == 0 || errno == EEXIST) continue;
    const int err = errno;
    return make_error("cannot create directory " + cur.string() + " for the database " + path +
                          ": " + reason_of(err) + "; " + fix_of(err),
                      err);
  }
  return Ok{};
}

Result<std::string> pragma_text(sqlite3* db, const std::string& pragma) {
  auto st = Stmt::prepare(db, "PRAGMA " + pragma);
  if (!st) return st.error();
  int rc = st->step();
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return make_error(db_error(db), sqlite3_extended_errcode(db));
  return st->text(0);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct Store::Impl {
  StoreOptions opt;
  DbPtr db;
  BatchWriter writer;  // after db: statements are finalized before the connection closes
  std::thread thread;

  mutable std::mutex mu;
  std::condition_variable wake;  // the writer waits on it
  std::condition_variable done;  // flush() and prune_now() wait on it
  std::deque<WindowBatch> queue;
  bool stop = false;
  std::uint64_t accepted = 0;   // batches enqueued
  std::uint64_t processed = 0;  // batches committed or failed
  std::uint64_t prune_requested = 0;
  std::uint64_t prune_done = 0;
  std::optional<Error> prune_error;
  StoreStats counters;  // all but queue_size; under mu

  // Writer thread only (and open and shutdown, before and after it runs).
  Reserve reserve;  // PATH.reserve: room to prune in when the disk is full
  SteadyClock::time_point next_size_check{};
  SteadyClock::time_point last_warn{};
  bool warned = false;
  std::uint64_t unreported_errors = 0;
  // Full-disk prunes not yet logged (one line a minute at most).
  SteadyClock::time_point last_full_note{};
  bool noted_full = false;
  std::uint64_t full_passes = 0, full_windows = 0, full_rows = 0;

  void run();
  void write(const std::vector<WindowBatch>& batches);
  Result<Ok> prune(SizePrune why = SizePrune::kAtLimit, std::uint64_t* pruned = nullptr,
                   bool report = true);
  bool make_room();
  void note_full_disk(std::uint64_t windows, std::uint64_t rows);
  void failed(const Error& e, const std::string& what);
  void shutdown();
};

void Store::Impl::failed(const Error& e, const std::string& what) {
  const int code = e.err & 0xff;
  {
    std::lock_guard lk(mu);
    counters.write_errors++;
    counters.failing = true;
    if (e.err > 0 && (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)) counters.corrupt = true;
  }
  unreported_errors++;
  const auto now = SteadyClock::now();
  if (warned && now - last_warn < std::chrono::minutes(1)) return;
  std::string msg = "store: " + what + ": " + e.message;
  if ((e.err & 0xff) == SQLITE_FULL) {
    msg += "; free disk space or lower --max-db";
  }
  if (unreported_errors > 1) {
    msg += " (" + std::to_string(unreported_errors) + " write errors since the last message)";
  }
  SW_LOG(kWarn) << msg;
  warned = true;
  last_warn = now;
  unreported_errors = 0;
}

Result<Ok> Store::Impl::prune(SizePrune why, std::uint64_t* pruned, bool report) {
  std::uint64_t rows = 0;
  Result<Ok> r = Ok{};
  if (opt.retention.count() > 0) r = prune_by_age(db.get(), now_ns() - opt.retention.count(), rows);
  // The freed pages go back a half-reserve at a time: the room one step's WAL may take.
  if (r) r = prune_by_size(db.get(), opt.path, opt.max_bytes, why, reserve.bytes() / 2, rows);
  apply_page_limit(db.get(), opt.max_bytes);
  // The reserve comes back once there is room for it again (after a full disk, or a path that
  // could not take it at open).
  if (reserve.enabled() && !reserve.held()) {
    const auto room = free_bytes(opt.path);
    if (room && *room >= reserve.bytes()) (void)reserve.create();
  }
  const std::uint64_t bytes = database_bytes(db.get(), opt.path);
  {
    std::lock_guard lk(mu);
    counters.rows_pruned += rows;
    counters.db_bytes = bytes;
  }
  if (pruned) *pruned += rows;
  if (!r && report) failed(r.error(), "pruning");
  return r;
}

namespace {
bool is_full(const Result<Ok>& r) { return !r && (r.error().err & 0xff) == SQLITE_FULL; }
}  // namespace

// A write found no room (SQLITE_FULL): --max-db (SQLite's max_page_count) or the file system is
// full. In WAL mode pruning needs room of its own (its deletes append to the -wal, the
// checkpoint writes before it truncates), so when the disk is the cause the reserve is released
// first; prune() takes it back once the oldest tenth is gone and the file has shrunk. True when
// something was pruned: then the write is worth another try.
bool Store::Impl::make_room() {
  const auto room = free_bytes(opt.path);
  bool disk = !room || *room < std::max<std::uint64_t>(reserve.bytes(), 1u << 20);
  if (disk) (void)reserve.release();
  const std::uint64_t windows_before = window_count(db.get());
  std::uint64_t rows = 0;
  const bool second_chance = reserve.held();
  auto r = prune(disk ? SizePrune::kDiskFull : SizePrune::kWriteFull, &rows, !second_chance);
  if (second_chance && is_full(r)) {
    // Not --max-db after all: the disk had room for the write's pages but not for pruning.
    disk = true;
    (void)reserve.release();
    r = prune(SizePrune::kDiskFull, &rows);
  } else if (second_chance && !r) {
    failed(r.error(), "pruning");
  }
  if (rows == 0) return false;  // nothing left to prune: the store goes off until there is room
  if (disk) {
    const std::uint64_t windows_after = window_count(db.get());
    note_full_disk(windows_before > windows_after ? windows_before - windows_after : 0, rows);
  }
  return true;
}

void Store::Impl::note_full_disk(std::uint64_t windows, std::uint64_t rows) {
  full_passes++;
  full_windows += windows;
  full_rows += rows;
  const auto now = SteadyClock::now();
  if (noted_full && now - last_full_note < std::chrono::minutes(1)) return;
  std::string msg = "store: the file system holding " + opt.path + " is full: pruned the oldest " +
                    std::to_string(full_windows) + " windows (" + std::to_string(full_rows) +
                    " rows)";
  if (full_passes > 1) msg += " in " + std::to_string(full_passes) + " passes";
  msg += " to make room";
  if (reserve.enabled()) {
    msg += " (in the " + format_size(reserve.bytes()) + " that " + reserve.path() + " held)";
  }
  msg += "; the store goes on with less history (free disk space to keep more)";
  SW_LOG(kWarn) << msg;
  noted_full = true;
  last_full_note = now;
  full_passes = full_windows = full_rows = 0;
}

void Store::Impl::write(const std::vector<WindowBatch>& batches) {
  if (batches.empty()) return;
  std::uint64_t written = 0, rows = 0;
  auto r = writer.write(batches);
  // The disk or --max-db is full: make room and try once more.
  if (is_full(r) && make_room()) r = writer.write(batches);
  if (r) {
    written = batches.size();
    for (const auto& b : batches) rows += b.rows();
  } else if (is_full(r) && batches.size() > 1) {
    // Together they do not fit: one transaction per batch, making room before each that needs
    // it, until pruning no longer helps (each pass prunes a tenth: a long queue would empty the
    // database for nothing).
    bool pruning_helps = true;
    for (size_t i = 0; i < batches.size(); i++) {
      const std::span<const WindowBatch> one(&batches[i], 1);
      auto w = writer.write(one);
      if (is_full(w) && pruning_helps) {
        if (make_room()) w = writer.write(one);
        pruning_helps = w.ok();
      }
      if (w) {
        written++;
        rows += batches[i].rows();
      } else {
        failed(w.error(), "writing a window batch failed, it is lost");
      }
    }
  } else {
    failed(r.error(),
           "writing " + std::to_string(batches.size()) + " window batch(es) failed, they are lost");
  }
  const std::uint64_t bytes = database_bytes(db.get(), opt.path);
  {
    std::lock_guard lk(mu);
    if (written == batches.size()) counters.failing = false;
    counters.batches_written += written;
    counters.rows_written += rows;
    counters.db_bytes = bytes;
  }
  // At --max-db between prune intervals (the WAL is beyond max_page_count's reach): prune
  // now, at most once a second.
  const auto now = SteadyClock::now();
  if (bytes >= opt.max_bytes && now >= next_size_check) {
    next_size_check = now + std::chrono::seconds(1);
    (void)prune();
  }
}

void Store::Impl::run() {
  const auto interval = std::clamp<std::chrono::nanoseconds>(
      opt.prune_interval, std::chrono::milliseconds(1), std::chrono::hours(24 * 365));
  auto next_prune = SteadyClock::now() + interval;
  std::unique_lock lk(mu);
  for (;;) {
    wake.wait_until(lk, next_prune,
                    [&] { return stop || !queue.empty() || prune_requested > prune_done; });
    std::vector<WindowBatch> batches(std::make_move_iterator(queue.begin()),
                                     std::make_move_iterator(queue.end()));
    queue.clear();
    const std::uint64_t want_prune = prune_requested;
    const bool stopping = stop;
    lk.unlock();

    write(batches);
    std::optional<Error> prune_result;
    const bool pruning = want_prune > prune_done || SteadyClock::now() >= next_prune;
    if (pruning) {
      auto r = prune();
      if (!r) prune_result = r.error();
      next_prune = SteadyClock::now() + interval;
    }

    lk.lock();
    processed += batches.size();
    if (pruning && want_prune > prune_done) {
      prune_done = want_prune;
      prune_error = prune_result;
    }
    done.notify_all();
    if (stopping && queue.empty()) break;
  }
}

void Store::Impl::shutdown() {
  {
    std::lock_guard lk(mu);
    stop = true;
  }
  wake.notify_one();
  if (thread.joinable()) thread.join();
  // The reserve lives while the store is open: a stopped daemon, or a demo's or test's
  // temporary store, leaves nothing behind, and on a full disk the last checkpoint has its room.
  // The next open takes it again (a crash leaves the file, which the next open reuses).
  (void)reserve.release();
  (void)exec(db.get(), "PRAGMA wal_checkpoint(TRUNCATE)");
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Store::~Store() {
  if (impl_) impl_->shutdown();
}

Result<std::unique_ptr<Store>> Store::open(const StoreOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) return make_error("no database path; pass --db PATH");
  if (auto r = make_parents(path); !r) return r.error();

  // Find out with plain system calls whether the file and its directory (for the -wal and
  // -shm files) are writable: SQLite opens lazily and reports less precise errors.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return cannot_write(path, errno);
  ::close(fd);
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return cannot_write(path + "-wal", errno);

  auto opened = open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX);
  if (!opened) return opened.error();
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  impl->opt.queue_batches = std::max<size_t>(options.queue_batches, 1);
  impl->db = std::move(*opened);
  sqlite3* db = impl->db.get();

  // A newer schema is refused before anything (journal mode included) is changed.
  auto version = schema_version(db);
  if (!version) return open_failure(db, path, version.error());
  if (*version > kSchemaVersion) {
    auto r = migrate(db);
    return make_error(path + ": " + (r ? std::string("schema too new") : r.error().message));
  }

  // auto_vacuum only takes effect before the first table is created.
  for (const char* pragma : {"auto_vacuum = INCREMENTAL", "synchronous = NORMAL"}) {
    if (auto r = pragma_text(db, pragma); !r) return open_failure(db, path, r.error());
  }
  auto mode = pragma_text(db, "journal_mode = WAL");
  if (!mode) return open_failure(db, path, mode.error());
  if (*mode != "wal") {
    SW_LOG(kWarn) << "store: " << path << ": the file system does not support WAL (journal mode "
                  << *mode << "); writes are slower";
  }
  // Keep the WAL small relative to --max-db: checkpoint every ~1/16 of it (SQLite's default
  // of 1000 pages at most) and truncate it back after checkpoints.
  const std::uint64_t wal_pages =
      std::clamp<std::uint64_t>(options.max_bytes / 4096 / 16, 16, 1000);
  const std::uint64_t wal_limit =
      std::clamp<std::uint64_t>(options.max_bytes / 16, 64 << 10, 64 << 20);
  (void)pragma_text(db, "wal_autocheckpoint = " + std::to_string(wal_pages));
  (void)pragma_text(db, "journal_size_limit = " + std::to_string(wal_limit));

  if (auto r = migrate(db); !r) return open_failure(db, path, r.error());

  auto vacuum = pragma_text(db, "auto_vacuum");
  if (vacuum && *vacuum != "2") {
    if (database_bytes(db, path) <= kMaxVacuumConversionBytes) {
      if (auto r = exec(db, "PRAGMA auto_vacuum = INCREMENTAL; VACUUM"); !r) {
        SW_LOG(kWarn) << "store: converting " << path
                      << " to incremental auto-vacuum failed: " << r.error().message;
      }
    } else {
      SW_LOG(kInfo) << "store: " << path
                    << " predates incremental auto-vacuum; pruned space is reused but the file "
                       "does not shrink (run VACUUM on it while stallwatch is stopped)";
    }
  }
  apply_page_limit(db, options.max_bytes);

  auto writer = BatchWriter::prepare(db);
  if (!writer) return open_failure(db, path, writer.error());
  impl->writer = std::move(*writer);

  // After the database, which matters more: without a reserve the store still runs.
  impl->reserve = Reserve(Reserve::path_for(path), Reserve::size_for(options.max_bytes));
  if (auto r = impl->reserve.create(); !r) {
    SW_LOG(kWarn) << "store: no reserve file: " << r.error().message
                  << "; on a full disk the store cannot prune and stops until there is room"
                  << (impl->reserve.refused() ? "" : " (retried at every prune)");
  }
  impl->counters.enabled = true;
  impl->counters.db_bytes = database_bytes(db, path);

  Impl* raw = impl.get();
  // run() returns at stop; should a batch make it throw, the writer logs it once and goes on.
  impl->thread = std::thread([raw] {
    while (!run_guarded("store writer", [raw] { raw->run(); })) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

bool Store::enqueue(WindowBatch batch) {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->stop || impl_->queue.size() >= impl_->opt.queue_batches) {
      impl_->counters.batches_dropped++;
      return false;
    }
    impl_->queue.push_back(std::move(batch));
    impl_->accepted++;
  }
  impl_->wake.notify_one();
  return true;
}

void Store::flush() {
  std::unique_lock lk(impl_->mu);
  const std::uint64_t target = impl_->accepted;
  impl_->done.wait(lk, [&] { return impl_->processed >= target; });
}

StoreStats Store::stats() const {
  std::lock_guard lk(impl_->mu);
  StoreStats s = impl_->counters;
  s.queue_size = impl_->queue.size();
  return s;
}

Result<Ok> Store::prune_now() {
  std::unique_lock lk(impl_->mu);
  const std::uint64_t ticket = ++impl_->prune_requested;
  impl_->wake.notify_one();
  impl_->done.wait(lk, [&] { return impl_->prune_done >= ticket; });
  if (impl_->prune_error) return *impl_->prune_error;
  return Ok{};
}

}  // namespace stallwatch::store
