// Unit tier: `stallwatch export`. A `demo incident` database is exported in both formats by the
// binary; the Perfetto trace is decoded by an independent reader (protoc --decode_raw, Debian's
// protobuf-compiler) and checked against a table of the fields perfetto.protos defines, the
// JSON by a JSON parser; tracks, slice counts, nesting and timestamps are compared with the
// store. The nesting of overlapping calls is checked on a hand-made timeline.
#include "cli/export.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"

namespace stallwatch::cli {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// ---- protoc --decode_raw's text, read back into a tree ----

struct Node {
  // field number -> values in order: a scalar's text, or a nested message
  std::multimap<int, std::string> scalars;
  std::multimap<int, Node> messages;
  std::vector<int> order;  // every field as it came

  const Node* message(int field) const {
    auto it = messages.find(field);
    return it == messages.end() ? nullptr : &it->second;
  }
  std::string scalar(int field) const {
    auto it = scalars.find(field);
    return it == scalars.end() ? std::string() : it->second;
  }
  long long number(int field) const {
    const std::string s = scalar(field);
    return s.empty() ? -1 : std::stoll(s);
  }
  bool has(int field) const { return scalars.count(field) || messages.count(field); }
};

Node parse_raw(std::istream& in) {
  Node n;
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    line = line.substr(b);
    if (line == "}") return n;
    const size_t colon = line.find(':');
    const size_t brace = line.find(" {");
    if (brace != std::string::npos && (colon == std::string::npos || brace < colon)) {
      const int field = std::stoi(line.substr(0, brace));
      n.messages.emplace(field, parse_raw(in));
      n.order.push_back(field);
    } else {
      const int field = std::stoi(line.substr(0, colon));
      n.scalars.emplace(field, line.substr(colon + 2));
      n.order.push_back(field);
    }
  }
  return n;
}

// The fields perfetto.protos defines for what we write (revision in cli/export.h). A string
// that happens to parse as a message is printed by --decode_raw as one: both forms are allowed.
const std::map<std::string, std::set<int>> kFields = {
    {"TracePacket", {8, 10, 11, 13, 60}},
    {"TrackDescriptor", {1, 2, 3, 4, 5, 8}},
    {"ProcessDescriptor", {1, 6}},
    {"ThreadDescriptor", {1, 2, 5}},
    {"CounterDescriptor", {3, 6}},
    {"TrackEvent", {4, 9, 11, 22, 23, 30, 44}},
    {"DebugAnnotation", {3, 5, 6, 10}},
};

void expect_only(const Node& n, const std::string& message) {
  for (int f : n.order) {
    EXPECT_TRUE(kFields.at(message).count(f)) << message << " has field " << f;
  }
}

// ---- the store, read with SQLite directly ----

struct Db {
  sqlite3* h = nullptr;
  explicit Db(const std::string& path) { sqlite3_open_v2(path.c_str(), &h, SQLITE_OPEN_READONLY, nullptr); }
  ~Db() { sqlite3_close(h); }
  std::vector<std::vector<long long>> ints(const std::string& sql) const {
    std::vector<std::vector<long long>> rows;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sqlite3_errmsg(h) << ": " << sql;
      return rows;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<long long> r;
      for (int c = 0; c < sqlite3_column_count(st); ++c) r.push_back(sqlite3_column_int64(st, c));
      rows.push_back(r);
    }
    sqlite3_finalize(st);
    return rows;
  }
  long long one(const std::string& sql) const {
    auto r = ints(sql);
    return r.empty() ? -1 : r[0][0];
  }
};

class ExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fs::temp_directory_path() / ("stallwatch-export-" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    const std::string cmd = std::string(STALLWATCH_BIN) + " demo incident --fast --db " + db() +
                            " > " + *dir_ + "/demo.out 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(*dir_ + "/demo.out");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string db() { return *dir_ + "/incident.db"; }
  static int run(const std::string& args, std::string* err = nullptr) {
    const std::string cmd = std::string(STALLWATCH_BIN) + " export " + args + " 2> " + *dir_ + "/err";
    const int rc = std::system(cmd.c_str());
    if (err) *err = slurp(*dir_ + "/err");
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static std::string* dir_;
};
std::string* ExportTest::dir_ = nullptr;

TEST_F(ExportTest, PerfettoTraceMatchesTheStore) {
  if (std::system("command -v protoc > /dev/null") != 0) {
    GTEST_FAIL() << "protoc is missing (Debian's protobuf-compiler): run `bash scripts/install-deps.sh`";
  }
  const std::string trace = *dir_ + "/incident.pftrace";
  std::string err;
  ASSERT_EQ(run("--format perfetto --db " + db() + " -o " + trace, &err), 0) << err;
  EXPECT_NE(err.find("1 processes, 10 calls, 1 chains"), std::string::npos) << err;
  const std::string decoded = *dir_ + "/decoded.txt";
  ASSERT_EQ(std::system(("protoc --decode_raw < " + trace + " > " + decoded).c_str()), 0);
  std::ifstream in(decoded);
  const Node root = parse_raw(in);
  for (int f : root.order) EXPECT_EQ(f, 1) << "Trace has only packets (field 1)";

  const Db store(db());
  const long long outliers = store.one("SELECT count(*) FROM outliers");
  ASSERT_EQ(outliers, 10);
  std::map<long long, const Node*> tracks;  // uuid -> descriptor
  std::map<long long, std::vector<std::pair<long long, const Node*>>> events;  // by track
  long long last_ts = -1;
  bool first = true;
  for (const auto& [field, p] : root.messages) {
    expect_only(p, "TracePacket");
    EXPECT_EQ(p.number(10), 1) << "trusted_packet_sequence_id";
    EXPECT_EQ(p.number(13), first ? 1 : 2) << "sequence_flags";
    first = false;
    const long long ts = p.number(8);
    EXPECT_GE(ts, last_ts) << "packets in time order";
    last_ts = ts;
    if (const Node* td = p.message(60)) {
      expect_only(*td, "TrackDescriptor");
      if (const Node* pd = td->message(3)) expect_only(*pd, "ProcessDescriptor");
      if (const Node* thd = td->message(4)) expect_only(*thd, "ThreadDescriptor");
      if (const Node* cd = td->message(8)) expect_only(*cd, "CounterDescriptor");
      tracks[td->number(1)] = td;
    }
    if (const Node* te = p.message(11)) {
      expect_only(*te, "TrackEvent");
      for (auto [it, end] = te->messages.equal_range(4); it != end; ++it) {
        expect_only(it->second, "DebugAnnotation");
      }
      events[te->number(11)].push_back({ts, te});
    }
  }

  // One process track per process, one thread track per CUDA-issuing thread.
  int processes = 0, threads = 0, counters = 0, chain_tracks = 0;
  long long chains_root = -1;
  for (const auto& [uuid, td] : tracks) {
    if (const Node* pd = td->message(3)) {
      ++processes;
      EXPECT_EQ(pd->number(1), store.one("SELECT pid FROM outliers LIMIT 1"));
    }
    if (const Node* thd = td->message(4)) {
      ++threads;
      EXPECT_EQ(thd->number(2), store.one("SELECT tid FROM outliers LIMIT 1"));
    }
    if (td->has(8)) ++counters;
    if (td->scalar(2) == "\"Causal chains\"") chains_root = uuid;
  }
  for (const auto& [uuid, td] : tracks) chain_tracks += td->number(5) == chains_root && !td->has(8);
  EXPECT_EQ(processes, store.one("SELECT count(DISTINCT pid) FROM outliers"));
  EXPECT_EQ(threads, store.one("SELECT count(DISTINCT tid) FROM outliers"));
  EXPECT_EQ(counters, 3) << "off-CPU runnable, off-CPU blocked, p99 cudaStreamSynchronize";
  EXPECT_EQ(chain_tracks, store.one("SELECT count(*) FROM chains"));

  // Slices: a begin and an end per stored outlier, begins at the stored start, properly nested
  // on every track; counters: one sample per stored window row.
  std::multiset<long long> begins, stored_begins;
  for (const auto& r : store.ints("SELECT ts_ns - duration_ns FROM outliers")) stored_begins.insert(r[0]);
  long long counter_samples = 0, chain_slices = 0;
  for (const auto& [track, list] : events) {
    ASSERT_TRUE(tracks.count(track)) << "an event on an undeclared track " << track;
    int depth = 0;
    for (const auto& [ts, te] : list) {
      const long long type = te->number(9);
      if (type == 1) {
        ++depth;
        if (tracks[track]->has(4)) begins.insert(ts);
        if (tracks[track]->number(5) == chains_root) ++chain_slices;
      } else if (type == 2) {
        --depth;
        ASSERT_GE(depth, 0) << "an end without a begin on track " << track;
      } else {
        EXPECT_EQ(type, 4);
        ++counter_samples;
      }
    }
    EXPECT_EQ(depth, 0) << "a slice left open on track " << track;
  }
  EXPECT_EQ(begins, stored_begins);
  EXPECT_EQ(chain_slices, store.one("SELECT count(*) FROM chains"));
  const long long windows = store.one(
      "SELECT count(*) FROM process_windows WHERE runnable_ns + blocked_ns + oncpu_ns > 0");
  const long long syncs = store.one(
      "SELECT count(*) FROM call_windows WHERE call LIKE '%Synchronize%' AND count > 0");
  EXPECT_EQ(counter_samples, 2 * windows + syncs);
}

TEST_F(ExportTest, ChromeJsonMatchesTheStore) {
  std::string err;
  const std::string out = *dir_ + "/incident.json";
  ASSERT_EQ(run("--format chrome-json --db " + db() + " -o " + out, &err), 0) << err;
  const Json doc = Json::parse(slurp(out));
  ASSERT_TRUE(doc["traceEvents"].is_array());
  EXPECT_EQ(doc["displayTimeUnit"], "ns");
  const long long origin = std::stoll(doc["otherData"]["origin_unix_ns"].get<std::string>());
  const Db store(db());
  std::multiset<long long> starts, stored;
  for (const auto& r : store.ints("SELECT ts_ns - duration_ns FROM outliers")) stored.insert(r[0]);
  int complete = 0, async_begin = 0, async_end = 0, names = 0, counters = 0;
  std::vector<std::pair<long long, long long>> spans;  // of the one thread, ns since the origin
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++complete;
      const double ts = e["ts"];
      starts.insert(origin + std::llround(ts * 1000));
      const long long start = std::llround(ts * 1000);
      spans.push_back({start, start + std::llround(e["dur"].get<double>() * 1000)});
      EXPECT_EQ(e["cat"], "cuda");
      EXPECT_TRUE(e["args"].contains("offcpu_runnable_ns"));
    } else if (ph == "b") {
      ++async_begin;
      EXPECT_EQ(e["cat"], "chain");
      EXPECT_EQ(e["args"]["kind"], "cpu_contention");
    } else if (ph == "e") {
      ++async_end;
    } else if (ph == "M") {
      ++names;
    } else if (ph == "C") {
      ++counters;
    }
  }
  EXPECT_EQ(complete, store.one("SELECT count(*) FROM outliers"));
  EXPECT_EQ(starts, stored);
  EXPECT_EQ(async_begin, store.one("SELECT count(*) FROM chains"));
  EXPECT_EQ(async_end, async_begin);
  EXPECT_EQ(names, 2) << "process_name and thread_name";
  EXPECT_GT(counters, 0);
  // Complete events of one thread never overlap partially.
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size(); ++j) {
      const auto& [a0, a1] = spans[i];
      const auto& [b0, b1] = spans[j];
      const bool disjoint = a1 <= b0 || b1 <= a0;
      const bool nested = (a0 <= b0 && b1 <= a1) || (b0 <= a0 && a1 <= b1);
      EXPECT_TRUE(disjoint || nested) << "[" << a0 << "," << a1 << ") and [" << b0 << "," << b1 << ")";
    }
  }
}

