// Unit tests for `stallwatch explain`: store/report.h (loading, filters, merged histograms,
// read-only opening) and cli/explain_render.h (text and JSON, against golden files in
// tests/fixtures/explain; UPDATE_GOLDEN=1 rewrites them). Databases are built in a temp dir
// with migrate() and raw INSERTs at fixed times, so the reports are byte-for-byte stable.
// The CliTest cases run the real binary and skip until main.cpp dispatches `explain`.
#include "cli/explain.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "cli/explain_render.h"
#include "common/json.h"
#include "store/report.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "trace/histogram.h"

namespace stallwatch {
namespace {

namespace fs = std::filesystem;
using store::Report;
using store::ReportQuery;

constexpr std::int64_t kS = 1000000000;
constexpr std::int64_t kNow = 1795183391 * kS;  // 2026-11-20 14:03:11 UTC
constexpr std::int64_t kHour = 3600 * kS;
constexpr std::int64_t kWindow = 5 * kS;
constexpr const char* kHost = "gpu-node-01";

const std::string kTrainId = "116f54c41d0405dbb10e7b04ebc31e262a5b8c85c1233fcf36eaee344d91ae58";
const std::string kPod = "6f1c2a3b-9d4e-4f5a-8b6c-7d8e9f0a1b2c";
const std::string kTrain =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c2a3b_9d4e_4f5a_8b6c_"
    "7d8e9f0a1b2c.slice/cri-containerd-" +
    kTrainId + ".scope";
const std::string kSlurm = "/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0";
const std::string kNodeExporter = "/system.slice/prometheus-node-exporter.service";
const std::string kFluentBit = "/system.slice/fluent-bit.service";

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "explain_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct ChainSpec {
  std::string id, kind, severity, peak;
  bool open = true;
  std::string cgroup, container_id, pod_uid;
  int pid = 0;
  std::string comm, call, api;
  double p50 = 0, p99 = 0, b50 = 0, b99 = 0, ratio = 0;
  std::int64_t opened = 0, updated = 0, closed = 0;
  std::int64_t windows = 0;
  std::string summary, root_cause, effect, recommendation;
  std::string contributors = "[]", evidence = "{}";
};

std::string contributor(const std::string& comm, int pid, const std::string& cgroup,
                        const std::string& role, std::int64_t cpu_ns, std::int64_t count) {
  return "{\"comm\":" + json_string(comm) + ",\"pid\":" + std::to_string(pid) +
         ",\"cgroup\":" + json_string(cgroup) + ",\"role\":" + json_string(role) +
         ",\"cpu_ns\":" + std::to_string(cpu_ns) + ",\"count\":" + std::to_string(count) + "}";
}

trace::KernelBuckets buckets(
    std::initializer_list<std::pair<std::uint64_t, std::uint64_t>> ns_count) {
  trace::KernelBuckets b{};
  for (auto [ns, n] : ns_count) b[trace::bucket_of_ns(ns)] += n;
  return b;
}

// A stallwatch database as the daemon leaves it: schema v2, WAL.
class TestDb {
 public:
  explicit TestDb(const std::string& path) : path_(path) {
    auto db = store::open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    EXPECT_TRUE(db.ok()) << db.error().message;
    db_ = std::move(*db);
    sql("PRAGMA journal_mode=WAL");
    auto m = store::migrate(db_.get());
    EXPECT_TRUE(m.ok()) << m.error().message;
  }
  sqlite3* get() { return db_.get(); }
  const std::string& path() const { return path_; }
  void close() { db_.reset(); }

  void sql(const std::string& s) {
    auto r = store::exec(db_.get(), s);
    ASSERT_TRUE(r.ok()) << r.error().message;
  }

