// Tests for exporter/store/store.h: batches become exact rows, chains are upserted in place,
// old schemas migrate and newer ones are refused, retention by age and by size, kill -9 leaves
// an intact database, unwritable paths give one clear line.
#include "store/store.h"

#include "app/store_keeper.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "store/report.h"
#include "store/reserve.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/writer.h"
#include "trace/calls.h"

namespace stallwatch::store {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kProcessStart = 1'600'000'000 * kSecond;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "stallwatch-store-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::uint32_t call_id(std::string_view symbol, trace::Api api) {
  auto id = trace::call_for_symbol(symbol, api);
  EXPECT_TRUE(id.has_value()) << symbol;
  return id.value_or(0);
}

CallTotals totals(std::uint64_t count, std::uint64_t sum_ns) {
  CallTotals t;
  t.count = count;
  t.sum_ns = sum_ns;
  t.runnable_ns = sum_ns / 4;
  t.blocked_ns = sum_ns / 8;
  t.max_ns = sum_ns / 2;
  t.buckets[trace::bucket_of_ns(sum_ns / count)] = count;
  return t;
}

chains::ProcessWindow process(const std::string& cgroup, int pid, std::int64_t start_ns) {
  chains::ProcessWindow p;
  p.cgroup = cgroup;
  p.pid = pid;
  p.comm = "python3";
  p.start_ns = start_ns;
  p.offcpu = {
      .runnable_ns = 3'000'000, .blocked_ns = 1'000'000, .oncpu_ns = 90'000'000, .preemptions = 17};
  p.calls[call_id("cudaStreamSynchronize", trace::Api::kRuntime)] = totals(40, 400'000'000);
  p.calls[call_id("cuLaunchKernel", trace::Api::kDriver)] = totals(1000, 5'000'000);
  p.preemptors.push_back(stallwatch::Preemptor{.victim_pid = pid,
                                   .pid = 777,
                                   .comm = "fluent-bit",
                                   .cgroup = "/system.slice/fluent-bit.service",
                                   .runnable_ns = 2'500'000,
                                   .count = 12,
                                   .thread = "flb-pipeline",
                                   .ppid = 1,
                                   .kernel_thread = false,
                                   .pod_uid = {},
                                   .unit = "fluent-bit.service"});
  return p;
}

chains::Chain chain(const std::string& id, std::int64_t at_ns) {
  chains::Chain c;
  c.id = id;
  c.kind = chains::Kind::kCpuContention;
  c.severity = chains::Severity::kHigh;
  c.peak = chains::Severity::kHigh;
  c.identity.cgroup = "/kubepods.slice/pod1";
  c.identity.pod_uid = "1a2b";
  c.pid = 4242;
  c.comm = "python3";
  c.call = "cudaStreamSynchronize";
  c.api = "runtime";
  c.p50_s = 0.004;
  c.p99_s = 0.25;
  c.baseline_p50_s = 0.002;
  c.baseline_p99_s = 0.01;
  c.ratio = 25;
  c.opened_ns = at_ns - 10 * kSecond;
  c.updated_ns = at_ns;
  c.windows = 2;
  c.summary = "[HIGH] cpu_contention: cudaStreamSynchronize p99 250ms (25x baseline)";
  c.root_cause = "fluent-bit (pid 777) kept python3 off the CPU";
  c.effect = "p99 250ms";
  c.recommendation = "systemctl set-property fluent-bit.service CPUQuota=50%\nline 2";
  c.contributors.push_back({.comm = "fluent-bit",
                            .pid = 777,
                            .cgroup = "/system.slice/fluent-bit.service",
                            .role = "preemptor",
                            .cpu_ns = 2'500'000,
                            .count = 12,
                            .thread = "flb-pipeline"});
  c.evidence = {{"runnable_share", 0.5}, {"preemptions", 17}};
  return c;
}

WindowBatch batch(std::int64_t end_ns, int pid = 4242,
                  const std::string& cgroup = "/kubepods.slice/pod1") {
  WindowBatch b;
  b.end_ns = end_ns;
  b.window_ns = 5 * kSecond;
  b.host = {.cpu_busy = 0.75,
            .mem_used = 0.5,
            .load1 = 12.5,
            .cpus = 16,
            .swap_used_bytes = 0,
            .cpu_stolen = {},
            .cpu_steal = 0.03,
            .cpu_irq = 0.01};
  identity::Identity id;
  id.cgroup = cgroup;
  id.pod_uid = "1a2b";
  id.qos = "burstable";
  b.cgroups.push_back(id);
  b.processes.push_back(process(cgroup, pid, kProcessStart));
  Outlier o;
  o.ts_ns = end_ns - kSecond;
  o.cgroup = cgroup;
  o.pid = pid;
  o.tid = pid + 1;
  o.comm = "python3";
  o.call = "cudaStreamSynchronize";
  o.api = "runtime";
  o.duration_ns = 300'000'000;
  o.runnable_ns = 200'000'000;
  o.blocked_ns = 1'000;
  o.preemptions = 9;
  b.outliers.push_back(o);
  return b;
}

StoreOptions options(const std::string& path) {
  StoreOptions o;
  o.path = path;
  o.prune_interval = hours(1);  // tests prune with prune_now()
  return o;
}

