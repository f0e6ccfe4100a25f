#include "metrics/otlp/metrics_encoder.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "trace/histogram.h"

namespace stallwatch::otlp {
namespace {

using metrics::Family;
using metrics::HistogramValue;
using metrics::MetricKind;
using metrics::Point;

// metrics.v1.AggregationTemporality
constexpr std::uint64_t kDelta = 1;
constexpr std::uint64_t kCumulative = 2;

// Kernel bucket k holds (2^(k-31), 2^(k-30)] seconds (bpf/stallwatch.h): base-2 exponential
// index k - 31 at scale 0. Bucket 0 also holds 0 ns and the last one everything above 256 s:
// both are reported in their neighbouring exponential bucket (a 0 ns or > 512 s CUDA call is
// not a thing that happens).
constexpr int kExponentialOffset = -31;

double seconds(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

// Attributes of a data point: the point's labels without empty values (Prometheus reads an
// empty label as an absent one; OTLP would keep it).
void write_point_attributes(ProtoWriter& w, std::uint32_t field, const Point& p) {
  for (const auto& [key, value] : p.labels) {
    if (!value.empty()) write_attribute(w, field, key, std::string_view(value));
  }
}

// A histogram that shrank anywhere was reset (its series restarted from zero).
bool histogram_reset(const HistogramValue& cur, const HistogramValue& prev) {
  if (cur.count < prev.count || cur.sum_ns < prev.sum_ns) return true;
  for (size_t k = 0; k < cur.buckets.size(); ++k) {
    if (cur.buckets[k] < prev.buckets[k]) return true;
  }
  return false;
}

// The change from `prev` to `cur` (no reset between them). A maximum cannot be differenced:
// the delta carries none.
HistogramValue histogram_delta(const HistogramValue& cur, const HistogramValue& prev) {
  HistogramValue d = cur;
  d.max_ns = 0;
  d.count -= prev.count;
  d.sum_ns -= prev.sum_ns;
  for (size_t k = 0; k < d.buckets.size(); ++k) d.buckets[k] -= prev.buckets[k];
  return d;
}

std::string encode_number_point(const Point& p, double value, std::uint64_t start_ns,
                                std::uint64_t time_ns, bool with_start) {
  // metrics.v1.NumberDataPoint { start = 2; time = 3; as_double = 4; attributes = 7 }
  ProtoWriter w;
  write_point_attributes(w, 7, p);
  if (with_start) w.fixed64_field(2, start_ns);
  w.fixed64_field(3, time_ns);
  w.double_field(4, value);
  return w.take();
}

std::string encode_explicit_point(const Point& p, const HistogramValue& h, std::uint64_t start_ns,
                                  std::uint64_t time_ns) {
  // metrics.v1.HistogramDataPoint { start = 2; time = 3; count = 4; sum = 5;
  //   bucket_counts = 6 (packed fixed64); explicit_bounds = 7 (packed double);
  //   attributes = 9; max = 12 }
  ProtoWriter w;
  write_point_attributes(w, 9, p);
  w.fixed64_field(2, start_ns);
  w.fixed64_field(3, time_ns);
  w.fixed64_field(4, h.count);
  w.double_field(5, seconds(h.sum_ns));
  ProtoWriter counts, bounds;
  for (std::uint64_t c : trace::fold_to_exported(h.buckets)) counts.fixed64_raw(c);
  for (double b : trace::exported_bounds()) {
    std::uint64_t bits;
    std::memcpy(&bits, &b, sizeof bits);
    bounds.fixed64_raw(bits);
  }
  w.bytes_field(6, counts.data());
  w.bytes_field(7, bounds.data());
  if (h.max_ns > 0) w.double_field(12, seconds(h.max_ns));
  return w.take();
}

std::string encode_exponential_point(const Point& p, const HistogramValue& h,
                                     std::uint64_t start_ns, std::uint64_t time_ns) {
  // metrics.v1.ExponentialHistogramDataPoint { attributes = 1; start = 2; time = 3; count = 4;
  //   sum = 5; scale = 6 (sint32); zero_count = 7; positive = 8; max = 13 }
  // Buckets { offset = 1 (sint32); bucket_counts = 2 (packed uint64) }
  ProtoWriter w;
  write_point_attributes(w, 1, p);
  w.fixed64_field(2, start_ns);
  w.fixed64_field(3, time_ns);
  w.fixed64_field(4, h.count);
  w.double_field(5, seconds(h.sum_ns));
  w.sint32_field(6, 0);
  w.fixed64_field(7, 0);
  size_t first = h.buckets.size(), last = 0;
  for (size_t k = 0; k < h.buckets.size(); ++k) {
    if (h.buckets[k] == 0) continue;
    first = std::min(first, k);
    last = k;
  }
  if (first < h.buckets.size()) {
    ProtoWriter buckets, counts;
    buckets.sint32_field(1, static_cast<std::int32_t>(first) + kExponentialOffset);
    for (size_t k = first; k <= last; ++k) counts.varint(h.buckets[k]);
    buckets.bytes_field(2, counts.data());
    w.message_field(8, buckets);
  }
  if (h.max_ns > 0) w.double_field(13, seconds(h.max_ns));
  return w.take();
}

// Metric { name = 1; description = 2; unit = 3 } and the data field: gauge = 5, sum = 7,
// histogram = 9, exponential_histogram = 10.
ProtoWriter metric_header(const Family& f, const std::string& name) {
  ProtoWriter m;
  m.string_field(1, name);
  m.string_field(2, f.help);
  m.string_field(3, f.unit);
  return m;
}

std::uint32_t data_field(const Family& f, HistogramFormat format) {
  switch (f.kind) {
    case MetricKind::kGauge:
      return 5;
    case MetricKind::kCounter:
      return 7;
    case MetricKind::kHistogram:
      break;
  }
  return format == HistogramFormat::kExplicit ? 9 : 10;
}

std::string series_key(const Family& f, const Point& p) {
  std::string key = f.name;
  key += '\x1f';
  if (p.workload) key += p.workload->cgroup;
  for (const auto& [name, value] : p.labels) {
    key += '\x1f';
    key += name;
    key += '=';
    key += value;
  }
  return key;
}

}  // namespace

MetricsEncoder::MetricsEncoder(MetricsEncoderOptions options) : options_(std::move(options)) {}

std::vector<Payload> MetricsEncoder::encode(const Snapshot& snap, const metrics::BuildInfo& build) {
  const auto time_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(snap.taken.time_since_epoch()).count());
  if (snap.sequence <= last_sequence_ || time_ns <= last_time_ns_) return {};
  const bool delta = options_.temporality != Temporality::kCumulative;
  // Where a series seen now for the first time started counting: after the previous export
  // (it was not there then), or at the daemon's start.
  const std::uint64_t fresh_start = last_time_ns_ ? last_time_ns_ : options_.start_ns;

