#include "cli/query.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string_view>

#include "cli/flags.h"
#include "cli/open_store.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/json.h"
#include "common/strings.h"
#include "store/sqlite.h"

namespace stallwatch::cli {
namespace {

constexpr const char* kUsage =
    "usage: stallwatch query [--db PATH] [--format table|csv|json] [--timeout DURATION]\n"
    "                        [--max-rows N] 'SQL'\n"
    "\n"
    "Runs one read-only SQL statement against the stallwatch database and prints the rows.\n"
    "Writes are refused; work on a copy with the sqlite3 shell to change data.\n"
    "\n"
    "options:\n"
    "  --db PATH        the database (default /var/lib/stallwatch/stallwatch.db)\n"
    "  --format FORMAT  table (default): aligned columns and a row count; csv: RFC 4180 with a\n"
    "                   header; json: an array of objects (NULL as null, blobs as hex strings)\n"
    "  --timeout D      stop the statement after D (default 30s; 100ms to 24h, 0 for none):\n"
    "                   a long read keeps the daemon from checkpointing its write-ahead log\n"
    "  --max-rows N     print at most N rows (1 to 1000000000); a note on stderr says when\n"
    "                   more were left out\n"
    "  -h, --help       this text\n"
    "  --version        the version (as `stallwatch version`)\n"
    "\n"
    "Rows are printed as they come (a table aligns its columns on the first 1,000 rows).\n"
    "\n"
    "Tables and columns: docs/store.md. Example:\n"
    "  stallwatch query \"SELECT kind, severity, count(*) AS chains FROM chains GROUP BY 1, 2\"\n";

constexpr const char* kPrefix = "stallwatch query: ";

enum class Format { kTable, kCsv, kJson };

// SQLite's own memory for one statement (sorters, recursive queues): past it the statement
// fails with SQLITE_NOMEM instead of the process running out of memory.
constexpr sqlite3_int64 kHeapLimit = 1ll << 30;

struct Options {
  std::string db = kDefaultDbPath;
  Format format = Format::kTable;
  std::string sql;
  std::chrono::nanoseconds timeout = kDefaultReadTimeout;
  std::uint64_t max_rows = 0;  // 0: all
  bool help = false;
  bool version = false;
};

// A usage error's message, or nullopt.
std::optional<std::string> parse(const std::vector<std::string>& args, Options& o) {
  po::options_description desc;
  // clang-format off
  add_help_flags(desc);
  desc.add_options()
    ("db", po::value<std::string>(), "")
    ("format", po::value<std::string>(), "")
    ("timeout", po::value<std::string>(), "")
    ("max-rows", po::value<std::string>(), "")
    ("sql", po::value<std::vector<std::string>>(), "");
  // clang-format on
  po::positional_options_description positional;
  positional.add("sql", -1);
  auto vm = parse_flags(args, desc, &positional);
  if (!vm) return vm.error().message;
  if (vm->count("help") || vm->count("version")) {
    o.help = vm->count("help") > 0;
    o.version = !o.help;
    return std::nullopt;
  }
  if (vm->count("db")) {
    o.db = (*vm)["db"].as<std::string>();
    if (o.db.empty()) return std::string("--db needs a path");
  }
  if (vm->count("format")) {
    const std::string value = (*vm)["format"].as<std::string>();
    if (value == "table") {
      o.format = Format::kTable;
    } else if (value == "csv") {
      o.format = Format::kCsv;
    } else if (value == "json") {
      o.format = Format::kJson;
    } else {
      return "unknown format '" + value + "' (table, csv or json)";
    }
  }
  if (vm->count("timeout")) {
    auto t = read_timeout((*vm)["timeout"].as<std::string>(), "--timeout");
    if (!t) return t.error().message;
    o.timeout = *t;
  }
  if (vm->count("max-rows")) {
    const std::string value = (*vm)["max-rows"].as<std::string>();
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(value.c_str(), &end, 10);
    if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0])) || *end != '\0' ||
        errno == ERANGE || n < 1 || n > 1000000000ULL) {
      return "--max-rows '" + value + "' is not a number from 1 to 1000000000";
    }
    o.max_rows = n;
  }
  const auto sql =
      vm->count("sql") ? (*vm)["sql"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (sql.size() > 1) {
    return std::string("give the SQL as one argument, quoted: stallwatch query 'SELECT ...'");
  }
  if (sql.empty()) return std::string("no SQL statement given");
  o.sql = sql.front();
  return std::nullopt;
}

