// Unit tests for the OTLP encoders (metrics/otlp/metrics_encoder.h, logs_encoder.h) and the
// push configuration (config.h): the structure of the requests read back field by field,
// delta arithmetic, resets, vanished series, the size limit, and the flag/variable precedence.
// The e2e tier decodes the same payloads with the OpenTelemetry JS SDK's schema.
#include <gtest/gtest.h>

#include <fstream>

#include <map>
#include <set>

#include "identity/cgroup_identity.h"
#include "metrics/otlp/config.h"
#include "metrics/otlp/logs_encoder.h"
#include "metrics/otlp/metrics_encoder.h"
#include "proto_reader.h"
#include "trace/calls.h"
#include "trace/histogram.h"

extern "C" {  // the kernel's constants, which these tests hold the user-space side to
#include <linux/types.h>

#include "bpf/stallwatch.h"
}

namespace stallwatch::otlp {
namespace {

using prototest::all;
using prototest::attribute;
using prototest::Field;
using prototest::fields;
using prototest::one;

constexpr std::uint64_t kStart = 1'795'183'000'000'000'000ull;
constexpr std::uint64_t kS = 1'000'000'000ull;
const std::string kPod =
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-"
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope";

std::uint32_t call_id(std::string_view name) {
  const auto calls = trace::all_calls();
  for (std::uint32_t i = 0; i < calls.size(); ++i) {
    if (calls[i].name == name) return i;
  }
  ADD_FAILURE() << name;
  return 0;
}

// One data point of a request, with where it sits.
struct Decoded {
  std::string resource;  // the Resource message
  std::string name, unit;
  std::uint32_t data = 0;  // 5 gauge, 7 sum, 9 histogram, 10 exponential
  std::uint64_t temporality = 0;
  bool monotonic = false;
  std::string point;  // the data point message
};

std::vector<Decoded> flatten(const std::vector<Payload>& payloads) {
  std::vector<Decoded> out;
  for (const auto& p : payloads) {
    EXPECT_EQ(p.signal, Signal::kMetrics);
    size_t points = 0;
    for (const Field& rm : all(p.body, 1)) {
      const std::string resource(one(rm.bytes, 1).bytes);
      for (const Field& sm : all(rm.bytes, 2)) {
        EXPECT_EQ(one(one(sm.bytes, 1).bytes, 1).bytes, "stallwatch");
        for (const Field& m : all(sm.bytes, 2)) {
          for (const Field& d : fields(m.bytes)) {
            if (d.number < 5) continue;
            for (const Field& dp : all(d.bytes, 1)) {
              Decoded x{resource,
                        std::string(one(m.bytes, 1).bytes),
                        std::string(one(m.bytes, 3).bytes),
                        d.number,
                        one(d.bytes, 2).scalar,
                        one(d.bytes, 3).scalar != 0,
                        std::string(dp.bytes)};
              out.push_back(std::move(x));
              ++points;
            }
          }
        }
      }
    }
    EXPECT_EQ(points, p.points);
  }
  return out;
}

// The points of one metric whose attributes (field `attr_field`) include every `match` pair.
std::vector<Decoded> select(const std::vector<Decoded>& all_points, std::string_view name,
                            std::map<std::string, std::string> match = {},
                            std::string cgroup = "") {
  std::vector<Decoded> out;
  for (const auto& d : all_points) {
    if (d.name != name) continue;
    if (!cgroup.empty() && attribute(d.resource, 1, "stallwatch.cgroup") != cgroup) continue;
    const std::uint32_t attr_field = d.data == 5 || d.data == 7 ? 7 : d.data == 9 ? 9 : 1;
    bool ok = true;
    for (const auto& [k, v] : match) ok = ok && attribute(d.point, attr_field, k) == v;
    if (ok) out.push_back(d);
  }
  return out;
}

Snapshot snapshot(std::uint64_t seq, std::uint64_t syncs, std::uint64_t runnable_ns) {
  Snapshot s;
  s.sequence = seq;
  s.taken = std::chrono::system_clock::time_point(
      std::chrono::nanoseconds(kStart + seq * 5 * kS));
  Series& pod = s.series[kPod];
  pod.identity = identity::parse_cgroup_path(kPod);
  CallTotals sync;
  sync.buckets[20] = syncs;      // (2^-11, 2^-10] s
  sync.buckets[23] = syncs / 2;  // (2^-8, 2^-7] s
  sync.count = syncs + syncs / 2;
  sync.sum_ns = sync.count * 1'000'000;
  sync.max_ns = 7'000'000;
  sync.runnable_ns = runnable_ns;
  pod.calls[call_id("cudaStreamSynchronize")] = sync;
  pod.offcpu.runnable_ns = runnable_ns;
  pod.runnable_ratio = 0.5;
  Series& root = s.series["/"];
  root.identity = identity::parse_cgroup_path("/");
  CallTotals malloc_totals;
  malloc_totals.buckets[0] = 1;  // at or below 1 ns
  malloc_totals.buckets[39] = 1;  // above 256 s
  malloc_totals.count = 2;
  root.calls[call_id("cudaMalloc")] = malloc_totals;
  return s;
}

MetricsEncoderOptions options(Temporality t, HistogramFormat h = HistogramFormat::kExplicit) {
  MetricsEncoderOptions o;
  o.temporality = t;
  o.histogram = h;
  o.resource.attributes = {{"host.name", "gpu-node-7"}, {"service.name", "stallwatch"}};
  o.version = "9.9.9";
  o.start_ns = kStart;
  o.per_call = true;  // these tests read points by call; the default is per class (below)
  return o;
}

const metrics::BuildInfo kBuild{"9.9.9", "abc"};

// The default (issue #37): the CUDA call points of a workload merged per class of call, as on
// /metrics, so a backend that bills per series (Datadog custom metrics) counts classes, not
// calls; the workload stays the resource.
TEST(OtlpMetricsTest, DefaultsMergeCallsPerClass) {
  MetricsEncoderOptions o = options(Temporality::kCumulative);
  o.per_call = false;
  MetricsEncoder enc(o);
  const auto points = flatten(enc.encode(snapshot(1, 100, 3 * kS), kBuild));
  auto sync = select(points, "stallwatch.cuda.call.duration", {{"class", "sync"}});
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(attribute(sync[0].point, 9, "call"), "<absent>");
  EXPECT_EQ(attribute(sync[0].point, 9, "api"), "runtime");
  EXPECT_EQ(one(sync[0].point, 4).scalar, 150u);
  EXPECT_EQ(attribute(sync[0].resource, 1, "stallwatch.cgroup"), kPod);
  EXPECT_TRUE(select(points, "stallwatch.cuda.call.duration", {{"call", "cudaStreamSynchronize"}}).empty());
}

// GPU memory (issue #20): byte counters and the live gauge with the OTel unit "By".
TEST(OtlpMetricsTest, GpuMemoryInBytes) {
  Snapshot snap = snapshot(1, 100, 3 * kS);
  CallTotals& m = snap.series["/"].calls[call_id("cudaMalloc")];
  m.alloc_bytes = 3u << 20;
  m.freed_bytes = 1u << 20;
  m.alloc_failures = 2;
  snap.series["/"].processes.push_back(ProcessCall{42, call_id("cudaMalloc"), m});
  MetricsEncoder enc(options(Temporality::kCumulative));
  const auto points = flatten(enc.encode(snap, kBuild));
  auto alloc = select(points, "stallwatch.cuda.memory.allocated", {{"call", "cudaMalloc"}});
  ASSERT_EQ(alloc.size(), 1u);
  EXPECT_EQ(alloc[0].unit, "By");
  EXPECT_TRUE(alloc[0].monotonic);
  EXPECT_DOUBLE_EQ(one(alloc[0].point, 4).as_double(), 3.0 * (1 << 20));
  auto freed = select(points, "stallwatch.cuda.memory.freed", {{"call", "cudaMalloc"}});
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_DOUBLE_EQ(one(freed[0].point, 4).as_double(), 1.0 * (1 << 20));
  auto live = select(points, "stallwatch.cuda.memory.live", {{"kind", "device"}});
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].unit, "By");
  EXPECT_EQ(live[0].data, 5u);  // a gauge
  EXPECT_DOUBLE_EQ(one(live[0].point, 4).as_double(), 2.0 * (1 << 20));
  auto failures = select(points, "stallwatch.cuda.memory.alloc.failures", {{"call", "cudaMalloc"}});
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_DOUBLE_EQ(one(failures[0].point, 4).as_double(), 2.0);
}

