// exposition_bench: what it costs to export one snapshot, measured without the kernel. For
// snapshots of 16 / 64 / 256 / 1024 cgroup series (kubepods container cgroups with container_id,
// pod, namespace and container filled), each with every metric family the exposition can emit
// (every CUDA runtime and driver call of trace/calls.h, four NCCL ops with rank and world_size,
// off-CPU, preemptors, block I/O on 2 devices x read/write, reclaim, PSI, TCP retransmits, OOM
// kills, chains, store, OTLP and Kubernetes self-metrics), it measures:
//  1. render: metrics::to_families + metrics::render_text (what one /metrics scrape computes)
//     and the size of that text gzip'd once (what Content-Encoding: gzip would send),
//     without HTTP; also the peak RSS of the process during one render (VmHWM after resetting
//     it through /proc/self/clear_refs);
//  2. /metrics over real HTTP on 127.0.0.1: the real metrics::HttpServer (libmicrohttpd) serving a
//     SnapshotBoard as `stallwatch run` does, fetched with one libcurl easy handle (as a scraper
//     keeps one), each request timed end to end; body bytes and sample lines;
//  3. OTLP: otlp::MetricsEncoder::encode (cumulative; explicit and exponential histograms, as
//     the pusher encodes) in steady state, the payload bytes, the number of requests (500 KB
//     cap) and their gzip'd size (otlp::gzip_compress, as delivery sends them) and gzip time;
//  4. the snapshot's memory: RSS before / after building each snapshot (/proc/self/statm, after
//     malloc_trim), as an indication.
// Each measurement runs --reps times (default 100) but stops early after --max-seconds (default
// 10) once 5 repetitions are done; median, p99 (nearest rank: the max below 100 repetitions) and
// max are reported. Everything, HTTP server threads included, runs pinned to one CPU (--cpu,
// default 0; -1: no pinning). Prints a table on stdout, progress on stderr, and writes one JSON
// object (--out PATH or the first positional argument). No root needed. Usage:
//   exposition_bench [--out PATH] [--cpu N|-1] [--reps N] [--max-seconds S]
//                    [--cgroups 16,64,256,1024] [--mix full|typical|original] [--port N] [--dump DIR]
// --dump DIR: also writes the bodies it measures (text-N.txt, protobuf-N.bin: native and
// classic) to DIR, to look at or to try other compressors on.
// --mix typical: the 8 runtime calls engine_bench uses and one NCCL op per series instead of
// every runtime and driver call of the table (25 until issue #20, 50 since: memory and graph
// calls) and 4 NCCL ops (the host families stay). --mix original: the full mix as it was when
// issue #18 set its targets, the first 25 runtime and driver calls of the table (the ones
// before issue #20) and 4 NCCL ops.
#include <curl/curl.h>
#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "chains/chain.h"
#include "trace/snapshot.h"
#include "demo/synthetic.h"
#include "metrics/exposition.h"
#include "metrics/proto_format.h"
#include "oracle/prometheus_oracle.h"
#include "metrics/http_server.h"
#include "metrics/model.h"
#include "metrics/otlp/encoding.h"
#include "metrics/otlp/metrics_encoder.h"
#include "metrics/otlp/wire.h"
#include "trace/calls.h"
#include "stallwatch_version.h"  // generated (cmake/GitVersion.cmake)

namespace sw = stallwatch;
using SteadyClock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;