// Percent-encoding for a file: URI (SQLite decodes %HH in the path).
std::string uri_path(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Opens read-only and reads the schema, so a database that cannot be read fails here.
Result<store::DbPtr> open_readonly(const std::string& path, bool immutable) {
  std::string uri = "file:" + uri_path(path) + "?mode=ro" + (immutable ? "&immutable=1" : "");
  auto db = store::open_db(uri, SQLITE_OPEN_READONLY);
  if (!db) return db.error();
  if (auto r = store::exec(db->get(), "PRAGMA query_only = 1; SELECT count(*) FROM sqlite_master");
      !r) {
    return make_error(sqlite3_errmsg(db->get()), sqlite3_extended_errcode(db->get()));
  }
  return db;
}

// Whether `name` is one of `list`, case-insensitively (SQL names); false for null.
template <size_t N>
bool listed(const char* name, const char* const (&list)[N]) {
  if (!name) return false;
  for (const char* entry : list) {
    if (sqlite3_stricmp(name, entry) == 0) return true;
  }
  return false;
}

// Pragmas that take an argument but only read.
bool reading_pragma(const char* name) {
  static constexpr const char* kReading[] = {
      "table_info",       "table_xinfo",       "index_info",      "index_xinfo", "index_list",
      "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check", "table_list"};
  return listed(name, kReading);
}

// The SQL functions a query may call: aggregates, windows, text, numbers, dates and JSON.
// Anything else is refused while the statement is prepared: fts3_tokenizer() hands out a
// pointer (and with one argument more installs a tokenizer), and a build may carry others
// (issue #49). Table-valued JSON functions (json_each, json_tree) are tables, not calls.
bool allowed_function(const char* name) {
  static constexpr const char* kAllowed[] = {
      "abs", "avg", "count", "max", "min", "sum", "total", "group_concat", "string_agg",
      "coalesce", "ifnull", "iif", "if", "nullif", "length", "octet_length", "lower", "upper",
      "substr", "substring", "trim", "ltrim", "rtrim", "replace", "instr", "printf", "format",
      "round", "typeof", "hex", "unhex", "quote", "like", "glob", "char", "unicode",
      "likely", "unlikely", "likelihood", "concat", "concat_ws", "sign",
      // Bounded by the statement's heap limit (kHeapLimit) like any value it makes.
      "random", "randomblob", "zeroblob",
      "date", "time", "datetime", "julianday", "strftime", "unixepoch", "timediff",
      "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
      "first_value", "last_value", "nth_value",
      "sqrt", "pow", "power", "exp", "ln", "log", "log2", "log10", "floor", "ceil", "ceiling",
      "mod", "pi", "trunc",
      "json", "json_extract", "->", "->>", "json_array", "json_object", "json_array_length",
      "json_type", "json_valid", "json_quote", "json_group_array", "json_group_object",
      "json_insert", "json_replace", "json_set", "json_remove", "json_patch"};
  return listed(name, kAllowed);
}

struct Authority {
  bool writes = false;
  std::string denied;  // the first function refused
};

// Called while a statement is prepared: notes what sqlite3_stmt_readonly() does not count as a
// write: ATTACH and DETACH (they change the connection, and may create a file) and setting a
// pragma; refuses a function off the list above. Everything else is sqlite3_stmt_readonly()'s
// call (the authorizer also sees SQLite's own bookkeeping, e.g. an UPDATE of sqlite_master when
// json_each is first used).
int authorize(void* state, int action, const char* a1, const char* a2, const char*, const char*) {
  auto* a = static_cast<Authority*>(state);
  if (action == SQLITE_ATTACH || action == SQLITE_DETACH ||
      (action == SQLITE_PRAGMA && a2 != nullptr && !reading_pragma(a1))) {
    a->writes = true;
  }
  if (action == SQLITE_FUNCTION && !allowed_function(a2)) {
    if (a->denied.empty()) a->denied = a2 ? a2 : "?";
    return SQLITE_DENY;
  }
  return SQLITE_OK;
}

// Skips whitespace and comments.
size_t skip_blank(std::string_view s, size_t i) {
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      i++;
    } else if (s.substr(i, 2) == "--") {
      size_t nl = s.find('\n', i);
      i = nl == std::string_view::npos ? s.size() : nl + 1;
    } else if (s.substr(i, 2) == "/*") {
      size_t end = s.find("*/", i + 2);
      i = end == std::string_view::npos ? s.size() : end + 2;
    } else {
      break;
    }
  }
  return i;
}