TEST(OtlpMetricsTest, CumulativeNamesUnitsResourcesAndBuckets) {
  MetricsEncoder enc(options(Temporality::kCumulative));
  const auto points = flatten(enc.encode(snapshot(1, 100, 3 * kS), kBuild));
  auto dur = select(points, "stallwatch.cuda.call.duration", {{"call", "cudaStreamSynchronize"}});
  ASSERT_EQ(dur.size(), 1u);
  EXPECT_EQ(dur[0].unit, "s");
  EXPECT_EQ(dur[0].data, 9u);
  EXPECT_EQ(dur[0].temporality, 2u);  // CUMULATIVE
  // The workload is the resource: cgroup, container id, pod uid, and the host attributes.
  EXPECT_EQ(attribute(dur[0].resource, 1, "stallwatch.cgroup"), kPod);
  EXPECT_EQ(attribute(dur[0].resource, 1, "container.id"),
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_EQ(attribute(dur[0].resource, 1, "k8s.pod.uid"), "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
  EXPECT_EQ(attribute(dur[0].resource, 1, "host.name"), "gpu-node-7");
  // Labels become attributes, identity labels do not.
  EXPECT_EQ(attribute(dur[0].point, 9, "api"), "runtime");
  EXPECT_EQ(attribute(dur[0].point, 9, "cgroup"), "<absent>");
  const std::string& dp = dur[0].point;
  EXPECT_EQ(one(dp, 2).scalar, kStart);
  EXPECT_EQ(one(dp, 3).scalar, kStart + 5 * kS);
  EXPECT_EQ(one(dp, 4).scalar, 150u);
  EXPECT_DOUBLE_EQ(one(dp, 5).as_double(), 0.15);
  EXPECT_DOUBLE_EQ(one(dp, 12).as_double(), 0.007);
  // Per-bucket counts over Prometheus' bounds (2^-20 .. 2^6 s) plus the overflow.
  std::string_view counts = one(dp, 6).bytes, bounds = one(dp, 7).bytes;
  ASSERT_EQ(bounds.size(), 27u * 8);
  ASSERT_EQ(counts.size(), 28u * 8);
  std::vector<std::uint64_t> c(28);
  std::memcpy(c.data(), counts.data(), counts.size());
  std::vector<double> b(27);
  std::memcpy(b.data(), bounds.data(), bounds.size());
  EXPECT_DOUBLE_EQ(b[0], 0.00000095367431640625);
  EXPECT_DOUBLE_EQ(b[10], 0.0009765625);
  EXPECT_EQ(c[10], 100u);  // kernel bucket 20 ↔ le 2^-10
  EXPECT_EQ(c[13], 50u);   // kernel bucket 23 ↔ le 2^-7
  std::uint64_t total = 0;
  for (auto v : c) total += v;
  EXPECT_EQ(total, 150u);

  auto off = select(points, "stallwatch.cuda.call.offcpu", {{"state", "runnable"}}, kPod);
  ASSERT_EQ(off.size(), 1u);
  EXPECT_EQ(off[0].data, 7u);
  EXPECT_TRUE(off[0].monotonic);
  EXPECT_EQ(off[0].unit, "s");
  EXPECT_DOUBLE_EQ(one(off[0].point, 4).as_double(), 3.0);
  auto ratio = select(points, "stallwatch.offcpu.ratio", {{"state", "runnable"}}, kPod);
  ASSERT_EQ(ratio.size(), 1u);
  EXPECT_EQ(ratio[0].data, 5u);
  EXPECT_EQ(ratio[0].unit, "1");
  EXPECT_EQ(one(ratio[0].point, 2).scalar, 0u);  // gauges carry no start time
  // The daemon's own series: a resource without a workload.
  auto build = select(points, "stallwatch.build.info");
  ASSERT_EQ(build.size(), 1u);
  EXPECT_EQ(attribute(build[0].resource, 1, "stallwatch.cgroup"), "<absent>");
  EXPECT_EQ(attribute(build[0].point, 7, "version"), "9.9.9");
  auto lost = select(points, "stallwatch.events.lost");
  // + library_limit, discovery_queue, thread_failure, and the LRU maps' drops
  EXPECT_EQ(lost.size(), static_cast<size_t>(SW_LOST_MAX) + 3 + SW_LRU_MAX);
}

TEST(OtlpMetricsTest, EveryFamilyHasItsOwnName) {
  Snapshot s = snapshot(1, 10, kS);
  s.store.enabled = true;
  s.otlp.enabled = true;
  std::map<std::string, std::string> seen;
  for (const auto& f : metrics::build_model(s, kBuild)) {
    auto [it, added] = seen.emplace(metrics::otel_name(f), f.name);
    EXPECT_TRUE(added) << f.name << " and " << it->second << " are both " << it->first;
  }
  EXPECT_EQ(seen.count("stallwatch.offcpu.ratio"), 1u);
  EXPECT_EQ(seen.count("stallwatch.otlp.queue"), 1u);  // stallwatch_otlp_queue_bytes
}

TEST(OtlpMetricsTest, ExponentialIsTheKernelBucketsAtScaleZero) {
  MetricsEncoder enc(options(Temporality::kCumulative, HistogramFormat::kExponential));
  const auto points = flatten(enc.encode(snapshot(1, 100, 0), kBuild));
  auto sync = select(points, "stallwatch.cuda.call.duration", {{"call", "cudaStreamSynchronize"}});
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(sync[0].data, 10u);
  const std::string& dp = sync[0].point;
  EXPECT_EQ(one(dp, 4).scalar, 150u);
  EXPECT_EQ(one(dp, 6).as_sint(), 0);
  EXPECT_EQ(one(dp, 7).scalar, 0u);
  std::string_view positive = one(dp, 8).bytes;
  // Kernel bucket 20 holds (2^-11, 2^-10]: exponential index -11.
  EXPECT_EQ(one(positive, 1).as_sint(), -11);
  std::vector<std::uint64_t> counts;
  std::string_view packed = one(positive, 2).bytes;
  for (std::uint64_t v; !packed.empty() && prototest::read_varint(packed, v);) counts.push_back(v);
  EXPECT_EQ(counts, (std::vector<std::uint64_t>{100, 0, 0, 50}));
  // The edges: kernel bucket 0 → index -31, the overflow bucket 39 → index 8.
  auto m = select(points, "stallwatch.cuda.call.duration", {{"call", "cudaMalloc"}});
  ASSERT_EQ(m.size(), 1u);
  std::string_view mp = one(m[0].point, 8).bytes;
  EXPECT_EQ(one(mp, 1).as_sint(), -31);
  packed = one(mp, 2).bytes;
  counts.clear();
  for (std::uint64_t v; !packed.empty() && prototest::read_varint(packed, v);) counts.push_back(v);
  ASSERT_EQ(counts.size(), 40u);
  EXPECT_EQ(counts.front(), 1u);
  EXPECT_EQ(counts.back(), 1u);
}

TEST(OtlpMetricsTest, DeltaSumsToTheCumulativeChangeAndHandlesResets) {
  MetricsEncoder enc(options(Temporality::kDelta));
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> steps = {
      {100, 3 * kS}, {160, 5 * kS}, {160, 5 * kS}, {20, 1 * kS} /* reset */, {50, 2 * kS}};
  double runnable_sum = 0;
  std::uint64_t sync_count = 0;
  std::uint64_t prev_time = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto points = flatten(enc.encode(snapshot(i + 1, steps[i].first, steps[i].second), kBuild));
    auto off = select(points, "stallwatch.cuda.call.offcpu", {{"state", "runnable"}}, kPod);
    ASSERT_EQ(off.size(), 1u);
    EXPECT_EQ(off[0].temporality, 1u);  // DELTA
    const double v = one(off[0].point, 4).as_double();
    const std::uint64_t start = one(off[0].point, 2).scalar, time = one(off[0].point, 3).scalar;
    EXPECT_EQ(time, kStart + (i + 1) * 5 * kS);
    EXPECT_EQ(start, i == 0 ? kStart : prev_time) << "window " << i;
    prev_time = time;
    auto dur = select(points, "stallwatch.cuda.call.duration", {{"call", "cudaStreamSynchronize"}});
    ASSERT_EQ(dur.size(), 1u);
    const std::uint64_t n = one(dur[0].point, 4).scalar;
    // A maximum cannot be differenced: only points that cover the series' whole life (the
    // first, and the first after a reset) carry one.
    EXPECT_EQ(one(dur[0].point, 12).scalar != 0, i == 0 || i == 3) << "window " << i;
    if (i == 3) {
      // The counter went from 5 s to 1 s: a reset. The new value is the delta.
      EXPECT_DOUBLE_EQ(v, 1.0);
      EXPECT_EQ(n, 30u);
    }
    runnable_sum += v;
    sync_count += n;
  }
  EXPECT_DOUBLE_EQ(runnable_sum, 5.0 + 2.0);  // up to the reset, then after it
  EXPECT_EQ(sync_count, 240u + 75u);
}

TEST(OtlpMetricsTest, SameSnapshotTwiceSendsNothingAndVanishedSeriesAreForgotten) {
  MetricsEncoder enc(options(Temporality::kDelta));
  EXPECT_FALSE(enc.encode(snapshot(1, 100, kS), kBuild).empty());
  EXPECT_TRUE(enc.encode(snapshot(1, 100, kS), kBuild).empty());
  const size_t tracked = enc.tracked_series();
  Snapshot s = snapshot(2, 100, kS);
  s.series.erase(kPod);
  const auto points = flatten(enc.encode(s, kBuild));
  EXPECT_TRUE(select(points, "stallwatch.cuda.call.duration", {}, kPod).empty());
  EXPECT_LT(enc.tracked_series(), tracked);
  // The pod comes back: its first point counts from the previous export.
  const auto back = flatten(enc.encode(snapshot(3, 10, kS), kBuild));
  auto dur = select(back, "stallwatch.cuda.call.duration", {{"call", "cudaStreamSynchronize"}});
  ASSERT_EQ(dur.size(), 1u);
  EXPECT_EQ(one(dur[0].point, 4).scalar, 15u);
  EXPECT_EQ(one(dur[0].point, 2).scalar, kStart + 2 * 5 * kS);
}

TEST(OtlpMetricsTest, RequestsStayUnderTheSizeLimit) {
  Snapshot s = snapshot(1, 10, kS);
  auto calls = trace::all_calls();
  for (int g = 0; g < 300; ++g) {
    const std::string cgroup = "/system.slice/job-" + std::to_string(g) + ".service";
    Series& series = s.series[cgroup];
    series.identity = identity::parse_cgroup_path(cgroup);
    for (std::uint32_t id = 0; id < 40 && id < calls.size(); ++id) {
      CallTotals t;
      t.buckets[20 + id % 10] = 3;
      t.count = 3;
      series.calls[id] = t;
    }
  }
  MetricsEncoder enc(options(Temporality::kCumulative));
  const auto payloads = enc.encode(s, kBuild);
  ASSERT_GT(payloads.size(), 1u);
  std::uint64_t points = 0;
  for (const auto& p : payloads) {
    EXPECT_LE(p.body.size(), kMaxRequestBytes);
    points += p.points;
  }
  const auto decoded = flatten(payloads);
  EXPECT_EQ(decoded.size(), points);
  // 300 workloads × 40 calls: every histogram is there exactly once.
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& d : select(decoded, "stallwatch.cuda.call.duration")) {
    EXPECT_TRUE(seen.insert({attribute(d.resource, 1, "stallwatch.cgroup"),
                             attribute(d.point, 9, "call")})
                    .second);
  }
  EXPECT_EQ(seen.size(), 300u * 40u + 2u);
}