std::unique_ptr<Store> open_store(const StoreOptions& o) {
  auto s = Store::open(o);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

DbPtr open_plain(const std::string& path) {
  auto db = open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  EXPECT_TRUE(db.ok());
  return db.ok() ? std::move(*db) : nullptr;
}

// Every row of a query, each as its columns joined with '|' (NULL as "NULL").
std::vector<std::string> rows(sqlite3* db, const std::string& sql) {
  std::vector<std::string> out;
  auto st = Stmt::prepare(db, sql);
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  if (!st) return out;
  while (st->step() == SQLITE_ROW) {
    std::string line;
    for (int c = 0; c < sqlite3_column_count(st->get()); c++) {
      if (c) line += '|';
      line += st->is_null(c) ? "NULL" : st->text(c);
    }
    out.push_back(line);
  }
  return out;
}

std::int64_t scalar(sqlite3* db, const std::string& sql) {
  auto st = Stmt::prepare(db, sql);
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  if (!st || st->step() != SQLITE_ROW) return -1;
  return st->int64(0);
}

TEST(StoreTest, WritesBatchAsExactRows) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  const std::int64_t ts = 1'700'000'000 * kSecond;
  WindowBatch b = batch(ts);
  b.chains.push_back(chain("00000000000000a1", ts));
  b.probe_cost = {.pair_emulated_s = 0.97e-6, .pair_stepped_s = -1, .workload_max = 0.0125};
  {
    auto store = open_store(options(path));
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->enqueue(b));
    store->flush();
    StoreStats s = store->stats();
    EXPECT_TRUE(s.enabled);
    EXPECT_EQ(s.batches_written, 1u);
    EXPECT_EQ(s.rows_written, b.rows());
    EXPECT_EQ(s.batches_dropped, 0u);
    EXPECT_EQ(s.write_errors, 0u);
    EXPECT_EQ(s.queue_size, 0u);
    EXPECT_GT(s.db_bytes, 0u);
  }
  auto db = open_plain(path);
  const std::string t = std::to_string(ts);
  EXPECT_EQ(rows(db.get(), "SELECT * FROM windows"),
            std::vector<std::string>{t +
                                     "|5000000000|0.75|0.5|12.5|16|0|0.03|0.01|NULL|9.7e-07|NULL|"
                                     "0.0125"});
  EXPECT_EQ(rows(db.get(), "SELECT * FROM cgroups"),
            std::vector<std::string>{
                "/kubepods.slice/pod1|NULL|1a2b|NULL|burstable|NULL|NULL|NULL|" + t + "|" + t +
                "|NULL|NULL|NULL"});
  EXPECT_EQ(rows(db.get(), "SELECT * FROM processes"),
            std::vector<std::string>{"4242|" + std::to_string(kProcessStart) +
                                     "|python3|/kubepods.slice/pod1|" + t + "|" + t});
  EXPECT_EQ(rows(db.get(), "SELECT * FROM process_windows"),
            std::vector<std::string>{t + "|/kubepods.slice/pod1|4242|3000000|1000000|90000000|17"});
  EXPECT_EQ(
      rows(db.get(),
           "SELECT ts_ns, cgroup, pid, call, api, count, sum_ns, runnable_ns, blocked_ns, "
           "max_ns FROM call_windows ORDER BY call"),
      (std::vector<std::string>{
          t + "|/kubepods.slice/"
              "pod1|4242|cuLaunchKernel|driver|1000|5000000|1250000|625000|2500000",
          t + "|/kubepods.slice/pod1|4242|cudaStreamSynchronize|runtime|40|400000000|100000000|"
              "50000000|200000000"}));
  auto st =
      Stmt::prepare(db.get(), "SELECT buckets FROM call_windows WHERE call = 'cuLaunchKernel'");
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->step(), SQLITE_ROW);
  EXPECT_EQ(decode_buckets(st->blob(0)), b.processes[0].calls.rbegin()->second.buckets);
  EXPECT_EQ(rows(db.get(), "SELECT * FROM preemptor_windows"),
            std::vector<std::string>{t + "|/kubepods.slice/pod1|4242|777|fluent-bit|"
                                         "/system.slice/fluent-bit.service|2500000|12|flb-pipeline|0"});
  EXPECT_EQ(rows(db.get(), "SELECT * FROM outliers"),
            std::vector<std::string>{std::to_string(ts - kSecond) +
                                     "|/kubepods.slice/pod1|4242|4243|python3|"
                                     "cudaStreamSynchronize|runtime|300000000|200000000|1000|9"});
  EXPECT_EQ(
      rows(db.get(),
           "SELECT id, kind, severity, peak, open, cgroup, container_id, pod_uid, pid, comm, call, "
           "api, p50_s, p99_s, baseline_p50_s, baseline_p99_s, ratio, opened_ns, updated_ns, "
           "closed_ns, windows, summary, root_cause, effect, recommendation FROM chains"),
      std::vector<std::string>{
          "00000000000000a1|cpu_contention|high|high|1|/kubepods.slice/pod1|NULL|1a2b|4242|"
          "python3|cudaStreamSynchronize|runtime|0.004|0.25|0.002|0.01|25.0|" +
          std::to_string(ts - 10 * kSecond) + "|" + t +
          "|0|2|[HIGH] cpu_contention: cudaStreamSynchronize p99 250ms (25x baseline)|"
          "fluent-bit (pid 777) kept python3 off the CPU|p99 250ms|"
          "systemctl set-property fluent-bit.service CPUQuota=50%\nline 2"});
  EXPECT_EQ(rows(db.get(), "SELECT contributors, evidence FROM chains"),
            std::vector<std::string>{
                R"([{"comm":"fluent-bit","pid":777,"cgroup":"/system.slice/fluent-bit.service",)"
                R"("role":"preemptor","cpu_ns":2500000,"count":12,"thread":"flb-pipeline"}]|)"
                R"({"runnable_share":0.5,"preemptions":17})"});
  // The JSON columns are usable from SQL.
  EXPECT_EQ(rows(db.get(),
                 "SELECT json_extract(contributors, '$[0].comm'), "
                 "json_extract(evidence, '$.runnable_share') FROM chains"),
            std::vector<std::string>{"fluent-bit|0.5"});
}