// Schema 10: each GPU's SM clock, held share and power per window, under a "GPUs" track in
// Perfetto and a pseudo-process of their own in Chrome JSON, with the stored values; host-wide,
// so a --pid filter keeps them.
TEST_F(ExportTest, GpuCountersMatchTheStore) {
  const std::string gdb = *dir_ + "/gpu.db";
  const std::string cmd = std::string(STALLWATCH_BIN) + " demo gpu-throttle --fast --db " + gdb +
                          " > " + *dir_ + "/gpu-demo.out 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(*dir_ + "/gpu-demo.out");
  const Db store(gdb);
  const long long rows = store.one("SELECT count(*) FROM gpu_windows");
  ASSERT_EQ(rows, 2 * store.one("SELECT count(*) FROM windows")) << "two GPUs, every window";

  std::string err;
  const std::string trace = *dir_ + "/gpu.pftrace";
  ASSERT_EQ(run("--format perfetto --since 1d --db " + gdb + " -o " + trace, &err), 0) << err;
  EXPECT_NE(err.find(std::to_string(3 * rows) + " GPU counter samples"), std::string::npos) << err;
  ASSERT_EQ(std::system(("protoc --decode_raw < " + trace + " > " + trace + ".txt").c_str()), 0);
  std::ifstream in(trace + ".txt");
  const Node root = parse_raw(in);
  long long gpus_root = -1;
  std::map<long long, std::string> gpu_tracks;  // uuid -> name
  std::map<long long, int> samples;             // per track
  for (const auto& [field, p] : root.messages) {
    if (const Node* td = p.message(60)) {
      if (td->scalar(2) == "\"GPUs\"") gpus_root = td->number(1);
      if (gpus_root >= 0 && td->number(5) == gpus_root && td->has(8)) {
        gpu_tracks[td->number(1)] = td->scalar(2);
      }
    }
    if (const Node* te = p.message(11)) {
      if (te->number(9) == 4) ++samples[te->number(11)];
    }
  }
  ASSERT_GE(gpus_root, 0) << "no GPUs track";
  EXPECT_EQ(gpu_tracks.size(), 6u) << "SM clock, clock held and power of GPU 0 and GPU 1";
  for (const auto& [uuid, name] : gpu_tracks) {
    EXPECT_EQ(samples[uuid], rows / 2) << name;
  }

  const std::string out = *dir_ + "/gpu.json";
  ASSERT_EQ(run("--format chrome-json --since 1d --pid 1 --db " + gdb + " -o " + out, &err), 0)
      << err;
  const Json doc = Json::parse(slurp(out));
  std::vector<double> clocks;
  std::string pseudo;
  for (const auto& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"], 4194305) << "only the GPUs' pseudo-process passes --pid 1";
    if (e["ph"] == "M") pseudo = e["args"]["name"];
    if (e["name"] == "GPU 0 NVIDIA H100 80GB HBM3 SM clock (MHz)") {
      clocks.push_back(e["args"]["value"].get<double>());
    }
  }
  EXPECT_EQ(pseudo, "GPUs");
  std::vector<double> stored;
  for (const auto& r : store.ints("SELECT sm_clock_mhz FROM gpu_windows WHERE gpu = 0 ORDER BY ts_ns")) {
    stored.push_back(static_cast<double>(r[0]));
  }
  EXPECT_EQ(clocks, stored);
  EXPECT_NE(std::find(clocks.begin(), clocks.end(), 1200.0), clocks.end()) << "the capped phase";
}