chains::Chain chain(std::string id, chains::Severity sev, bool open) {
  chains::Chain c;
  c.id = std::move(id);
  c.kind = chains::Kind::kCpuContention;
  c.severity = sev;
  c.peak = sev;
  c.open = open;
  c.identity = identity::parse_cgroup_path(kPod);
  c.pid = 4242;
  c.comm = "python3";
  c.call = "cudaStreamSynchronize";
  c.api = "runtime";
  c.p99_s = 0.007;
  c.baseline_p99_s = 0.000007;
  c.ratio = 1000;
  c.opened_ns = static_cast<std::int64_t>(kStart);
  c.updated_ns = static_cast<std::int64_t>(kStart + 10 * kS);
  c.summary = "[HIGH] cpu_contention: cudaStreamSynchronize p99 7 ms (was 7 µs)";
  c.evidence = {{"runnable_share", 0.52}};
  c.contributors = {{"fluent-bit", 77, "/system.slice/fluent-bit.service", "preemptor", 1, 2, {}}};
  return c;
}

TEST(OtlpLogsTest, OneRecordPerOpeningSeverityChangeAndClosing) {
  ChainLog log;
  using chains::Severity;
  auto e1 = log.select({chain("a", Severity::kHigh, true)}, 1);
  ASSERT_EQ(e1.size(), 1u);
  EXPECT_EQ(e1[0].state, "opened");
  EXPECT_TRUE(log.select({chain("a", Severity::kHigh, true)}, 2).empty()) << "no news";
  auto e3 = log.select({chain("a", Severity::kCritical, true)}, 3);
  ASSERT_EQ(e3.size(), 1u);
  EXPECT_EQ(e3[0].state, "updated");
  auto e4 = log.select({chain("a", Severity::kCritical, false)}, 4);
  ASSERT_EQ(e4.size(), 1u);
  EXPECT_EQ(e4[0].state, "closed");
  EXPECT_EQ(log.tracked(), 0u);
  // Opened and closed within one window: both records.
  auto e5 = log.select({chain("b", Severity::kLow, false)}, 5);
  ASSERT_EQ(e5.size(), 2u);
  EXPECT_EQ(e5[0].state, "opened");
  EXPECT_EQ(e5[1].state, "closed");
  EXPECT_EQ(log.tracked(), 0u);
}