namespace {

using stallwatch::bench::arr;
using stallwatch::bench::hex;
using stallwatch::bench::num;
using stallwatch::bench::seconds_since;

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kWindowNs = 5 * kSecond;
constexpr int kMinReps = 5;
constexpr double kTargetP99Ms = 50;  // DESIGN.md: /metrics p99 <= 50 ms with 256 cgroups
constexpr int kTargetCgroups = 256;

bool g_typical = false;
// The full mix without the calls issue #20 added: the first 25 runtime and driver calls.
bool g_original = false;
constexpr size_t kOriginalCalls = 25;
const char* mix_name() { return g_typical ? "typical" : g_original ? "original" : "full"; }


struct Stats {
  size_t n = 0;
  double median = 0, p99 = 0, max = 0, min = 0;
};

// Median, p99 (nearest rank) and max of samples.
Stats stats(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  s.p99 = v[std::max<size_t>(rank, 1) - 1];
  s.max = v.back();
  s.min = v.front();
  return s;
}

std::string stats_json(const Stats& s, const char* unit) {
  return std::string("{\"reps\":") + std::to_string(s.n) + ",\"median_" + unit + "\":" +
         num(s.median) + ",\"p99_" + unit + "\":" + num(s.p99) + ",\"max_" + unit +
         "\":" + num(s.max) + ",\"min_" + unit + "\":" + num(s.min) + "}";
}


// Resident set size from /proc/self/statm, in KiB.
long rss_kb() {
  std::ifstream f("/proc/self/statm");
  long size = 0, resident = 0;
  f >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// VmHWM of /proc/self/status, in KiB; reset_peak() sets it back to the current RSS.
long peak_rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}
bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// Repeats `fn` (which returns the seconds it measured) up to `reps` times, stopping after
// `max_s` of wall time once kMinReps are done. Returns the samples in ms.
template <typename Fn>
std::vector<double> repeat(int reps, double max_s, const char* what, int cgroups, Fn fn) {
  std::vector<double> ms;
  const auto start = SteadyClock::now();
  for (int rep = 0; rep < reps; rep++) {
    if (rep >= kMinReps && seconds_since(start) > max_s) break;
    ms.push_back(fn() * 1e3);
  }
  const Stats s = stats(ms);
  std::cerr << "[exposition_bench] " << what << ", " << cgroups << " cgroups: " << ms.size()
            << " reps, median " << std::fixed << std::setprecision(2) << s.median << " ms, p99 "
            << s.p99 << " ms\n"
            << std::defaultfloat;
  return ms;
}

// ---------------------------------------------------------------------------------------------
// The snapshot: `n` kubepods container cgroups, one CUDA process each (plus a data-loader
// process doing the block I/O), two 5 s windows of activity so that every counter and window
// ratio is set, every family filled.
struct Built {
  std::shared_ptr<sw::Snapshot> snap;
  double build_s = 0;
  long rss_before_kb = 0, rss_after_kb = 0;
  size_t call_series = 0;  // (cgroup, call) pairs
};

Built build_snapshot(int n, std::uint64_t seed) {
  Built b;
  malloc_trim(0);
  b.rss_before_kb = rss_kb();
  const auto t0 = SteadyClock::now();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  const std::int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(WallClock::now().time_since_epoch())
          .count();
  static const char* comms[] = {"python3", "torchrun", "vllm", "tritonserver"};
  static const char* namespaces[] = {"ml-training", "inference", "research", "batch"};
  static const char* containers[] = {"trainer", "server", "worker", "notebook"};
  static const char* pre_comm[] = {"kworker/u16:2", "node_exporter", "containerd", "kubelet",
                                   "fluent-bit"};
  static const char* pre_cgroup[] = {"/", "/system.slice/node-exporter.service",
                                     "/system.slice/containerd.service",
                                     "/system.slice/kubelet.service",
                                     "/system.slice/fluent-bit.service"};
  static const char* typical_calls[] = {"cudaLaunchKernel",      "cudaMemcpyAsync",
                                        "cudaStreamSynchronize", "cudaMemcpy",
                                        "cudaMalloc",            "cudaFree",
                                        "cudaEventSynchronize",  "cudaGraphLaunch"};
  static const char* nccl_ops[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                   "ncclBroadcast"};

  struct Workload {
    std::string cgroup, pod, ns, container;
    int pid = 0;
  };
  std::vector<Workload> wl;
  sw::demo::SyntheticHost host;
  for (int i = 0; i < n; i++) {
    Workload w;
    const std::string uid = hex(rng, 8) + "_" + hex(rng, 4) + "_" + hex(rng, 4) + "_" +
                            hex(rng, 4) + "_" + hex(rng, 12);
    w.cgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid +
               ".slice/cri-containerd-" + hex(rng, 64) + ".scope";
    w.ns = namespaces[i % 4];
    w.container = containers[i % 4];
    w.pod = std::string(containers[i % 4]) + "-" + std::to_string(i) + "-" + hex(rng, 10) +
            "-" + hex(rng, 5);
    w.pid = 10000 + i * 10;
    host.add_process(w.cgroup, w.pid, comms[i % 4], now_ns - 3600 * kSecond);
    wl.push_back(std::move(w));
  }
  auto calls = sw::trace::all_calls();
  std::shared_ptr<sw::Snapshot> snap;
  for (int window = 0; window < 2; window++) {
    for (int i = 0; i < n; i++) {
      const Workload& w = wl[static_cast<size_t>(i)];
      auto cnt = [&](double c) { return static_cast<std::uint64_t>(c * jitter(rng)) + 1; };
      // CUDA runtime and driver calls: all of the table, or the typical eight.
      auto mix = [&](std::string_view name, size_t k) {
        const std::uint64_t typical = 5000ull << (k % 12);  // 5 us .. 10 ms
        host.calls(w.pid, {name, cnt(4000.0 / static_cast<double>(k + 1)), typical, typical * 20,
                           0.01, 0.02, 0.01});
      };
      if (g_typical) {
        for (size_t k = 0; k < std::size(typical_calls); k++) mix(typical_calls[k], k);
      } else {
        size_t made = 0;
        for (size_t k = 0; k < calls.size(); k++) {
          if (calls[k].api == sw::trace::Api::kNccl) continue;
          if (g_original && made == kOriginalCalls) break;
          mix(calls[k].name, k);
          made++;
        }
      }
      // NCCL ops of this rank (also counted as calls, api nccl).
      const size_t ops = g_typical ? 1 : std::size(nccl_ops);
      for (size_t k = 0; k < ops; k++) {
        host.nccl(w.pid, {nccl_ops[k], i % 8, 8, cnt(200), 64u << 20, 3000000, 40000000, 0.02,
                          0.01, 0.05});
      }
      host.offcpu(w.pid, cnt(15e6), cnt(60e6), cnt(3.5e9), cnt(150));
      for (int k = 0; k < 5; k++) {
        host.preempted_by(w.pid, 900 + k, pre_comm[k], pre_cgroup[k], cnt(3e6 / (k + 1)),
                          cnt(40.0 / (k + 1)));
      }
      for (const char* dev : {"nvme0n1", "nvme1n1"}) {
        for (const char* op : {"read", "write"}) {
          host.io(w.cgroup, w.pid + 1, "pt_data_worker",
                  {dev, op, cnt(500), 131072, 200000, 20000000, 0.01});
        }
      }
      host.reclaim(w.cgroup, cnt(2e6), cnt(5e6), cnt(1e6), cnt(20));
      sw::PressureTotals p;
      p.cpu_some_ns = cnt(5e7);
      p.cpu_full_ns = cnt(1e7);
      p.memory_some_ns = cnt(2e7);
      p.memory_full_ns = cnt(5e6);
      p.io_some_ns = cnt(3e7);
      p.io_full_ns = cnt(1e7);
      host.pressure(w.cgroup, p);
      host.retransmits(w.cgroup, cnt(30), cnt(3));
      if (window == 0) host.oom_kill(w.cgroup, w.pid + 2, "python3", now_ns - 600 * kSecond);
    }
    snap = host.snapshot(WallClock::now(), std::chrono::nanoseconds(kWindowNs));
    (void)host.drain_outliers();
  }
  // What the run loop adds before publishing: Kubernetes names, chains, self-metrics.
  for (auto& [label, s] : snap->series) {
    b.call_series += s.calls.size();
    for (const Workload& w : wl) {
      if (w.cgroup != label) continue;
      s.identity.pod = w.pod;
      s.identity.pod_namespace = w.ns;
      s.identity.container = w.container;
      break;
    }
  }
  using sw::chains::Kind;
  using sw::chains::Severity;
  for (int i = 0; i < n; i += 8) {  // a chain history on one workload in 8, one in 32 open now
    const auto& id = snap->series[wl[static_cast<size_t>(i)].cgroup].identity;
    snap->chains.push_back({std::string(sw::chains::kind_name(Kind::kCpuContention)),
                            std::string(sw::chains::severity_name(Severity::kMedium)), id, 3, 0});
    snap->chains.push_back({std::string(sw::chains::kind_name(Kind::kIoStall)),
                            std::string(sw::chains::severity_name(Severity::kLow)), id, 1, 0});
    if (i % 32 == 0) {
      snap->chains.push_back({std::string(sw::chains::kind_name(Kind::kAllocSpike)),
                              std::string(sw::chains::severity_name(Severity::kHigh)), id, 1, 1});
    }
  }
  for (size_t k = 0; k < snap->lost.size(); k++) snap->lost[k] = k * 3;
  snap->outliers = 12345;
  snap->traced_processes = static_cast<std::uint64_t>(n);
  snap->attached_libraries = 3;
  snap->attached_probes = 2 * calls.size();
  snap->ready = true;
  snap->store = {true, true, false, false, 720, 700000, 0, 0, 1200, 1, 26u << 20};
  snap->otlp.enabled = true;
  snap->otlp.requests = {{"metrics/success", 720}, {"metrics/failure", 3}, {"logs/success", 40}};
  snap->otlp.failures = {{"timeout", 2}, {"connection", 1}};
  snap->otlp.points_dropped = {{"retries_exhausted", 10}};
  snap->otlp.points_sent = 5000000;
  snap->kube = {true, static_cast<std::uint64_t>(n), 100, 1};
  b.build_s = seconds_since(t0);
  malloc_trim(0);
  b.rss_after_kb = rss_kb();
  b.snap = std::move(snap);
  return b;
}

// Lines of a text exposition that are samples (not comments, not empty).
size_t sample_lines(const std::string& text) {
  size_t n = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos && text[pos] != '#') n++;
    pos = end + 1;
  }
  return n;
}

