// The exported metrics of one snapshot as a neutral model: families of counters, gauges and
// histograms whose points keep the workload identity apart from the other labels and keep the
// kernel's log2 buckets as they are. Prometheus (exposition.h) folds identity into labels and
// buckets into `le` bounds; OTLP (otlp/metrics_encoder.h) turns identity into resources and
// sends the buckets as explicit or scale-0 exponential histograms. One list, two renderings:
// both exporters carry the same families, names and numbers.
// Pure; the model borrows identities from the snapshot, so it must not outlive it.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "trace/snapshot.h"
#include "identity/cgroup_identity.h"
#include "trace/histogram.h"

namespace stallwatch::metrics {

struct BuildInfo {
  std::string version;
  std::string revision;
};

enum class MetricKind : std::uint8_t { kCounter, kGauge, kHistogram };

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

struct HistogramValue {
  std::uint64_t count = 0;
  std::uint64_t sum_ns = 0;
  std::uint64_t max_ns = 0;
  trace::KernelBuckets buckets{};
};

struct Point {
  const identity::Identity* workload = nullptr;  // the series' workload; null: the daemon's own
  LabelPairs labels;                             // without the identity labels
  double value = 0;                              // counters and gauges
  HistogramValue histogram;                      // histograms
};

struct Family {
  std::string name;  // Prometheus name, e.g. stallwatch_cuda_call_duration_seconds
  std::string help;
  MetricKind kind = MetricKind::kGauge;
  std::string unit;  // UCUM: "s", "By", "1", "{call}", ...
  std::vector<Point> points;
};

// Every exported family of the snapshot, in exposition order. The CUDA call and chain families
// are always there (possibly without points); the others only when they have points.
std::vector<Family> build_model(const Snapshot& snap, const BuildInfo& build);

// What a deployment chooses to expose on /metrics (run --metrics.identity-labels,
// --metrics.histogram-ladder): fewer series labels and classic buckets at fleet scale.
struct ExpositionOptions {
  // Identity labels kept on every series beside `cgroup` (stallwatch_cgroup_info keeps them
  // all, for joins).
  bool container_id = true;
  bool pod = true;
  bool pod_namespace = true;
  bool container = true;
  int ladder_step = 1;  // classic `le` bounds: every power of two (1) or every 4th (4)
  bool drops_identity() const { return !(container_id && pod && pod_namespace && container); }
  bool operator==(const ExpositionOptions&) const = default;
};

// Points of every family but stallwatch_cgroup_info re-pointed at copies of their workload
// without the identity labels `o` leaves out; the copies live in `holder`.
void strip_identity(std::vector<Family>& families, const ExpositionOptions& o,
                    std::deque<identity::Identity>& holder);

// Identity labels of a workload, in label order: cgroup always, container_id when known.
LabelPairs identity_labels(const identity::Identity& id);

// The OpenTelemetry name of a family: `_total` of counters and a unit suffix (`_seconds`,
// `_bytes`: the unit field says it) dropped, `_` replaced by `.`.
// stallwatch_cuda_call_duration_seconds → stallwatch.cuda.call.duration;
// stallwatch_offcpu_ratio → stallwatch.offcpu.ratio (unit 1). No two families share a name.
std::string otel_name(const Family& f);

}  // namespace stallwatch::metrics