  void window(std::int64_t ts, double cpu, double mem, double load, int cpus, std::int64_t swap) {
    auto st = prep(
        "INSERT INTO windows(ts_ns, window_ns, cpu_busy, mem_used, load1, cpus, "
        "swap_used_bytes) VALUES(?,?,?,?,?,?,?)");
    st.bind(1, ts).bind(2, kWindow).bind(3, cpu).bind(4, mem).bind(5, load);
    st.bind(6, std::int64_t{cpus}).bind(7, swap);
    done(st);
  }
  void chain(const ChainSpec& c) {
    auto st = prep(
        "INSERT INTO chains(id, kind, severity, peak, open, cgroup, container_id, pod_uid, pid, "
        "comm, call, api, p50_s, p99_s, baseline_p50_s, baseline_p99_s, ratio, opened_ns, "
        "updated_ns, closed_ns, windows, summary, root_cause, effect, recommendation, "
        "contributors, evidence) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    st.bind(1, c.id)
        .bind(2, c.kind)
        .bind(3, c.severity)
        .bind(4, c.peak.empty() ? c.severity : c.peak);
    st.bind(5, std::int64_t{c.open}).bind(6, c.cgroup).bind(7, c.container_id).bind(8, c.pod_uid);
    st.bind(9, std::int64_t{c.pid}).bind(10, c.comm).bind(11, c.call).bind(12, c.api);
    st.bind(13, c.p50).bind(14, c.p99).bind(15, c.b50).bind(16, c.b99).bind(17, c.ratio);
    st.bind(18, c.opened).bind(19, c.updated).bind(20, c.closed).bind(21, c.windows);
    st.bind(22, c.summary).bind(23, c.root_cause).bind(24, c.effect).bind(25, c.recommendation);
    st.bind(26, c.contributors).bind(27, c.evidence);
    done(st);
  }
  void call_window(std::int64_t ts, const std::string& cgroup, int pid, const std::string& call,
                   std::uint64_t max_ns, const trace::KernelBuckets& b) {
    std::uint64_t count = 0;
    for (auto n : b) count += n;
    auto st = prep(
        "INSERT INTO call_windows(ts_ns, cgroup, pid, call, api, count, sum_ns, "
        "runnable_ns, blocked_ns, max_ns, buckets) VALUES(?,?,?,?,?,?,?,?,?,?,?)");
    st.bind(1, ts)
        .bind(2, cgroup)
        .bind(3, std::int64_t{pid})
        .bind(4, call)
        .bind(5, std::string_view(call.rfind("nccl", 0) == 0 ? "nccl" : "runtime"));
    st.bind(6, static_cast<std::int64_t>(count)).bind(7, std::int64_t{0}).bind(8, std::int64_t{0});
    st.bind(9, std::int64_t{0}).bind(10, static_cast<std::int64_t>(max_ns));
    st.bind_blob(11, store::encode_buckets(b));
    done(st);
  }
  void process_window(std::int64_t ts, const std::string& cgroup, int pid, std::int64_t runnable,
                      std::int64_t blocked, std::int64_t preemptions) {
    auto st = prep("INSERT INTO process_windows VALUES(?,?,?,?,?,?,?)");
    st.bind(1, ts).bind(2, cgroup).bind(3, std::int64_t{pid}).bind(4, runnable).bind(5, blocked);
    st.bind(6, kWindow - runnable - blocked).bind(7, preemptions);
    done(st);
  }
  void preemptor(std::int64_t ts, const std::string& cgroup, int victim, int pid,
                 const std::string& comm, const std::string& pcgroup, std::int64_t runnable,
                 std::int64_t count) {
    auto st = prep(
        "INSERT INTO preemptor_windows(ts_ns, cgroup, victim_pid, pid, comm, preemptor_cgroup, "
        "runnable_ns, count) VALUES(?,?,?,?,?,?,?,?)");
    st.bind(1, ts).bind(2, cgroup).bind(3, std::int64_t{victim}).bind(4, std::int64_t{pid});
    st.bind(5, comm).bind(6, pcgroup).bind(7, runnable).bind(8, count);
    done(st);
  }
  void outlier(std::int64_t ts, const std::string& cgroup, int pid, const std::string& call,
               std::int64_t duration) {
    auto st = prep("INSERT INTO outliers VALUES(?,?,?,?,'',?,'runtime',?,0,0,0)");
    st.bind(1, ts).bind(2, cgroup).bind(3, std::int64_t{pid}).bind(4, std::int64_t{pid});
    st.bind(5, call).bind(6, duration);
    done(st);
  }
  void process(int pid, const std::string& comm, const std::string& cgroup) {
    auto st = prep("INSERT INTO processes VALUES(?,?,?,?,?,?)");
    st.bind(1, std::int64_t{pid}).bind(2, std::int64_t{pid} * 1000).bind(3, comm).bind(4, cgroup);
    st.bind(5, kNow - 2 * kHour).bind(6, kNow);
    done(st);
  }

 private:
  store::Stmt prep(const char* sql) {
    auto st = store::Stmt::prepare(db_.get(), sql);
    EXPECT_TRUE(st.ok()) << st.error().message;
    return std::move(*st);
  }
  void done(store::Stmt& st) { EXPECT_EQ(st.step(), SQLITE_DONE) << store::db_error(db_.get()); }

  std::string path_;
  store::DbPtr db_;
};

// An hour of 5 s windows ending at kNow (host context averages to 94.2 % / 78.1 % / 12.3),
// plus one stale window an hour earlier that the averages must not include.
void add_windows(TestDb& db) {
  db.sql("BEGIN");
  for (int i = 0; i < 720; i++) {
    const std::int64_t ts = kNow - static_cast<std::int64_t>(719 - i) * kWindow;
    db.window(ts, i % 2 ? 0.932 : 0.952, 0.781, i % 2 ? 12.2 : 12.4, 8, 0);
  }
  db.window(kNow - 2 * kHour, 0.01, 0.01, 0.1, 8, 1 << 30);
  db.sql("COMMIT");
}

ChainSpec cpu_chain() {
  ChainSpec c;
  c.id = "a1b2c3d4e5f60718";
  c.kind = "cpu_contention";
  c.severity = "high";
  c.cgroup = kTrain;
  c.container_id = kTrainId;
  c.pod_uid = kPod;
  c.pid = 3821;
  c.comm = "python3";
  c.call = "cudaStreamSynchronize";
  c.api = "runtime";
  c.p50 = std::ldexp(1.0, -9);
  c.p99 = std::ldexp(1.0, -7);
  c.b50 = std::ldexp(1.0, -18);
  c.b99 = std::ldexp(1.0, -17);
  c.ratio = 1024;
  c.opened = kNow - 60 * kS;
  c.updated = kNow;
  c.windows = 12;
  c.summary =
      "[HIGH] cpu_contention: cudaStreamSynchronize p99 1,024x baseline in python3 (PID "
      "3821)";
  c.root_cause =
      "python3 (PID 3821) was runnable but not running for 50.4s of 120s (42.0%): "
      "14,496 preemptions";
  c.effect = "CUDA calls per second fell 47% from the workload's peak";
  c.recommendation =
      "pin training to dedicated cores: taskset -c 0-5 python3 train.py\n"
      "set DataLoader(persistent_workers=True, num_workers=4)\n"
      "nice -n 19 the monitoring agents: systemctl set-property prometheus-node-exporter.service "
      "CPUWeight=10";
  c.contributors =
      "[" + contributor("pt_data_worker:0", 3822, kTrain, "preemptor", 21600000000, 6000) + "," +
      contributor("prometheus-node-exporter", 1205, kNodeExporter, "preemptor", 8640000000, 3120) +
      "," + contributor("fluent-bit", 1301, kFluentBit, "preemptor", 4800000000, 2160) + "]";
  c.evidence = R"({"runnable_share":0.42,"preemptions":14496,"worst_stall_s":0.609,"cpus":8})";
  return c;
}

ChainSpec memory_chain() {
  ChainSpec c;
  c.id = "0f1e2d3c4b5a6978";
  c.kind = "memory_pressure";
  c.severity = "medium";
  c.peak = "high";
  c.open = false;
  c.cgroup = kSlurm;
  c.pid = 5120;
  c.comm = "python3";
  c.call = "cudaMemcpyAsync";
  c.api = "runtime";
  c.p50 = std::ldexp(1.0, -12);
  c.p99 = std::ldexp(1.0, -6);
  c.opened = kNow - 43 * 60 * kS - 10 * kS;  // 13:20:01
  c.closed = kNow - 32 * 60 * kS - 5 * kS;   // 13:31:06
  c.updated = c.closed;
  c.windows = 133;
  c.root_cause = "direct reclaim stalled python3 (PID 5120) for 3.2s: 41,022 reclaim entries";
  c.effect = "cudaMemcpyAsync waited on page faults in pageable host buffers";
  c.recommendation =
      "raise the job's memory limit (sbatch --mem=64G) or pin host buffers\n"
      "find the memory hog: stallwatch explain --per-process --since 2h";
  c.contributors = "[" + contributor("kswapd0", 97, "/", "reclaimer", 2100000000, 41022) + "]";
  c.evidence = R"({"reclaim_s":3.2,"direct_reclaims":41022,"mem_used_share":0.97})";
  return c;
}

ChainSpec old_chain() {
  ChainSpec c;
  c.id = "ffff000011112222";
  c.kind = "io_stall";
  c.severity = "low";
  c.open = false;
  c.cgroup = kTrain;
  c.pid = 3821;
  c.comm = "python3";
  c.opened = kNow - 3 * kHour;
  c.closed = c.updated = kNow - 3 * kHour + 300 * kS;
  c.windows = 60;
  c.root_cause = "an old chain";
  return c;
}

// The incident: a high CPU contention chain, an earlier memory pressure chain, an old one
// outside the hour, and two minutes of per-process data for the training pod.
void build_incident(TestDb& db) {
  add_windows(db);
  db.chain(cpu_chain());
  db.chain(memory_chain());
  db.chain(old_chain());
  db.process(3821, "python3", kTrain);
  db.process(3822, "pt_data_worker:0", kTrain);
  db.process(5120, "python3", kSlurm);
  db.sql("BEGIN");
  for (int i = 0; i < 24; i++) {
    const std::int64_t ts = kNow - static_cast<std::int64_t>(23 - i) * kWindow;
    db.call_window(ts, kTrain, 3821, "cudaStreamSynchronize", 12000000,
                   buckets({{1000000, 500}, {5000000, 15}, {7000000, 5}}));
    db.call_window(ts, kTrain, 3821, "cudaLaunchKernel", 800000,
                   buckets({{10000, 700}, {800000, 7}}));
    db.process_window(ts, kTrain, 3821, 2100000000, 500000000, 604);
    db.process_window(ts, kTrain, 3822, 1300000000, 0, 210);
    db.preemptor(ts, kTrain, 3821, 3822, "pt_data_worker:0", kTrain, 900000000, 250);
    db.preemptor(ts, kTrain, 3821, 1205, "prometheus-node-exporter", kNodeExporter, 360000000, 130);
    db.preemptor(ts, kTrain, 3821, 1301, "fluent-bit", kFluentBit, 200000000, 90);
    db.preemptor(ts, kTrain, 3822, 3821, "python3", kTrain, 500000000, 100);
  }
  db.outlier(kNow - 30 * kS, kTrain, 3821, "cudaStreamSynchronize", 609000000);
  for (int i = 0; i < 3; i++) {
    const std::int64_t ts = kNow - 38 * 60 * kS + static_cast<std::int64_t>(i) * kWindow;
    db.call_window(ts, kSlurm, 5120, "cudaMemcpyAsync", 15000000,
                   buckets({{200000, 990}, {15000000, 10}}));
    db.process_window(ts, kSlurm, 5120, 100000000, 1200000000, 12);
  }
  db.sql("COMMIT");
}

std::string golden_path(const std::string& name) {
  return std::string(FIXTURES_DIR) + "/explain/" + name;
}

void expect_golden(const std::string& name, const std::string& got) {
  const std::string path = golden_path(name);
  const char* update = std::getenv("UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << got;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing golden file " << path << " (run with UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(want.str(), got) << "golden " << path << " differs (UPDATE_GOLDEN=1 rewrites it)";
}

Report load(sqlite3* db, ReportQuery q) {
  auto r = store::load_report(db, q);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) return Report{};
  r->host.hostname = kHost;
  return std::move(*r);
}

ReportQuery hour(bool per_process = false, std::string cgroup = "") {
  return ReportQuery{kNow, kHour, std::move(cgroup), per_process};
}

std::vector<std::string> ids(const Report& r) {
  std::vector<std::string> out;
  for (const auto& c : r.chains) out.push_back(c.id);
  return out;
}

// SQLite as a JSON checker: json_valid and json_extract on the rendered text.
std::string json_path(const std::string& json, const std::string& path) {
  auto db = store::open_db(":memory:", SQLITE_OPEN_READWRITE);
  auto st = store::Stmt::prepare(db->get(), "SELECT json_valid(?1), json_extract(?1, ?2)");
  st->bind(1, json).bind(2, path);
  EXPECT_EQ(st->step(), SQLITE_ROW);
  EXPECT_EQ(st->int64(0), 1) << "not valid JSON: " << json;
  return st->text(1);
}

class ExplainTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::string path = dir.path() + "/stallwatch.db";
};

TEST_F(ExplainTest, GoldenCpuContentionText) {
  TestDb db(path);
  build_incident(db);
  expect_golden("cpu_contention.txt", cli::render_explain_text(load(db.get(), hour())));
}

TEST_F(ExplainTest, GoldenCpuContentionJson) {
  TestDb db(path);
  build_incident(db);
  const std::string json = cli::render_explain_json(load(db.get(), hour()));
  expect_golden("cpu_contention.json", json + "\n");
  EXPECT_EQ(json_path(json, "$.chains[0].kind"), "cpu_contention");
  EXPECT_EQ(json_path(json, "$.chains[0].severity"), "high");
  EXPECT_EQ(json_path(json, "$.chains[0].cgroup"), kTrain);
  EXPECT_EQ(json_path(json, "$.chains[0].call"), "cudaStreamSynchronize");
  EXPECT_EQ(json_path(json, "$.chains[0].contributors[0].comm"), "pt_data_worker:0");
  EXPECT_NE(json_path(json, "$.chains[0].recommendation").find("taskset"), std::string::npos);
  EXPECT_EQ(json_path(json, "$.chains[0].closed"), "");  // null while open
  EXPECT_EQ(json_path(json, "$.chains[1].closed"), "2026-11-20T13:31:06Z");
  EXPECT_EQ(json_path(json, "$.chains[0].evidence.preemptions"), "14496");
  EXPECT_EQ(json_path(json, "$.processes"), "");  // only with --per-process
}

TEST_F(ExplainTest, GoldenPerProcess) {
  TestDb db(path);
  build_incident(db);
  const Report r = load(db.get(), hour(true));
  expect_golden("per_process.txt", cli::render_explain_text(r));
  const std::string json = cli::render_explain_json(r);
  EXPECT_EQ(json_path(json, "$.processes[0].comm"), "python3");
  EXPECT_EQ(json_path(json, "$.processes[0].calls[0].call"), "cudaLaunchKernel");
  EXPECT_EQ(json_path(json, "$.processes[0].preemptors[0].comm"), "pt_data_worker:0");
}

TEST_F(ExplainTest, GoldenNoChains) {
  TestDb db(path);
  add_windows(db);
  db.sql("BEGIN");
  for (int i = 0; i < 12; i++) {
    const std::int64_t ts = kNow - static_cast<std::int64_t>(i) * kWindow;
    db.call_window(ts, kTrain, 3821, "cudaStreamSynchronize", 90000, buckets({{9000, 1200}}));
    db.call_window(ts, kTrain, 3823, "cudaLaunchKernel", 40000, buckets({{6000, 2500}}));
    db.call_window(ts, kSlurm, 5120, "ncclAllReduce", 900000, buckets({{400000, 80}}));
    db.process_window(ts, kTrain, 3821, 1000000, 0, 3);
    db.process_window(ts, kTrain, 3823, 1000000, 0, 3);
    db.process_window(ts, kSlurm, 5120, 1000000, 0, 1);
  }
  db.sql("COMMIT");
  db.chain(old_chain());  // three hours old: not in the report
  const Report r = load(db.get(), hour());
  EXPECT_TRUE(r.chains.empty());
  expect_golden("no_chains.txt", cli::render_explain_text(r));
}

TEST_F(ExplainTest, NoWindowsAtAllSaysSo) {
  TestDb db(path);
  const std::string text = cli::render_explain_text(load(db.get(), hour()));
  EXPECT_NE(text.find("The daemon wrote nothing to this database yet"), std::string::npos) << text;
}

TEST_F(ExplainTest, StaleDataSuggestsALongerSince) {
  TestDb db(path);
  db.window(kNow - 3 * kHour - 600 * kS, 0.5, 0.5, 1, 8, 0);  // 13:13:11 UTC... 3h10m ago
  const std::string text = cli::render_explain_text(load(db.get(), hour()));
  EXPECT_NE(text.find("No data in the last 1h; newest data is from 2026-11-20 10:53:11 UTC "
                      "(3h ago); try --since 4h."),
            std::string::npos)
      << text;
}

TEST_F(ExplainTest, OrdersOpenThenSeverityThenNewest) {
  TestDb db(path);
  add_windows(db);
  auto spec = [](const char* id, bool open, const char* sev, std::int64_t updated) {
    ChainSpec c;
    c.id = id;
    c.kind = "cpu_contention";
    c.severity = sev;
    c.open = open;
    c.cgroup = kTrain;
    c.opened = kNow - 50 * 60 * kS;
    c.updated = updated;
    c.closed = open ? 0 : updated;
    return c;
  };
  db.chain(spec("closed-critical", false, "critical", kNow - 60 * kS));
  db.chain(spec("open-low", true, "low", kNow));
  db.chain(spec("open-high-early", true, "high", kNow - 600 * kS));
  db.chain(spec("open-high-late", true, "high", kNow - 5 * kS));
  db.chain(spec("closed-medium", false, "medium", kNow - 30 * kS));
  db.chain(spec("open-critical", true, "critical", kNow - 1200 * kS));
  EXPECT_EQ(ids(load(db.get(), hour())),
            (std::vector<std::string>{"open-critical", "open-high-late", "open-high-early",
                                      "open-low", "closed-critical", "closed-medium"}));
}

TEST_F(ExplainTest, CgroupFilterTakesTheCgroupAndItsDescendants) {
  TestDb db(path);
  add_windows(db);
  for (const char* cg : {"/kubepods.slice/a", "/kubepods.slice/a/child", "/kubepods.slice/ab",
                         "/kubepods.slice/a-b", "/system.slice"}) {
    ChainSpec c = cpu_chain();
    c.id = cg;
    c.cgroup = cg;
    db.chain(c);
  }
  auto got = [&](const char* filter) {
    auto v = ids(load(db.get(), hour(false, filter)));
    std::sort(v.begin(), v.end());
    return v;
  };
  const std::vector<std::string> a = {"/kubepods.slice/a", "/kubepods.slice/a/child"};
  EXPECT_EQ(got("/kubepods.slice/a"), a);
  EXPECT_EQ(got("/kubepods.slice/a/"), a);
  EXPECT_EQ(got("kubepods.slice/a"), a);
  EXPECT_EQ(got("/kubepods.slice/a/child"), std::vector<std::string>{"/kubepods.slice/a/child"});
  EXPECT_EQ(got("/kubepods.slice").size(), 4u);
  EXPECT_EQ(got("/").size(), 5u);
  EXPECT_EQ(got("").size(), 5u);
  EXPECT_TRUE(got("/kubepods").empty());
  EXPECT_TRUE(store::cgroup_matches("/a", "/a/b"));
  EXPECT_FALSE(store::cgroup_matches("/a", "/ab"));
  EXPECT_TRUE(store::cgroup_matches("/", "/ab"));
}

// The pod and container names the daemon learnt from the API server name the workload, in text
// and JSON; a cgroup without names keeps its container id / pod UID label.
TEST_F(ExplainTest, KubernetesNamesNameTheWorkload) {
  TestDb db(path);
  add_windows(db);
  ChainSpec named = cpu_chain();
  named.id = "named";
  named.cgroup = "/kubepods.slice/named";
  db.chain(named);
  ChainSpec plain = cpu_chain();
  plain.id = "plain";
  plain.cgroup = "/kubepods.slice/plain";
  db.chain(plain);
  db.sql("INSERT INTO cgroups(path, pod, namespace, container, first_seen_ns, last_seen_ns) "
         "VALUES('/kubepods.slice/named', 'llm-train-0', 'ml-training', 'trainer', 1, 1), "
         "('/kubepods.slice/plain', NULL, NULL, NULL, 1, 1)");
  const Report r = load(db.get(), hour());
  ASSERT_EQ(r.chains.size(), 2u);
  const std::string text = cli::render_explain_text(r);
  EXPECT_NE(text.find("pod ml-training/llm-train-0, container trainer"), std::string::npos)
      << text;
  for (const auto& c : r.chains) {
    EXPECT_EQ(c.pod, c.id == "named" ? "llm-train-0" : "") << c.id;
    EXPECT_EQ(c.pod_namespace, c.id == "named" ? "ml-training" : "") << c.id;
    EXPECT_EQ(c.container, c.id == "named" ? "trainer" : "") << c.id;
  }
}

// Seen on an H100: a chain whose effect is fewer calls per window, at the baseline's latency,
// read "cuLaunchKernel p99 61µs -> 61µs (1.0x)". It now says the latency did not move.
TEST_F(ExplainTest, LatencyAsInTheBaselineIsSaidSo) {
  TestDb db(path);
  add_windows(db);
  ChainSpec c = cpu_chain();
  c.call = "cuLaunchKernel";
  c.p99 = c.b99 = 61e-6;
  c.p50 = c.b50 = 7.6e-6;
  c.ratio = 1.02;
  c.effect = "cuLaunchKernel calls per window fell 69.8% from the baseline (6,966 → 2,106)";
  db.chain(c);
  const std::string text = cli::render_explain_text(load(db.get(), hour()));
  EXPECT_NE(text.find("Effect:       cuLaunchKernel p99 61µs, p50 7.6µs, as in the baseline\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("(1.0x)"), std::string::npos) << text;
}

TEST_F(ExplainTest, CgroupFilterAppliesToProcessesAndTraced) {
  TestDb db(path);
  build_incident(db);
  const Report r = load(db.get(), hour(true, kSlurm));
  ASSERT_EQ(r.chains.size(), 1u);
  EXPECT_EQ(r.chains[0].kind, "memory_pressure");
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].pid, 5120);
  const std::string text = cli::render_explain_text(r);
  EXPECT_NE(text.find("Cgroup: " + kSlurm + " and below"), std::string::npos) << text;
}

TEST_F(ExplainTest, SinceExcludesOldChains) {
  TestDb db(path);
  build_incident(db);
  EXPECT_EQ(ids(load(db.get(), hour())),
            (std::vector<std::string>{"a1b2c3d4e5f60718", "0f1e2d3c4b5a6978"}));
  EXPECT_EQ(ids(load(db.get(), ReportQuery{kNow, 20 * 60 * kS, "", false})),
            std::vector<std::string>{"a1b2c3d4e5f60718"});
  EXPECT_EQ(ids(load(db.get(), ReportQuery{kNow, 4 * kHour, "", false})),
            (std::vector<std::string>{"a1b2c3d4e5f60718", "0f1e2d3c4b5a6978", "ffff000011112222"}));
  // Chains that open after the period's end are not in it either.
  EXPECT_EQ(ids(load(db.get(), ReportQuery{kNow - 2 * kHour, 2 * kHour, "", false})),
            std::vector<std::string>{"ffff000011112222"});
  EXPECT_TRUE(ids(load(db.get(), ReportQuery{kNow - 4 * kHour, kHour, "", false})).empty());
}

// 99 fast calls in one window and one slow call in another: the merged histogram puts p99 in
// the fast bucket and only p100 in the slow one. Averaging the windows' p99s would not.
TEST_F(ExplainTest, PerProcessQuantilesComeFromMergedHistograms) {
  TestDb db(path);
  add_windows(db);
  db.call_window(kNow - 10 * kS, kTrain, 3821, "cudaMalloc", 4000, buckets({{4000, 99}}));
  db.call_window(kNow - 5 * kS, kTrain, 3821, "cudaMalloc", 100000000, buckets({{100000000, 1}}));
  db.call_window(kNow - 10 * kS, kTrain, 3821, "cudaFree", 4000, buckets({{4000, 98}}));
  db.call_window(kNow - 5 * kS, kTrain, 3821, "cudaFree", 100000000, buckets({{100000000, 2}}));
  db.call_window(kNow - 2 * kHour, kTrain, 3821, "cudaFree", 9 * kS, buckets({{9 * kS, 1000}}));
  const Report r = load(db.get(), hour(true));
  ASSERT_EQ(r.processes.size(), 1u);
  const auto& calls = r.processes[0].calls;
  ASSERT_EQ(calls.size(), 2u);
  const double fast = trace::bucket_upper_seconds(trace::bucket_of_ns(4000));
  const double slow = trace::bucket_upper_seconds(trace::bucket_of_ns(100000000));
  EXPECT_EQ(calls[0].call, "cudaFree");
  EXPECT_EQ(calls[0].count, 100u);
  // Rank 99 is the first of the two slow calls: the slow bucket, whose upper bound (0.125 s)
  // is above every call in it, so the maximum seen (0.1 s) is reported instead.
  EXPECT_GT(slow, 0.1);
  EXPECT_EQ(calls[0].p99_s, 0.1);
  EXPECT_EQ(calls[1].call, "cudaMalloc");
  EXPECT_EQ(calls[1].count, 100u);
  EXPECT_EQ(calls[1].p50_s, fast);
  EXPECT_EQ(calls[1].p99_s, fast);
  EXPECT_EQ(calls[1].max_s, 0.1);
  EXPECT_EQ(r.processes[0].worst_stall_ns, 100000000u);
}

// Schema 10: each GPU's windows under the System context, host-wide: the mean SM clock against
// its maximum, the held share and the reason that held it longest, temperature, power against
// a limit lowered during the period, Xid errors counted by code; a driver's name escaped.
TEST_F(ExplainTest, GpuContextSummarisesEachGpu) {
  TestDb db(path);
  struct Row {
    int gpu;
    const char* name;
    int clock;
    double held;
    const char* reason;
    int temp;
    double watts, limit;
    const char* xids;
  };
  const Row rows[] = {
      {0, "NVIDIA H100 80GB HBM3", 1980, 0, nullptr, 66, 560, 700, nullptr},
      {0, "NVIDIA H100 80GB HBM3", 1200, 0.85, "sw_power_cap", 71, 400, 400, "79"},
      {0, "NVIDIA H100 80GB HBM3", 1200, 0.85, "sw_power_cap", 70, 400, 400, "79,13"},
      {1, "evil\x1b[31mGPU", 1980, 0.1, "hw_thermal_slowdown", 90, 300, 700, nullptr},
  };
  int i = 0;
  for (const auto& r : rows) {
    const std::int64_t ts = kNow - kHour / 2 + (i++ % 3) * kWindow;
    if (r.gpu == 0) db.window(ts, 0.5, 0.5, 1, 8, 0);
    db.sql("INSERT INTO gpu_windows(ts_ns, gpu, uuid, name, sm_clock_mhz, sm_clock_max_mhz, "
           "held_share, top_reason, top_reason_share, temperature_c, power_w, power_limit_w, "
           "xids, xid_codes) VALUES(" +
           std::to_string(ts) + ", " + std::to_string(r.gpu) + ", 'GPU-" + std::to_string(r.gpu) +
           "', '" + r.name + "', " + std::to_string(r.clock) + ", 1980, " +
           std::to_string(r.held) + ", " + (r.reason ? "'" + std::string(r.reason) + "'" : "NULL") +
           ", " + std::to_string(r.held) + ", " + std::to_string(r.temp) + ", " +
           std::to_string(r.watts) + ", " + std::to_string(r.limit) + ", " +
           (r.xids ? std::to_string(std::string(r.xids).size() > 2 ? 2 : 1) : "0") + ", " +
           (r.xids ? "'" + std::string(r.xids) + "'" : "NULL") + ")");
  }
  const Report report = load(db.get(), hour());
  const std::string text = cli::render_explain_text(report);
  EXPECT_NE(text.find("GPU 0 NVIDIA H100 80GB HBM3: SM 1,460 of 1,980 MHz | held 56.7% "
                      "(sw_power_cap) | 71 C max | 560 W max, limit 400 to 700 W | Xid 13 x1, "
                      "79 x2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("GPU 1 evil\\x1b[31mGPU: SM 1,980 of 1,980 MHz | held 10.0% "
                      "(hw_thermal_slowdown) | 90 C max | 300 of 700 W max\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  const std::string json = cli::render_explain_json(report);
  EXPECT_EQ(json_path(json, "$.host.gpus[0].xids[1].xid"), "79");
  EXPECT_EQ(json_path(json, "$.host.gpus[0].xids[1].errors"), "2");
  EXPECT_EQ(json_path(json, "$.host.gpus[0].power_limit_min_w"), "400");
  EXPECT_EQ(json_path(json, "$.host.gpus[0].top_reason"), "sw_power_cap");
  EXPECT_EQ(json_path(json, "$.host.gpus[1].name"), "evil\x1b[31mGPU");
  // A period without GPU rows (no NVML): no GPU line, an empty list.
  const Report old = load(db.get(), ReportQuery{kNow - 2 * kHour, kHour / 4, "", false});
  EXPECT_EQ(cli::render_explain_text(old).find("GPU "), std::string::npos);
  EXPECT_EQ(json_path(cli::render_explain_json(old), "$.host.gpus"), "[]");
}

// Schema 13 (issue #48): what stallwatch's probes cost, under the System context: the pair
// costs the daemon measured at start and the largest share of a workload's CUDA-thread CPU.
TEST_F(ExplainTest, ProbeCostIsInTheSystemContext) {
  TestDb db(path);
  const std::int64_t t0 = kNow - kHour / 2;
  db.window(t0, 0.5, 0.5, 1, 8, 0);
  db.window(t0 + kWindow, 0.5, 0.5, 1, 8, 0);
  db.sql("UPDATE windows SET probe_pair_emulated_s = 9.7e-7, probe_pair_stepped_s = 4.26e-6");
  db.sql("UPDATE windows SET probe_cost_max = 0.02 WHERE ts_ns = " + std::to_string(t0));
  db.sql("UPDATE windows SET probe_cost_max = 0.01 WHERE ts_ns = " +
         std::to_string(t0 + kWindow));
  const Report report = load(db.get(), hour());
  const std::string text = cli::render_explain_text(report);
  EXPECT_NE(text.find("  Probes (stallwatch's own): 970ns (emulated site), 4.3µs "
                      "(single-stepped) a traced call; at most 2.0% of a workload's CUDA-thread "
                      "CPU (mean 1.5%; --cost-budget bounds it)\n"),
            std::string::npos)
      << text;
  const std::string json = cli::render_explain_json(report);
  EXPECT_EQ(json_path(json, "$.host.probe_cost_max"), "0.02");
  EXPECT_EQ(json_path(json, "$.host.probe_cost_mean"), "0.015");
  EXPECT_EQ(json_path(json, "$.host.probe_pair_stepped_s"), "4.26e-06");
  // Not measured (a demo's database, or one written before schema 13): no line, JSON nulls.
  db.sql("UPDATE windows SET probe_pair_emulated_s = NULL, probe_pair_stepped_s = NULL, "
         "probe_cost_max = NULL");
  const Report none = load(db.get(), hour());
  EXPECT_EQ(cli::render_explain_text(none).find("Probes"), std::string::npos);
  EXPECT_EQ(json_path(cli::render_explain_json(none), "$.host.probe_cost_max"), "");
}

TEST(ExplainFormatTest, HumanNumbers) {
  EXPECT_EQ(cli::human_seconds(0), "0");
  EXPECT_EQ(cli::human_seconds(610e-9), "610ns");
  EXPECT_EQ(cli::human_seconds(7e-6), "7µs");
  EXPECT_EQ(cli::human_seconds(std::ldexp(1.0, -17)), "7.6µs");
  EXPECT_EQ(cli::human_seconds(890e-6), "890µs");
  EXPECT_EQ(cli::human_seconds(999.7e-6), "1ms");
  EXPECT_EQ(cli::human_seconds(7.2e-3), "7.2ms");
  EXPECT_EQ(cli::human_seconds(1.3), "1.3s");
  EXPECT_EQ(cli::human_seconds(31.4), "31s");
  EXPECT_EQ(cli::human_seconds(125), "2m05s");
  EXPECT_EQ(cli::human_seconds(3 * 3600 + 120), "3h02m");
  EXPECT_EQ(cli::human_seconds(INFINITY), ">256s");
  EXPECT_EQ(cli::thousands(0), "0");
  EXPECT_EQ(cli::thousands(999), "999");
  EXPECT_EQ(cli::thousands(1028), "1,028");
  EXPECT_EQ(cli::thousands(1234567), "1,234,567");
  EXPECT_EQ(cli::rfc3339(kNow), "2026-11-20T14:03:11Z");
  EXPECT_EQ(cli::utc_datetime(kNow), "2026-11-20 14:03:11");
}

TEST(ExplainFormatTest, JsonEscapesEverything) {
  Report r;
  r.query = ReportQuery{kNow, kHour, "", false};
  store::ReportChain c;
  c.kind = "cpu_contention";
  c.severity = "high";
  c.cgroup = "/weird\"path\\\n\x01";
  c.comm = std::string("bad\xff");
  c.recommendation = "line1\nline2\t\"quoted\"";
  c.contributors.push_back({"co\"mm", 1, "/", "preemptor", 5, 6, {}});
  c.evidence.emplace_back("x\"y", NAN);
  r.chains.push_back(c);
  const std::string json = cli::render_explain_json(r);
  EXPECT_EQ(json_path(json, "$.chains[0].cgroup"), c.cgroup);
  EXPECT_EQ(json_path(json, "$.chains[0].recommendation"), c.recommendation);
  EXPECT_EQ(json_path(json, "$.chains[0].contributors[0].comm"), "co\"mm");
}

TEST(ExplainOptionsTest, Parses) {
  auto o = cli::parse_explain_options(
      {"--db", "/x.db", "--since=15m", "--cgroup", "/a", "--per-process", "--json"});
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->db, "/x.db");
  EXPECT_EQ(o->since, std::chrono::minutes(15));
  EXPECT_EQ(o->cgroup, "/a");
  EXPECT_TRUE(o->per_process);
  EXPECT_TRUE(o->json);
  auto d = cli::parse_explain_options({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->db, "/var/lib/stallwatch/stallwatch.db");
  EXPECT_EQ(d->since, std::chrono::hours(1));
  EXPECT_FALSE(cli::parse_explain_options({"--since", "5"}).ok());
  EXPECT_FALSE(cli::parse_explain_options({"--since"}).ok());
  EXPECT_FALSE(cli::parse_explain_options({"--bogus"}).ok());
  EXPECT_FALSE(cli::parse_explain_options({"--json=yes"}).ok());
  EXPECT_TRUE(cli::parse_explain_options({"-h"})->help);
}

int explain(const std::string& db, std::string* out, std::string* err,
            std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"--db", db});
  auto o = cli::parse_explain_options(extra);
  EXPECT_TRUE(o.ok());
  std::ostringstream o_out, o_err;
  const int rc = cli::run_explain(*o, kNow, kHost, o_out, o_err);
  *out = o_out.str();
  *err = o_err.str();
  return rc;
}

TEST_F(ExplainTest, MissingDatabaseIsOneLine) {
  std::string out, err;
  EXPECT_EQ(explain(dir.path() + "/nope.db", &out, &err), 1);
  EXPECT_EQ(out, "");
  // The hint sends the demo to a file of its own, never to the missing path (by default the
  // daemon's store, where a fake incident would read as a real one): issue #51.
  EXPECT_EQ(err, "stallwatch explain: no database at " + dir.path() +
                     "/nope.db; start `stallwatch run`, or pass --db (to try explain without a "
                     "daemon: `stallwatch demo incident --fast --db /tmp/stallwatch-demo.db`, then "
                     "`stallwatch explain --db /tmp/stallwatch-demo.db`)\n");
}

TEST_F(ExplainTest, RefusesWhatIsNotAStallwatchDatabase) {
  std::string out, err;
  std::ofstream(path) << "this is not sqlite, just some text that is long enough to have a header"
                      << std::string(200, 'x');
  EXPECT_EQ(explain(path, &out, &err), 1);
  EXPECT_NE(err.find("not a database"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);

  const std::string other = dir.path() + "/other.db";
  {
    auto db = store::open_db(other, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(store::exec(db->get(), "CREATE TABLE foo(x)").ok());
  }
  EXPECT_EQ(explain(other, &out, &err), 1);
  EXPECT_NE(err.find("is not a stallwatch database"), std::string::npos) << err;

  {
    TestDb db(dir.path() + "/newer.db");
    db.sql("PRAGMA user_version = " + std::to_string(store::kSchemaVersion + 1));
  }
  EXPECT_EQ(explain(dir.path() + "/newer.db", &out, &err), 1);
  EXPECT_NE(err.find("newer than this stallwatch reads"), std::string::npos) << err;
  EXPECT_EQ(explain(dir.path(), &out, &err), 1);
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
}

// The daemon holds a write transaction and has not checkpointed: explain reads the committed
// state (WAL included) and neither blocks nor sees the uncommitted row.
TEST_F(ExplainTest, ReadsWhileTheDaemonWrites) {
  TestDb db(path);
  db.sql("PRAGMA wal_autocheckpoint = 0");
  build_incident(db);
  db.sql("BEGIN IMMEDIATE");
  ChainSpec c = cpu_chain();
  c.id = "uncommitted";
  db.chain(c);
  auto rdb = store::open_report_db(path);
  ASSERT_TRUE(rdb.ok()) << rdb.error().message;
  EXPECT_FALSE(rdb->immutable);
  EXPECT_EQ(ids(load(rdb->db.get(), hour())),
            (std::vector<std::string>{"a1b2c3d4e5f60718", "0f1e2d3c4b5a6978"}));
  db.sql("COMMIT");
  EXPECT_EQ(load(rdb->db.get(), hour()).chains.size(), 3u);
}

// A copy of the live files: with its -wal everything shows; without it, what was checkpointed.
TEST_F(ExplainTest, ReadsACopyWithOrWithoutItsWal) {
  TestDb db(path);
  add_windows(db);
  db.sql("PRAGMA wal_checkpoint(TRUNCATE)");
  db.sql("PRAGMA wal_autocheckpoint = 0");
  db.chain(cpu_chain());  // only in the -wal
  ASSERT_GT(fs::file_size(path + "-wal"), 0u);
  const std::string with = dir.path() + "/with.db", without = dir.path() + "/without.db";
  fs::copy_file(path, with);
  fs::copy_file(path + "-wal", with + "-wal");
  fs::copy_file(path, without);
  auto a = store::open_report_db(with);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(load(a->db.get(), hour()).chains.size(), 1u);
  auto b = store::open_report_db(without);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(load(b->db.get(), hour()).chains.size(), 0u);
  EXPECT_EQ(load(b->db.get(), hour()).host.windows, 720u);
}

// A copy in a read-only place. SQLite (3.22+) reads a WAL database without creating -shm when
// it cannot (wal-index on the heap), so a read-only directory, or a -shm it cannot open, still
// gives everything, -wal included. Root ignores directory modes, hence the -shm directory too.
std::string make_copy_with_wal(const std::string& dir_path, const std::string& name) {
  const std::string live = dir_path + "/live.db", copy = dir_path + "/" + name;
  TestDb db(live);
  db.sql("PRAGMA wal_autocheckpoint = 0");
  build_incident(db);
  EXPECT_GT(fs::file_size(live + "-wal"), 0u);
  fs::create_directories(fs::path(copy).parent_path());
  fs::copy_file(live, copy);
  fs::copy_file(live + "-wal", copy + "-wal");
  return copy;
}

// Runs `check` in a child process as an unprivileged user (nobody) when the test runs as root,
// since root ignores file modes; returns what `check` returned (0 good), or 99 on setup failure.
int as_unprivileged(const std::function<int()>& check) {
  if (geteuid() != 0) return check();
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(99);
    _exit(check());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 98;
}

// A copy (database and -wal, mode 0444) in a directory nobody may write: no -shm can be
// created there, so explain reads a private copy in $TMPDIR and removes it afterwards.
TEST_F(ExplainTest, ReadsACopyInAReadOnlyDirectory) {
  const std::string copy = make_copy_with_wal(dir.path(), "ro/stallwatch.db");
  ASSERT_EQ(chmod(copy.c_str(), 0444), 0);
  ASSERT_EQ(chmod((copy + "-wal").c_str(), 0444), 0);
  ASSERT_EQ(chmod((dir.path() + "/ro").c_str(), 0555), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const int rc = as_unprivileged([&] {
    std::string private_dir;
    {
      auto r = store::open_report_db(copy);
      if (!r.ok()) return 1;
      if (!r->copy || r->note.find("read a private copy of " + copy) == std::string::npos) return 2;
      private_dir = r->copy->path();
      if (!fs::exists(private_dir + "/stallwatch.db")) return 3;
      auto report = store::load_report(r->db.get(), hour());
      if (!report.ok() || report->chains.size() != 2) return 4;  // the chains are in the -wal
    }
    return fs::exists(private_dir) ? 5 : 0;
  });
  EXPECT_EQ(rc, 0) << "1 open failed, 2 no private copy, 3 copy missing, 4 chains, 5 not removed";
  std::string out, err;  // and as ourselves, whoever that is
  EXPECT_EQ(explain(copy, &out, &err), 0) << err;
  EXPECT_NE(out.find("Causal chains (last 1h): 2, 1 open"), std::string::npos) << out;
  chmod((dir.path() + "/ro").c_str(), 0755);
}

TEST_F(ExplainTest, ReadsACopyWhoseShmCannotBeCreated) {
  const std::string copy = make_copy_with_wal(dir.path(), "copy.db");
  fs::create_directory(copy + "-shm");  // nobody, root included, can open this as a file
  auto r = store::open_report_db(copy);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->immutable);
  EXPECT_EQ(load(r->db.get(), hour()).chains.size(), 2u);  // the chains live in the -wal
}

// When even that fails (here: a -wal that cannot be opened), explain falls back to
// immutable=1, reads the main file and says on stderr that it did.
TEST_F(ExplainTest, UnopenableWalFallsBackToImmutable) {
  const std::string p = dir.path() + "/src.db";
  {
    TestDb db(p);
    build_incident(db);
  }  // closing checkpoints and removes the -wal; the file stays in WAL mode
  ASSERT_FALSE(fs::exists(p + "-wal"));
  fs::create_directory(p + "-wal");
  auto r = store::open_report_db(p);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->immutable);
  EXPECT_NE(r->note.find("opened as immutable"), std::string::npos) << r->note;
  EXPECT_EQ(r->note.find("were not read"), std::string::npos) << r->note;
  EXPECT_EQ(load(r->db.get(), hour()).chains.size(), 2u);
  std::string out, err;
  EXPECT_EQ(explain(p, &out, &err), 0);
  EXPECT_NE(out.find("[HIGH] cpu_contention"), std::string::npos) << out;
  EXPECT_NE(err.find("opened as immutable"), std::string::npos) << err;
}

// ---- the real binary (needs `explain` dispatched in exporter/main.cpp) ----

struct BinRun {
  int rc = -1;
  std::string out, err;
};

BinRun run_bin(const std::vector<std::string>& args) {
  TempDir tmp;
  std::string cmd = std::string(STALLWATCH_BIN);
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " >" + tmp.path() + "/out 2>" + tmp.path() + "/err";
  BinRun r;
  const int st = std::system(cmd.c_str());
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream o(tmp.path() + "/out"), e(tmp.path() + "/err");
  std::stringstream so, se;
  so << o.rdbuf();
  se << e.rdbuf();
  r.out = so.str();
  r.err = se.str();
  return r;
}

class CliTest : public ExplainTest {
 protected:
  void SetUp() override {
    const BinRun help = run_bin({"explain", "--help"});
    if (help.rc != 0 || help.out.find("usage: stallwatch explain") == std::string::npos) {
      GTEST_SKIP() << "stallwatch does not dispatch `explain` yet (exporter/main.cpp)";
    }
  }
};

TEST_F(CliTest, ReportsJsonFromTheWallClock) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  {
    TestDb db(path);
    db.window(now - 10 * kS, 0.5, 0.5, 1, 4, 0);
    ChainSpec c = cpu_chain();
    c.opened = now - 60 * kS;
    c.updated = now - 10 * kS;
    db.chain(c);
  }
  const BinRun r = run_bin({"explain", "--db", path, "--since", "5m", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json_path(r.out, "$.chains[0].kind"), "cpu_contention");
  EXPECT_EQ(json_path(r.out, "$.chains[0].contributors[0].comm"), "pt_data_worker:0");
  const BinRun text = run_bin({"explain", "--db", path, "--per-process"});
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("[HIGH] cpu_contention  OPEN since"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Process breakdown"), std::string::npos) << text.out;
}

TEST_F(CliTest, MissingDatabaseAndBadUsage) {
  const BinRun r = run_bin({"explain", "--db", dir.path() + "/nope.db"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("no database at " + dir.path() + "/nope.db"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const BinRun bad = run_bin({"explain", "--since", "forever"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("invalid duration 'forever'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace stallwatch
