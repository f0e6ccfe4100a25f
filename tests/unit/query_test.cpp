// Tests for `stallwatch query` (exporter/cli/query.h): exact table, CSV and JSON output, writes
// and multiple statements refused with exit 2, clear errors for a missing database and bad SQL.
// QueryTest.* call query_main directly; QueryBinaryTest.* run the real binary (STALLWATCH_BIN).
#include "cli/query.h"
#include "store/schema.h"

#include <algorithm>
#include <fcntl.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/store.h"

extern char** environ;

namespace stallwatch::cli {
namespace {

namespace fs = std::filesystem;

const std::string kRefused =
    "); query is read-only \xe2\x80\x94 work on a copy with the sqlite3 shell to change data\n";

std::string refused(const std::string& verb) {
  return "stallwatch query: refusing to run a statement that writes (" + verb + " \xe2\x80\xa6" +
         kRefused;
}

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

Outcome run_query(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Outcome o;
  o.code = query_main(args, out, err);
  o.out = out.str();
  o.err = err.str();
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class QueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "stallwatch-query-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    db_ = dir_ + "/sw.db";
    auto db = store::open_db(db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(store::exec(db->get(), "PRAGMA journal_mode = WAL").ok());
    ASSERT_TRUE(store::migrate(db->get()).ok());
    ASSERT_TRUE(store::exec(db->get(),
                            "INSERT INTO call_windows VALUES"
                            "(1000, '/a', 10, 'cudaMemcpy', 'runtime', 3, 1500000000, 0, 0, "
                            "900000000, x'0a01'),"
                            "(2000, '/b,\"c\"', 11, 'cuLaunchKernel', 'driver', 12, 250000, 0, 0, "
                            "40000, NULL);"
                            "INSERT INTO chains(id, kind, severity, open, cgroup, opened_ns, "
                            "updated_ns, closed_ns, windows, summary, peak) VALUES"
                            "('00000000000000a1', 'cpu_contention', 'high', 1, '/a', 1, 2, 0, 1, "
                            "'line one\nline two', 'high')")
                    .ok());
  }
  void TearDown() override {
    ::chmod(dir_.c_str(), 0700);
    fs::remove_all(dir_);
  }

  std::int64_t count(const std::string& table) {
    auto db = store::open_db(db_, SQLITE_OPEN_READONLY);
    auto st = store::Stmt::prepare(db->get(), "SELECT count(*) FROM " + table);
    if (!st || st->step() != SQLITE_ROW) return -1;
    return st->int64(0);
  }

  std::string dir_;
  std::string db_;
};

constexpr const char* kSelect =
    "SELECT call, api, count, sum_ns / 1e9 AS sum_s, buckets FROM call_windows ORDER BY ts_ns";

TEST_F(QueryTest, TableOutput) {
  Outcome o = run_query({"--db", db_, kSelect});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(o.out,
            "call            api      count    sum_s  buckets\n"
            "--------------  -------  -----  -------  -------\n"
            "cudaMemcpy      runtime      3      1.5  0a01\n"
            "cuLaunchKernel  driver      12  0.00025  NULL\n"
            "2 rows\n");
}

TEST_F(QueryTest, TableEscapesNewlinesAndCountsOneRow) {
  Outcome o = run_query({"--db=" + db_, "--format", "table", "SELECT id, summary FROM chains"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "id                summary\n"
            "----------------  ------------------\n"
            "00000000000000a1  line one\\nline two\n"
            "1 row\n");
  o = run_query({"--db", db_, "SELECT * FROM chains WHERE 0"});
  EXPECT_EQ(o.code, 0);
  EXPECT_TRUE(o.out.ends_with("\n0 rows\n")) << o.out;
}

TEST_F(QueryTest, CsvOutput) {
  Outcome o = run_query({"--db", db_, "--format", "csv",
                         "SELECT cgroup, call, count, sum_ns / 1e9 AS \"sum,s\", buckets "
                         "FROM call_windows ORDER BY ts_ns"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "cgroup,call,count,\"sum,s\",buckets\r\n"
            "/a,cudaMemcpy,3,1.5,0a01\r\n"
            "\"/b,\"\"c\"\"\",cuLaunchKernel,12,0.00025,\r\n");
  o = run_query({"--db", db_, "--format=csv", "SELECT summary FROM chains"});
  EXPECT_EQ(o.out, "summary\r\n\"line one\nline two\"\r\n");
}

TEST_F(QueryTest, JsonOutput) {
  Outcome o = run_query({"--db", db_, "--format", "json", kSelect});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "[\n"
            R"({"call":"cudaMemcpy","api":"runtime","count":3,"sum_s":1.5,"buckets":"0a01"},)"
            "\n"
            R"({"call":"cuLaunchKernel","api":"driver","count":12,"sum_s":0.00025,"buckets":null})"
            "\n]\n");
  o = run_query({"--db", db_, "--format", "json", "SELECT 1 WHERE 0"});
  EXPECT_EQ(o.out, "[]\n");
  o = run_query({"--db", db_, "--format", "json", "SELECT summary, 2.0 AS two FROM chains"});
  EXPECT_EQ(o.out, "[\n{\"summary\":\"line one\\nline two\",\"two\":2.0}\n]\n");
}

TEST_F(QueryTest, MaxRowsStopsAndSaysSo) {
  Outcome o = run_query({"--db", db_, "--format", "json", "--max-rows", "1", kSelect});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out,
            "[\n"
            R"({"call":"cudaMemcpy","api":"runtime","count":3,"sum_s":1.5,"buckets":"0a01"})"
            "\n]\n");
  EXPECT_EQ(o.err, "stallwatch query: stopped after 1 row (--max-rows); more rows were left out\n");
  o = run_query({"--db", db_, "--format", "json", "--max-rows", "2", kSelect});
  EXPECT_EQ(o.err, "");  // exactly as many rows as allowed: nothing left out
  for (const char* bad : {"0", "-1", "x", "1000000001", ""}) {
    o = run_query({"--db", db_, "--max-rows", bad, kSelect});
    EXPECT_EQ(o.code, 2) << bad;
    EXPECT_TRUE(o.err.starts_with("stallwatch query: --max-rows '")) << o.err;
  }
}

TEST_F(QueryTest, ReadingStatementsRun) {
  EXPECT_EQ(run_query({"--db", db_, "PRAGMA table_info(windows)"}).code, 0);
  Outcome o = run_query({"--db", db_, "--format", "csv", "PRAGMA user_version"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "user_version\r\n" + std::to_string(store::kSchemaVersion) + "\r\n");
  o = run_query({"--db", db_, "--format", "csv", "  -- comment\n SELECT 7 AS n; -- trailing\n;"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "n\r\n7\r\n");
  o = run_query(
      {"--db", db_, "--format", "csv",
       "WITH t(x) AS (SELECT 1) SELECT json_extract('{\"a\":5}', '$.a') + x AS y FROM t"});
  EXPECT_EQ(o.out, "y\r\n6\r\n");
  o = run_query({"--db", db_, "--format", "csv",
                 "SELECT c.id, j.value AS v FROM chains AS c, json_each('[1,2]') AS j"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "id,v\r\n00000000000000a1,1\r\n00000000000000a1,2\r\n");
  o = run_query({"--db", db_, "BEGIN"});  // harmless: nothing can be written inside it
  EXPECT_EQ(o.code, 0) << o.err;
}

TEST_F(QueryTest, WritesAreRefusedWithExit2) {
  const std::vector<std::pair<std::string, std::string>> writes = {
      {"INSERT", "INSERT INTO windows(ts_ns, window_ns) VALUES(1, 1)"},
      {"UPDATE", "UPDATE chains SET severity = 'low'"},
      {"DELETE", "DELETE FROM call_windows"},
      {"DROP", "DROP TABLE call_windows"},
      {"CREATE", "CREATE TABLE t(x)"},
      {"ALTER", "ALTER TABLE chains ADD COLUMN x"},
      {"ATTACH", "ATTACH DATABASE '" + dir_ + "/other.db' AS other"},
      {"DETACH", "DETACH DATABASE other"},
      {"PRAGMA", "PRAGMA user_version = 5"},
      {"PRAGMA", "PRAGMA journal_mode = DELETE"},
      {"VACUUM", "VACUUM INTO '" + dir_ + "/copy.db'"},
      {"REINDEX", "REINDEX"},
      {"WITH", "WITH old AS (SELECT 1) DELETE FROM chains"},
      {"REPLACE", "REPLACE INTO windows(ts_ns, window_ns) VALUES(1, 1)"},
      {"CREATE", "CREATE TEMP TABLE t(x)"},
      {"CREATE", "CREATE TEMP VIEW v AS SELECT 1"},
      {"CREATE", "CREATE INDEX i ON chains(kind)"},
      {"CREATE", "CREATE VIRTUAL TABLE temp.s USING json_each('[1]')"},
  };
  for (const auto& [verb, sql] : writes) {
    Outcome o = run_query({"--db", db_, sql});
    EXPECT_EQ(o.code, 2) << sql;
    EXPECT_EQ(o.err, refused(verb)) << sql;
    EXPECT_EQ(o.out, "") << sql;
  }
  EXPECT_EQ(count("call_windows"), 2);
  EXPECT_EQ(count("chains"), 1);
  EXPECT_EQ(count("windows"), 0);
  EXPECT_FALSE(fs::exists(dir_ + "/other.db"));
  EXPECT_FALSE(fs::exists(dir_ + "/copy.db"));
}

// Only a list of functions (issue #49): fts3_tokenizer('simple') hands out a pointer of the
// process, and a build may carry other functions no query needs.
TEST_F(QueryTest, FunctionsOffTheListAreRefused) {
  for (const char* fn : {"fts3_tokenizer", "load_extension", "sqlite_compileoption_used"}) {
    const std::string sql = std::string("SELECT hex(") + fn + "('simple'))";
    Outcome o = run_query({"--db", db_, sql});
    EXPECT_EQ(o.code, 2) << sql << ": " << o.err;
    EXPECT_EQ(o.out, "") << sql;
    EXPECT_EQ(o.err, std::string("stallwatch query: the SQL function ") + fn +
                         "() is not allowed in query (aggregates, window, text, number, date and "
                         "JSON functions are); use the sqlite3 shell on a copy for anything else\n")
        << sql;
  }
  Outcome o = run_query({"--db", db_, "--format", "csv",
                         "SELECT upper('a') AS u, abs(-3) AS r, count(*) AS n, "
                         "strftime('%Y', 0, 'unixepoch') AS y FROM chains"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "u,r,n,y\r\nA,3,1,1970\r\n");
}

TEST_F(QueryTest, OneStatementOnly) {
  Outcome o = run_query({"--db", db_, "SELECT 1; DELETE FROM chains"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err,
            "stallwatch query: only one SQL statement per call; run the others separately\n");
  o = run_query({"--db", db_, "SELECT 1; SELECT 2"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(count("chains"), 1);
}

TEST_F(QueryTest, Errors) {
  Outcome o = run_query({"--db", dir_ + "/missing.db", "SELECT 1"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "stallwatch query: no database at " + dir_ +
                       "/missing.db; start `stallwatch run`, or pass --db (to try query without "
                       "a daemon: `stallwatch demo incident --fast --db /tmp/stallwatch-demo.db`, "
                       "then `stallwatch query --db /tmp/stallwatch-demo.db`)\n");
  EXPECT_FALSE(fs::exists(dir_ + "/missing.db"));  // never created

  o = run_query({"--db", db_, "SELEC * FROM chains"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "stallwatch query: SQL error: near \"SELEC\": syntax error\n");

  o = run_query({"--db", db_, "SELECT * FROM nope"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "stallwatch query: SQL error: no such table: nope\n");

  o = run_query({"--db", db_, "  -- nothing\n"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "stallwatch query: no SQL statement given\n");

  std::ofstream(dir_ + "/text.db") << "not a database, only some words that are long enough\n";
  o = run_query({"--db", dir_ + "/text.db", "SELECT 1"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err,
            "stallwatch query: " + dir_ +
                "/text.db is not a SQLite database; pass --db with the stallwatch database\n");
}

TEST_F(QueryTest, UsageErrorsAndHelp) {
  Outcome o = run_query({"--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_TRUE(o.out.starts_with(
      "usage: stallwatch query [--db PATH] [--format table|csv|json] [--timeout DURATION]\n"
      "                        [--max-rows N] 'SQL'\n"));
  o = run_query({"--db", db_});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "stallwatch query: no SQL statement given (see `stallwatch query --help`)\n");
  o = run_query({"--db", db_, "--format", "yaml", "SELECT 1"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err,
            "stallwatch query: unknown format 'yaml' (table, csv or json) (see `stallwatch query "
            "--help`)\n");
  o = run_query({"--db", db_, "--frobnicate", "SELECT 1"});
  EXPECT_EQ(o.code, 2);
  o = run_query({"--db", db_, "SELECT", "1"});
  EXPECT_EQ(o.code, 2);
  o = run_query({"--db"});
  EXPECT_EQ(o.code, 2);
}

// A read-only copy (a WAL database in a directory the reader cannot write, so no -shm can be
// created) is still read, through immutable=1. Root ignores permissions: the query then runs in
// a child that drops to nobody.
// An endless statement is stopped at --timeout with the rows so far printed and one line
// saying what to do; out-of-range timeouts are usage errors (issue #15).
TEST_F(QueryTest, TimeoutStopsAnEndlessStatementAndKeepsItsRows) {
  const std::string endless =
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n";
  Outcome o = run_query({"--db", db_, "--format", "csv", "--timeout", "300ms", endless});
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(o.out.starts_with("i\r\n1\r\n2\r\n3\r\n")) << o.out.substr(0, 40);
  const size_t printed = std::count(o.out.begin(), o.out.end(), '\n') - 1;
  EXPECT_GT(printed, 1000u);
  EXPECT_EQ(o.err, "stallwatch query: stopped after 300ms (--timeout) with " +
                       std::to_string(printed) +
                       " rows printed; narrow the statement (a WHERE on t_ns, a LIMIT) or raise "
                       "--timeout\n");
  // The table form streams too: it prints after its first 1,000 rows, not at the end.
  o = run_query({"--db", db_, "--timeout", "300ms", endless});
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(o.out.starts_with("   i\n----\n   1\n   2\n")) << o.out.substr(0, 40);
  EXPECT_NE(o.out.find("\n10000\n"), std::string::npos);  // wider than the sample: whole

  o = run_query({"--db", db_, "--timeout", "10ms", "SELECT 1"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err,
            "stallwatch query: --timeout 10ms is out of range: use 100ms to 24h, or 0 for no limit "
            "(see `stallwatch query --help`)\n");
  o = run_query({"--db", db_, "--timeout", "0", "--format", "csv",
                 "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 5) "
                 "SELECT i FROM n"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "i\r\n1\r\n2\r\n3\r\n4\r\n5\r\n");
}

TEST_F(QueryTest, ReadsReadOnlyCopy) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_FALSE(fs::exists(db_ + "-wal"));
  ASSERT_FALSE(fs::exists(db_ + "-shm"));
  ASSERT_EQ(::chmod(db_.c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0555), 0);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(100);
    Outcome o =
        run_query({"--db", db_, "--format", "csv", "SELECT count(*) AS n FROM call_windows"});
    const std::string text = o.out + o.err;
    if (::write(pipefd[1], text.data(), text.size()) < 0) ::_exit(101);
    ::_exit(o.code);
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::chmod(dir_.c_str(), 0700);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << text;
  EXPECT_EQ(text, "n\r\n2\r\n");
  EXPECT_FALSE(fs::exists(db_ + "-shm"));
}

// Reading while the daemon's store writes never blocks the writer nor fails.
TEST_F(QueryTest, ReadsWhileTheStoreWrites) {
  store::StoreOptions so;
  so.path = db_;
  auto s = store::Store::open(so);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const std::int64_t ts = 1'700'000'000'000'000'000;
  for (int i = 0; i < 20; i++) {
    store::WindowBatch b;
    b.end_ns = ts + i;
    b.window_ns = 1;
    (*s)->enqueue(b);
    Outcome o =
        run_query({"--db", db_, "--format", "csv", "SELECT count(*) >= 0 AS ok FROM windows"});
    EXPECT_EQ(o.code, 0) << o.err;
  }
  (*s)->flush();
  Outcome o = run_query({"--db", db_, "--format", "csv", "SELECT count(*) AS n FROM windows"});
  EXPECT_EQ(o.out, "n\r\n20\r\n");
  EXPECT_EQ((*s)->stats().write_errors, 0u);
}

TEST(QueryRenderTest, Pieces) {
  EXPECT_EQ(format_real(0.1), "0.1");
  EXPECT_EQ(format_real(2), "2.0");
  EXPECT_EQ(format_real(1e300), "1e+300");
  EXPECT_EQ(format_real(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(format_real(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(json_cell({SQLITE_FLOAT, "Inf"}), "null");
  EXPECT_EQ(json_cell({SQLITE_BLOB, "00ff"}), "\"00ff\"");
  EXPECT_EQ(render_table({"n"}, {}), "n\n-\n0 rows\n");
  EXPECT_EQ(
      render_table({"name", "n"}, {{{SQLITE_TEXT, "\xc3\xa9t\xc3\xa9"}, {SQLITE_INTEGER, "1234"}}}),
      "name     n\n----  ----\n\xc3\xa9t\xc3\xa9   1234\n1 row\n");
}

// ---- through the binary: these need `query` dispatched in exporter/main.cpp ----

Outcome run_binary(const std::vector<std::string>& args, const std::string& dir) {
  std::vector<std::string> argv_s = {STALLWATCH_BIN, "query"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  Outcome o;
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return o;
  int status = 0;
  ::waitpid(pid, &status, 0);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = slurp(out_path);
  o.err = slurp(err_path);
  return o;
}

using QueryBinaryTest = QueryTest;

TEST_F(QueryBinaryTest, CsvThroughTheBinary) {
  Outcome o = run_binary(
      {"--db", db_, "--format", "csv", "SELECT call, count FROM call_windows ORDER BY ts_ns"},
      dir_);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "call,count\r\ncudaMemcpy,3\r\ncuLaunchKernel,12\r\n");
}

TEST_F(QueryBinaryTest, WriteRefusedThroughTheBinary) {
  Outcome o = run_binary({"--db", db_, "DELETE FROM chains"}, dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, refused("DELETE"));
  EXPECT_EQ(count("chains"), 1);
}

TEST_F(QueryBinaryTest, MissingDatabaseThroughTheBinary) {
  Outcome o = run_binary({"--db", dir_ + "/none.db", "SELECT 1"}, dir_);
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "stallwatch query: no database at " + dir_ +
                       "/none.db; start `stallwatch run`, or pass --db (to try query without "
                       "a daemon: `stallwatch demo incident --fast --db /tmp/stallwatch-demo.db`, "
                       "then `stallwatch query --db /tmp/stallwatch-demo.db`)\n");
}

}  // namespace
}  // namespace stallwatch::cli
