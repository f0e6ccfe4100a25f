// engine_bench: the user-space side of stallwatch, measured without the kernel. Single-threaded
// on one CPU (pinned to CPU 0 unless --cpu says otherwise; the store's writer thread inherits
// the pin), each measurement repeated --reps times (default 5) and reported as the median:
//  1. ring-buffer records through the engine: trace::OutlierRecord records fed to OutlierSink::add,
//     with a drain + Pipeline::window (diff, Engine::observe, publish; no store) every 100,000
//     records: records/s and ns per record;
//  2. Pipeline::window (Engine::observe) per window for 16 and 256 processes x 8 calls built
//     with demo::SyntheticHost: us per window;
//  3. the store: rows/s written through store::Store from diff_windows of SyntheticHost
//     snapshots (64 processes x 8 calls), and the database size of one hour at a stated load;
//  4. explain over 24 hours: a 24-h database at that load with ~50 chains, then run_explain
//     (default and --per-process, --since 24h) into a null stream.
// Prints a table on stdout, progress on stderr, and writes one JSON object (--out PATH or the
// first positional argument). No root needed. Usage:
//   engine_bench [--out PATH] [--cpu N|-1] [--reps N] [--only ring,observe,store,explain]
//                [--dir DIR (databases, default /tmp)] [--keep-db (leave the 24-h database)]
//                [--short-cgroups (systemd-unit paths instead of kubepods container paths)]
//                [--days N (part 4 over N days of windows instead of one: --since 7d)]
#include <sched.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "bench_util.h"
#include "chains/chain.h"
#include "chains/outliers.h"
#include "app/pipeline.h"
#include "chains/window.h"
#include "cli/explain.h"
#include "trace/snapshot.h"
#include "demo/synthetic.h"
#include "identity/cgroup_identity.h"
#include "metrics/http_server.h"
#include "store/records.h"
#include "store/store.h"
#include "trace/calls.h"

namespace sw = stallwatch;
using SteadyClock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;

namespace {

using stallwatch::bench::arr;
using stallwatch::bench::hex;
using stallwatch::bench::num;
using stallwatch::bench::seconds_since;

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kWindowNs = 5 * kSecond;  // the stated load: 5 s windows
// --short-cgroups: /system.slice/train-N.service (about 30 bytes) instead of a kubepods
// container path (about 190 bytes), which every per-window row of the store repeats.
bool g_short_cgroups = false;


double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::int64_t wall_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             WallClock::now().time_since_epoch())
      .count();
}

WallClock::time_point wall_at(std::int64_t ns) {
  return WallClock::time_point(
      std::chrono::duration_cast<WallClock::duration>(std::chrono::nanoseconds(ns)));
}



// Discards what is written and counts the bytes.
class NullBuf : public std::streambuf {
 public:
  std::uint64_t bytes = 0;

 protected:
  int overflow(int c) override {
    bytes++;
    return c == EOF ? 0 : c;
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += static_cast<std::uint64_t>(n);
    return n;
  }
};

// Removes a database and its -wal / -shm files.
void remove_db(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::error_code ec;
    std::filesystem::remove(path + suffix, ec);
  }
}

struct DbGuard {
  std::string path;
  explicit DbGuard(std::string p) : path(std::move(p)) { remove_db(path); }
  ~DbGuard() {
    if (!path.empty()) remove_db(path);
  }
  DbGuard(const DbGuard&) = delete;
  DbGuard& operator=(const DbGuard&) = delete;
};

// page_count * page_size (and freelist pages) of a closed database.
struct DbSize {
  std::uint64_t bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t wal_bytes = 0;
};
DbSize db_size(const std::string& path) {
  DbSize s;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    auto pragma = [&](const char* sql) -> std::uint64_t {
      sqlite3_stmt* st = nullptr;
      std::uint64_t v = 0;
      if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW) {
        v = static_cast<std::uint64_t>(sqlite3_column_int64(st, 0));
      }
      sqlite3_finalize(st);
      return v;
    };
    const std::uint64_t page = pragma("PRAGMA page_size");
    s.bytes = pragma("PRAGMA page_count") * page;
    s.free_bytes = pragma("PRAGMA freelist_count") * page;
  }
  sqlite3_close_v2(db);
  std::error_code ec;
  s.file_bytes = std::filesystem::file_size(path, ec);
  if (ec) s.file_bytes = 0;
  s.wal_bytes = std::filesystem::file_size(path + "-wal", ec);
  if (ec) s.wal_bytes = 0;
  return s;
}

// ---------------------------------------------------------------------------------------------
// The synthetic load: CUDA processes, one per container cgroup (kubepods, containerd), each
// making 8 kinds of calls per 5 s window, preempted by `preemptors` host tasks. Now and then a
// process is CPU-contended for 10 windows (more runnable time, heavier preemptors), and its
// cudaMalloc spikes once in a while, so the engine's rules have something to find.
class Load {
 public:
  struct Proc {
    int pid = 0;
    std::string cgroup;
    std::string comm;
  };