TEST_F(ExportTest, FiltersAndErrors) {
  std::string err;
  const std::string out = *dir_ + "/none.json";
  ASSERT_EQ(run("--format chrome-json --db " + db() + " --pid 1 -o " + out, &err), 0) << err;
  const Json doc = Json::parse(slurp(out));
  EXPECT_TRUE(doc["traceEvents"].empty()) << "no process 1 in the demo";
  ASSERT_EQ(run("--format chrome-json --db " + db() + " --cgroup /nowhere -o " + out, &err), 0);
  EXPECT_TRUE(Json::parse(slurp(out))["traceEvents"].empty());

  EXPECT_EQ(run("--db " + db() + " -o " + out, &err), 2);
  EXPECT_NE(err.find("--format is required"), std::string::npos) << err;
  EXPECT_EQ(run("--format svg --db " + db() + " -o " + out, &err), 2);
  EXPECT_NE(err.find("unknown format 'svg'"), std::string::npos) << err;
  EXPECT_EQ(run("--format perfetto --db " + db(), &err), 2);
  EXPECT_NE(err.find("-o FILE is required"), std::string::npos) << err;
  EXPECT_EQ(run("--format perfetto --pid x --db " + db() + " -o " + out, &err), 2);
  EXPECT_EQ(run("--format perfetto --db " + *dir_ + "/missing.db -o " + out, &err), 1);
  EXPECT_EQ(run("--format perfetto --db " + db() + " -o " + *dir_ + "/no/such/dir/t", &err), 1);
  EXPECT_NE(err.find("cannot write"), std::string::npos) << err;
}