// What /metrics carried before issue #37 (every identity label and the cgroup path on every
// series, one series per call, every power of two): what the prometheus-cpp serializer, which
// knows no exposition options, renders too.
sw::metrics::ExpositionOptions pre37() {
  sw::metrics::ExpositionOptions o;
  o.cgroup = o.container_id = o.per_call = true;
  o.ladder_step = 1;
  return o;
}

// ---------------------------------------------------------------------------------------------
struct RenderResult {
  std::vector<double> ms, families_ms;
  std::vector<double> legacy_ms;  // prometheus-cpp's serializer (what /metrics used before)
  size_t bytes = 0, lines = 0, families = 0;
  size_t gzip_bytes = 0;  // the text gzip'd once (Content-Encoding: gzip would send this)
  double gzip_ms = 0;
  long peak_rss_kb = -1, rss_before_kb = 0;
  // What /metrics does for a gzip'd text scrape: render and gzip in pieces (issue #18).
  long streamed_peak_rss_kb = -1, streamed_rss_before_kb = 0;
  double streamed_ms = 0;
  size_t streamed_bytes = 0;
};

RenderResult bench_render(const sw::Snapshot& snap, const sw::metrics::BuildInfo& build, int reps,
                          double max_s, int n) {
  RenderResult r;
  // Peak RSS of one render (families + text), from the RSS just before it.
  malloc_trim(0);
  r.rss_before_kb = rss_kb();
  const bool peak_ok = reset_peak();
  {
    auto text = sw::metrics::render_exposition(snap, build);
    r.bytes = text.size();
    r.lines = sample_lines(text);
    if (peak_ok) r.peak_rss_kb = peak_rss_kb();
    const auto a = SteadyClock::now();
    r.gzip_bytes = sw::otlp::gzip_compress(text).size();
    r.gzip_ms = seconds_since(a) * 1e3;
  }
  malloc_trim(0);
  r.streamed_rss_before_kb = rss_kb();
  const bool streamed_peak_ok = reset_peak();
  {
    const auto a = SteadyClock::now();
    r.streamed_bytes = sw::metrics::render_exposition_gzip(snap, build, {}, false, 1).size();
    r.streamed_ms = seconds_since(a) * 1e3;
    if (streamed_peak_ok) r.streamed_peak_rss_kb = peak_rss_kb();
  }
  r.families = sw::metrics::to_families(snap, build).size();
  r.ms = repeat(reps, max_s, "render (render_exposition)", n, [&] {
    const auto a = SteadyClock::now();
    auto text = sw::metrics::render_exposition(snap, build);
    const double s = seconds_since(a);
    if (text.size() != r.bytes) std::cerr << "exposition_bench: render size changed\n";
    return s;
  });
  // prometheus-cpp renders the model without exposition options: the pre-#37 shape, which
  // render_exposition writes byte for byte with those options.
  const size_t pre37_bytes = sw::metrics::render_exposition(snap, build, pre37()).size();
  r.legacy_ms = repeat(reps, max_s, "render (prometheus-cpp serializer)", n, [&] {
    const auto a = SteadyClock::now();
    auto text = sw::metrics::render_text(sw::metrics::to_families(snap, build));
    const double s = seconds_since(a);
    if (text.size() != pre37_bytes) std::cerr << "exposition_bench: the two renders differ\n";
    return s;
  });
  r.families_ms = repeat(reps, max_s, "to_families alone", n, [&] {
    const auto a = SteadyClock::now();
    auto f = sw::metrics::to_families(snap, build);
    return seconds_since(a);
  });
  return r;
}

