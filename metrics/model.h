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
#include <map>
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
// --metrics.calls, --metrics.histogram-ladder). The defaults are what a fleet can afford
// (issue #37): every per-workload series carries the short `workload` key and the Kubernetes
// names where known, CUDA calls are grouped by class, and the classic ladder has a bound every
// power of four. stallwatch_cgroup_info carries the whole identity, for joins.
struct ExpositionOptions {
  // Identity labels kept on every series beside `workload`.
  bool cgroup = false;        // the full cgroup v2 path
  bool container_id = false;  // 64 hex digits: a new value at every container restart
  bool pod = true;
  bool pod_namespace = true;
  bool container = true;
  // CUDA call families (duration, off-CPU in calls, in flight, allocation bytes): one series
  // per call (true) or per class of call: launch, sync, copy, memory, graph_build, nccl, other
  // (the memory families per kind of memory, the off-CPU time in calls per api alone).
  bool per_call = false;
  int ladder_step = 2;  // classic `le` bounds: every power of two (1), of four (2), of 16 (4)
  bool operator==(const ExpositionOptions&) const = default;
};

// Shapes the model for one exposition: every point is re-pointed at a copy of its workload
// (kept in `holder`) that carries the workload key (workload_keys) and only the identity
// labels `o` keeps (stallwatch_cgroup_info keeps them all), and unless `o.per_call` the points
// of the CUDA call families are merged per class of call (their `call` label dropped).
void shape_families(std::vector<Family>& families, const ExpositionOptions& o,
                    std::deque<identity::Identity>& holder);

// The points of the CUDA call families merged per class of call (what --metrics.calls class, the
// default, exposes and pushes over OTLP): their `call` label dropped, and for the off-CPU time in
// calls the `class` too. Points must already be re-pointed per workload (any identity copy).
void merge_per_class(std::vector<Family>& families);

// The `workload` label of each workload of the model, by cgroup path: a short key stable across
// container restarts (identity::workload_key), or the cgroup path where two workloads of the
// node would share one key.
std::map<std::string, std::string> workload_keys(const std::vector<Family>& families);

// Identity labels of a workload copy made by shape_families, in label order: workload, then
// cgroup, container_id, pod, namespace, container where kept and known.
LabelPairs identity_labels(const identity::Identity& id);

// The OpenTelemetry name of a family: `_total` of counters and a unit suffix (`_seconds`,
// `_bytes`: the unit field says it) dropped, `_` replaced by `.`.
// stallwatch_cuda_call_duration_seconds → stallwatch.cuda.call.duration;
// stallwatch_offcpu_ratio → stallwatch.offcpu.ratio (unit 1). No two families share a name.
std::string otel_name(const Family& f);

}  // namespace stallwatch::metrics
