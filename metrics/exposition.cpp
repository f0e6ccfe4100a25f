#include "metrics/exposition.h"

#include <prometheus/text_serializer.h>

#include <sstream>

#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

constexpr double kNsPerS = 1e9;

double seconds(std::uint64_t ns) { return static_cast<double>(ns) / kNsPerS; }

// Identity labels of a series: cgroup always, the others when known.
Labels identity_labels(const identity::Identity& id) {
  Labels l{{"cgroup", id.cgroup}};
  if (!id.container_id.empty()) l.push_back({"container_id", id.container_id});
  return l;
}

Labels with(Labels l, std::initializer_list<ClientMetric::Label> more) {
  l.insert(l.end(), more);
  return l;
}

MetricFamily family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

ClientMetric counter(Labels labels, double v) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = v;
  return m;
}

ClientMetric gauge(Labels labels, double v) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = v;
  return m;
}

ClientMetric histogram(Labels labels, const CallTotals& t) {
  ClientMetric m;
  m.label = std::move(labels);
  m.histogram.sample_count = t.count;
  m.histogram.sample_sum = seconds(t.sum_ns);
  auto bounds = trace::exported_bounds();
  auto counts = trace::fold_to_exported(t.buckets);
  std::uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    m.histogram.bucket.push_back({cumulative, bounds[i]});
  }
  m.histogram.bucket.push_back({t.count, std::numeric_limits<double>::infinity()});
  return m;
}

void add_chain_families(const Snapshot& snap, std::vector<MetricFamily>& out) {
  auto total = family("stallwatch_chains_total",
                      "Causal chains opened, by kind and the severity they opened with.",
                      MetricType::Counter);
  auto active = family("stallwatch_chain_active",
                       "Causal chains open now, by kind and current severity (0 once closed).",
                       MetricType::Gauge);
  for (const auto& c : snap.chains) {
    Labels l = with(identity_labels(c.identity), {{"kind", c.kind}, {"severity", c.severity}});
    if (c.total > 0) total.metric.push_back(counter(l, static_cast<double>(c.total)));
    active.metric.push_back(gauge(l, static_cast<double>(c.active)));
  }
  out.push_back(std::move(total));
  out.push_back(std::move(active));
}

void add_store_families(const StoreStats& st, std::vector<MetricFamily>& out) {
  if (!st.enabled) return;
  auto add = [&](const char* name, const char* help, MetricType type, std::uint64_t v) {
    auto f = family(name, help, type);
    f.metric.push_back(type == MetricType::Counter ? counter({}, static_cast<double>(v))
                                                   : gauge({}, static_cast<double>(v)));
    out.push_back(std::move(f));
  };
  add("stallwatch_store_rows_written_total", "Rows committed to the SQLite store.",
      MetricType::Counter, st.rows_written);
  add("stallwatch_store_batches_dropped_total",
      "Window batches dropped because the store writer fell behind.", MetricType::Counter,
      st.batches_dropped);
  add("stallwatch_store_write_errors_total", "Failed store transactions (disk full, I/O errors).",
      MetricType::Counter, st.write_errors);
  add("stallwatch_store_rows_pruned_total", "Rows deleted by retention (age or --max-db).",
      MetricType::Counter, st.rows_pruned);
  add("stallwatch_store_queue_batches", "Window batches waiting for the store writer.",
      MetricType::Gauge, st.queue_size);
  add("stallwatch_store_size_bytes", "Size of the store on disk (database and WAL).",
      MetricType::Gauge, st.db_bytes);
}

}  // namespace

const char* lost_source_name(unsigned source) {
  static constexpr const char* kNames[] = {"outlier_ringbuf", "discovery_ringbuf", "call_map_full",
                                           "offcpu_map_full", "thread_state",      "call_nesting"};
  return source < std::size(kNames) ? kNames[source] : "unknown";
}