  std::vector<Family> families = metrics::build_model(snap, build);
  // The same series as /metrics at its defaults (issue #37): a Datadog custom metric per class
  // of call and workload, not per call.
  if (!options_.per_call) metrics::merge_per_class(families);
  // Resources: 0 is the daemon's own; then one per workload, in snapshot order, carrying the
  // workload key /metrics gives it.
  const auto keys = metrics::workload_keys(families);
  std::deque<identity::Identity> keyed;
  std::vector<std::string> resources{encode_resource(options_.resource, nullptr)};
  std::map<std::string, size_t> resource_of;
  auto resource_index = [&](const identity::Identity* id) -> size_t {
    if (!id) return 0;
    auto [it, added] = resource_of.emplace(id->cgroup, resources.size());
    if (added) {
      identity::Identity& copy = keyed.emplace_back(*id);
      if (auto k = keys.find(id->cgroup); k != keys.end()) copy.workload = k->second;
      resources.push_back(encode_resource(options_.resource, &copy));
    }
    return it->second;
  };
  for (const auto& [label, s] : snap.series) resource_index(&s.identity);

  struct Group {
    size_t family;
    std::vector<std::string> points;
  };
  std::map<size_t, std::vector<Group>> by_resource;  // resource → groups in family order
  for (size_t fi = 0; fi < families.size(); ++fi) {
    const Family& f = families[fi];
    for (const Point& p : f.points) {
      const size_t r = resource_index(p.workload);
      auto& groups = by_resource[r];
      if (groups.empty() || groups.back().family != fi) groups.push_back({fi, {}});
      if (f.kind == MetricKind::kGauge) {
        groups.back().points.push_back(encode_number_point(p, p.value, 0, time_ns, false));
        continue;
      }
      auto [it, fresh] = previous_.try_emplace(series_key(f, p));
      Previous& prev = it->second;
      std::uint64_t start_ns;
      if (f.kind == MetricKind::kCounter) {
        const bool reset = !fresh && p.value < prev.value;
        start_ns = fresh ? fresh_start : (delta || reset) ? prev.time_ns : prev.start_ns;
        const double value = delta && !fresh && !reset ? p.value - prev.value : p.value;
        groups.back().points.push_back(encode_number_point(p, value, start_ns, time_ns, true));
        prev.value = p.value;
      } else {
        const bool reset = !fresh && histogram_reset(p.histogram, prev.histogram);
        start_ns = fresh ? fresh_start : (delta || reset) ? prev.time_ns : prev.start_ns;
        const HistogramValue v =
            delta && !fresh && !reset ? histogram_delta(p.histogram, prev.histogram) : p.histogram;
        groups.back().points.push_back(options_.histogram == HistogramFormat::kExplicit
                                           ? encode_explicit_point(p, v, start_ns, time_ns)
                                           : encode_exponential_point(p, v, start_ns, time_ns));
        prev.histogram = p.histogram;
      }
      prev.start_ns = start_ns;
      prev.time_ns = time_ns;
      prev.seen = snap.sequence;
    }
  }
  std::erase_if(previous_, [&](const auto& kv) { return kv.second.seen != snap.sequence; });
  last_sequence_ = snap.sequence;
  last_time_ns_ = time_ns;