TEST(StoreTest, UnknownValuesAreNull) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  WindowBatch b;
  b.end_ns = now_ns();
  b.window_ns = kSecond;
  chains::Chain c = chain("00000000000000b2", b.end_ns);
  c.pid = 0;
  c.comm.clear();
  c.identity.pod_uid.clear();
  c.baseline_p50_s = c.baseline_p99_s = c.ratio = 0;
  c.contributors.clear();
  c.evidence.clear();
  b.chains.push_back(c);
  {
    auto store = open_store(options(path));
    ASSERT_TRUE(store);
    store->enqueue(b);
  }  // the destructor writes what is queued
  auto db = open_plain(path);
  EXPECT_EQ(rows(db.get(), "SELECT cpu_busy, mem_used, load1, cpus, swap_used_bytes, cpu_steal, "
                           "cpu_irq FROM windows"),
            std::vector<std::string>{"NULL|NULL|NULL|NULL|NULL|NULL|NULL"});
  EXPECT_EQ(rows(db.get(),
                 "SELECT pid, comm, pod_uid, baseline_p50_s, baseline_p99_s, ratio, "
                 "contributors, evidence FROM chains"),
            std::vector<std::string>{"NULL|NULL|NULL|NULL|NULL|NULL|[]|{}"});
}

TEST(StoreTest, ChainUpsertUpdatesInPlace) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  const std::int64_t ts = now_ns();
  {
    auto store = open_store(options(path));
    ASSERT_TRUE(store);
    WindowBatch first = batch(ts);
    first.chains.push_back(chain("00000000000000c3", ts));
    first.chains.push_back(chain("00000000000000c4", ts));
    ASSERT_TRUE(store->enqueue(first));
    store->flush();

    WindowBatch second = batch(ts + 5 * kSecond);
    chains::Chain c = chain("00000000000000c3", ts + 5 * kSecond);
    c.open = false;
    c.severity = chains::Severity::kMedium;
    c.peak = chains::Severity::kCritical;
    c.closed_ns = ts + 5 * kSecond;
    c.windows = 3;
    c.p99_s = 0.5;
    c.contributors.clear();
    second.chains.push_back(c);
    ASSERT_TRUE(store->enqueue(second));
    store->flush();
    EXPECT_EQ(store->stats().batches_written, 2u);
  }
  auto db = open_plain(path);
  EXPECT_EQ(rows(db.get(),
                 "SELECT id, open, severity, peak, closed_ns, windows, p99_s, "
                 "contributors FROM chains ORDER BY id"),
            (std::vector<std::string>{"00000000000000c3|0|medium|critical|" +
                                          std::to_string(ts + 5 * kSecond) + "|3|0.5|[]",
                                      "00000000000000c4|1|high|high|0|2|0.25|" +
                                          contributors_json(chain("x", 0).contributors)}));
  // The process and the cgroup are one row each, seen from the first to the second window.
  EXPECT_EQ(rows(db.get(), "SELECT first_seen_ns, last_seen_ns FROM processes"),
            std::vector<std::string>{std::to_string(ts) + "|" + std::to_string(ts + 5 * kSecond)});
  EXPECT_EQ(rows(db.get(), "SELECT first_seen_ns, last_seen_ns FROM cgroups"),
            std::vector<std::string>{std::to_string(ts) + "|" + std::to_string(ts + 5 * kSecond)});
  EXPECT_EQ(scalar(db.get(), "SELECT count(*) FROM windows"), 2);
}

