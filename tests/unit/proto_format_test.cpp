// Unit tier: the protobuf exposition (metrics/proto_format.h) read back field by field: a
// native histogram of schema 0 from the kernel's buckets (zero bucket, spans, deltas), the
// classic buckets beside it or not, counters and gauges with their labels, the length
// delimiting; and the Accept negotiation. The e2e tier has a real Prometheus ingest it.
#include "metrics/proto_format.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "proto_reader.h"

namespace stallwatch::metrics {
namespace {

using prototest::Field;
using prototest::fields;

// The delimited MetricFamily messages of a body.
std::vector<std::string_view> families(std::string_view body) {
  std::vector<std::string_view> out;
  while (!body.empty()) {
    std::uint64_t len = 0;
    EXPECT_TRUE(prototest::read_varint(body, len));
    EXPECT_LE(len, body.size());
    out.push_back(body.substr(0, len));
    body.remove_prefix(len);
  }
  return out;
}

std::vector<Field> all(const std::vector<Field>& f, std::uint32_t n) {
  std::vector<Field> out;
  for (const auto& x : f) {
    if (x.number == n) out.push_back(x);
  }
  return out;
}

const Field& one(const std::vector<Field>& f, std::uint32_t n) {
  for (const auto& x : f) {
    if (x.number == n) return x;
  }
  static const Field none;
  ADD_FAILURE() << "no field " << n;
  return none;
}

std::vector<Family> model() {
  static identity::Identity id = [] {
    identity::Identity i;
    i.cgroup = "/job";
    return i;
  }();
  Family h{"stallwatch_cuda_call_duration_seconds", "Wall time.", MetricKind::kHistogram, "s", {}};
  Point p;
  p.workload = &id;
  p.labels = {{"api", "runtime"}, {"call", "cudaStreamSynchronize"}};
  p.histogram.buckets[0] = 2;   // the zero bucket
  p.histogram.buckets[31] = 5;  // (1 s, 2 s]: native index 1
  p.histogram.buckets[33] = 3;  // (4 s, 8 s]: native index 3
  p.histogram.count = 10;
  p.histogram.sum_ns = 30'000'000'000;
  h.points.push_back(p);
  Family c{"stallwatch_outliers_total", "Outliers.", MetricKind::kCounter, "{call}", {}};
  Point q;
  q.value = 17;
  c.points.push_back(q);
  Family g{"stallwatch_traced_processes", "Processes.", MetricKind::kGauge, "{process}", {}};
  Point r;
  r.value = 3;
  g.points.push_back(r);
  return {h, c, g};
}

TEST(ProtoFormatTest, NativeHistogramFromKernelBuckets) {
  const std::string body = render_protobuf(model(), false);
  const auto fams = families(body);
  ASSERT_EQ(fams.size(), 3u);
  const auto f = fields(fams[0]);
  EXPECT_EQ(one(f, 1).bytes, "stallwatch_cuda_call_duration_seconds");
  EXPECT_EQ(one(f, 3).scalar, 4u);  // HISTOGRAM
  const auto metrics = all(f, 4);
  ASSERT_EQ(metrics.size(), 1u);
  const auto m = fields(metrics[0].bytes);
  const auto labels = all(m, 1);
  // An identity the exposition has not shaped: its key, then its cgroup path.
  ASSERT_EQ(labels.size(), 4u);  // workload, cgroup, api, call
  EXPECT_EQ(one(fields(labels[0].bytes), 1).bytes, "workload");
  EXPECT_EQ(one(fields(labels[0].bytes), 2).bytes, "/job");
  EXPECT_EQ(one(fields(labels[1].bytes), 1).bytes, "cgroup");
  EXPECT_EQ(one(fields(labels[3].bytes), 2).bytes, "cudaStreamSynchronize");
  const auto h = fields(one(m, 7).bytes);
  EXPECT_EQ(one(h, 1).scalar, 10u);
  EXPECT_DOUBLE_EQ(one(h, 2).as_double(), 30.0);
  EXPECT_TRUE(all(h, 3).empty()) << "no classic buckets";
  EXPECT_EQ(one(h, 5).as_sint(), 0);  // schema 0
  EXPECT_DOUBLE_EQ(one(h, 6).as_double(), 1.0 / (1ULL << 30));
  EXPECT_EQ(one(h, 7).scalar, 2u);
  const auto spans = all(h, 12);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(one(fields(spans[0].bytes), 1).as_sint(), 1);  // starts at index 1
  EXPECT_EQ(one(fields(spans[0].bytes), 2).scalar, 1u);
  EXPECT_EQ(one(fields(spans[1].bytes), 1).as_sint(), 1);  // gap of one (index 2 is empty)
  EXPECT_EQ(one(fields(spans[1].bytes), 2).scalar, 1u);
  const auto deltas = all(h, 13);
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[0].as_sint(), 5);
  EXPECT_EQ(deltas[1].as_sint(), -2);
}

TEST(ProtoFormatTest, ClassicBucketsRideAlongAndScalarsKeepTheirType) {
  const std::string body = render_protobuf(model(), true);
  const auto fams = families(body);
  const auto h = fields(one(fields(one(fields(fams[0]), 4).bytes), 7).bytes);
  const auto buckets = all(h, 3);
  ASSERT_EQ(buckets.size(), trace::exported_bounds().size());
  std::uint64_t last = 0;
  for (const auto& b : buckets) {
    const auto bf = fields(b.bytes);
    EXPECT_GE(one(bf, 1).scalar, last) << "cumulative";
    last = one(bf, 1).scalar;
  }
  EXPECT_EQ(last, 10u) << "every observation is at or below the last finite bound";
  EXPECT_FALSE(all(h, 12).empty()) << "native too";

  const auto c = fields(fams[1]);
  EXPECT_EQ(one(c, 3).scalar, 0u);  // COUNTER
  EXPECT_DOUBLE_EQ(one(fields(one(fields(one(c, 4).bytes), 3).bytes), 1).as_double(), 17.0);
  const auto g = fields(fams[2]);
  EXPECT_EQ(one(g, 3).scalar, 1u);  // GAUGE
  EXPECT_DOUBLE_EQ(one(fields(one(fields(one(g, 4).bytes), 2).bytes), 1).as_double(), 3.0);
}

TEST(ProtoFormatTest, EmptyHistogramStaysNative) {
  auto m = model();
  m[0].points[0].histogram = HistogramValue{};
  const std::string body = render_protobuf(m, false);
  const auto h = fields(one(fields(one(fields(families(body)[0]), 4).bytes), 7).bytes);
  const auto spans = all(h, 12);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(one(fields(spans[0].bytes), 2).scalar, 0u) << "a no-op span";
}

TEST(ProtoFormatTest, AcceptNegotiation) {
  // Prometheus 2.42 with --enable-feature=native-histograms.
  EXPECT_TRUE(accepts_protobuf(
      "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,"
      "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"));
  // Without the feature.
  EXPECT_FALSE(accepts_protobuf(
      "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
      "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"));
  EXPECT_FALSE(accepts_protobuf(""));
  EXPECT_FALSE(accepts_protobuf("*/*"));
  EXPECT_FALSE(accepts_protobuf(
      "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; q=0"));
  EXPECT_FALSE(accepts_protobuf("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"));
  EXPECT_TRUE(accepts_protobuf(
      "text/plain, Application/Vnd.Google.Protobuf; Proto=io.prometheus.client.MetricFamily; Encoding=delimited"));
}

}  // namespace
}  // namespace stallwatch::metrics