// Issue 35 row 12: a symlink planted at FILE.tmp (or at FILE) pointing at a victim file is never
// written through: the victim keeps its bytes, the link stays as it was (or is replaced by the
// trace), no temporary file is left, and the trace is 0600.
TEST_F(ExportTest, NeverWritesThroughAPlantedSymlink) {
  const std::string out = *dir_ + "/planted.json", victim = *dir_ + "/victim";
  {
    std::ofstream(victim) << "precious\n";
  }
  fs::create_symlink(victim, out + ".tmp");
  std::string err;
  ASSERT_EQ(run("--format chrome-json --db " + db() + " -o " + out, &err), 0) << err;
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_TRUE(fs::is_symlink(out + ".tmp"));
  EXPECT_TRUE(Json::parse(slurp(out)).contains("traceEvents"));
  struct stat st {};
  ASSERT_EQ(::lstat(out.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const auto& e : fs::directory_iterator(*dir_)) {
    EXPECT_EQ(e.path().filename().string().rfind("planted.json.tmp.", 0), std::string::npos)
        << "left behind: " << e.path();
  }

  const std::string linked = *dir_ + "/linked.pftrace";
  fs::create_symlink(victim, linked);
  ASSERT_EQ(run("--format perfetto --db " + db() + " -o " + linked, &err), 0) << err;
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_FALSE(fs::is_symlink(linked)) << "the link itself is replaced, not its target";
}

// Calls of one thread that overlap (clock jitter) are nested: the later one ends with the
// earlier; calls of other threads are left alone.
TEST(ExportNestingTest, OverlapsAreClampedPerThread) {
  store::Timeline t;
  t.from_ns = 1'000'000'000;
  t.to_ns = 2'000'000'000;
  t.processes.push_back({7, "job", "/a"});
  auto call = [](int tid, long long start, long long end) {
    store::TimelineCall c;
    c.pid = 7;
    c.tid = tid;
    c.thread = "t";
    c.call = "cudaMemcpy";
    c.api = "runtime";
    c.start_ns = start;
    c.end_ns = end;
    return c;
  };
  t.calls = {call(7, 1'000'001'000, 1'000'005'000), call(7, 1'000'002'000, 1'000'006'000),
             call(8, 1'000'002'000, 1'000'009'000), call(7, 1'000'007'000, 1'000'008'000)};
  const Json doc = Json::parse(chrome_trace_json(t));
  std::map<int, std::vector<std::pair<double, double>>> spans;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") spans[e["tid"].get<int>()].push_back({e["ts"], e["dur"]});
  }
  ASSERT_EQ(spans[7].size(), 3u);
  EXPECT_EQ(spans[7][0], (std::pair<double, double>{1.0, 4.0}));
  EXPECT_EQ(spans[7][1], (std::pair<double, double>{2.0, 3.0}));  // clamped to end at 5 µs
  EXPECT_EQ(spans[7][2], (std::pair<double, double>{7.0, 1.0}));
  ASSERT_EQ(spans[8].size(), 1u);
  EXPECT_EQ(spans[8][0], (std::pair<double, double>{2.0, 7.0}));
}

}  // namespace
}  // namespace stallwatch::cli