TEST(StoreTest, SetsWalIncrementalVacuumAndCreatesDirectories) {
  TempDir dir;
  const std::string path = dir.file("a/b/sw.db");
  { ASSERT_TRUE(open_store(options(path))); }
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("a/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  auto db = open_plain(path);
  EXPECT_EQ(rows(db.get(), "PRAGMA journal_mode"), std::vector<std::string>{"wal"});
  EXPECT_EQ(scalar(db.get(), "PRAGMA auto_vacuum"), 2);  // incremental
  EXPECT_EQ(scalar(db.get(), "PRAGMA user_version"), kSchemaVersion);
}

// Issue #51: the reserve file that lets the store prune on a full disk (docs/store.md, "A full
// disk"): beside the database, allocated (not sparse), mode 0640, and gone when the store
// closes.
TEST(StoreTest, KeepsAReserveFileBesideTheDatabaseWhileOpen) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  StoreOptions o = options(path);
  o.max_bytes = 500ull << 20;
  {
    auto store = open_store(o);
    ASSERT_TRUE(store);
    struct stat st {};
    ASSERT_EQ(::stat((path + ".reserve").c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_size, 5 << 20);  // --max-db / 100
    EXPECT_GE(st.st_blocks * 512, 5 << 20) << "allocated, not sparse";
    EXPECT_EQ(st.st_mode & 0777, 0640u);
  }
  EXPECT_FALSE(fs::exists(path + ".reserve"));
}

TEST(StoreTest, ReserveSizeAndPath) {
  EXPECT_EQ(Reserve::size_for(1ull << 20), 1u << 20);  // at least 1 MiB
  EXPECT_EQ(Reserve::size_for(100ull << 20), 1u << 20);
  EXPECT_EQ(Reserve::size_for(500ull << 20), 5u << 20);
  EXPECT_EQ(Reserve::size_for(2ull << 30), 16u << 20);  // at most 16 MiB
  EXPECT_EQ(Reserve::path_for("/var/lib/stallwatch/stallwatch.db"),
            "/var/lib/stallwatch/stallwatch.db.reserve");
  EXPECT_EQ(Reserve::path_for(":memory:"), "");
  EXPECT_EQ(Reserve::path_for("file:sw?mode=memory&cache=shared"), "");
  EXPECT_EQ(Reserve::path_for(""), "");
  Reserve none;
  EXPECT_TRUE(none.create().ok());
  EXPECT_FALSE(none.held());
  EXPECT_FALSE(none.release());
}

// A reserve left by a crash is taken over at the size this --max-db asks for.
TEST(StoreTest, ALeftoverReserveIsReusedAtItsSize) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  std::ofstream(path + ".reserve") << std::string(3 << 20, 'x');
  Reserve r(path + ".reserve", 1 << 20);
  ASSERT_TRUE(r.create().ok());
  EXPECT_TRUE(r.held());
  EXPECT_EQ(fs::file_size(path + ".reserve"), 1u << 20);
  EXPECT_TRUE(r.release());
  EXPECT_FALSE(fs::exists(path + ".reserve"));
  EXPECT_FALSE(r.release()) << "released once";
  ASSERT_TRUE(r.create().ok()) << "and taken again";
  EXPECT_EQ(fs::file_size(path + ".reserve"), 1u << 20);
}

// A directory, a symlink, a FIFO or a second name of another file where the reserve goes is
// never touched: the store opens and runs without a reserve.
TEST(StoreTest, AReservePathThatIsNotARegularFileIsLeftAlone) {
  TempDir dir;
  const std::string target = dir.file("precious");
  std::ofstream(target) << "keep me";
  struct Case {
    const char* what;
    std::function<void(const std::string&)> make;
  };
  const Case cases[] = {
      {"directory", [](const std::string& p) { fs::create_directories(p + "/inside"); }},
      {"symlink", [&](const std::string& p) { fs::create_symlink(target, p); }},
      {"dangling symlink", [&](const std::string& p) { fs::create_symlink(target + "-no", p); }},
      {"fifo", [](const std::string& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0); }},
      {"hard link", [&](const std::string& p) { fs::create_hard_link(target, p); }},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.file("sw" + std::to_string(i++) + ".db");
    c.make(path + ".reserve");
    const auto type = fs::symlink_status(path + ".reserve").type();
    Reserve r(path + ".reserve", 1 << 20);
    auto made = r.create();
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.error().message, path +
                                        ".reserve exists and is not a regular file; left "
                                        "alone, so the store has no reserve (remove it, or "
                                        "pass --db with another path)");
    EXPECT_TRUE(r.refused());
    EXPECT_FALSE(r.enabled());
    EXPECT_FALSE(r.release());
    {
      auto store = open_store(options(path));
      ASSERT_TRUE(store);
      ASSERT_TRUE(store->enqueue(batch(now_ns())));
      store->flush();
      EXPECT_EQ(store->stats().write_errors, 0u);
      EXPECT_TRUE(store->prune_now().ok());
    }
    EXPECT_EQ(fs::symlink_status(path + ".reserve").type(), type) << "left as it was";
  }
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep me");
  EXPECT_FALSE(fs::exists(target + "-no"));
  EXPECT_TRUE(fs::is_directory(dir.file("sw0.db.reserve/inside")));
}