std::string first_keyword(std::string_view sql) {
  size_t i = skip_blank(sql, 0);
  std::string word;
  while (i < sql.size() && std::isalpha(static_cast<unsigned char>(sql[i]))) {
    word += static_cast<char>(std::toupper(static_cast<unsigned char>(sql[i++])));
  }
  return word.empty() ? std::string("statement") : word;
}

QueryCell read_cell(sqlite3_stmt* st, int col) {
  QueryCell c;
  c.type = sqlite3_column_type(st, col);
  switch (c.type) {
    case SQLITE_INTEGER:
      c.text = std::to_string(sqlite3_column_int64(st, col));
      break;
    case SQLITE_FLOAT:
      c.text = format_real(sqlite3_column_double(st, col));
      break;
    case SQLITE_TEXT: {
      const unsigned char* t = sqlite3_column_text(st, col);
      c.text.assign(reinterpret_cast<const char*>(t),
                    static_cast<size_t>(sqlite3_column_bytes(st, col)));
      break;
    }
    case SQLITE_BLOB: {
      static const char* hex = "0123456789abcdef";
      const auto* b = static_cast<const unsigned char*>(sqlite3_column_blob(st, col));
      const int n = sqlite3_column_bytes(st, col);
      for (int i = 0; i < n; i++) {
        c.text += hex[b[i] >> 4];
        c.text += hex[b[i] & 15];
      }
      break;
    }
    default:
      break;
  }
  return c;
}

