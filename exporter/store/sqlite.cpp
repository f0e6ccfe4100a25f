#include "store/sqlite.h"

namespace stallwatch::store {

std::string db_error(sqlite3* db) {
  const char* file = sqlite3_db_filename(db, "main");
  std::string where = file && *file ? std::string(file) : std::string("database");
  return where + ": " + sqlite3_errmsg(db);
}

StatementDeadline::StatementDeadline(sqlite3* db, std::chrono::nanoseconds budget) : db_(db) {
  if (budget.count() <= 0) return;
  deadline_ = std::chrono::steady_clock::now() + budget;
  // ~4,000 steps take tens of microseconds: the clock is read rarely, the deadline kept closely.
  sqlite3_progress_handler(db_, 4000, &StatementDeadline::check, this);
}

StatementDeadline::~StatementDeadline() { sqlite3_progress_handler(db_, 0, nullptr, nullptr); }

int StatementDeadline::check(void* self) {
  auto* d = static_cast<StatementDeadline*>(self);
  if (std::chrono::steady_clock::now() >= d->deadline_) d->expired_ = true;
  return d->expired_ ? 1 : 0;  // non-zero interrupts the statement
}

Result<DbPtr> open_db(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_URI, nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) {
    std::string msg = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    return make_error("cannot open database " + path + ": " + msg, rc);
  }
  sqlite3_busy_timeout(db.get(), 5000);
  sqlite3_extended_result_codes(db.get(), 1);
  return db;
}

Result<Ok> exec(sqlite3* db, std::string_view sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, std::string(sql).c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    const char* file = sqlite3_db_filename(db, "main");
    return make_error(std::string(file && *file ? file : "database") + ": " + msg, rc);
  }
  return Ok{};
}

Result<Stmt> Stmt::prepare(sqlite3* db, std::string_view sql) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &raw, nullptr);
  if (rc != SQLITE_OK) return make_error(db_error(db), rc);
  Stmt s;
  s.s_.reset(raw);
  return s;
}

Stmt& Stmt::bind(int i, std::int64_t v) {
  sqlite3_bind_int64(s_.get(), i, v);
  return *this;
}

Stmt& Stmt::bind(int i, double v) {
  sqlite3_bind_double(s_.get(), i, v);
  return *this;
}

Stmt& Stmt::bind(int i, std::string_view v) {
  sqlite3_bind_text(s_.get(), i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}

Stmt& Stmt::bind_blob(int i, const std::string& v) {
  sqlite3_bind_blob(s_.get(), i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}

Stmt& Stmt::bind_null(int i) {
  sqlite3_bind_null(s_.get(), i);
  return *this;
}

int Stmt::step() { return sqlite3_step(s_.get()); }

void Stmt::reset() {
  sqlite3_reset(s_.get());
  sqlite3_clear_bindings(s_.get());
}

std::string Stmt::text(int col) const {
  const unsigned char* t = sqlite3_column_text(s_.get(), col);
  return t ? std::string(reinterpret_cast<const char*>(t),
                         static_cast<size_t>(sqlite3_column_bytes(s_.get(), col)))
           : std::string();
}

std::string Stmt::blob(int col) const {
  const void* b = sqlite3_column_blob(s_.get(), col);
  return b ? std::string(static_cast<const char*>(b),
                         static_cast<size_t>(sqlite3_column_bytes(s_.get(), col)))
           : std::string();
}

}  // namespace stallwatch::store