TEST(OtlpLogsTest, RecordCarriesSeverityBodyAndEvidence) {
  ChainLog log;
  const auto events = log.select({chain("a", chains::Severity::kHigh, true),
                                  chain("b", chains::Severity::kCritical, true)},
                                 kStart + 11 * kS);
  const auto payloads = encode_chain_logs(events, {{{"host.name", "gpu-node-7"}}}, "9.9.9",
                                          kMaxRequestBytes);
  ASSERT_EQ(payloads.size(), 1u);
  EXPECT_EQ(payloads[0].signal, Signal::kLogs);
  EXPECT_EQ(payloads[0].points, 2u);
  const auto rl = all(payloads[0].body, 1);
  ASSERT_EQ(rl.size(), 1u);  // one workload, one resource
  EXPECT_EQ(attribute(one(rl[0].bytes, 1).bytes, 1, "stallwatch.cgroup"), kPod);
  const auto records = all(one(rl[0].bytes, 2).bytes, 2);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(one(records[0].bytes, 2).scalar, 17u);  // ERROR
  EXPECT_EQ(one(records[1].bytes, 2).scalar, 21u);  // FATAL
  EXPECT_EQ(one(records[0].bytes, 3).bytes, "ERROR");
  EXPECT_EQ(one(one(records[0].bytes, 5).bytes, 1).bytes, chain("a", chains::Severity::kHigh, true).summary);
  EXPECT_EQ(one(records[0].bytes, 1).scalar, kStart);  // opened at
  EXPECT_EQ(one(records[0].bytes, 11).scalar, kStart + 11 * kS);
  EXPECT_EQ(attribute(records[0].bytes, 6, "stallwatch.chain.kind"), "cpu_contention");
  EXPECT_EQ(attribute(records[0].bytes, 6, "stallwatch.chain.state"), "opened");
  EXPECT_EQ(attribute(records[0].bytes, 6, "stallwatch.evidence.runnable_share"), "0.520000");
  EXPECT_EQ(attribute(records[0].bytes, 6, "process.pid"), "4242");
  EXPECT_EQ(attribute(records[0].bytes, 6, "stallwatch.chain.contributors"),
            "fluent-bit (pid 77, preemptor)");
  // No site known: no code attributes.
  EXPECT_EQ(attribute(records[0].bytes, 6, "code.function.name"), "<absent>");
}