TEST(StoreTest, MigratesVersion1Database) {
  TempDir dir;
  const std::string path = dir.file("old.db");
  const std::int64_t ts = now_ns();
  {
    auto db = open_plain(path);
    ASSERT_TRUE(migrate(db.get(), 1).ok());
    ASSERT_EQ(scalar(db.get(), "PRAGMA user_version"), 1);
    const std::string t = std::to_string(ts);
    ASSERT_TRUE(
        exec(db.get(), "INSERT INTO windows(ts_ns, window_ns) VALUES(" + t +
                           ", 5000000000);"
                           "INSERT INTO chains(id, kind, severity, open, cgroup, opened_ns, "
                           "updated_ns, closed_ns, windows) VALUES('00000000000000d5', "
                           "'io_stall', 'critical', 0, '/job', " +
                           t + ", " + t + ", " + t + ", 4)")
            .ok());
  }
  {
    auto store = open_store(options(path));
    ASSERT_TRUE(store);
    store->enqueue(batch(ts + 5 * kSecond));
  }
  auto db = open_plain(path);
  EXPECT_EQ(scalar(db.get(), "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(scalar(db.get(), "PRAGMA auto_vacuum"), 2);  // converted with VACUUM
  EXPECT_EQ(rows(db.get(), "SELECT id, kind, severity, peak, container_id, pod_uid FROM chains"),
            std::vector<std::string>{"00000000000000d5|io_stall|critical|critical|NULL|NULL"});
  EXPECT_EQ(rows(db.get(), "SELECT ts_ns, cpu_busy, cpus FROM windows ORDER BY ts_ns"),
            (std::vector<std::string>{std::to_string(ts) + "|NULL|NULL",
                                      std::to_string(ts + 5 * kSecond) + "|0.75|16"}));
  EXPECT_EQ(rows(db.get(), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
}

// Kubernetes names come from the API server a window or two after a pod starts, and a list can
// fail: a window without them must not erase names an earlier window stored.
TEST(StoreTest, KubernetesNamesOutliveWindowsWithoutThem) {
  TempDir dir;
  const std::string path = dir.file("names.db");
  const std::int64_t ts = now_ns();
  {
    auto store = open_store(options(path));
    ASSERT_TRUE(store);
    store->enqueue(batch(ts));  // before the pod was listed
    WindowBatch named = batch(ts + 5 * kSecond);
    named.cgroups[0].pod = "llm-train-0";
    named.cgroups[0].pod_namespace = "ml-training";
    named.cgroups[0].container = "trainer";
    store->enqueue(named);
    store->enqueue(batch(ts + 10 * kSecond));  // the API server did not answer this time
  }
  auto db = open_plain(path);
  EXPECT_EQ(rows(db.get(), "SELECT path, pod, namespace, container, last_seen_ns FROM cgroups"),
            std::vector<std::string>{"/kubepods.slice/pod1|llm-train-0|ml-training|trainer|" +
                                     std::to_string(ts + 10 * kSecond)});
}

TEST(StoreTest, RefusesNewerSchema) {
  TempDir dir;
  const std::string path = dir.file("new.db");
  {
    auto db = open_plain(path);
    ASSERT_TRUE(exec(db.get(), "CREATE TABLE future(x); PRAGMA user_version = 99").ok());
  }
  auto s = Store::open(options(path));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            path +
                ": database schema version 99 is newer than this stallwatch understands (" +
                std::to_string(kSchemaVersion) + "); "
                "upgrade stallwatch or use another --db");
  auto db = open_plain(path);
  EXPECT_EQ(scalar(db.get(), "PRAGMA user_version"), 99);
  EXPECT_EQ(rows(db.get(), "PRAGMA journal_mode"),
            std::vector<std::string>{"delete"});  // untouched
}

TEST(StoreTest, RefusesFileThatIsNotADatabase) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("these are not the pages you are looking for, not at all, no. 0123456789abcdef\n",
               f);
    std::fclose(f);
  }
  auto s = Store::open(options(path));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, path + " is not a SQLite database; pass --db with another path");
}

TEST(StoreTest, UnwritablePathIsOneClearLine) {
  TempDir dir;
  // A directory where the file should be.
  const std::string as_dir = dir.file("db.d");
  ASSERT_TRUE(fs::create_directory(as_dir));
  auto s = Store::open(options(as_dir));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "cannot write " + as_dir +
                                   ": is a directory; pass --db with a file name, not a directory");
  // A directory that cannot be created (even by root).
  s = Store::open(options("/proc/stallwatch-test/sw.db"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("cannot create directory /proc/stallwatch-test for the database "
                                   "/proc/stallwatch-test/sw.db: "),
            std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("pass --db PATH"), std::string::npos);
  EXPECT_EQ(s.error().message.find('\n'), std::string::npos);
}

TEST(StoreTest, PermissionDeniedNamesTheFix) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  const std::string ro = dir.file("ro");
  ASSERT_TRUE(fs::create_directory(ro));
  ASSERT_EQ(::chmod(ro.c_str(), 0500), 0);
  auto s = Store::open(options(ro + "/sw.db"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "cannot write " + ro +
                                   "/sw.db: permission denied; run as root or pass --db PATH in a "
                                   "writable directory");
}

TEST(StoreTest, FullQueueDropsNewBatchesAndCountsThem) {
  TempDir dir;
  StoreOptions o = options(dir.file("sw.db"));
  o.queue_batches = 2;
  auto store = open_store(o);
  ASSERT_TRUE(store);
  const std::int64_t ts = now_ns();
  std::uint64_t accepted = 0, refused = 0;
  for (int i = 0; i < 300; i++) {
    (store->enqueue(batch(ts + i * kSecond)) ? accepted : refused)++;
  }
  store->flush();
  StoreStats s = store->stats();
  EXPECT_EQ(s.batches_dropped, refused);
  EXPECT_EQ(s.batches_written, accepted);
  EXPECT_EQ(s.queue_size, 0u);
  EXPECT_EQ(s.batches_written + s.batches_dropped, 300u);
}