// ---------------------------------------------------------------------------------------------
struct HttpResult {
  std::vector<double> ms, ttfb_ms;
  size_t bytes = 0, lines = 0;
  size_t wire_bytes = 0;  // as sent (gzip'd when asked for)
  long connects = 0;
  int failures = 0;
};

size_t write_body(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

// GET /metrics as Prometheus does (Accept-Encoding: gzip when `gzip`). `before` runs before each
// timed request, outside the timing: publishing a fresh copy of the snapshot makes every scrape
// render (one scrape per window, the common case); without it, scrapes after the first are
// served from the per-snapshot cache (several scrapers of one window).
// What a Prometheus with native histograms on asks for.
constexpr const char* kAcceptProtobuf =
    "Accept: application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
    "encoding=delimited";

// `accept`: an Accept header line to send (nullptr: none, the text format). `inflate`: false
// keeps the gzip'd body as it came (what the server costs, without the client's inflate).
HttpResult bench_http(CURL* curl, const std::string& url, int reps, double max_s, int n,
                      const char* label, bool gzip, const std::function<void()>& before,
                      const char* accept = nullptr, bool inflate = true) {
  HttpResult r;
  std::string body;
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(
      accept ? curl_slist_append(nullptr, accept) : nullptr, &curl_slist_free_all);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, gzip ? "gzip" : nullptr);
  curl_easy_setopt(curl, CURLOPT_HTTP_CONTENT_DECODING, inflate ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 120000L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  auto get = [&]() -> double {
    body.clear();
    if (before) before();
    const auto a = SteadyClock::now();
    const CURLcode rc = curl_easy_perform(curl);
    const double s = seconds_since(a);
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK || code != 200) {
      r.failures++;
      std::cerr << "exposition_bench: GET " << url << ": " << curl_easy_strerror(rc) << ", HTTP "
                << code << "\n";
    }
    long connects = 0;
    curl_easy_getinfo(curl, CURLINFO_NUM_CONNECTS, &connects);
    r.connects += connects;
    curl_off_t ttfb = 0;
    curl_easy_getinfo(curl, CURLINFO_STARTTRANSFER_TIME_T, &ttfb);
    r.ttfb_ms.push_back(static_cast<double>(ttfb) / 1e3);
    return s;
  };
  get();  // warm-up: the connection and the server's first render
  r.ttfb_ms.clear();
  r.connects = 0;
  r.bytes = body.size();
  r.lines = sample_lines(body);
  curl_off_t wire = 0;
  curl_easy_getinfo(curl, CURLINFO_SIZE_DOWNLOAD_T, &wire);
  r.wire_bytes = static_cast<size_t>(wire);
  r.ms = repeat(reps, max_s, label, n, get);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(curl, CURLOPT_HTTP_CONTENT_DECODING, 1L);
  return r;
}