TEST(OtlpLogsTest, TopSiteAsOpenTelemetryCodeAttributes) {
  ChainLog log;
  chains::Chain c = chain("s", chains::Severity::kHigh, true);
  chains::CallSite site;
  site.call = "cudaStreamSynchronize";
  site.share = 0.83;
  chains::SiteFrame settle, epoch, ffi;
  settle.python = epoch.python = true;
  settle.function = "settle";
  settle.file = epoch.file = "/app/train.py";
  settle.line = 87;
  epoch.function = "epoch";
  epoch.line = 120;
  ffi.module = "libffi.so.8";
  ffi.offset = 0x6f7a;
  site.frames = {settle, epoch, ffi};
  c.sites = {site};
  const auto payloads = encode_chain_logs(log.select({c}, kStart + kS), {}, "9.9.9", kMaxRequestBytes);
  ASSERT_EQ(payloads.size(), 1u);
  const auto records = all(one(one(payloads[0].body, 1).bytes, 2).bytes, 2);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(attribute(records[0].bytes, 6, "code.function.name"), "settle");
  EXPECT_EQ(attribute(records[0].bytes, 6, "code.file.path"), "/app/train.py");
  EXPECT_EQ(attribute(records[0].bytes, 6, "code.line.number"), "87");
  EXPECT_EQ(attribute(records[0].bytes, 6, "code.stacktrace"),
            "settle() at /app/train.py:87\nepoch() at /app/train.py:120\nlibffi.so.8+0x6f7a");
  EXPECT_EQ(attribute(records[0].bytes, 6, "stallwatch.site"),
            "settle() at /app/train.py:87  <- epoch() at /app/train.py:120");
}