// explain --per-process from the 5-minute rollups (schema 7) gives exactly what a scan of every
// window gives: periods that start and end mid-bucket, one within a bucket, one that starts
// before the data, a cgroup filter, and after an age prune that cut a bucket in two.
TEST(StoreTest, PerProcessRollupsGiveTheNumbersOfEveryWindow) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  auto store = open_store(options(path));
  ASSERT_TRUE(store);
  // 70 minutes of 7-second windows from an odd start: 600 windows, three processes in two
  // cgroups, each window's numbers different.
  const std::int64_t t0 = (now_ns() / kRollupNs - 20) * kRollupNs + 123 * kSecond;
  for (int i = 0; i < 600; i++) {
    WindowBatch b = batch(t0 + i * 7 * kSecond, 4242, "/kubepods.slice/pod1");
    b.window_ns = 7 * kSecond;
    b.processes.push_back(process("/kubepods.slice/pod1", 4243, kProcessStart));
    b.processes.push_back(process("/system.slice/job.service", 99, kProcessStart));
    for (auto& p : b.processes) {
      p.offcpu.runnable_ns += static_cast<std::uint64_t>(i * 1000 + p.pid);
      for (auto& [id, t] : p.calls) {
        t.count += static_cast<std::uint64_t>(i % 7);
        t.buckets[10 + i % 13] += static_cast<std::uint64_t>(i % 5);
        t.max_ns = static_cast<std::uint64_t>(1000 + (i * 7919) % 100000);
      }
      p.preemptors[0].runnable_ns += static_cast<std::uint64_t>(i);
      p.preemptors[0].count += static_cast<std::uint64_t>(i % 3);
    }
    if (i % 50 == 49) {
      ASSERT_TRUE(store->enqueue(std::move(b)));
      store->flush();
    } else {
      ASSERT_TRUE(store->enqueue(std::move(b)));
    }
  }
  store->flush();
  auto compare = [&](std::int64_t now, std::int64_t since, const std::string& cgroup) {
    auto rdb = open_report_db(path);
    ASSERT_TRUE(rdb.ok()) << rdb.error().message;
    ReportQuery q{.now_ns = now, .since_ns = since, .cgroup = cgroup, .per_process = true};
    auto rolled = load_report(rdb->db.get(), q);
    q.rollups = false;
    auto scanned = load_report(rdb->db.get(), q);
    ASSERT_TRUE(rolled.ok() && scanned.ok());
    const auto& a = rolled->processes;
    const auto& b = scanned->processes;
    ASSERT_EQ(a.size(), b.size()) << since;
    for (size_t i = 0; i < a.size(); i++) {
      SCOPED_TRACE("process " + std::to_string(b[i].pid) + ", since " + std::to_string(since));
      EXPECT_EQ(a[i].pid, b[i].pid);
      EXPECT_EQ(a[i].cgroup, b[i].cgroup);
      EXPECT_EQ(a[i].runnable_ns, b[i].runnable_ns);
      EXPECT_EQ(a[i].blocked_ns, b[i].blocked_ns);
      EXPECT_EQ(a[i].oncpu_ns, b[i].oncpu_ns);
      EXPECT_EQ(a[i].wall_ns, b[i].wall_ns);
      EXPECT_EQ(a[i].preemptions, b[i].preemptions);
      EXPECT_EQ(a[i].worst_stall_ns, b[i].worst_stall_ns);
      ASSERT_EQ(a[i].calls.size(), b[i].calls.size());
      for (size_t c = 0; c < a[i].calls.size(); c++) {
        EXPECT_EQ(a[i].calls[c].call, b[i].calls[c].call);
        EXPECT_EQ(a[i].calls[c].count, b[i].calls[c].count);
        EXPECT_DOUBLE_EQ(a[i].calls[c].p50_s, b[i].calls[c].p50_s);
        EXPECT_DOUBLE_EQ(a[i].calls[c].p99_s, b[i].calls[c].p99_s);
        EXPECT_DOUBLE_EQ(a[i].calls[c].max_s, b[i].calls[c].max_s);
      }
      ASSERT_EQ(a[i].preemptors.size(), b[i].preemptors.size());
      for (size_t k = 0; k < a[i].preemptors.size(); k++) {
        EXPECT_EQ(a[i].preemptors[k].pid, b[i].preemptors[k].pid);
        EXPECT_EQ(a[i].preemptors[k].comm, b[i].preemptors[k].comm);
        EXPECT_EQ(a[i].preemptors[k].cpu_ns, b[i].preemptors[k].cpu_ns);
        EXPECT_EQ(a[i].preemptors[k].count, b[i].preemptors[k].count);
      }
    }
  };
  const std::int64_t end = t0 + 599 * 7 * kSecond;
  compare(end, 3600 * kSecond, "");                          // most of it, mid-bucket edges
  compare(end - 13 * kSecond, 1800 * kSecond, "");           // ends mid-bucket too
  compare(end, 24 * 3600 * kSecond, "");                     // starts before the data
  compare(t0 + 40 * 60 * kSecond, 120 * kSecond, "");        // within one or two buckets
  compare(end, 3600 * kSecond, "/kubepods.slice/pod1");      // a cgroup filter
  {
    // And both are right: the preemptor's time summed over the 600 windows, once.
    auto rdb = open_report_db(path);
    ASSERT_TRUE(rdb.ok());
    auto r = load_report(rdb->db.get(), ReportQuery{.now_ns = end, .since_ns = 24 * 3600 * kSecond,
                                                    .cgroup = "/system.slice/job.service",
                                                    .per_process = true});
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->processes.size(), 1u);
    ASSERT_EQ(r->processes[0].preemptors.size(), 1u);
    EXPECT_EQ(r->processes[0].preemptors[0].cpu_ns, 600u * 2'500'000u + 599u * 600u / 2u);
    EXPECT_EQ(r->processes[0].runnable_ns, 600u * (3'000'000u + 99u) + 599u * 600u / 2u * 1000u);
  }
  // The rollups are used: far fewer call rows than windows.
  {
    auto db = open_plain(path);
    EXPECT_EQ(scalar(db.get(), "SELECT count(*) FROM call_windows"), 600 * 6);
    EXPECT_LE(scalar(db.get(), "SELECT count(*) FROM call_rollups"), 16 * 6);
  }
  // An age prune that cuts a bucket in two: the cut bucket is read from its remaining windows.
  std::uint64_t pruned = 0;
  {
    auto db = open_plain(path);
    ASSERT_TRUE(prune_by_age(db.get(), t0 + 1000 * kSecond, pruned).ok());
  }
  EXPECT_GT(pruned, 0u);
  compare(end, 24 * 3600 * kSecond, "");
  compare(end, 3000 * kSecond, "");
}