int run(const Options& o, std::ostream& out, std::ostream& err) {
  struct stat st {};
  if (::stat(o.db.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      err << kPrefix << no_database_message(o.db, "query") << "\n";
    } else {
      err << kPrefix << "cannot read " << o.db << ": " << std::strerror(errno) << "\n";
    }
    return 1;
  }
  if (S_ISDIR(st.st_mode)) {
    err << kPrefix << o.db << " is a directory; pass --db with the database file\n";
    return 1;
  }
  auto db = open_readonly(o.db, false);
  if (!db && (db.error().err & 0xff) != SQLITE_BUSY && (db.error().err & 0xff) != SQLITE_NOTADB) {
    // The -shm/-wal files cannot be created (a read-only copy): read the file as it is.
    if (auto retry = open_readonly(o.db, true)) {
      db = std::move(retry);
      struct stat wal {};
      if (::stat((o.db + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
        err << kPrefix << "note: " << o.db
            << "-wal cannot be used here (read-only directory?); rows written since the last "
               "checkpoint are not visible\n";
      }
    }
  }
  if (!db) {
    if ((db.error().err & 0xff) == SQLITE_NOTADB) {
      err << kPrefix << o.db
          << " is not a SQLite database; pass --db with the stallwatch database\n";
    } else {
      err << kPrefix << "cannot read " << o.db << ": " << db.error().message << "\n";
    }
    return 1;
  }
  sqlite3* h = db->get();
  sqlite3_hard_heap_limit64(kHeapLimit);

  Authority authority;
  sqlite3_set_authorizer(h, authorize, &authority);
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(h, o.sql.c_str(), static_cast<int>(o.sql.size()), &raw, &tail);
  sqlite3_set_authorizer(h, nullptr, nullptr);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  if (!authority.denied.empty()) {
    err << kPrefix << "the SQL function " << escape_line(authority.denied)
        << "() is not allowed in query (aggregates, window, text, number, date and JSON "
           "functions are); use the sqlite3 shell on a copy for anything else\n";
    return 2;
  }
  if (rc != SQLITE_OK) {
    err << kPrefix << "SQL error: " << sqlite3_errmsg(h) << "\n";
    return 1;
  }
  if (!stmt) {
    err << kPrefix << "no SQL statement given\n";
    return 2;
  }
  const std::string verb = first_keyword(o.sql);
  if (authority.writes || !sqlite3_stmt_readonly(stmt.get()) || verb == "VACUUM") {
    err << kPrefix << "refusing to run a statement that writes (" << verb
        << " \xe2\x80\xa6); query is read-only \xe2\x80\x94 work on a copy with the sqlite3 shell "
           "to "
           "change data\n";
    return 2;
  }
  const std::string_view rest(tail, static_cast<size_t>(o.sql.c_str() + o.sql.size() - tail));
  if (skip_blank(rest, 0) < rest.size()) {
    // Only ';' and comments may follow; anything else is a second statement.
    size_t i = skip_blank(rest, 0);
    while (i < rest.size() && rest[i] == ';') i = skip_blank(rest, i + 1);
    if (i < rest.size()) {
      err << kPrefix << "only one SQL statement per call; run the others separately\n";
      return 2;
    }
  }

  const int cols = sqlite3_column_count(stmt.get());
  std::vector<std::string> names;
  for (int c = 0; c < cols; c++) names.emplace_back(sqlite3_column_name(stmt.get(), c));
  std::optional<TableWriter> table;
  if (o.format == Format::kTable) table.emplace(names, out);
  size_t count = 0;
  if (o.format == Format::kCsv && cols > 0) {
    for (int c = 0; c < cols; c++)
      out << (c ? "," : "") << csv_field(names[static_cast<size_t>(c)]);
    out << "\r\n";
  }
  if (o.format == Format::kJson) out << "[";
  const store::StatementDeadline deadline(h, o.timeout);
  std::vector<QueryCell> row;
  bool truncated = false;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    if (o.max_rows != 0 && count == o.max_rows) {
      truncated = true;
      break;
    }
    row.clear();
    for (int c = 0; c < cols; c++) row.push_back(read_cell(stmt.get(), c));
    if (table) {
      table->add(row);
    } else if (o.format == Format::kCsv) {
      for (int c = 0; c < cols; c++) {
        out << (c ? "," : "") << csv_field(row[static_cast<size_t>(c)].text);
      }
      out << "\r\n";
    } else {
      out << (count ? ",\n" : "\n") << "{";
      for (int c = 0; c < cols; c++) {
        out << (c ? "," : "") << json_string(names[static_cast<size_t>(c)]) << ":"
            << json_cell(row[static_cast<size_t>(c)]);
      }
      out << "}";
    }
    count++;
    if (!out) break;  // the reader went away (a closed pipe): stop reading
  }
  if (o.format == Format::kJson) out << (count ? "\n]\n" : "]\n");
  if (table) table->finish();
  out.flush();
  if (truncated) {
    err << kPrefix << "stopped after " << count << (count == 1 ? " row" : " rows")
        << " (--max-rows); more rows were left out\n";
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    if (deadline.expired()) {
      err << kPrefix << "stopped after " << format_duration(o.timeout) << " (--timeout) with "
          << count << (count == 1 ? " row" : " rows")
          << " printed; narrow the statement (a WHERE on t_ns, a LIMIT) or raise --timeout\n";
    } else if ((rc & 0xff) == SQLITE_NOMEM) {
      err << kPrefix << "the statement needs more than " << (kHeapLimit >> 20)
          << " MiB of memory; narrow it (a WHERE on t_ns, a LIMIT)\n";
    } else {
      err << kPrefix << "SQL error: " << sqlite3_errmsg(h) << "\n";
    }
    return 1;
  }
  return out ? 0 : 1;
}

}  // namespace

int query_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Options o;
  if (auto e = parse(args, o)) return usage_error(err, "query", *e);
  if (o.help) {
    out << kUsage;
    return 0;
  }
  if (o.version) {
    out << version_text();
    return 0;
  }
  return run(o, out, err);
}

int query_main(const std::vector<std::string>& args) {
  return query_main(args, std::cout, std::cerr);
}

}  // namespace stallwatch::cli
