#include "metrics/exposition.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <tuple>

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

// A histogram from kernel log2 buckets: CallTotals, IoTotals and NcclTotals alike.
template <typename Totals>
ClientMetric histogram(Labels labels, const Totals& t) {
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

// Whether a series has CUDA-issuing threads (a cgroup can also be a series for its host
// evidence alone, e.g. a DataLoader's I/O): only those get the off-CPU and starvation families.
bool has_cuda_threads(const Series& s) {
  return !s.calls.empty() || !s.process_info.empty() || s.offcpu.runnable_ns > 0 ||
         s.offcpu.blocked_ns > 0 || s.offcpu.oncpu_ns > 0;
}

// The `rank` and `world_size` labels: decimal, "" while not learnt (-1).
std::string rank_label(int v) { return v < 0 ? std::string() : std::to_string(v); }

// Host-side families (issue 4), per series and only where the series has that kind of data.
void add_host_families(const Snapshot& snap, std::vector<MetricFamily>& out) {
  auto calls = trace::all_calls();
  auto starvation = family("stallwatch_gpu_starvation_ratio",
                           "Share of the CUDA-issuing threads' wall time over the last window "
                           "spent blocked (off-CPU, sleeping) outside any CUDA call (0..1).",
                           MetricType::Gauge);
  auto reclaim_s = family("stallwatch_memory_reclaim_seconds_total",
                          "Time the series' tasks spent in memory reclaim, by kind (direct: the "
                          "node ran short; memcg: the cgroup's own memory limit).",
                          MetricType::Counter);
  auto reclaims =
      family("stallwatch_memory_reclaims_total",
             "Memory reclaim episodes of the series' tasks, by kind.", MetricType::Counter);
  auto oom = family("stallwatch_oom_kills_total",
                    "Processes of the series killed by the OOM killer, by victim (cuda: a "
                    "CUDA-issuing process).",
                    MetricType::Counter);
  auto pressure = family("stallwatch_pressure_stall_seconds_total",
                         "The cgroup's pressure stall time (cgroup v2 PSI), by resource and "
                         "scope (some: at least one task stalled; full: all non-idle tasks).",
                         MetricType::Counter);
  auto io_duration = family("stallwatch_block_io_duration_seconds",
                            "Block I/O requests submitted by the series' tasks, from submission "
                            "to completion, by device and op.",
                            MetricType::Histogram);
  auto io_bytes = family("stallwatch_block_io_bytes_total",
                         "Bytes of the block I/O requests submitted by the series' tasks.",
                         MetricType::Counter);
  auto retransmits = family("stallwatch_tcp_retransmits_total",
                            "TCP segments retransmitted by sockets of the series, by family.",
                            MetricType::Counter);
  auto nccl_duration = family("stallwatch_nccl_op_duration_seconds",
                              "Wall time of NCCL collective and point-to-point calls, by op and "
                              "the communicator's rank and size (\"\" until known).",
                              MetricType::Histogram);
  auto nccl_bytes =
      family("stallwatch_nccl_op_bytes_total",
             "Bytes passed to NCCL ops (element count times element size).", MetricType::Counter);
  const auto count = [](std::uint64_t v) { return static_cast<double>(v); };
  for (const auto& [label, s] : snap.series) {
    Labels id = identity_labels(s.identity);
    if (has_cuda_threads(s)) starvation.metric.push_back(gauge(id, s.starvation_ratio));
    const ReclaimTotals& r = s.reclaim;
    if (r.direct_count + r.memcg_count > 0 || r.direct_ns + r.memcg_ns > 0) {
      reclaim_s.metric.push_back(counter(with(id, {{"kind", "direct"}}), seconds(r.direct_ns)));
      reclaim_s.metric.push_back(counter(with(id, {{"kind", "memcg"}}), seconds(r.memcg_ns)));
      reclaims.metric.push_back(counter(with(id, {{"kind", "direct"}}), count(r.direct_count)));
      reclaims.metric.push_back(counter(with(id, {{"kind", "memcg"}}), count(r.memcg_count)));
    }
    if (s.oom_kills > 0 || s.oom_kills_cuda > 0) {
      const std::uint64_t cuda = std::min(s.oom_kills_cuda, s.oom_kills);
      oom.metric.push_back(counter(with(id, {{"victim", "cuda"}}), count(s.oom_kills_cuda)));
      oom.metric.push_back(counter(with(id, {{"victim", "other"}}), count(s.oom_kills - cuda)));
    }
    if (const PressureTotals& p = s.pressure; p.known) {
      for (const auto& [resource, some_ns, full_ns] :
           {std::tuple{"cpu", p.cpu_some_ns, p.cpu_full_ns},
            std::tuple{"memory", p.memory_some_ns, p.memory_full_ns},
            std::tuple{"io", p.io_some_ns, p.io_full_ns}}) {
        pressure.metric.push_back(
            counter(with(id, {{"resource", resource}, {"scope", "some"}}), seconds(some_ns)));
        pressure.metric.push_back(
            counter(with(id, {{"resource", resource}, {"scope", "full"}}), seconds(full_ns)));
      }
    }
    for (const auto& [key, t] : s.io) {
      Labels l = with(id, {{"device", key.device}, {"op", key.op}});
      io_duration.metric.push_back(histogram(l, t));
      io_bytes.metric.push_back(counter(l, count(t.bytes)));
    }
    if (s.tcp_retransmits_ipv4 + s.tcp_retransmits_ipv6 > 0) {
      retransmits.metric.push_back(
          counter(with(id, {{"family", "ipv4"}}), count(s.tcp_retransmits_ipv4)));
      retransmits.metric.push_back(
          counter(with(id, {{"family", "ipv6"}}), count(s.tcp_retransmits_ipv6)));
    }
    for (const auto& [key, t] : s.nccl) {
      if (key.call_id >= calls.size()) continue;
      Labels l = with(id, {{"op", std::string(calls[key.call_id].name)},
                           {"rank", rank_label(key.rank)},
                           {"world_size", rank_label(key.world_size)}});
      nccl_duration.metric.push_back(histogram(l, t));
      nccl_bytes.metric.push_back(counter(l, count(t.bytes)));
    }
  }
  for (auto* f : {&starvation, &reclaim_s, &reclaims, &oom, &pressure, &io_duration, &io_bytes,
                  &retransmits, &nccl_duration, &nccl_bytes}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }
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
                                           "offcpu_map_full", "thread_state",      "call_nesting",
                                           "host_ringbuf",    "host_map_full"};
  static_assert(std::size(kNames) == SW_LOST_MAX, "a name for every enum sw_lost_source");
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
    if (has_cuda_threads(s)) {
      off.metric.push_back(
          counter(with(id, {{"state", "runnable"}}), seconds(s.offcpu.runnable_ns)));
      off.metric.push_back(counter(with(id, {{"state", "blocked"}}), seconds(s.offcpu.blocked_ns)));
      ratio.metric.push_back(gauge(with(id, {{"state", "runnable"}}), s.runnable_ratio));
      ratio.metric.push_back(gauge(with(id, {{"state", "blocked"}}), s.blocked_ratio));
    }
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
  for (auto* f : {&duration, &call_off, &off, &ratio, &info}) out.push_back(std::move(*f));
  add_host_families(snap, out);
  for (auto* f : {&lost, &outliers, &traced, &libs, &probes, &seq, &build_info}) {
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