  Load(int processes, int preemptors, std::uint64_t seed, std::int64_t start_ns)
      : rng_(seed), preemptors_(preemptors) {
    static const char* comms[] = {"python3", "torchrun", "vllm", "tritonserver"};
    for (int i = 0; i < processes; i++) {
      std::string uid = hex(rng_, 8) + "-" + hex(rng_, 4) + "-" + hex(rng_, 4) + "-" +
                        hex(rng_, 4) + "-" + hex(rng_, 12);
      std::string uid_ = uid;
      std::replace(uid_.begin(), uid_.end(), '-', '_');
      Proc p;
      p.pid = 4000 + i * 7;
      p.cgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ +
                 ".slice/cri-containerd-" + hex(rng_, 64) + ".scope";
      if (g_short_cgroups) p.cgroup = "/system.slice/train-" + std::to_string(i) + ".service";
      p.comm = comms[i % 4];
      host_.add_process(p.cgroup, p.pid, p.comm, start_ns - 3600 * kSecond);
      procs_.push_back(std::move(p));
    }
  }

  const std::vector<Proc>& procs() const { return procs_; }
  sw::demo::SyntheticHost& host() { return host_; }

  static bool contended(int w, int i) { return ((w / 40 + i) % 6 == 0) && (w % 40) < 10; }

  // One window's activity of every process.
  void step(int w) {
    static const char* pre_comm[] = {"kworker/u16:2", "node_exporter", "containerd",
                                     "kubelet",       "fluent-bit",    "sshd",
                                     "systemd-journal", "dockerd"};
    static const char* pre_cgroup[] = {"/",
                                       "/system.slice/node-exporter.service",
                                       "/system.slice/containerd.service",
                                       "/system.slice/kubelet.service",
                                       "/system.slice/fluent-bit.service",
                                       "/system.slice/ssh.service",
                                       "/system.slice/systemd-journald.service",
                                       "/system.slice/docker.service"};
    std::uniform_real_distribution<double> jitter(0.9, 1.1);
    for (size_t i = 0; i < procs_.size(); i++) {
      const int pid = procs_[i].pid;
      const bool hot = contended(w, static_cast<int>(i));
      const double rs = hot ? 0.30 : 0.01;
      auto n = [&](double c) { return static_cast<std::uint64_t>(c * jitter(rng_)); };
      const bool spike = (w + 13 * static_cast<int>(i)) % 200 == 0;
      auto& h = host_;
      h.calls(pid, {"cudaLaunchKernel", n(4000), 6000, 60000, 0.01, rs * 0.2, 0.001});
      h.calls(pid, {"cudaMemcpyAsync", n(400), 15000, 0, 0, rs * 0.2, 0.001});
      h.calls(pid, {"cudaStreamSynchronize", n(200), 2500000, 30000000, 0.02, rs, 0.05});
      h.calls(pid, {"cudaMemcpy", n(40), 300000, 4000000, 0.05, rs, 0.02});
      h.calls(pid, {"cudaMalloc", n(4), 150000, spike ? 20000000u : 0u, spike ? 0.25 : 0.0, rs,
                    0.1});
      h.calls(pid, {"cudaFree", n(4), 60000, 0, 0, rs, 0.05});
      h.calls(pid, {"cudaEventSynchronize", n(60), 700000, 2000000, 0.1, rs, 0.05});
      h.calls(pid, {"cudaGraphLaunch", n(100), 20000, 0, 0, rs * 0.2, 0.001});
      h.offcpu(pid, hot ? n(400e6) : n(15e6), n(60e6), n(3.5e9), hot ? n(3000) : n(150));
      for (int k = 0; k < preemptors_; k++) {
        const double share = 1.0 / (k + 1);
        h.preempted_by(pid, 900 + k, pre_comm[k % 8], pre_cgroup[k % 8],
                       static_cast<std::uint64_t>((hot ? 80e6 : 3e6) * share * jitter(rng_)),
                       n((hot ? 900 : 40) * share) + 1);
      }
    }
  }

  // Steps the load and returns the snapshot of the window ending at end_ns.
  std::shared_ptr<sw::Snapshot> window(int w, std::int64_t end_ns) {
    step(w);
    return host_.snapshot(wall_at(end_ns), std::chrono::nanoseconds(kWindowNs));
  }

 private:
  std::mt19937_64 rng_;
  int preemptors_;
  sw::demo::SyntheticHost host_;
  std::vector<Proc> procs_;
};

sw::store::HostContext host_context(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  sw::store::HostContext h;
  h.cpu_busy = 0.3 + 0.3 * u(rng);
  h.mem_used = 0.55 + 0.1 * u(rng);
  h.load1 = 2 + 4 * u(rng);
  h.cpus = 64;
  h.swap_used_bytes = 0;
  return h;
}