// ---- configuration ----

Getenv env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

Result<PushConfig> resolve(const PushFlags& flags, std::map<std::string, std::string> vars) {
  return resolve_push_config(flags, env_of(std::move(vars)), "gpu-node-7", "9.9.9");
}

TEST(OtlpConfigTest, OffWithoutAnEndpoint) {
  auto c = resolve({}, {});
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->enabled);
  EXPECT_EQ(describe(*c), "off");
}

TEST(OtlpConfigTest, BaseEndpointGetsTheSignalPaths) {
  auto c = resolve({}, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->enabled);
  EXPECT_EQ(c->delivery.metrics_url, "http://collector:4318/v1/metrics");
  EXPECT_EQ(c->delivery.logs_url, "http://collector:4318/v1/logs");
  EXPECT_EQ(c->temporality, Temporality::kCumulative);
  EXPECT_EQ(c->interval, std::chrono::seconds(15));
  EXPECT_TRUE(c->delivery.gzip);
  EXPECT_EQ(c->delivery.timeout, std::chrono::seconds(10));
}

TEST(OtlpConfigTest, SignalEndpointIsUsedAsIsAndTheFlagWins) {
  auto c = resolve({}, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"},
                        {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "https://b/api/otlp/v1/metrics"}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->delivery.metrics_url, "https://b/api/otlp/v1/metrics");
  EXPECT_EQ(c->delivery.logs_url, "http://a:4318/v1/logs");
  PushFlags f;
  f.endpoint = "http://127.0.0.1:4318";
  c = resolve(f, {{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "https://b/v1/metrics"}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->delivery.metrics_url, "http://127.0.0.1:4318/v1/metrics");
  f.endpoint = "https://intake.example/api/otlp/v1/metrics";
  f.logs_endpoint = "none";
  c = resolve(f, {});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->delivery.metrics_url, f.endpoint);
  EXPECT_EQ(c->delivery.logs_url, "");
}