TEST(StoreTest, PrunesByAge) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  const std::int64_t now = now_ns();
  const std::int64_t old_ts = now - 8 * 24 * 3600 * kSecond;
  const std::int64_t new_ts = now - 3600 * kSecond;
  WindowBatch old_batch = batch(old_ts, 100, "/old");
  chains::Chain closed = chain("00000000000000e1", old_ts);
  closed.open = false;
  closed.closed_ns = old_ts;
  old_batch.chains.push_back(closed);
  old_batch.chains.push_back(chain("00000000000000e2", old_ts));  // open: kept however old
  WindowBatch new_batch = batch(new_ts, 200, "/new");
  StoreOptions o = options(path);
  o.retention = hours(24 * 7);
  auto store = open_store(o);
  ASSERT_TRUE(store);
  store->enqueue(old_batch);
  store->enqueue(new_batch);
  store->flush();
  ASSERT_TRUE(store->prune_now().ok());
  // windows, cgroup, process, process window, 2 calls, preemptor, outlier, closed chain, and
  // the rollups of its bucket: process, 2 calls, preemptor.
  EXPECT_EQ(store->stats().rows_pruned, 13u);
  auto db = open_plain(path);
  const std::string n = std::to_string(new_ts);
  for (const char* table : {"windows", "call_windows", "process_windows", "preemptor_windows"}) {
    EXPECT_EQ(rows(db.get(), std::string("SELECT DISTINCT ts_ns FROM ") + table),
              std::vector<std::string>{n})
        << table;
  }
  EXPECT_EQ(rows(db.get(), "SELECT ts_ns FROM outliers"),
            std::vector<std::string>{std::to_string(new_ts - kSecond)});
  EXPECT_EQ(rows(db.get(), "SELECT id FROM chains"), std::vector<std::string>{"00000000000000e2"});
  EXPECT_EQ(rows(db.get(), "SELECT path FROM cgroups"), std::vector<std::string>{"/new"});
  EXPECT_EQ(rows(db.get(), "SELECT pid FROM processes"), std::vector<std::string>{"200"});
}