// A store batch as the run loop builds it (pipeline.cpp), with `outliers` stored outliers whose
// timestamps lie inside the window.
sw::store::WindowBatch make_batch(const sw::Snapshot* previous, const sw::Snapshot& snap,
                                  const sw::chains::OutlierWindow& outliers, size_t keep,
                                  std::mt19937_64& rng) {
  sw::chains::WindowView view = sw::chains::diff_windows(previous, snap);
  sw::store::WindowBatch b;
  b.end_ns = view.end_ns;
  b.window_ns = view.window_ns;
  b.host = host_context(rng);
  for (const auto& [label, s] : snap.series) b.cgroups.push_back(s.identity);
  b.outliers = sw::app::resolve_outliers(snap, outliers, keep);
  for (auto& o : b.outliers) {
    o.ts_ns = b.end_ns - static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(kWindowNs));
  }
  b.processes = std::move(view.processes);
  return b;
}

// ---------------------------------------------------------------------------------------------
// 1. Ring-buffer records through the engine.
struct RingResult {
  std::vector<double> records_per_s, add_ns, drain_us, window_us;
  size_t records = 0, per_window = 0, pids = 0, calls = 0;
};

RingResult bench_ring(int reps) {
  constexpr size_t kPerWindow = 100000;
  constexpr size_t kWindows = 10;
  constexpr int kPids = 64;
  RingResult r;
  r.per_window = kPerWindow;
  r.records = kPerWindow * kWindows;
  r.pids = kPids;
  r.calls = sw::trace::all_calls().size();

  // The snapshots the window loop would see (built once, not timed: the collector's work).
  const std::int64_t t0 = wall_now_ns() - static_cast<std::int64_t>(kWindows) * kWindowNs;
  Load load(kPids, 5, 1, t0);
  std::vector<std::shared_ptr<sw::Snapshot>> snaps;
  for (size_t w = 0; w < kWindows; w++) {
    snaps.push_back(load.window(static_cast<int>(w), t0 + static_cast<std::int64_t>(w + 1) * kWindowNs));
    (void)load.host().drain_outliers();
  }
  // The records, generated once: 64 pids, every call id, durations above 1 ms.
  std::mt19937_64 rng(2);
  std::exponential_distribution<double> extra(1.0 / 4e6);  // mean 4 ms above the 1 ms floor
  std::uniform_real_distribution<double> share(0, 0.3);
  std::vector<sw::trace::OutlierRecord> recs(r.records);
  std::uint64_t ts = static_cast<std::uint64_t>(SteadyClock::now().time_since_epoch().count());
  for (auto& e : recs) {
    const auto& p = load.procs()[rng() % kPids];
    e = sw::trace::OutlierRecord{};
    ts += 1000 + rng() % 1000;
    e.ts_ns = ts;
    e.cgroup_id = 10000 + static_cast<std::uint64_t>(p.pid);
    e.duration_ns = 1000000 + static_cast<std::uint64_t>(extra(rng));
    e.runnable_ns = static_cast<std::uint64_t>(static_cast<double>(e.duration_ns) * share(rng));
    e.blocked_ns = static_cast<std::uint64_t>(static_cast<double>(e.duration_ns) * share(rng));
    e.tgid = static_cast<std::uint32_t>(p.pid);
    e.tid = static_cast<std::uint32_t>(p.pid + static_cast<int>(rng() % 8));
    e.call_id = static_cast<std::uint32_t>(rng() % r.calls);
    e.preemptions = static_cast<std::uint32_t>(rng() % 8);
    std::strncpy(e.comm, p.comm.c_str(), sizeof(e.comm) - 1);
  }

  sw::store::HostContext ctx;
  for (int rep = 0; rep < reps; rep++) {
    sw::metrics::SnapshotBoard board;
    sw::app::Pipeline pipeline(sw::app::PipelineOptions{}, board, nullptr);
    sw::chains::OutlierSink sink;  // as `run` makes it (keep 256)
    double add_s = 0, drain_s = 0, window_s = 0;
    const auto start = SteadyClock::now();
    for (size_t w = 0; w < kWindows; w++) {
      const auto a = SteadyClock::now();
      const sw::trace::OutlierRecord* e = recs.data() + w * kPerWindow;
      for (size_t i = 0; i < kPerWindow; i++) sink.add(e[i]);
      const auto b = SteadyClock::now();
      sw::chains::OutlierWindow ow = sink.drain();
      const auto c = SteadyClock::now();
      auto changed = pipeline.window(snaps[w], ow, ctx);
      const auto d = SteadyClock::now();
      add_s += std::chrono::duration<double>(b - a).count();
      drain_s += std::chrono::duration<double>(c - b).count();
      window_s += std::chrono::duration<double>(d - c).count();
    }
    const double total = seconds_since(start);
    r.records_per_s.push_back(static_cast<double>(r.records) / total);
    r.add_ns.push_back(add_s * 1e9 / static_cast<double>(r.records));
    r.drain_us.push_back(drain_s * 1e6 / kWindows);
    r.window_us.push_back(window_s * 1e6 / kWindows);
    std::cerr << "[engine_bench] ring rep " << rep + 1 << "/" << reps << ": "
              << std::lround(r.records_per_s.back()) << " records/s\n";
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// 2. Pipeline::window (Engine::observe) per window.
struct ObserveResult {
  int processes = 0;
  int windows = 0;
  std::vector<double> window_us, diff_us, max_us;
  std::uint64_t chains_changed = 0;  // over the last repetition
};

ObserveResult bench_observe(int processes, int reps) {
  constexpr int kWindows = 60;  // 5 minutes of 5 s windows; the first is not counted
  ObserveResult r;
  r.processes = processes;
  r.windows = kWindows - 1;
  sw::store::HostContext ctx;
  std::mt19937_64 rng(3);
  for (int rep = 0; rep < reps; rep++) {
    const std::int64_t t0 = wall_now_ns() - kWindows * kWindowNs;
    Load load(processes, 5, 10 + static_cast<std::uint64_t>(processes), t0);
    sw::metrics::SnapshotBoard board;
    sw::app::Pipeline pipeline(sw::app::PipelineOptions{}, board, nullptr);
    std::shared_ptr<sw::Snapshot> prev;
    double window_s = 0, diff_s = 0, worst = 0;
    std::uint64_t changed = 0;
    for (int w = 0; w < kWindows; w++) {
      auto snap = load.window(w, t0 + (w + 1) * kWindowNs);
      auto outliers = load.host().drain_outliers();
      ctx = host_context(rng);
      // diff_windows alone (Pipeline::window does it again inside).
      const auto a = SteadyClock::now();
      auto view = sw::chains::diff_windows(prev.get(), *snap);
      const auto b = SteadyClock::now();
      auto ch = pipeline.window(snap, outliers, ctx);
      const auto c = SteadyClock::now();
      prev = snap;
      if (w == 0) continue;  // first window: everything cumulative is new
      const double ws = std::chrono::duration<double>(c - b).count();
      window_s += ws;
      worst = std::max(worst, ws);
      diff_s += std::chrono::duration<double>(b - a).count();
      changed += ch.size();
      (void)view;
    }
    r.window_us.push_back(window_s * 1e6 / r.windows);
    r.diff_us.push_back(diff_s * 1e6 / r.windows);
    r.max_us.push_back(worst * 1e6);
    r.chains_changed = changed;
    std::cerr << "[engine_bench] observe " << processes << " processes rep " << rep + 1 << "/"
              << reps << ": " << std::fixed << std::setprecision(1) << r.window_us.back()
              << " us/window\n"
              << std::defaultfloat;
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// 3. The store.
std::unique_ptr<sw::store::Store> open_store(const std::string& path, size_t queue, int days = 1) {
  sw::store::StoreOptions o;
  o.path = path;
  o.queue_batches = queue;
  // A --days database is kept whole: neither the 2 GiB default nor 7 days of retention prune it.
  o.max_bytes = std::max<std::uint64_t>(o.max_bytes, static_cast<std::uint64_t>(days) << 30);
  o.retention = std::chrono::hours(24 * (days + 1));
  auto s = sw::store::Store::open(o);
  if (!s) {
    std::cerr << "engine_bench: " << s.error().message << "\n";
    std::exit(1);
  }
  return std::move(*s);
}

struct StoreResult {
  int processes = 0;
  size_t batches = 0;
  std::uint64_t rows = 0;
  std::vector<double> rows_per_s_window;  // enqueue + flush per batch: one commit per window
  std::vector<double> rows_per_s_bulk;    // all queued, then one flush
  std::vector<double> ms_per_window;
  // One hour at the stated load.
  int hour_processes = 8, hour_calls = 8, hour_preemptors = 5, hour_outliers = 16;
  int hour_windows = 720;
  std::uint64_t hour_rows = 0;
  DbSize hour_size;
  double hour_write_s = 0;
};

// Batches of `windows` consecutive windows of `processes` processes, ending at `end_ns`.
std::vector<sw::store::WindowBatch> make_batches(int processes, int windows, std::int64_t end_ns,
                                                 size_t keep_outliers, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t t0 = end_ns - static_cast<std::int64_t>(windows) * kWindowNs;
  Load load(processes, 5, seed, t0);
  std::vector<sw::store::WindowBatch> out;
  std::shared_ptr<sw::Snapshot> prev;
  for (int w = 0; w < windows; w++) {
    auto snap = load.window(w, t0 + (w + 1) * kWindowNs);
    auto outliers = load.host().drain_outliers();
    out.push_back(make_batch(prev.get(), *snap, outliers, keep_outliers, rng));
    prev = snap;
  }
  return out;
}

StoreResult bench_store(int reps, const std::string& dir) {
  StoreResult r;
  r.processes = 64;
  // Window 0 diffs against nothing (cumulative = window); skip it, keep the steady ones.
  auto all = make_batches(r.processes, 101, wall_now_ns(), 16, 4);
  std::vector<sw::store::WindowBatch> batches(all.begin() + 1, all.end());
  r.batches = batches.size();
  for (const auto& b : batches) r.rows += b.rows();
  const std::string path = dir + "/stallwatch-engine-bench-" + std::to_string(getpid()) + "-rows.db";
  for (int bulk = 0; bulk < 2; bulk++) {
    for (int rep = 0; rep < reps; rep++) {
      DbGuard guard(path);
      auto store = open_store(path, batches.size() + 1);
      std::vector<sw::store::WindowBatch> copy = batches;
      const auto start = SteadyClock::now();
      for (auto& b : copy) {
        store->enqueue(std::move(b));
        if (!bulk) store->flush();
      }
      store->flush();
      const double s = seconds_since(start);
      const auto st = store->stats();
      if (st.rows_written != r.rows || st.batches_dropped || st.write_errors) {
        std::cerr << "engine_bench: store wrote " << st.rows_written << " of " << r.rows
                  << " rows (" << st.batches_dropped << " batches dropped, " << st.write_errors
                  << " errors)\n";
      }
      const double rps = static_cast<double>(st.rows_written) / s;
      (bulk ? r.rows_per_s_bulk : r.rows_per_s_window).push_back(rps);
      if (!bulk) r.ms_per_window.push_back(s * 1e3 / static_cast<double>(batches.size()));
      std::cerr << "[engine_bench] store " << (bulk ? "bulk" : "per-window") << " rep " << rep + 1
                << "/" << reps << ": " << std::lround(rps) << " rows/s\n";
    }
  }

  // One hour: 720 windows of 5 s, 8 processes x 8 calls, 5 preemptors each, 16 outliers.
  const std::string hpath = dir + "/stallwatch-engine-bench-" + std::to_string(getpid()) + "-hour.db";
  DbGuard guard(hpath);
  auto hour = make_batches(r.hour_processes, r.hour_windows + 1, wall_now_ns(),
                           static_cast<size_t>(r.hour_outliers), 5);
  hour.erase(hour.begin());
  for (const auto& b : hour) r.hour_rows += b.rows();
  {
    auto store = open_store(hpath, 1024);
    const auto start = SteadyClock::now();
    for (auto& b : hour) store->enqueue(std::move(b));
    store->flush();
    r.hour_write_s = seconds_since(start);
  }  // the destructor checkpoints (TRUNCATE)
  r.hour_size = db_size(hpath);
  std::cerr << "[engine_bench] store hour: " << r.hour_size.bytes << " bytes\n";
  return r;
}

// ---------------------------------------------------------------------------------------------
// 4. explain over 24 hours.
struct ExplainResult {
  int windows = 17280;
  int chains = 0;
  std::uint64_t rows = 0;
  double generate_s = 0;
  double build_s = 0;  // building the batches (synthetic host, diff), inside generate_s
  DbSize size;
  std::vector<double> default_ms, per_process_ms;
  std::uint64_t default_bytes = 0, per_process_bytes = 0;
};

// ~50 chains over the day: one every 30 minutes lasting 30 s to 2.5 min, kinds rotating, the
// last two still open at the end.
struct ChainPlan {
  int start = 0;
  int length = 0;
  sw::chains::Chain chain;
};

std::vector<ChainPlan> plan_chains(const std::vector<Load::Proc>& procs, int windows,
                                   std::mt19937_64& rng) {
  using sw::chains::Kind;
  using sw::chains::Severity;
  static const Kind kinds[] = {Kind::kCpuContention, Kind::kAllocSpike, Kind::kGpuContention,
                               Kind::kCpuContention, Kind::kMemcpyBound, Kind::kColdStart};
  static const char* calls[] = {"cudaStreamSynchronize", "cudaMalloc", "cudaStreamSynchronize",
                                "cudaEventSynchronize",  "cudaMemcpy", "cudaLaunchKernel"};
  std::vector<ChainPlan> out;
  const int every = 360;  // 30 min
  for (int k = 0; windows - (k * every + 100) > 0; k++) {
    ChainPlan p;
    p.start = k * every + 100;
    p.length = 6 + (k % 5) * 6;
    out.push_back(std::move(p));
  }
  // Two still open at the end of the day.
  for (int k = 0; k < 2; k++) {
    ChainPlan p;
    p.start = windows - 30 - k * 12;
    p.length = 1 << 30;
    out.push_back(std::move(p));
  }
  for (size_t k = 0; k < out.size(); k++) {
    const auto& proc = procs[k % procs.size()];
    sw::chains::Chain& c = out[k].chain;
    c.id = hex(rng, 16);
    c.kind = kinds[k % 6];
    c.severity = static_cast<Severity>(k % 4);
    c.peak = std::max(c.severity, static_cast<Severity>((k + 1) % 4));
    c.identity = sw::identity::parse_cgroup_path(proc.cgroup);
    c.identity.cgroup = proc.cgroup;
    c.pid = proc.pid;
    c.comm = proc.comm;
    c.call = calls[k % 6];
    c.api = "runtime";
    c.p50_s = 0.0031;
    c.p99_s = 0.041;
    c.baseline_p50_s = 0.0025;
    c.baseline_p99_s = 0.0041;
    c.ratio = c.p99_s / c.baseline_p99_s;
    const std::string name(sw::chains::kind_name(c.kind));
    c.summary = "[" + std::string(sw::chains::severity_name(c.severity)) + "] " + name + ": " +
                c.call + " in " + c.comm + " (PID " + std::to_string(c.pid) +
                ") p99 41ms vs baseline 4.1ms (10x)";
    c.root_cause = c.comm + " (PID " + std::to_string(c.pid) +
                   ") waited for a CPU 31% of its CUDA call time: kworker/u16:2 (PID 900) and "
                   "node_exporter (PID 901) held its CPUs";
    c.effect = "cudaStreamSynchronize p99 41ms against a baseline of 4.1ms (10x); p50 3.1ms";
    c.recommendation =
        "taskset -cp 0-15 " + std::to_string(c.pid) +
        "\nsystemctl set-property node-exporter.service AllowedCPUs=16-63";
    for (int j = 0; j < 5; j++) {
      c.contributors.push_back(sw::chains::Contributor{
          j ? "node_exporter" : "kworker/u16:2", 900 + j, j ? "/system.slice/node-exporter.service" : "/",
          "preemptor", static_cast<std::uint64_t>(80e6 / (j + 1)), static_cast<std::uint64_t>(900 / (j + 1)), ""});
    }
    c.evidence = {{"runnable_share", 0.31}, {"thread_runnable_share", 0.27},
                  {"window_runnable_s", 1.55}, {"preemptions", 3000}};
  }
  return out;
}

ExplainResult bench_explain(int reps, const std::string& dir, bool keep, int days) {
  ExplainResult r;
  r.windows *= days;
  const std::string path = dir + "/stallwatch-engine-bench-" + std::to_string(getpid()) + "-" +
                           std::to_string(24 * days) + "h.db";
  DbGuard guard(path);
  if (keep) guard.path.clear();  // --keep-db: left for a look with `stallwatch explain --db`
  const std::int64_t now_ns = wall_now_ns();
  const std::int64_t t0 = now_ns - static_cast<std::int64_t>(r.windows) * kWindowNs;
  std::mt19937_64 rng(6);
  Load load(8, 5, 6, t0);
  auto plans = plan_chains(load.procs(), r.windows, rng);
  r.chains = static_cast<int>(plans.size());

  std::cerr << "[engine_bench] explain: writing " << r.windows << " windows (" << 24 * days
            << " h) to " << path << "\n";
  const auto start = SteadyClock::now();
  double build_s = 0;
  {
    auto store = open_store(path, 4096, days);
    // Window -1 primes the cumulative snapshot so that window 0 holds one window's deltas.
    std::shared_ptr<sw::Snapshot> prev = load.window(-1, t0);
    (void)load.host().drain_outliers();
    int next_pct = 10;
    for (int w = 0; w < r.windows; w++) {
      const auto b0 = SteadyClock::now();
      const std::int64_t end = t0 + static_cast<std::int64_t>(w + 1) * kWindowNs;
      auto snap = load.window(w, end);
      auto outliers = load.host().drain_outliers();
      auto batch = make_batch(prev.get(), *snap, outliers, 16, rng);
      prev = snap;
      for (auto& p : plans) {
        if (w < p.start) continue;
        const int i = w - p.start;
        const bool last = i == p.length - 1;
        if (i >= p.length) continue;
        sw::chains::Chain& c = p.chain;
        if (i == 0) c.opened_ns = end - 2 * kWindowNs;  // open_after = 2
        c.updated_ns = end;
        c.windows = static_cast<std::uint64_t>(i + 2);
        if (last) {
          c.open = false;
          c.closed_ns = end;
        }
        batch.chains.push_back(c);
      }
      r.rows += batch.rows();
      build_s += seconds_since(b0);
      store->enqueue(std::move(batch));
      if (w % 240 == 239) store->flush();  // keep the queue short (20 minutes of windows)
      if ((w + 1) * 100 >= next_pct * r.windows) {
        std::cerr << "[engine_bench] explain: generated " << next_pct << "% (" << w + 1
                  << " windows, " << std::fixed << std::setprecision(1) << seconds_since(start)
                  << " s)\n"
                  << std::defaultfloat;
        next_pct += 10;
      }
    }
    store->flush();
    const auto st = store->stats();
    if (st.batches_dropped || st.write_errors) {
      std::cerr << "engine_bench: 24-h database: " << st.batches_dropped << " batches dropped, "
                << st.write_errors << " write errors\n";
    }
  }  // checkpoint
  r.generate_s = seconds_since(start);
  r.build_s = build_s;
  r.size = db_size(path);

  for (int per_process = 0; per_process < 2; per_process++) {
    for (int rep = 0; rep < reps; rep++) {
      sw::cli::ExplainOptions o;
      o.db = path;
      o.since = std::chrono::hours(24 * days);
      o.per_process = per_process != 0;
      NullBuf nb;
      std::ostream out(&nb);
      std::ostringstream err;
      const auto a = SteadyClock::now();
      const int rc = sw::cli::run_explain(o, now_ns, "bench-host", out, err);
      const double ms = seconds_since(a) * 1e3;
      if (rc != 0) std::cerr << "engine_bench: explain returned " << rc << ": " << err.str();
      (per_process ? r.per_process_ms : r.default_ms).push_back(ms);
      (per_process ? r.per_process_bytes : r.default_bytes) = nb.bytes;
      std::cerr << "[engine_bench] explain" << (per_process ? " --per-process" : "") << " rep "
                << rep + 1 << "/" << reps << ": " << std::fixed << std::setprecision(1) << ms
                << " ms\n"
                << std::defaultfloat;
    }
  }
  return r;
}

void usage() {
  std::cerr << "usage: engine_bench [--out PATH | PATH] [--cpu N|-1] [--reps N] "
               "[--only ring,observe,store,explain] [--dir DIR] [--keep-db] [--short-cgroups] "
               "[--days N (explain over N days, default 1)]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int cpu = 0;
  int reps = 5;
  std::string only = "ring,observe,store,explain";
  std::string dir = "/tmp";
  bool keep_db = false;
  int days = 1;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--out") {
      out_path = value();
    } else if (a == "--cpu") {
      cpu = std::stoi(value());
    } else if (a == "--reps") {
      reps = std::max(1, std::stoi(value()));
    } else if (a == "--only") {
      only = value();
    } else if (a == "--dir") {
      dir = value();
    } else if (a == "--short-cgroups") {
      g_short_cgroups = true;
    } else if (a == "--keep-db") {
      keep_db = true;
    } else if (a == "--days") {
      days = std::clamp(std::stoi(value()), 1, 30);
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] != '-' && out_path.empty()) {
      out_path = a;
    } else {
      usage();
      return 2;
    }
  }
  auto wanted = [&](const char* part) {
    return ("," + only + ",").find(std::string(",") + part + ",") != std::string::npos;
  };

  if (!stallwatch::bench::pin_to_cpu(cpu, "engine_bench")) return 1;
  const auto start = SteadyClock::now();
  std::ostringstream json;
  json << "{\"cpu\":" << cpu << ",\"reps\":" << reps << ",\"window_s\":" << kWindowNs / kSecond
       << ",\"cgroups\":\"" << (g_short_cgroups ? "short" : "kubepods") << "\"";

  std::ostringstream table;
  table << "engine and store (user space only, 1 thread pinned to CPU " << cpu << ", median of "
        << reps << ", " << (g_short_cgroups ? "short" : "kubepods") << " cgroup paths)\n";
  char line[256];

  if (wanted("ring")) {
    auto r = bench_ring(reps);
    const double rps = median(r.records_per_s);
    json << ",\"ring\":{\"records\":" << r.records << ",\"records_per_window\":" << r.per_window
         << ",\"pids\":" << r.pids << ",\"call_ids\":" << r.calls
         << ",\"records_per_s\":" << num(rps) << ",\"ns_per_record\":" << num(1e9 / rps)
         << ",\"add_ns_per_record\":" << num(median(r.add_ns))
         << ",\"drain_us_per_window\":" << num(median(r.drain_us))
         << ",\"pipeline_us_per_window\":" << num(median(r.window_us))
         << ",\"target_records_per_s\":1000000,\"pass\":" << (rps >= 1e6 ? "true" : "false")
         << ",\"samples_records_per_s\":" << arr(r.records_per_s) << "}";
    std::snprintf(line, sizeof line,
                  "ring records -> OutlierSink + window/100k: %.2f M records/s, %.1f ns/record "
                  "(add %.1f ns; drain %.0f us, window %.0f us per 100k)  target >= 1 M/s\n",
                  rps / 1e6, 1e9 / rps, median(r.add_ns), median(r.drain_us),
                  median(r.window_us));
    table << line;
  }
  if (wanted("observe")) {
    json << ",\"observe\":[";
    for (int n : {16, 256}) {
      auto r = bench_observe(n, reps);
      json << (n == 16 ? "" : ",") << "{\"processes\":" << n << ",\"calls\":8,\"windows\":"
           << r.windows << ",\"us_per_window\":" << num(median(r.window_us))
           << ",\"diff_us_per_window\":" << num(median(r.diff_us))
           << ",\"max_us\":" << num(median(r.max_us))
           << ",\"chains_changed\":" << r.chains_changed
           << ",\"samples_us_per_window\":" << arr(r.window_us) << "}";
      std::snprintf(line, sizeof line,
                    "Pipeline::window (Engine::observe), %3d processes x 8 calls: %.1f us/window "
                    "(diff_windows %.1f us, worst %.0f us)\n",
                    n, median(r.window_us), median(r.diff_us), median(r.max_us));
      table << line;
    }
    json << "]";
  }
  if (wanted("store")) {
    auto r = bench_store(reps, dir);
    const double mib = static_cast<double>(r.hour_size.bytes) / (1 << 20);
    json << ",\"store\":{\"processes\":" << r.processes << ",\"calls\":8,\"batches\":" << r.batches
         << ",\"rows\":" << r.rows << ",\"rows_per_batch\":"
         << num(static_cast<double>(r.rows) / static_cast<double>(r.batches))
         << ",\"rows_per_s\":" << num(median(r.rows_per_s_window))
         << ",\"ms_per_window\":" << num(median(r.ms_per_window))
         << ",\"rows_per_s_bulk\":" << num(median(r.rows_per_s_bulk))
         << ",\"samples_rows_per_s\":" << arr(r.rows_per_s_window)
         << ",\"samples_rows_per_s_bulk\":" << arr(r.rows_per_s_bulk) << ",\"hour\":{\"windows\":"
         << r.hour_windows << ",\"window_s\":5,\"processes\":" << r.hour_processes
         << ",\"calls_per_process\":" << r.hour_calls << ",\"preemptors_per_process\":"
         << r.hour_preemptors << ",\"outliers_per_window\":" << r.hour_outliers
         << ",\"rows\":" << r.hour_rows << ",\"bytes\":" << r.hour_size.bytes
         << ",\"free_bytes\":" << r.hour_size.free_bytes << ",\"file_bytes\":"
         << r.hour_size.file_bytes << ",\"mib_per_hour\":" << num(mib)
         << ",\"bytes_per_row\":"
         << num(static_cast<double>(r.hour_size.bytes) / static_cast<double>(r.hour_rows))
         << ",\"write_s\":" << num(r.hour_write_s) << "}}";
    std::snprintf(line, sizeof line,
                  "store, 64 processes x 8 calls (%.0f rows/window): %.0f rows/s one commit per "
                  "window (%.1f ms/window), %.0f rows/s all queued\n",
                  static_cast<double>(r.rows) / static_cast<double>(r.batches),
                  median(r.rows_per_s_window), median(r.ms_per_window),
                  median(r.rows_per_s_bulk));
    table << line;
    std::snprintf(line, sizeof line,
                  "store size, 1 h of 5 s windows, 8 processes x 8 calls, 5 preemptors, 16 "
                  "outliers: %.2f MiB/hour (%llu rows, %.0f B/row; %.1f GiB/7 days)\n",
                  mib, static_cast<unsigned long long>(r.hour_rows),
                  static_cast<double>(r.hour_size.bytes) / static_cast<double>(r.hour_rows),
                  mib * 24 * 7 / 1024);
    table << line;
  }
  if (wanted("explain")) {
    auto r = bench_explain(reps, dir, keep_db, days);
    const double d = median(r.default_ms), p = median(r.per_process_ms);
    json << ",\"explain\":{\"days\":" << days << ",\"windows\":" << r.windows
         << ",\"window_s\":5,\"processes\":8"
         << ",\"calls_per_process\":8,\"chains\":" << r.chains << ",\"rows\":" << r.rows
         << ",\"db_bytes\":" << r.size.bytes << ",\"generate_s\":" << num(r.generate_s)
         << ",\"build_batches_s\":" << num(r.build_s) << ",\"default_ms\":" << num(d)
         << ",\"per_process_ms\":" << num(p) << ",\"samples_default_ms\":" << arr(r.default_ms)
         << ",\"samples_per_process_ms\":" << arr(r.per_process_ms)
         << ",\"output_bytes\":{\"default\":" << r.default_bytes
         << ",\"per_process\":" << r.per_process_bytes << "},\"target_ms\":" << (days == 1 ? 1000 : 3000)
         << ",\"pass\":"
         << (std::max(d, p) < 1000.0 * (days == 1 ? 1 : 3) ? "true" : "false") << "}";
    std::snprintf(line, sizeof line,
                  "explain --since %dh (%d windows, %d chains, %.0f MiB): default %.0f ms, "
                  "--per-process %.0f ms  target < %d ms\n",
                  24 * days, r.windows, r.chains, static_cast<double>(r.size.bytes) / (1 << 20), d,
                  p, days == 1 ? 1000 : 3000);
    table << line;
    std::snprintf(line, sizeof line,
                  "  %d-h database generation: %.1f s (%llu rows; %.1f s building batches)\n",
                  24 * days, r.generate_s, static_cast<unsigned long long>(r.rows), r.build_s);
    table << line;
  }
  const double total = seconds_since(start);
  json << ",\"runtime_s\":" << num(total) << "}";
  std::snprintf(line, sizeof line, "engine_bench runtime %.0f s\n", total);
  table << line;
  std::cout << table.str();
  return stallwatch::bench::write_json(out_path, json.str(), "engine_bench") ? 0 : 1;
}
