// One snapshot → OTLP ExportMetricsServiceRequest messages (protobuf): every family of the
// metrics model (model.h) under its OpenTelemetry name and UCUM unit, one ResourceMetrics per
// workload plus one for the daemon's own series, histograms as explicit buckets (Prometheus'
// bounds) or base-2 exponential at scale 0 (the kernel's buckets, unchanged), in cumulative or
// delta temporality. Delta points are computed from the cumulative snapshots: a series seen for
// the first time counts from the previous export (the daemon's start for the first), a value
// that went down is a reset (the new value is the delta, starting at the previous point), and a
// series that disappears is forgotten. Requests stay under the size limit.
// Not thread-safe: one encoder per pusher thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace/snapshot.h"
#include "metrics/model.h"
#include "metrics/otlp/delivery.h"
#include "metrics/otlp/encoding.h"

namespace stallwatch::otlp {

struct MetricsEncoderOptions {
  Temporality temporality = Temporality::kCumulative;
  HistogramFormat histogram = HistogramFormat::kExplicit;
  ResourceSettings resource;
  std::string version;            // the scope's version
  std::uint64_t start_ns = 0;     // unix time the daemon started: cumulative start time
  size_t max_request_bytes = kMaxRequestBytes;
  bool per_call = false;  // CUDA call points per call (true) or merged per class (the default)
};

class MetricsEncoder {
 public:
  explicit MetricsEncoder(MetricsEncoderOptions options);

  // The requests of one snapshot. Empty when the snapshot is not newer than the last one
  // encoded (a series never gets two points with one timestamp).
  std::vector<Payload> encode(const Snapshot& snap, const metrics::BuildInfo& build);

  size_t tracked_series() const { return previous_.size(); }

 private:
  struct Previous {
    std::uint64_t time_ns = 0;
    std::uint64_t start_ns = 0;  // start time of the series' cumulative points
    double value = 0;
    metrics::HistogramValue histogram;
    std::uint64_t seen = 0;      // sequence of the last snapshot that had the series
  };

  MetricsEncoderOptions options_;
  std::unordered_map<std::string, Previous> previous_;
  std::uint64_t last_sequence_ = 0;
  std::uint64_t last_time_ns_ = 0;
};

}  // namespace stallwatch::otlp
