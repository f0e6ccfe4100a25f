#include "oracle/prometheus_oracle.h"

#include <prometheus/text_serializer.h>

#include <limits>
#include <sstream>

#include "trace/histogram.h"

namespace stallwatch::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricType;

MetricType prometheus_type(MetricKind k) {
  switch (k) {
    case MetricKind::kCounter:
      return MetricType::Counter;
    case MetricKind::kHistogram:
      return MetricType::Histogram;
    case MetricKind::kGauge:
      break;
  }
  return MetricType::Gauge;
}

// Identity labels first, then the point's own, in the model's order.
std::vector<ClientMetric::Label> labels_of(const Point& p) {
  std::vector<ClientMetric::Label> out;
  if (p.workload) {
    for (auto& [name, value] : identity_labels(*p.workload)) out.push_back({name, value});
  }
  for (const auto& [name, value] : p.labels) out.push_back({name, value});
  return out;
}

// Kernel log2 buckets folded into the exported `le` bounds, cumulative, plus +Inf.
void fill_histogram(const HistogramValue& h, ClientMetric::Histogram& out) {
  out.sample_count = h.count;
  out.sample_sum = static_cast<double>(h.sum_ns) / 1e9;
  auto bounds = trace::exported_bounds();
  auto counts = trace::fold_to_exported(h.buckets);
  std::uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    out.bucket.push_back({cumulative, bounds[i]});
  }
  out.bucket.push_back({h.count, std::numeric_limits<double>::infinity()});
}

}  // namespace

std::vector<prometheus::MetricFamily> to_families(const Snapshot& snap, const BuildInfo& build) {
  std::vector<prometheus::MetricFamily> out;
  for (const Family& f : build_model(snap, build)) {
    prometheus::MetricFamily pf;
    pf.name = f.name;
    pf.help = f.help;
    pf.type = prometheus_type(f.kind);
    for (const Point& p : f.points) {
      ClientMetric m;
      m.label = labels_of(p);
      switch (f.kind) {
        case MetricKind::kCounter:
          m.counter.value = p.value;
          break;
        case MetricKind::kGauge:
          m.gauge.value = p.value;
          break;
        case MetricKind::kHistogram:
          fill_histogram(p.histogram, m.histogram);
          break;
      }
      pf.metric.push_back(std::move(m));
    }
    out.push_back(std::move(pf));
  }
  return out;
}



std::string render_text(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace stallwatch::metrics
