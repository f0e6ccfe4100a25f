// `stallwatch query [--db PATH] [--format table|csv|json] 'SQL'`: one read-only SQL statement
// against the chain store (docs/store.md), printed as an aligned table, CSV (RFC 4180) or a
// JSON array of objects.
// Read-only by construction: the database is opened with SQLITE_OPEN_READONLY and
// query_only=1, and a statement that would write (sqlite3_stmt_readonly() false, ATTACH,
// DETACH, VACUUM, a PRAGMA that sets a value) is refused before it runs, with exit code 2.
// Never takes a write lock, so it is safe while `stallwatch run` writes the same database.
// query.cpp parses, opens and classifies; query_render.cpp holds the pure renderers below.
// Thread-safety: reentrant.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace stallwatch::cli {

inline constexpr const char* kDefaultDbPath = "/var/lib/stallwatch/stallwatch.db";

// Exit codes: 0 ok; 1 the database cannot be opened or the statement fails; 2 usage errors
// and refused statements (writes, more than one statement).
int query_main(const std::vector<std::string>& args);
// The same, writing results to `out` and the one-line errors to `err` (tests).
int query_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// ---- pure pieces (query_render.cpp) ----

// One result value: `type` is SQLite's (SQLITE_INTEGER, _FLOAT, _TEXT, _BLOB, _NULL); `text`
// is the integer in decimal, the real as its shortest round-trip form (always with a '.' or an
// exponent; NaN, Inf, -Inf), the text, or the blob as lowercase hex; empty for NULL.
struct QueryCell {
  int type = 5;  // SQLITE_NULL
  std::string text;
};

std::string format_real(double v);
// RFC 4180: quoted (quotes doubled) when the field holds a comma, quote, CR or LF.
std::string csv_field(const std::string& s);
// JSON value: numbers as numbers (non-finite reals as null), NULL as null, else a string.
std::string json_cell(const QueryCell& c);
// Streams a table: column widths and alignment come from the first `sample` rows (a cell of a
// later row that is wider is printed whole, out of line), so memory stays bounded however
// many rows a query returns. finish() prints what is buffered and "N rows".
class TableWriter {
 public:
  TableWriter(std::vector<std::string> names, std::ostream& out, size_t sample = 1000);
  void add(const std::vector<QueryCell>& row);
  void finish();

 private:
  void start();
  void write_row(const std::vector<QueryCell>& row);
  void write_line(const std::vector<std::string>& cells);
  std::vector<std::string> names_;
  std::ostream& out_;
  size_t sample_;
  std::vector<std::vector<QueryCell>> buffered_;
  std::vector<size_t> width_;
  std::vector<bool> numeric_;
  bool started_ = false;
  size_t count_ = 0;
};

// All rows at once through TableWriter: header, a rule of dashes, one line per row (numeric columns right-aligned, NULL shown as
// NULL, control characters escaped), then "N rows" ("1 row").
std::string render_table(const std::vector<std::string>& names,
                         const std::vector<std::vector<QueryCell>>& rows);

}  // namespace stallwatch::cli