// ---------------------------------------------------------------------------------------------
struct OtlpResult {
  std::vector<double> ms, gzip_ms;
  size_t requests = 0, bytes = 0, gzip_bytes = 0, largest = 0;
  std::uint64_t points = 0;
};

OtlpResult bench_otlp(sw::Snapshot& snap, const sw::metrics::BuildInfo& build,
                      sw::otlp::HistogramFormat format, int reps, double max_s, int n) {
  OtlpResult r;
  sw::otlp::MetricsEncoderOptions o;
  o.temporality = sw::otlp::Temporality::kCumulative;
  o.histogram = format;
  o.resource.attributes = {{"host.name", "gpu-node-17.example.internal"},
                           {"service.name", "stallwatch"},
                           {"service.version", build.version}};
  o.version = build.version;
  o.start_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          (snap.taken - std::chrono::hours(1)).time_since_epoch())
          .count());
  sw::otlp::MetricsEncoder enc(o);
  std::vector<sw::otlp::Payload> last;
  // Each encode needs a newer snapshot: the same numbers, one window later.
  auto next = [&] {
    snap.sequence++;
    snap.taken += std::chrono::nanoseconds(kWindowNs);
  };
  next();
  last = enc.encode(snap, build);  // first export: every series new to the encoder
  const char* what = format == sw::otlp::HistogramFormat::kExplicit
                         ? "OTLP encode (cumulative, explicit)"
                         : "OTLP encode (cumulative, exponential)";
  r.ms = repeat(reps, max_s, what, n, [&] {
    next();
    const auto a = SteadyClock::now();
    auto p = enc.encode(snap, build);
    const double s = seconds_since(a);
    last = std::move(p);
    return s;
  });
  r.requests = last.size();
  for (const auto& p : last) {
    r.bytes += p.body.size();
    r.points += p.points;
    r.largest = std::max(r.largest, p.body.size());
  }
  r.gzip_ms = repeat(reps, max_s, "gzip of the requests", n, [&] {
    size_t z = 0;
    const auto a = SteadyClock::now();
    for (const auto& p : last) z += sw::otlp::gzip_compress(p.body).size();
    const double s = seconds_since(a);
    r.gzip_bytes = z;
    return s;
  });
  return r;
}

std::string otlp_json(const OtlpResult& r) {
  const Stats e = stats(r.ms), z = stats(r.gzip_ms);
  return "{\"encode\":" + stats_json(e, "ms") + ",\"requests\":" + std::to_string(r.requests) +
         ",\"bytes\":" + std::to_string(r.bytes) + ",\"largest_request_bytes\":" +
         std::to_string(r.largest) + ",\"points\":" + std::to_string(r.points) +
         ",\"gzip_bytes\":" + std::to_string(r.gzip_bytes) + ",\"gzip\":" + stats_json(z, "ms") +
         ",\"samples_encode_ms\":" + arr(r.ms) + "}";
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(std::max(1, std::stoi(item)));
  }
  return out;
}