  // Headers of every family, and the sizes the packer needs.
  std::vector<std::string> headers;
  for (const Family& f : families) headers.push_back(metric_header(f, metrics::otel_name(f)).take());
  std::vector<GroupSizes> sizes;
  std::vector<const Group*> flat;
  for (const auto& [r, groups] : by_resource) {
    for (const Group& g : groups) {
      GroupSizes s{r, headers[g.family].size() + 16, {}};
      for (const auto& pt : g.points) s.items.push_back(pt.size());
      sizes.push_back(std::move(s));
      flat.push_back(&g);
    }
  }
  std::vector<size_t> resource_sizes;
  for (const auto& r : resources) resource_sizes.push_back(r.size());
  const std::string scope = encode_scope(options_.version);
  const std::uint64_t temporality = delta ? kDelta : kCumulative;

  std::vector<Payload> out;
  for (const auto& slices : pack(resource_sizes, scope.size(), sizes, options_.max_request_bytes)) {
    // ExportMetricsServiceRequest { resource_metrics = 1 } → ResourceMetrics { resource = 1;
    // scope_metrics = 2 } → ScopeMetrics { scope = 1; metrics = 2 }
    ProtoWriter request;
    Payload payload;
    payload.signal = Signal::kMetrics;
    for (size_t i = 0; i < slices.size();) {
      const size_t r = sizes[slices[i].group].resource;
      ProtoWriter scope_metrics;
      scope_metrics.bytes_field(1, scope);
      for (; i < slices.size() && sizes[slices[i].group].resource == r; ++i) {
        const Slice& s = slices[i];
        const Group& g = *flat[s.group];
        const Family& f = families[g.family];
        ProtoWriter data;
        for (size_t k = s.begin; k < s.end; ++k) data.bytes_field(1, g.points[k]);
        if (f.kind == MetricKind::kCounter || f.kind == MetricKind::kHistogram) {
          data.uint64_field(2, temporality);  // aggregation_temporality
        }
        if (f.kind == MetricKind::kCounter) data.bool_field(3, true);  // is_monotonic
        ProtoWriter metric;
        metric.append_raw(headers[g.family]);
        metric.message_field(data_field(f, options_.histogram), data);
        scope_metrics.message_field(2, metric);
        payload.points += s.end - s.begin;
      }
      ProtoWriter resource_metrics;
      resource_metrics.bytes_field(1, resources[r]);
      resource_metrics.message_field(2, scope_metrics);
      request.message_field(1, resource_metrics);
    }
    payload.body = request.take();
    out.push_back(std::move(payload));
  }
  return out;
}

}  // namespace stallwatch::otlp