std::vector<MetricFamily> to_families(const Snapshot& snap, const BuildInfo& build) {
  auto calls = trace::all_calls();
  auto duration = family("stallwatch_cuda_call_duration_seconds",
                         "Wall time of traced CUDA runtime, driver and NCCL calls.",
                         MetricType::Histogram);
  auto call_off = family("stallwatch_cuda_call_offcpu_seconds_total",
                         "Time the calling thread spent off-CPU inside CUDA calls, by state "
                         "(runnable: waiting for a CPU; blocked: sleeping).",
                         MetricType::Counter);
  auto off = family("stallwatch_offcpu_seconds_total",
                    "Time CUDA-issuing threads spent off-CPU, by state.", MetricType::Counter);
  auto ratio = family("stallwatch_offcpu_ratio",
                      "Share of the CUDA-issuing threads' time spent off-CPU over the last "
                      "window, by state (0..1).",
                      MetricType::Gauge);
  auto info = family("stallwatch_cgroup_info",
                     "Workload identity of each cgroup series (value 1); join on cgroup.",
                     MetricType::Gauge);
  for (const auto& [label, s] : snap.series) {
    Labels id = identity_labels(s.identity);
    for (const auto& [call_id, t] : s.calls) {
      if (call_id >= calls.size()) continue;
      std::string api(trace::api_name(calls[call_id].api));
      std::string name(calls[call_id].name);
      duration.metric.push_back(histogram(with(id, {{"api", api}, {"call", name}}), t));
      call_off.metric.push_back(counter(
          with(id, {{"api", api}, {"call", name}, {"state", "runnable"}}), seconds(t.runnable_ns)));
      call_off.metric.push_back(counter(
          with(id, {{"api", api}, {"call", name}, {"state", "blocked"}}), seconds(t.blocked_ns)));
    }
    off.metric.push_back(counter(with(id, {{"state", "runnable"}}), seconds(s.offcpu.runnable_ns)));
    off.metric.push_back(counter(with(id, {{"state", "blocked"}}), seconds(s.offcpu.blocked_ns)));
    ratio.metric.push_back(gauge(with(id, {{"state", "runnable"}}), s.runnable_ratio));
    ratio.metric.push_back(gauge(with(id, {{"state", "blocked"}}), s.blocked_ratio));
    const auto& i = s.identity;
    info.metric.push_back(gauge(with(id, {{"pod_uid", i.pod_uid},
                                          {"runtime", i.runtime},
                                          {"systemd_unit", i.systemd_unit},
                                          {"slurm_job", i.slurm_job},
                                          {"slurm_step", i.slurm_step}}),
                                1));
  }

  auto lost = family("stallwatch_events_lost_total",
                     "Records or aggregations the kernel side could not deliver, by source.",
                     MetricType::Counter);
  for (unsigned i = 0; i < SW_LOST_MAX; ++i) {
    lost.metric.push_back(counter({{"source", lost_source_name(i)}}, static_cast<double>(snap.lost[i])));
  }
  auto outliers = family("stallwatch_outliers_total",
                         "Calls at or above the outlier threshold delivered one by one to user space.",
                         MetricType::Counter);
  outliers.metric.push_back(counter({}, static_cast<double>(snap.outliers)));
  auto traced = family("stallwatch_traced_processes",
                       "Processes that map a traced CUDA library now.", MetricType::Gauge);
  traced.metric.push_back(gauge({}, static_cast<double>(snap.traced_processes)));
  auto libs = family("stallwatch_attached_libraries",
                     "CUDA library files (distinct inodes) with probes attached now.",
                     MetricType::Gauge);
  libs.metric.push_back(gauge({}, static_cast<double>(snap.attached_libraries)));
  auto probes = family("stallwatch_attached_probes", "Uprobe and uretprobe links attached now.",
                       MetricType::Gauge);
  probes.metric.push_back(gauge({}, static_cast<double>(snap.attached_probes)));
  auto seq = family("stallwatch_snapshot_sequence",
                    "Number of the window the exposition was built from.", MetricType::Gauge);
  seq.metric.push_back(gauge({}, static_cast<double>(snap.sequence)));
  auto build_info = family("stallwatch_build_info", "Version of the running stallwatch (value 1).",
                           MetricType::Gauge);
  build_info.metric.push_back(gauge({{"version", build.version}, {"revision", build.revision}}, 1));

  std::vector<MetricFamily> out;
  for (auto* f : {&duration, &call_off, &off, &ratio, &info, &lost, &outliers, &traced, &libs,
                  &probes, &seq, &build_info}) {
    out.push_back(std::move(*f));
  }
  add_chain_families(snap, out);
  add_store_families(snap.store, out);
  return out;
}

std::string render_text(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace stallwatch::metrics
