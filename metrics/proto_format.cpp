#include "metrics/proto_format.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "metrics/otlp/protobuf.h"
#include "trace/histogram.h"

namespace stallwatch::metrics {
namespace {

using otlp::ProtoWriter;

// io.prometheus.client field numbers.
constexpr std::uint32_t kFamilyName = 1, kFamilyHelp = 2, kFamilyType = 3, kFamilyMetric = 4;
constexpr std::uint64_t kTypeCounter = 0, kTypeGauge = 1, kTypeHistogram = 4;
constexpr std::uint32_t kMetricLabel = 1, kMetricGauge = 2, kMetricCounter = 3,
                        kMetricHistogram = 7;
constexpr std::uint32_t kLabelName = 1, kLabelValue = 2;
constexpr std::uint32_t kValue = 1;  // Gauge.value, Counter.value
constexpr std::uint32_t kHistCount = 1, kHistSum = 2, kHistBucket = 3, kHistSchema = 5,
                        kHistZeroThreshold = 6, kHistZeroCount = 7, kHistPositiveSpan = 12,
                        kHistPositiveDelta = 13;
constexpr std::uint32_t kBucketCumulative = 1, kBucketUpperBound = 2;
constexpr std::uint32_t kSpanOffset = 1, kSpanLength = 2;

void label(ProtoWriter& m, std::string_view name, std::string_view value) {
  ProtoWriter l;
  l.string_field(kLabelName, name);
  l.string_field(kLabelValue, value);
  m.message_field(kMetricLabel, l);
}

std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}

void native(ProtoWriter& h, const trace::KernelBuckets& b) {
  h.sint32_field(kHistSchema, 0);
  h.double_field(kHistZeroThreshold, 1.0 / static_cast<double>(1ULL << trace::kTickShift));
  h.uint64_field(kHistZeroCount, b[0]);
  // Spans of consecutive non-empty buckets, indices k - kTickShift; deltas across all spans.
  std::int64_t previous_count = 0;
  int previous_end = 0;  // index after the last span's last bucket
  bool first = true;
  ProtoWriter deltas;
  for (size_t k = 1; k < b.size();) {
    if (b[k] == 0) {
      ++k;
      continue;
    }
    size_t end = k;
    while (end < b.size() && b[end] != 0) ++end;
    const int index = static_cast<int>(k) - trace::kTickShift;
    ProtoWriter span;
    span.sint32_field(kSpanOffset, first ? index : index - previous_end);
    span.uint64_field(kSpanLength, end - k);
    h.message_field(kHistPositiveSpan, span);
    for (size_t i = k; i < end; ++i) {
      const auto count = static_cast<std::int64_t>(b[i]);
      h.tag(kHistPositiveDelta, ProtoWriter::kVarint);
      h.varint(zigzag(count - previous_count));
      previous_count = count;
    }
    previous_end = static_cast<int>(end) - trace::kTickShift;
    first = false;
    k = end;
  }
  if (first) {  // no observation above the zero bucket: a no-op span keeps it native
    ProtoWriter span;
    span.sint32_field(kSpanOffset, 0);
    span.uint64_field(kSpanLength, 0);
    h.message_field(kHistPositiveSpan, span);
  }
}

}  // namespace

std::string render_protobuf(const std::vector<Family>& families, bool classic,
                            int ladder_step) {
  const size_t step = ladder_step > 1 ? static_cast<size_t>(ladder_step) : 1;
  const std::vector<double> bounds = trace::exported_bounds();
  std::string out;
  for (const Family& f : families) {
    ProtoWriter fam;
    fam.string_field(kFamilyName, f.name);
    fam.string_field(kFamilyHelp, f.help);
    fam.uint64_field(kFamilyType, f.kind == MetricKind::kCounter   ? kTypeCounter
                                  : f.kind == MetricKind::kGauge ? kTypeGauge
                                                                 : kTypeHistogram);
    for (const Point& p : f.points) {
      ProtoWriter m;
      if (p.workload) {
        for (const auto& [name, value] : identity_labels(*p.workload)) label(m, name, value);
      }
      for (const auto& [name, value] : p.labels) label(m, name, value);
      if (f.kind == MetricKind::kHistogram) {
        const HistogramValue& v = p.histogram;
        ProtoWriter h;
        h.uint64_field(kHistCount, v.count);
        h.double_field(kHistSum, static_cast<double>(v.sum_ns) / 1e9);
        if (classic) {
          const auto counts = trace::fold_to_exported(v.buckets);
          std::uint64_t cumulative = 0;
          for (size_t i = 0; i < bounds.size(); ++i) {
            cumulative += counts[i];
            if (i % step != 0) continue;
            ProtoWriter bucket;
            bucket.uint64_field(kBucketCumulative, cumulative);
            bucket.double_field(kBucketUpperBound, bounds[i]);
            h.message_field(kHistBucket, bucket);
          }
        }
        native(h, v.buckets);
        m.message_field(kMetricHistogram, h);
      } else {
        ProtoWriter v;
        v.double_field(kValue, p.value);
        m.message_field(f.kind == MetricKind::kCounter ? kMetricCounter : kMetricGauge, v);
      }
      fam.message_field(kFamilyMetric, m);
    }
    ProtoWriter len;
    len.varint(fam.size());
    out += len.data();
    out += fam.data();
  }
  return out;
}

bool accepts_protobuf(std::string_view accept) {
  // Each comma-separated media range: the protobuf type with proto=...MetricFamily and
  // encoding=delimited, and no q=0.
  size_t start = 0;
  while (start <= accept.size()) {
    size_t end = accept.find(',', start);
    if (end == std::string_view::npos) end = accept.size();
    std::string range(accept.substr(start, end - start));
    for (auto& c : range) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string compact;
    for (char c : range) {
      if (c != ' ' && c != '\t') compact += c;
    }
    if (compact.rfind("application/vnd.google.protobuf", 0) == 0 &&
        compact.find("proto=io.prometheus.client.metricfamily") != std::string::npos &&
        compact.find("encoding=delimited") != std::string::npos) {
      const size_t q = compact.find(";q=");
      if (q == std::string::npos || std::strtod(compact.c_str() + q + 3, nullptr) > 0) return true;
    }
    start = end + 1;
  }
  return false;
}

}  // namespace stallwatch::metrics