TEST(StoreTest, PrunesBySizeKeepingTheNewest) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  StoreOptions o = options(path);
  o.max_bytes = 256 << 10;
  auto store = open_store(o);
  ASSERT_TRUE(store);
  const std::int64_t first = now_ns() - 3600 * kSecond;
  constexpr int kBatches = 600;
  for (int i = 0; i < kBatches; i++) {
    WindowBatch b = batch(first + i * kSecond);
    for (int p = 1; p < 4; p++) b.processes.push_back(process("/kubepods.slice/pod1", 5000 + p, 0));
    ASSERT_TRUE(store->enqueue(std::move(b)));
    if (i % 50 == 49) store->flush();
  }
  store->flush();
  ASSERT_TRUE(store->prune_now().ok());
  StoreStats s = store->stats();
  EXPECT_GT(s.rows_pruned, 0u);
  EXPECT_EQ(s.write_errors, 0u);
  EXPECT_EQ(s.batches_written, static_cast<std::uint64_t>(kBatches));
  EXPECT_LE(s.db_bytes, o.max_bytes);

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  std::uint64_t on_disk = static_cast<std::uint64_t>(st.st_size);
  if (::stat((path + "-wal").c_str(), &st) == 0) on_disk += static_cast<std::uint64_t>(st.st_size);
  EXPECT_LE(on_disk, o.max_bytes);

  auto db = open_plain(path);
  const std::string newest = std::to_string(first + (kBatches - 1) * kSecond);
  EXPECT_EQ(scalar(db.get(), "SELECT max(ts_ns) FROM windows"), first + (kBatches - 1) * kSecond);
  EXPECT_EQ(scalar(db.get(), "SELECT count(*) FROM call_windows WHERE ts_ns = " + newest), 8);
  EXPECT_EQ(scalar(db.get(), "SELECT count(*) FROM windows WHERE ts_ns = " + std::to_string(first)),
            0);
  EXPECT_EQ(
      scalar(db.get(), "SELECT count(*) FROM call_windows WHERE ts_ns = " + std::to_string(first)),
      0);
  // What is left is a contiguous run of the newest windows.
  const std::int64_t kept = scalar(db.get(), "SELECT count(*) FROM windows");
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, kBatches);
  EXPECT_EQ(scalar(db.get(), "SELECT min(ts_ns) FROM windows"),
            first + (kBatches - kept) * kSecond);
  EXPECT_EQ(rows(db.get(), "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
}

TEST(StoreTest, WriteErrorsAreCountedNotFatal) {
  TempDir dir;
  StoreOptions o = options(dir.file("sw.db"));
  o.max_bytes = 192 << 10;  // open chains are never pruned: they fill it for good
  auto store = open_store(o);
  ASSERT_TRUE(store);
  const std::int64_t ts = now_ns();
  for (int i = 0; i < 40; i++) {
    WindowBatch b;
    b.end_ns = ts + i;
    b.window_ns = kSecond;
    for (int k = 0; k < 10; k++) {
      chains::Chain c = chain(std::to_string(1000 + i * 10 + k), ts);
      c.root_cause.assign(2000, 'x');
      b.chains.push_back(c);
    }
    EXPECT_TRUE(store->enqueue(std::move(b)));
    store->flush();
  }
  StoreStats s = store->stats();
  EXPECT_GT(s.write_errors, 0u);
  EXPECT_GT(s.batches_written, 0u);
  EXPECT_LT(s.batches_written, 40u);
  // Still alive and writing what fits.
  auto small = batch(ts + kSecond);
  small.outliers.clear();
  EXPECT_TRUE(store->enqueue(small));
  store->flush();
}

// Corruption found while running: the write fails, the keeper closes the store, moves the file
// aside (kept) and starts a new one that takes the next batch (issue #15).
TEST(StoreKeeperTest, DatabaseCorruptedDuringARunIsMovedAsideAndReplaced) {
  TempDir dir;
  const std::string path = dir.file("sw.db");
  app::StoreKeeper keeper(options(path), std::chrono::seconds(60));
  const auto t0 = app::StoreKeeper::Clock::now();
  Store* store = keeper.get(t0);
  ASSERT_NE(store, nullptr);
  const std::int64_t ts = now_ns();
  ASSERT_TRUE(store->enqueue(batch(ts)));
  store->flush();
  ASSERT_EQ(store->stats().write_errors, 0u);
  {
    // Another writer changes the WAL (so the store's page cache is dropped), then everything
    // after page 1 is overwritten with garbage, as a failing disk or a stray `dd` would.
    auto other = open_plain(path);
    ASSERT_TRUE(exec(other.get(), "PRAGMA wal_checkpoint(TRUNCATE); CREATE TABLE x(a); "
                                  "DROP TABLE x"));
    const auto size = fs::file_size(path);
    ASSERT_GT(size, 8192u);
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 4096, SEEK_SET);
    const std::string junk(size - 4096, '\xa5');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  ASSERT_TRUE(store->enqueue(batch(ts + kSecond)));
  store->flush();
  const StoreStats broken = store->stats();
  EXPECT_GE(broken.write_errors, 1u);
  EXPECT_TRUE(broken.failing);
  ASSERT_TRUE(broken.corrupt);

  Store* fresh = keeper.get(t0 + std::chrono::seconds(1));
  ASSERT_NE(fresh, nullptr);
  EXPECT_TRUE(keeper.up());
  std::vector<std::string> aside;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("sw.db.corrupt-") && !name.ends_with("-wal") && !name.ends_with("-shm")) {
      aside.push_back(name);
    }
  }
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_GT(fs::file_size(dir.file(aside[0])), 8192u);  // kept as it was, never deleted
  ASSERT_TRUE(fresh->enqueue(batch(ts + 2 * kSecond)));
  fresh->flush();
  EXPECT_EQ(fresh->stats().batches_written, 1u);
  EXPECT_FALSE(fresh->stats().failing);
  auto db = open_plain(path);
  EXPECT_EQ(scalar(db.get(), "SELECT count(*) FROM windows"), 1);
}

// A writer killed with SIGKILL at any moment leaves a database that passes integrity_check.
TEST(StoreCrashTest, Kill9LeavesIntactDatabase) {
  TempDir dir;
  const std::string path = dir.file("crash.db");
  const std::int64_t base = now_ns() - 3600 * kSecond;
  std::int64_t last_count = 0;
  for (int round = 0; round < 4; round++) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      StoreOptions o;
      o.path = path;
      o.max_bytes = 4 << 20;  // size pruning runs while it is killed, too
      o.prune_interval = std::chrono::milliseconds(20);
      auto s = Store::open(o);
      if (!s) ::_exit(3);
      std::int64_t ts = base + std::int64_t{round} * 1'000'000 * kSecond / 1000;
      for (bool signalled = false;;) {
        for (int k = 0; k < 8; k++) {
          WindowBatch b = batch(ts);
          b.chains.push_back(chain("00000000000000f" + std::to_string(k), ts));
          (*s)->enqueue(std::move(b));
          ts += kSecond / 1000;
        }
        (*s)->flush();
        if (!signalled) {
          signalled = ::write(ready[1], "r", 1) == 1;
        }
      }
    }
    ::close(ready[1]);
    char c = 0;
    const ssize_t n = ::read(ready[0], &c, 1);
    ::close(ready[0]);
    if (n == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_EQ(n, 1) << "the writer child did not commit (exit " << WEXITSTATUS(status) << ")";
    ASSERT_TRUE(WIFSIGNALED(status));

    auto db = open_plain(path);
    EXPECT_EQ(rows(db.get(), "PRAGMA integrity_check"), std::vector<std::string>{"ok"})
        << "round " << round;
    const std::int64_t count = scalar(db.get(), "SELECT count(*) FROM windows");
    EXPECT_GT(count, 0);
    EXPECT_GE(scalar(db.get(), "SELECT count(*) FROM call_windows"), 2 * count);
    EXPECT_EQ(scalar(db.get(), "SELECT count(*) FROM chains"), 8);
    last_count = count;
  }
  EXPECT_GT(last_count, 0);
}

}  // namespace
}  // namespace stallwatch::store
