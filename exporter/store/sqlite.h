// Thin RAII over the SQLite C API: a connection, a prepared statement, exec with an error
// message that names the database. Not thread-safe: one connection per thread.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace stallwatch::store {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

// Opens `path` with SQLite flags (SQLITE_OPEN_*), busy timeout 5 s. The error names the path.
Result<DbPtr> open_db(const std::string& path, int flags);

// Runs one or more statements that return no rows.
Result<Ok> exec(sqlite3* db, std::string_view sql);

class Stmt {
 public:
  Stmt() = default;
  static Result<Stmt> prepare(sqlite3* db, std::string_view sql);

  Stmt& bind(int i, std::int64_t v);
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::string_view v);
  Stmt& bind_blob(int i, const std::string& v);
  Stmt& bind_null(int i);
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int step();
  void reset();

  std::int64_t int64(int col) const { return sqlite3_column_int64(s_.get(), col); }
  double real(int col) const { return sqlite3_column_double(s_.get(), col); }
  std::string text(int col) const;
  std::string blob(int col) const;
  bool is_null(int col) const { return sqlite3_column_type(s_.get(), col) == SQLITE_NULL; }
  sqlite3_stmt* get() const { return s_.get(); }

 private:
  struct Finalizer {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
  };
  std::unique_ptr<sqlite3_stmt, Finalizer> s_;
};

// Stops the statements of `db` that run past a time budget (`query` and `explain --timeout`):
// a progress handler looks at the clock every few thousand virtual-machine steps and interrupts
// the statement, which then fails with SQLITE_INTERRUPT. A budget of 0 means none. The handler
// is removed when this goes away. One per connection at a time.
class StatementDeadline {
 public:
  StatementDeadline(sqlite3* db, std::chrono::nanoseconds budget);
  ~StatementDeadline();
  StatementDeadline(const StatementDeadline&) = delete;
  StatementDeadline& operator=(const StatementDeadline&) = delete;
  bool expired() const { return expired_; }

 private:
  static int check(void* self);
  sqlite3* db_;
  std::chrono::steady_clock::time_point deadline_;
  bool expired_ = false;
};

// The message of the connection's last error, with the database file name.
std::string db_error(sqlite3* db);

}  // namespace stallwatch::store