void usage() {
  std::cerr << "usage: exposition_bench [--out PATH | PATH] [--cpu N|-1] [--reps N] "
               "[--max-seconds S] [--cgroups 16,64,256,1024] [--mix full|typical|original] [--port N] "
               "[--dump DIR]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int cpu = 0;
  int reps = 100;
  double max_s = 10;
  int port = 19564;
  std::vector<int> sizes = {16, 64, 256, 1024};
  std::string dump_dir;
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
    } else if (a == "--max-seconds") {
      max_s = std::stod(value());
    } else if (a == "--cgroups") {
      sizes = parse_list(value());
    } else if (a == "--port") {
      port = std::stoi(value());
    } else if (a == "--dump") {
      dump_dir = value();
    } else if (a == "--mix") {
      const std::string m = value();
      if (m != "full" && m != "typical" && m != "original") {
        usage();
        return 2;
      }
      g_typical = m == "typical";
      g_original = m == "original";
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
  if (sizes.empty()) {
    usage();
    return 2;
  }
  // Before the server starts: its threads inherit the pin.
  if (!stallwatch::bench::pin_to_cpu(cpu, "exposition_bench")) return 1;
  const auto start = SteadyClock::now();
  const sw::metrics::BuildInfo build{STALLWATCH_VERSION, STALLWATCH_REVISION};

  // The real endpoint, as `stallwatch run` starts it: a board, the server, publish.
  sw::metrics::SnapshotBoard board;
  std::unique_ptr<sw::metrics::HttpServer> server;
  std::string listen;
  for (int p = port; p < port + 100 && !server; p++) {
    listen = "127.0.0.1:" + std::to_string(p);
    auto s = sw::metrics::HttpServer::start(listen, board, build);
    if (s) server = std::move(*s);
  }
  if (!server) {
    std::cerr << "exposition_bench: no free port in " << port << ".." << port + 99 << "\n";
    return 1;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURL* curl = curl_easy_init();
  const std::string url = "http://" + listen + "/metrics";
  const size_t runtime_driver_calls = static_cast<size_t>(
      std::count_if(sw::trace::all_calls().begin(), sw::trace::all_calls().end(),
                    [](const auto& c) { return c.api != sw::trace::Api::kNccl; }));

  std::ostringstream json;
  json << "{\"cpu\":" << cpu << ",\"reps\":" << reps << ",\"max_seconds\":" << num(max_s)
       << ",\"min_reps\":" << kMinReps << ",\"mix\":\"" << mix_name()
       << "\",\"calls_per_series\":"
       << (g_typical ? 8 : g_original ? kOriginalCalls : runtime_driver_calls)
       << ",\"nccl_ops_per_series\":" << (g_typical ? 1 : 4) << ",\"listen\":\"" << listen
       << "\",\"target\":{\"cgroups\":" << kTargetCgroups << ",\"p99_ms\":" << num(kTargetP99Ms)
       << "},\"points\":[";
  std::ostringstream table;
  table << "exposition (1 CPU: " << cpu << ", HTTP server threads included; up to " << reps
        << " reps or " << max_s << " s per measurement; " << mix_name()
        << " mix, kubepods paths)\n";
  char line[512];
  std::snprintf(line, sizeof line,
                "%7s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s %8s %8s %8s %6s %8s %8s\n", "cgroups",
                "lines", "MB", "render", "p-cpp", "GET med", "GET p99", "GET max", "plain", "cached",
                "otlp enc",
                "otlp MB", "gzip MB", "requests", "snapMB", "peakMB", "target");
  table << line;
  bool target_pass = true;
  bool target_seen = false;
  // Issue #18: the same snapshot in each format /metrics can answer, and with the cardinality
  // settings: uncompressed and gzip'd bytes, render + gzip time (median of 3).
  std::ostringstream formats;
  formats << "\nformats (render + gzip ms, MB uncompressed / gzip'd):\n";
  // Scrapes per format (issue #18), median / p99: fresh (the first scrape of a window renders
  // and gzips) and cached (every later scrape of the window); the gzip'd protobuf body; the RSS
  // the server keeps for the window's cached bodies.
  std::ostringstream scrapes, scrapes_json;
  scrapes << "\nscrapes, gzip'd (median / p99): text fresh, text cached (p99 without the client's inflate), protobuf (native + classic) "
             "fresh, protobuf cached; protobuf on the wire; bytes cached for the window (both gzip'd bodies); "
             "text rendered and gzip'd in pieces as /metrics does it: time, peak RSS growth\n";
  std::snprintf(line, sizeof line, "%7s %26s %26s %26s %26s %26s\n", "cgroups",
                "text, pre-#37 defaults", "text, defaults", "protobuf n+c, pre-#37",
                "protobuf n+c, defaults", "protobuf native, defaults");
  formats << line;
  for (size_t k = 0; k < sizes.size(); k++) {
    const int n = sizes[k];
    std::cerr << "[exposition_bench] building the snapshot of " << n << " cgroups\n";
    Built b = build_snapshot(n, 100 + static_cast<std::uint64_t>(n));
    auto render = bench_render(*b.snap, build, reps, max_s, n);
    {
      // Issue #37: what the defaults were before (every identity label and the cgroup path on
      // every series, one series per call, every power of two) and what they are now.
      const sw::metrics::ExpositionOptions before = pre37();
      const sw::metrics::ExpositionOptions now;
      auto protobuf = [&](const sw::metrics::ExpositionOptions& o, bool classic) {
        auto families = sw::metrics::build_model(*b.snap, build);
        std::deque<sw::identity::Identity> shaped;
        sw::metrics::shape_families(families, o, shaped);
        return sw::metrics::render_protobuf(families, classic, o.ladder_step);
      };
      auto measure = [&](const std::function<std::string()>& render_one) {
        std::vector<double> ms;
        size_t bytes = 0, gz = 0;
        for (int i = 0; i < 3; i++) {
          const auto a = SteadyClock::now();
          const std::string body = render_one();
          const std::string z = sw::otlp::gzip_compress(body, 1);
          ms.push_back(seconds_since(a) * 1e3);
          bytes = body.size();
          gz = z.size();
        }
        char cell[64];
        std::snprintf(cell, sizeof cell, "%6.1fms %7.2f/%6.2f", stats(ms).median,
                      static_cast<double>(bytes) / 1e6, static_cast<double>(gz) / 1e6);
        return std::string(cell);
      };
      if (!dump_dir.empty()) {
        const std::string n_s = std::to_string(n);
        std::ofstream(dump_dir + "/text-" + n_s + ".txt", std::ios::binary)
            << sw::metrics::render_exposition(*b.snap, build);
        std::ofstream(dump_dir + "/protobuf-" + n_s + ".bin", std::ios::binary)
            << protobuf(now, true);
      }
      const std::string t2 =
          measure([&] { return sw::metrics::render_exposition(*b.snap, build, before); });
      const std::string t16 = measure([&] { return sw::metrics::render_exposition(*b.snap, build); });
      const std::string pb = measure([&] { return protobuf(before, true); });
      const std::string pn = measure([&] { return protobuf(now, true); });
      const std::string pl = measure([&] { return protobuf(now, false); });
      std::snprintf(line, sizeof line, "%7d %26s %26s %26s %26s %26s\n", n, t2.c_str(),
                    t16.c_str(), pb.c_str(), pn.c_str(), pl.c_str());
      formats << line;
    }
    auto fresh = [&] { board.publish(std::make_shared<sw::Snapshot>(*b.snap)); };
    auto http = bench_http(curl, url, reps, max_s, n, "GET /metrics, gzip, fresh", true, fresh);
    auto plain = bench_http(curl, url, reps, max_s, n, "GET /metrics, plain, fresh", false, fresh);
    auto pb_fresh = bench_http(curl, url, reps, max_s, n, "GET /metrics, protobuf, gzip, fresh",
                               true, fresh, kAcceptProtobuf);
    board.publish(b.snap);
    auto cached = bench_http(curl, url, reps, max_s, n, "GET /metrics, gzip, cached", true, {});
    auto pb_cached = bench_http(curl, url, reps, max_s, n, "GET /metrics, protobuf, gzip, cached",
                                true, {}, kAcceptProtobuf);
    auto raw_cached = bench_http(curl, url, reps, max_s, n,
                                 "GET /metrics, gzip, cached, not inflated", true, {}, nullptr,
                                 false);
    // What the server keeps for this window once both formats were scraped: the gzip'd bodies.
    const size_t cache_bytes = cached.wire_bytes + pb_cached.wire_bytes;
    board.publish(std::make_shared<sw::Snapshot>());
    {
      const Stats tf = stats(http.ms), tc = stats(cached.ms), pf = stats(pb_fresh.ms),
                  pc = stats(pb_cached.ms);
      std::snprintf(line, sizeof line,
                    "%7d %7.1f / %7.1f ms %7.1f / %7.1f ms (%5.1f) %7.1f / %7.1f ms %7.1f / %7.1f ms "
                    "%7.2f MB %9.2f MB %7.1f ms %6.1f MB\n",
                    n, tf.median, tf.p99, tc.median, tc.p99, stats(raw_cached.ms).p99, pf.median,
                    pf.p99, pc.median, pc.p99,
                    static_cast<double>(pb_cached.wire_bytes) / 1e6,
                    static_cast<double>(cache_bytes) / 1e6, render.streamed_ms,
                    static_cast<double>(render.streamed_peak_rss_kb - render.streamed_rss_before_kb) /
                        1024);
      scrapes << line;
      scrapes_json << (k ? "," : "") << "{\"cgroups\":" << n
                   << ",\"text_gzip_fresh\":" << stats_json(tf, "ms")
                   << ",\"text_gzip_cached\":" << stats_json(tc, "ms")
                   << ",\"text_gzip_cached_not_inflated\":" << stats_json(stats(raw_cached.ms), "ms")
                   << ",\"protobuf_gzip_fresh\":" << stats_json(pf, "ms")
                   << ",\"protobuf_gzip_cached\":" << stats_json(pc, "ms")
                   << ",\"protobuf_body_bytes\":" << pb_cached.bytes
                   << ",\"protobuf_wire_bytes\":" << pb_cached.wire_bytes
                   << ",\"cached_bytes\":" << cache_bytes
                   << ",\"text_gzip_streamed\":{\"ms\":" << num(render.streamed_ms)
                   << ",\"bytes\":" << render.streamed_bytes << ",\"peak_rss_kb\":"
                   << render.streamed_peak_rss_kb - render.streamed_rss_before_kb << "}}";
    }
    auto explicit_ = bench_otlp(*b.snap, build, sw::otlp::HistogramFormat::kExplicit, reps, max_s, n);
    auto expo = bench_otlp(*b.snap, build, sw::otlp::HistogramFormat::kExponential, reps, max_s, n);
    const Stats rs = stats(render.ms), fs = stats(render.families_ms), hs = stats(http.ms),
                ts = stats(http.ttfb_ms);
    const bool pass = hs.p99 <= kTargetP99Ms;
    if (n == kTargetCgroups) {
      target_seen = true;
      target_pass = pass;
    }
    json << (k ? "," : "") << "{\"cgroups\":" << n << ",\"call_series\":" << b.call_series
         << ",\"snapshot\":{\"build_ms\":" << num(b.build_s * 1e3)
         << ",\"rss_before_kb\":" << b.rss_before_kb << ",\"rss_after_kb\":" << b.rss_after_kb
         << ",\"rss_delta_kb\":" << b.rss_after_kb - b.rss_before_kb << "}"
         << ",\"families\":" << render.families << ",\"body_bytes\":" << render.bytes
         << ",\"sample_lines\":" << render.lines << ",\"body_gzip_bytes\":" << render.gzip_bytes
         << ",\"body_gzip_ms\":" << num(render.gzip_ms) << ",\"render\":" << stats_json(rs, "ms")
         << ",\"to_families\":" << stats_json(fs, "ms")
         << ",\"render_prometheus_cpp\":" << stats_json(stats(render.legacy_ms), "ms")
         << ",\"render_peak_rss_kb\":" << render.peak_rss_kb
         << ",\"render_rss_before_kb\":" << render.rss_before_kb
         << ",\"samples_render_ms\":" << arr(render.ms) << ",\"http\":{\"latency\":"
         << stats_json(hs, "ms") << ",\"ttfb\":" << stats_json(ts, "ms")
         << ",\"body_bytes\":" << http.bytes << ",\"sample_lines\":" << http.lines
         << ",\"connects\":" << http.connects << ",\"failures\":" << http.failures
         << ",\"samples_ms\":" << arr(http.ms) << ",\"target_p99_ms\":" << num(kTargetP99Ms)
         << ",\"pass\":" << (pass ? "true" : "false") << ",\"wire_bytes\":" << http.wire_bytes
         << ",\"plain\":" << stats_json(stats(plain.ms), "ms")
         << ",\"cached\":" << stats_json(stats(cached.ms), "ms") << "}"
         << ",\"otlp\":{\"temporality\":\"cumulative\",\"max_request_bytes\":"
         << sw::otlp::kMaxRequestBytes << ",\"explicit\":" << otlp_json(explicit_)
         << ",\"exponential\":" << otlp_json(expo) << "}}";
    std::snprintf(line, sizeof line,
                  "%7d %9zu %8.1f %7.1fms %7.1fms %7.1fms %7.1fms %7.1fms %7.1fms %7.1fms %7.1fms "
                  "%8.2f %8.2f %8zu %6.1f %8.1f %8s\n",
                  n, render.lines, static_cast<double>(render.bytes) / 1e6, rs.median,
                  stats(render.legacy_ms).median, hs.median, hs.p99, hs.max,
                  stats(plain.ms).median, stats(cached.ms).median, stats(explicit_.ms).median,
                  static_cast<double>(explicit_.bytes) / 1e6,
                  static_cast<double>(explicit_.gzip_bytes) / 1e6, explicit_.requests,
                  static_cast<double>(b.rss_after_kb - b.rss_before_kb) / 1024,
                  static_cast<double>(render.peak_rss_kb - render.rss_before_kb) / 1024,
                  n == kTargetCgroups ? (pass ? "met" : "MISSED") : "-");
    table << line;
  }
  const double total = seconds_since(start);
  json << "],\"pass\":" << (target_seen ? (target_pass ? "true" : "false") : "null")
       << ",\"scrapes\":[" << scrapes_json.str() << "],\"runtime_s\":" << num(total) << "}";
  table << "  render: render_exposition (text_format.h); p-cpp: prometheus-cpp's serializer "
           "(before); GET: a scrape of a new snapshot with Accept-Encoding: gzip, end to end over "
           "127.0.0.1 (libcurl), as Prometheus scrapes once per window; plain: the same without "
           "gzip; cached: a second scrape of the same snapshot; otlp enc: explicit-bucket encode; MB: uncompressed (gzip: the requests gzip'd); snapMB: "
           "RSS growth for the snapshot; peakMB: peak RSS growth of one render. Target: GET p99 "
           "<= 50 ms at 256 cgroups\n";
  table << formats.str() << scrapes.str();
  std::snprintf(line, sizeof line, "exposition_bench runtime %.0f s\n", total);
  table << line;
  curl_easy_cleanup(curl);
  curl_global_cleanup();
  server.reset();
  std::cout << table.str();
  return stallwatch::bench::write_json(out_path, json.str(), "exposition_bench") ? 0 : 1;
}