TEST(OtlpConfigTest, HeadersMergeFlagsWinAndSecretsStayOutOfDescribe) {
  PushFlags f;
  f.endpoint = "https://user:pw@intake.example:443/otlp?api_key=abc";
  f.headers = {"DD-API-KEY=from-flag"};
  auto c = resolve(f, {{"OTEL_EXPORTER_OTLP_HEADERS", "dd-api-key=from-env, x-team=gpu%20infra"},
                       {"OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-metrics=1"},
                       {"OTEL_EXPORTER_OTLP_LOGS_HEADERS", "x-logs=1"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->delivery.headers,
            (Headers{{"dd-api-key", "from-flag"}, {"x-team", "gpu infra"}, {"x-metrics", "1"}}));
  EXPECT_EQ(c->logs_headers,
            (Headers{{"dd-api-key", "from-flag"}, {"x-team", "gpu infra"}, {"x-logs", "1"}}));
  const std::string line = describe(*c);
  EXPECT_EQ(line.find("from-flag"), std::string::npos) << line;
  EXPECT_EQ(line.find("pw"), std::string::npos) << line;
  EXPECT_EQ(line.find("abc"), std::string::npos) << line;
  EXPECT_NE(line.find("dd-api-key"), std::string::npos) << line;
  EXPECT_EQ(redact_url("https://u:p@h:1/v1/metrics?k=v"), "https://h:1/v1/metrics");
}

TEST(OtlpConfigTest, TemporalityIntervalAndResourceFromTheEnvironment) {
  auto c = resolve({}, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"},
                        {"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta"},
                        {"OTEL_METRIC_EXPORT_INTERVAL", "2500"},
                        {"OTEL_EXPORTER_OTLP_TIMEOUT", "3000"},
                        {"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.name=x"},
                        {"OTEL_SERVICE_NAME", "gpu-watch"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->temporality, Temporality::kDelta);
  EXPECT_EQ(c->interval, std::chrono::milliseconds(2500));
  EXPECT_EQ(c->delivery.timeout, std::chrono::milliseconds(3000));
  EXPECT_EQ(c->resource.attributes, (metrics::LabelPairs{{"host.name", "gpu-node-7"},
                                                          {"service.name", "gpu-watch"},
                                                          {"service.version", "9.9.9"},
                                                          {"deployment.environment", "prod"}}));
  PushFlags f;
  f.temporality = "cumulative";
  f.interval = std::chrono::seconds(1);
  c = resolve(f, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"},
                  {"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta"},
                  {"OTEL_METRIC_EXPORT_INTERVAL", "2500"}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->temporality, Temporality::kCumulative);
  EXPECT_EQ(c->interval, std::chrono::seconds(1));
}

TEST(OtlpConfigTest, BadInputNamesTheSourceAndNeverTheSecret) {
  const std::map<std::string, std::string> base = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"}};
  auto with = [&](std::string k, std::string v) {
    auto m = base;
    m[k] = v;
    return resolve({}, m);
  };
  auto c = with("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "sometimes");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("cumulative, delta or lowmemory"), std::string::npos);
  c = with("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("http/protobuf"), std::string::npos);
  c = with("OTEL_EXPORTER_OTLP_HEADERS", "dd-api-key=ok,s3cr3t-no-equals");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("item 2"), std::string::npos);
  EXPECT_EQ(c.error().message.find("s3cr3t"), std::string::npos);
  c = with("OTEL_METRIC_EXPORT_INTERVAL", "15s");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("milliseconds"), std::string::npos);
  PushFlags no_scheme;
  no_scheme.endpoint = "collector:4318";
  c = resolve(no_scheme, {});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("http://"), std::string::npos);
  PushFlags f;
  EXPECT_FALSE(set_push_flag(f, "otlp-interval", "soon"));
  EXPECT_FALSE(set_push_flag(f, "otlp-max-queue", "lots"));
  EXPECT_TRUE(set_push_flag(f, "otlp-header", "a=b"));
  EXPECT_TRUE(set_push_flag(f, "otlp-header", "c=d"));
  EXPECT_EQ(f.headers.size(), 2u);
}

// TLS files (issue #15): flag > OTEL_EXPORTER_OTLP_<SIGNAL>_<X> > OTEL_EXPORTER_OTLP_<X>, each
// checked readable at start; a client certificate needs its key.
TEST(OtlpConfigTest, TlsFilesPerSignal) {
  const std::string dir = ::testing::TempDir();
  const std::string ca = dir + "/otlp-ca.pem", logs_ca = dir + "/otlp-logs-ca.pem",
                    crt = dir + "/otlp-client.pem", key = dir + "/otlp-client.key";
  for (const auto& f : {ca, logs_ca, crt, key}) std::ofstream(f) << "-----BEGIN X-----\n";
  auto c = resolve({}, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel:4318"},
                        {"OTEL_EXPORTER_OTLP_CERTIFICATE", ca},
                        {"OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE", logs_ca},
                        {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", crt},
                        {"OTEL_EXPORTER_OTLP_CLIENT_KEY", key}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->delivery.tls, (TlsFiles{ca, crt, key}));
  EXPECT_EQ(c->delivery.logs_tls, (TlsFiles{logs_ca, crt, key}));

  PushFlags flags;
  ASSERT_TRUE(set_push_flag(flags, "otlp-certificate", logs_ca));
  c = resolve(flags, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel:4318"},
                      {"OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", ca}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->delivery.tls.certificate, logs_ca) << "the flag wins over the variables";

  c = resolve({}, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel:4318"},
                   {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", crt}});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("needs both a client certificate and its key"),
            std::string::npos) << c.error().message;

  c = resolve({}, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel:4318"},
                   {"OTEL_EXPORTER_OTLP_CERTIFICATE", dir + "/missing.pem"}});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message, "OTEL_EXPORTER_OTLP_CERTIFICATE " + dir +
                                   "/missing.pem: not a readable file (a PEM certificate or key)");
}

}  // namespace
}  // namespace stallwatch::otlp
