#include "metrics/model.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "trace/records.h"
#include "metrics/exposition.h"
#include "trace/calls.h"
#include "trace/nccl_ranks.h"

namespace stallwatch::metrics {
namespace {

constexpr double kNsPerS = 1e9;

double seconds(std::uint64_t ns) { return static_cast<double>(ns) / kNsPerS; }
double count(std::uint64_t v) { return static_cast<double>(v); }

Family family(std::string name, std::string help, MetricKind kind, std::string unit) {
  Family f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.kind = kind;
  f.unit = std::move(unit);
  return f;
}

Point point(const identity::Identity* workload, LabelPairs labels, double v) {
  Point p;
  p.workload = workload;
  p.labels = std::move(labels);
  p.value = v;
  return p;
}

// A histogram point from kernel log2 buckets: CallTotals, IoTotals and NcclTotals alike.
template <typename Totals>
Point histogram(const identity::Identity* workload, LabelPairs labels, const Totals& t) {
  Point p;
  p.workload = workload;
  p.labels = std::move(labels);
  // The count is the buckets' sum rather than the kernel's separate counter: a map read can
  // land between the two updates, and a histogram whose +Inf bucket differs from its count is
  // malformed for Prometheus and OTLP alike.
  p.histogram.count = 0;
  for (std::uint64_t c : t.buckets) p.histogram.count += c;
  p.histogram.sum_ns = t.sum_ns;
  p.histogram.max_ns = t.max_ns;
  p.histogram.buckets = t.buckets;
  return p;
}

// Whether a series has CUDA-issuing threads (a cgroup can also be a series for its host
// evidence alone, e.g. a DataLoader's I/O): only those get the off-CPU and starvation families.
bool has_cuda_threads(const Series& s) {
  return !s.calls.empty() || !s.process_info.empty() || s.offcpu.runnable_ns > 0 ||
         s.offcpu.blocked_ns > 0 || s.offcpu.oncpu_ns > 0;
}

// The `rank` and `world_size` labels: decimal, "" while not learnt (-1).
std::string rank_label(int v) { return v < 0 ? std::string() : std::to_string(v); }

void keep_nonempty(std::initializer_list<Family*> families, std::vector<Family>& out) {
  for (auto* f : families) {
    if (!f->points.empty()) out.push_back(std::move(*f));
  }
}

void add_call_families(const Snapshot& snap, std::vector<Family>& out) {
  auto calls = trace::all_calls();
  auto duration = family("stallwatch_cuda_call_duration_seconds",
                         "Wall time of traced CUDA runtime, driver and NCCL calls.",
                         MetricKind::kHistogram, "s");
  auto call_off = family("stallwatch_cuda_call_offcpu_seconds_total",
                         "Time the calling thread spent off-CPU inside CUDA calls, by state "
                         "(runnable: waiting for a CPU; blocked: sleeping).",
                         MetricKind::kCounter, "s");
  auto off = family("stallwatch_offcpu_seconds_total",
                    "Time CUDA-issuing threads spent off-CPU, by state.", MetricKind::kCounter, "s");
  auto ratio = family("stallwatch_offcpu_ratio",
                      "Share of the CUDA-issuing threads' time spent off-CPU over the last "
                      "window, by state (0..1).",
                      MetricKind::kGauge, "1");
  auto info = family("stallwatch_cgroup_info",
                     "Workload identity of each workload (value 1): the full cgroup path, "
                     "container id, pod UID and the rest; join on workload.",
                     MetricKind::kGauge, "1");
  for (const auto& [label, s] : snap.series) {
    const identity::Identity* id = &s.identity;
    for (const auto& [call_id, t] : s.calls) {
      if (call_id >= calls.size()) continue;
      std::string api(trace::api_name(calls[call_id].api));
      std::string cls(trace::metric_class(call_id));
      std::string name(calls[call_id].name);
      duration.points.push_back(histogram(id, {{"api", api}, {"class", cls}, {"call", name}}, t));
      call_off.points.push_back(point(
          id, {{"api", api}, {"class", cls}, {"call", name}, {"state", "runnable"}},
          seconds(t.runnable_ns)));
      call_off.points.push_back(point(
          id, {{"api", api}, {"class", cls}, {"call", name}, {"state", "blocked"}},
          seconds(t.blocked_ns)));
    }
    if (has_cuda_threads(s)) {
      off.points.push_back(point(id, {{"state", "runnable"}}, seconds(s.offcpu.runnable_ns)));
      off.points.push_back(point(id, {{"state", "blocked"}}, seconds(s.offcpu.blocked_ns)));
      ratio.points.push_back(point(id, {{"state", "runnable"}}, s.runnable_ratio));
      ratio.points.push_back(point(id, {{"state", "blocked"}}, s.blocked_ratio));
    }
    const auto& i = s.identity;
    info.points.push_back(point(id,
                                {{"pod_uid", i.pod_uid},
                                 {"runtime", i.runtime},
                                 {"systemd_unit", i.systemd_unit},
                                 {"slurm_job", i.slurm_job},
                                 {"slurm_step", i.slurm_step}},
                                1));
  }
  for (auto* f : {&duration, &call_off, &off, &ratio, &info}) out.push_back(std::move(*f));
  // Calls that have not returned: the oldest of each kind per workload; absent when none.
  auto inflight = family("stallwatch_cuda_call_inflight_seconds",
                         "Age of the oldest traced call of that kind still in flight (not "
                         "returned) in the workload, at the end of the last window.",
                         MetricKind::kGauge, "s");
  for (const auto& [label, s] : snap.series) {
    std::map<std::uint32_t, std::uint64_t> oldest;
    for (const auto& c : s.inflight) oldest[c.call_id] = std::max(oldest[c.call_id], c.age_ns);
    for (const auto& [call_id, age] : oldest) {
      if (call_id >= calls.size()) continue;
      inflight.points.push_back(point(&s.identity,
                                      {{"api", std::string(trace::api_name(calls[call_id].api))},
                                       {"class", std::string(trace::metric_class(call_id))},
                                       {"call", std::string(calls[call_id].name)}},
                                      seconds(age)));
    }
  }
  keep_nonempty({&inflight}, out);
}

// GPU memory handed out by the allocating calls (issue #20), per series that allocated: bytes by
// allocating call (freed bytes too, credited to the call that allocated them), out-of-memory
// returns, and what the series' live processes hold now by api and where it lives.
void add_memory_families(const Snapshot& snap, std::vector<Family>& out) {
  auto calls = trace::all_calls();
  auto allocated = family("stallwatch_cuda_memory_allocated_bytes_total",
                          "Bytes handed out by successful CUDA allocation calls, by the "
                          "allocating call.",
                          MetricKind::kCounter, "By");
  auto freed = family("stallwatch_cuda_memory_freed_bytes_total",
                      "Bytes of traced allocations freed again, by the call that allocated them.",
                      MetricKind::kCounter, "By");
  auto live = family("stallwatch_cuda_memory_live_bytes",
                     "Bytes the workload's live processes hold from traced allocation calls, by "
                     "api and kind (device, managed, pinned host); not the CUDA context's own "
                     "memory.",
                     MetricKind::kGauge, "By");
  auto failures = family("stallwatch_cuda_memory_alloc_failures_total",
                         "CUDA allocation calls that returned out of memory, by call.",
                         MetricKind::kCounter, "{call}");
  for (const auto& [label, s] : snap.series) {
    const identity::Identity* id = &s.identity;
    std::map<std::pair<trace::Api, trace::MemKind>, std::uint64_t> held;
    for (const auto& [call_id, t] : s.calls) {
      if (!trace::is_allocating_call(call_id) || t.alloc_bytes + t.alloc_failures == 0) continue;
      const LabelPairs l{{"api", std::string(trace::api_name(calls[call_id].api))},
                         {"kind", std::string(trace::mem_kind_name(trace::mem_kind(call_id)))},
                         {"call", std::string(calls[call_id].name)}};
      allocated.points.push_back(point(id, l, count(t.alloc_bytes)));
      freed.points.push_back(point(id, l, count(t.freed_bytes)));
      failures.points.push_back(point(id, l, count(t.alloc_failures)));
      if (t.alloc_bytes > 0) held[{calls[call_id].api, trace::mem_kind(call_id)}] += 0;
    }
    for (const auto& p : s.processes) {
      if (!trace::is_allocating_call(p.call_id)) continue;
      held[{calls[p.call_id].api, trace::mem_kind(p.call_id)}] += p.totals.live_bytes();
    }
    for (const auto& [key, bytes] : held) {
      live.points.push_back(point(id,
                                  {{"api", std::string(trace::api_name(key.first))},
                                   {"kind", std::string(trace::mem_kind_name(key.second))}},
                                  count(bytes)));
    }
  }
  keep_nonempty({&allocated, &freed, &live, &failures}, out);
}

// Host-side families (issue 4), per series and only where the series has that kind of data.
void add_host_families(const Snapshot& snap, std::vector<Family>& out) {
  auto calls = trace::all_calls();
  auto starvation = family("stallwatch_gpu_starvation_ratio",
                           "Share of the CUDA-issuing threads' wall time over the last window "
                           "spent blocked (off-CPU, sleeping) outside any CUDA call (0..1).",
                           MetricKind::kGauge, "1");
  auto probe_cost = family("stallwatch_workload_probe_cost_ratio",
                           "Estimated share of the CUDA-issuing threads' CPU time over the last "
                           "window spent in stallwatch's own probes: each call times the trap "
                           "cost measured at start for its site's class (0..1).",
                           MetricKind::kGauge, "1");
  auto duty = family("stallwatch_probe_duty_ratio",
                     "Share of the last window the workload's kernel-launch probes were attached: "
                     "below 1 the cost budget (--cost-budget) duty-cycles them and its launch "
                     "counts are estimates, scaled by it (0..1).",
                     MetricKind::kGauge, "1");
  auto reclaim_s = family("stallwatch_memory_reclaim_seconds_total",
                          "Time the series' tasks spent in memory reclaim, by kind (direct: the "
                          "node ran short; memcg: the cgroup's own memory limit).",
                          MetricKind::kCounter, "s");
  auto reclaims = family("stallwatch_memory_reclaims_total",
                         "Memory reclaim episodes of the series' tasks, by kind.",
                         MetricKind::kCounter, "{reclaim}");
  auto oom = family("stallwatch_oom_kills_total",
                    "Processes of the series killed by the OOM killer, by victim (cuda: a "
                    "CUDA-issuing process).",
                    MetricKind::kCounter, "{process}");
  auto pressure = family("stallwatch_pressure_stall_seconds_total",
                         "The cgroup's pressure stall time (cgroup v2 PSI), by resource and "
                         "scope (some: at least one task stalled; full: all non-idle tasks).",
                         MetricKind::kCounter, "s");
  auto throttled_s = family("stallwatch_cgroup_cpu_throttled_seconds_total",
                            "Time the workload's CPU limit (CFS quota: Kubernetes limits.cpu, "
                            "systemd CPUQuota=) kept it throttled, summed over CPUs and over the "
                            "limited levels of its cgroup and ancestors (cpu.stat).",
                            MetricKind::kCounter, "s");
  auto throttled_n = family("stallwatch_cgroup_cpu_throttled_periods_total",
                            "Enforcement periods in which the workload's CPU limit throttled it "
                            "(cpu.stat nr_throttled, limited levels summed).",
                            MetricKind::kCounter, "{period}");
  auto periods_n = family("stallwatch_cgroup_cpu_periods_total",
                          "Enforcement periods in which the workload's limited cgroups had "
                          "runnable tasks (cpu.stat nr_periods, limited levels summed).",
                          MetricKind::kCounter, "{period}");
  auto limit_cores = family("stallwatch_cgroup_cpu_limit_cores",
                            "The tightest CPU limit over the workload's cgroup and its ancestors, "
                            "in CPUs (quota / period).",
                            MetricKind::kGauge, "{cpu}");
  auto io_duration = family("stallwatch_block_io_duration_seconds",
                            "Block I/O requests submitted by the series' tasks, from submission "
                            "to completion, by device and op.",
                            MetricKind::kHistogram, "s");
  auto io_bytes = family("stallwatch_block_io_bytes_total",
                         "Bytes of the block I/O requests submitted by the series' tasks.",
                         MetricKind::kCounter, "By");
  auto retransmits = family("stallwatch_tcp_retransmits_total",
                            "TCP segments retransmitted by sockets of the series, by family.",
                            MetricKind::kCounter, "{segment}");
  auto nccl_duration = family("stallwatch_nccl_op_duration_seconds",
                              "Wall time of NCCL collective and point-to-point calls, by op and "
                              "the communicator's rank and size (\"\" until known).",
                              MetricKind::kHistogram, "s");
  auto nccl_bytes = family("stallwatch_nccl_op_bytes_total",
                           "Bytes passed to NCCL ops (element count times element size).",
                           MetricKind::kCounter, "By");
  for (const auto& [label, s] : snap.series) {
    const identity::Identity* id = &s.identity;
    if (has_cuda_threads(s)) starvation.points.push_back(point(id, {}, s.starvation_ratio));
    if (has_cuda_threads(s) && (snap.trap_cost_emulated.measured || snap.trap_cost_stepped.measured)) {
      probe_cost.points.push_back(point(id, {}, s.probe_cost_ratio));
      duty.points.push_back(point(id, {}, s.launch_duty));
    }
    const ReclaimTotals& r = s.reclaim;
    if (r.direct_count + r.memcg_count > 0 || r.direct_ns + r.memcg_ns > 0) {
      reclaim_s.points.push_back(point(id, {{"kind", "direct"}}, seconds(r.direct_ns)));
      reclaim_s.points.push_back(point(id, {{"kind", "memcg"}}, seconds(r.memcg_ns)));
      reclaims.points.push_back(point(id, {{"kind", "direct"}}, count(r.direct_count)));
      reclaims.points.push_back(point(id, {{"kind", "memcg"}}, count(r.memcg_count)));
    }
    if (s.oom_kills > 0 || s.oom_kills_cuda > 0) {
      const std::uint64_t cuda = std::min(s.oom_kills_cuda, s.oom_kills);
      oom.points.push_back(point(id, {{"victim", "cuda"}}, count(s.oom_kills_cuda)));
      oom.points.push_back(point(id, {{"victim", "other"}}, count(s.oom_kills - cuda)));
    }
    if (const PressureTotals& p = s.pressure; p.known) {
      for (const auto& [resource, some_ns, full_ns] :
           {std::tuple{"cpu", p.cpu_some_ns, p.cpu_full_ns},
            std::tuple{"memory", p.memory_some_ns, p.memory_full_ns},
            std::tuple{"io", p.io_some_ns, p.io_full_ns}}) {
        pressure.points.push_back(
            point(id, {{"resource", resource}, {"scope", "some"}}, seconds(some_ns)));
        pressure.points.push_back(
            point(id, {{"resource", resource}, {"scope", "full"}}, seconds(full_ns)));
      }
    }
    if (const host::CpuLimitTotals& l = s.cpu_limit; l.known && l.limited()) {
      throttled_s.points.push_back(point(id, {}, seconds(l.throttled_ns)));
      throttled_n.points.push_back(point(id, {}, count(l.throttled_periods)));
      periods_n.points.push_back(point(id, {}, count(l.periods)));
      limit_cores.points.push_back(point(id, {}, l.limit_cores));
    }
    for (const auto& [key, t] : s.io) {
      LabelPairs l{{"device", key.device}, {"op", key.op}};
      io_duration.points.push_back(histogram(id, l, t));
      io_bytes.points.push_back(point(id, l, count(t.bytes)));
    }
    if (s.tcp_retransmits_ipv4 + s.tcp_retransmits_ipv6 > 0) {
      retransmits.points.push_back(point(id, {{"family", "ipv4"}}, count(s.tcp_retransmits_ipv4)));
      retransmits.points.push_back(point(id, {{"family", "ipv6"}}, count(s.tcp_retransmits_ipv6)));
    }
    for (const auto& [key, t] : s.nccl) {
      if (key.call_id >= calls.size()) continue;
      LabelPairs l{{"op", std::string(calls[key.call_id].name)},
                   {"rank", rank_label(key.rank)},
                   {"world_size", rank_label(key.world_size)}};
      nccl_duration.points.push_back(histogram(id, l, t));
      nccl_bytes.points.push_back(point(id, l, count(t.bytes)));
    }
  }
  keep_nonempty({&starvation, &probe_cost, &duty, &reclaim_s, &reclaims, &oom, &pressure, &throttled_s, &throttled_n,
                 &periods_n, &limit_cores, &io_duration, &io_bytes,
                 &retransmits, &nccl_duration, &nccl_bytes},
                out);
}

void add_daemon_families(const Snapshot& snap, const BuildInfo& build, std::vector<Family>& out) {
  auto lost = family("stallwatch_events_lost_total",
                     "Records or aggregations the kernel side could not deliver, by source.",
                     MetricKind::kCounter, "{event}");
  for (unsigned i = 0; i < trace::kLostSources; ++i) {
    lost.points.push_back(point(nullptr, {{"source", trace::lost_source_name(i)}}, count(snap.lost[i])));
  }
  // Losses in user space: library files refused at --max-libraries (each once; their calls go
  // untraced) and library-mapping events dropped before discovery (the next full scan finds
  // the process).
  lost.points.push_back(point(nullptr, {{"source", "library_limit"}}, count(snap.libraries_refused)));
  lost.points.push_back(point(nullptr, {{"source", "discovery_queue"}}, count(snap.discovery_dropped)));
  // Steps of a daemon thread that threw and were skipped (a hostile input; logged once each).
  lost.points.push_back(point(nullptr, {{"source", "thread_failure"}}, count(snap.thread_failures)));
  // Entries the LRU maps dropped to make room (a preemptor's share, an I/O request's or a
  // reclaim's duration, a communicator's rank): evidence lost without a failed insert.
  for (unsigned i = 0; i < trace::kLruMaps; ++i) {
    lost.points.push_back(point(nullptr, {{"source", trace::lru_evicted_name(i)}}, count(snap.evicted[i])));
  }
  out.push_back(std::move(lost));
  auto single = [&](const char* name, const char* help, MetricKind kind, const char* unit,
                    double v, LabelPairs labels = {}) {
    auto f = family(name, help, kind, unit);
    f.points.push_back(point(nullptr, std::move(labels), v));
    out.push_back(std::move(f));
  };
  // The process metrics every exporter has (the daemon itself; `run` only).
  if (snap.self) {
    const host::SelfStats& p = *snap.self;
    single("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
           MetricKind::kCounter, "s", p.cpu_seconds);
    single("process_resident_memory_bytes", "Resident memory size in bytes.", MetricKind::kGauge,
           "By", static_cast<double>(p.resident_bytes));
    single("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricKind::kGauge,
           "By", static_cast<double>(p.virtual_bytes));
    single("process_open_fds", "Number of open file descriptors.", MetricKind::kGauge, "{fd}",
           static_cast<double>(p.open_fds));
    single("process_max_fds", "Maximum number of open file descriptors.", MetricKind::kGauge,
           "{fd}", static_cast<double>(p.max_fds));
    single("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
           MetricKind::kGauge, "s", p.start_time_seconds);
  }
  single("stallwatch_outliers_total",
         "Calls at or above the outlier threshold delivered one by one to user space.",
         MetricKind::kCounter, "{call}", count(snap.outliers));
  single("stallwatch_traced_processes", "Processes that map a traced CUDA library now.",
         MetricKind::kGauge, "{process}", count(snap.traced_processes));
  single("stallwatch_attached_libraries",
         "CUDA library files (distinct inodes) with probes attached now.", MetricKind::kGauge,
         "{file}", count(snap.attached_libraries));
  single("stallwatch_attached_probes", "Uprobe and uretprobe links attached now.",
         MetricKind::kGauge, "{probe}", count(snap.attached_probes));
  {
    auto f = family("stallwatch_probe_sites",
                    "Uprobe and uretprobe sites attached now, by how the kernel runs the "
                    "instruction under each: emulated in the trap, or single-stepped out of line "
                    "(a second trap: several times the cost; docs/performance.md).",
                    MetricKind::kGauge, "{probe}");
    const std::uint64_t emulated = std::min(snap.emulated_probes, snap.attached_probes);
    f.points.push_back(point(nullptr, {{"class", "emulated"}}, count(emulated)));
    f.points.push_back(point(nullptr, {{"class", "stepped"}}, count(snap.attached_probes - emulated)));
    out.push_back(std::move(f));
  }
  if (snap.trap_cost_emulated.measured || snap.trap_cost_stepped.measured) {
    auto f = family("stallwatch_probe_trap_seconds",
                    "What one probe adds to a call on this host, measured at start on the "
                    "daemon's own targets: by site class and probe (entry; return: what the "
                    "return probe adds).",
                    MetricKind::kGauge, "s");
    for (const auto& [cls, cost] : {std::pair{"emulated", &snap.trap_cost_emulated},
                                    std::pair{"stepped", &snap.trap_cost_stepped}}) {
      if (!cost->measured) continue;
      f.points.push_back(point(nullptr, {{"class", cls}, {"probe", "entry"}}, cost->entry_seconds));
      f.points.push_back(point(nullptr, {{"class", cls}, {"probe", "return"}}, cost->return_seconds));
    }
    out.push_back(std::move(f));
  }
  if (snap.trap_cost_emulated.measured || snap.trap_cost_stepped.measured) {
    single("stallwatch_probe_cost_budget_ratio",
           "The cost budget (--cost-budget): the most a workload pays in probes, as a share of "
           "its CUDA-issuing threads' CPU time; 0: none.",
           MetricKind::kGauge, "1", snap.cost_budget);
  }
  single("stallwatch_snapshot_sequence", "Number of the window the exposition was built from.",
         MetricKind::kGauge, "1", count(snap.sequence));
  if (!snap.cpu_stolen.empty()) {
    double steal = 0, irq = 0;
    for (const auto& c : snap.cpu_stolen) {
      steal = std::max(steal, c.steal);
      irq = std::max(irq, c.irq);
    }
    auto f = family("stallwatch_cpu_stolen_ratio",
                    "Share of the most affected CPU's time in the last window taken by the "
                    "hypervisor (source=steal) or by interrupts (source=irq: hard and soft).",
                    MetricKind::kGauge, "1");
    f.points.push_back(point(nullptr, {{"source", "steal"}}, steal));
    f.points.push_back(point(nullptr, {{"source", "irq"}}, irq));
    out.push_back(std::move(f));
  }
  if (!snap.bpf_programs.empty()) {
    auto f = family("stallwatch_bpf_programs_loaded",
                    "Whether each BPF program of the daemon is loaded (1) or not (0): a variant "
                    "this kernel does not need, a hook whose tracepoint it lacks, or a program "
                    "its verifier refused (the log says which and why).",
                    MetricKind::kGauge, "1");
    for (const auto& [name, loaded] : snap.bpf_programs) {
      f.points.push_back(point(nullptr, {{"program", name}}, loaded ? 1 : 0));
    }
    out.push_back(std::move(f));
  }
  single("stallwatch_build_info", "Version of the running stallwatch (value 1).",
         MetricKind::kGauge, "1", 1, {{"version", build.version}, {"revision", build.revision}});
}

// The GPUs' own state (host/gpu_monitor.h): per GPU (label `gpu`, NVML's index), and which
// GPUs each workload uses. Nothing without NVML; the Xid counter also without it.
void add_gpu_families(const Snapshot& snap, std::vector<Family>& out) {
  const host::GpuSnapshot& g = snap.gpu;
  auto info = family("stallwatch_gpu_info",
                     "A GPU NVML reports (value 1): its UUID, PCI bus id and name.",
                     MetricKind::kGauge, "1");
  auto clock = family("stallwatch_gpu_sm_clock_hertz", "The GPU's SM clock at the last sample.",
                      MetricKind::kGauge, "Hz");
  auto clock_max = family("stallwatch_gpu_sm_clock_max_hertz",
                          "The GPU's maximum SM clock.", MetricKind::kGauge, "Hz");
  auto held = family("stallwatch_gpu_clock_held_seconds_total",
                     "Time the GPU's SM clock was held down by any reason but idle and the display "
                     "clock setting (sampled).",
                     MetricKind::kCounter, "s");
  auto reasons = family("stallwatch_gpu_clock_throttle_seconds_total",
                        "Time each clocks event (throttle) reason was active on the GPU "
                        "(sampled; several may be active at once).",
                        MetricKind::kCounter, "s");
  auto temp = family("stallwatch_gpu_temperature_celsius", "The GPU's temperature.",
                     MetricKind::kGauge, "Cel");
  auto lost = family("stallwatch_gpu_lost",
                     "1 while NVML answers that the GPU is lost (fallen off the bus, Xid 79): its "
                     "info keeps the last good identity, its clocks, power and temperature are "
                     "absent; else 0.",
                     MetricKind::kGauge, "1");
  auto power = family("stallwatch_gpu_power_watts", "The GPU's power draw.", MetricKind::kGauge,
                      "W");
  auto limit = family("stallwatch_gpu_power_limit_watts", "The GPU's enforced power limit.",
                      MetricKind::kGauge, "W");
  auto xids = family("stallwatch_gpu_xid_errors_total",
                     "Xid errors the NVIDIA driver logged since the daemon started, by GPU "
                     "(\"\" when its address matches no GPU NVML knows), PCI bus id and code.",
                     MetricKind::kCounter, "{error}");
  auto uses = family("stallwatch_workload_gpu_info",
                     "A GPU a workload's CUDA processes use now (value 1), by NVML index.",
                     MetricKind::kGauge, "1");
  for (const auto& t : g.gpus) {
    const std::string idx = std::to_string(t.last.index);
    info.points.push_back(point(nullptr,
                                {{"gpu", idx},
                                 {"uuid", t.last.uuid},
                                 {"pci_bus_id", t.last.bus_id},
                                 {"name", t.last.name}},
                                1));
    if (t.last.clocks_known) {
      clock.points.push_back(point(nullptr, {{"gpu", idx}}, t.last.sm_clock_mhz * 1e6));
      clock_max.points.push_back(point(nullptr, {{"gpu", idx}}, t.last.sm_clock_max_mhz * 1e6));
    }
    if (t.last.reasons_known) {
      held.points.push_back(point(nullptr, {{"gpu", idx}}, seconds(t.held_ns)));
      for (size_t k = 0; k < host::kClockReasons.size(); ++k) {
        reasons.points.push_back(point(
            nullptr, {{"gpu", idx}, {"reason", std::string(host::kClockReasons[k].name)}},
            seconds(t.reason_ns[k])));
      }
    }
    lost.points.push_back(point(nullptr, {{"gpu", idx}}, t.lost ? 1 : 0));
    if (!t.lost) temp.points.push_back(point(nullptr, {{"gpu", idx}}, t.last.temperature_c));
    if (t.last.power_known) {
      power.points.push_back(point(nullptr, {{"gpu", idx}}, t.last.power_w));
      limit.points.push_back(point(nullptr, {{"gpu", idx}}, t.last.power_limit_w));
    }
  }
  for (const auto& x : g.xid_counts) {
    xids.points.push_back(point(nullptr,
                                {{"gpu", x.gpu >= 0 ? std::to_string(x.gpu) : std::string()},
                                 {"pci_bus_id", x.pci},
                                 {"xid", std::to_string(x.code)}},
                                count(x.count)));
  }
  for (const auto& [label, s] : snap.series) {
    std::vector<unsigned> used;
    for (const auto& [pid, pi] : s.process_info) {
      auto it = g.process_gpus.find(pid);
      if (it == g.process_gpus.end()) continue;
      for (unsigned i : it->second) {
        if (std::find(used.begin(), used.end(), i) == used.end()) used.push_back(i);
      }
    }
    std::sort(used.begin(), used.end());
    for (unsigned i : used) uses.points.push_back(point(&s.identity, {{"gpu", std::to_string(i)}}, 1));
  }
  keep_nonempty({&info, &lost, &clock, &clock_max, &held, &reasons, &temp, &power, &limit, &xids,
                 &uses},
                out);
  if (g.nvml || g.kmsg) {
    auto failures = family("stallwatch_gpu_sample_failures_total",
                           "GPU readings NVML refused (reason=error) and windows whose readings "
                           "were stale because a pass did not return (reason=stale).",
                           MetricKind::kCounter, "{sample}");
    failures.points.push_back(point(nullptr, {{"reason", "error"}}, count(g.sample_failures)));
    failures.points.push_back(point(nullptr, {{"reason", "stale"}}, count(g.stale_windows)));
    out.push_back(std::move(failures));
  }
  if (g.kmsg) {
    auto xid_lost = family("stallwatch_gpu_xid_lost_total",
                       "Xid lines not kept: over the rate bound (reason=rate), or overwritten in "
                       "the kernel's ring before they were read (reason=overrun: any record).",
                       MetricKind::kCounter, "{line}");
    xid_lost.points.push_back(point(nullptr, {{"reason", "rate"}}, count(g.xid_dropped)));
    xid_lost.points.push_back(point(nullptr, {{"reason", "overrun"}}, count(g.kmsg_overrun)));
    out.push_back(std::move(xid_lost));
  }
}

void add_chain_families(const Snapshot& snap, std::vector<Family>& out) {
  auto total = family("stallwatch_chains_total",
                      "Causal chains opened, by kind and the severity they opened with.",
                      MetricKind::kCounter, "{chain}");
  auto active = family("stallwatch_chain_active",
                       "Causal chains open now, by kind and current severity (0 once closed).",
                       MetricKind::kGauge, "{chain}");
  auto culprit = family("stallwatch_chain_culprit_info",
                        "1 for each process name an open chain blames first (its top "
                        "contributor apart from the workload's own process), by kind.",
                        MetricKind::kGauge, "1");
  std::set<std::tuple<const identity::Identity*, std::string, std::string>> blamed;
  for (const auto& c : snap.chains) {
    LabelPairs l{{"kind", c.kind}, {"severity", c.severity}};
    if (c.total > 0) total.points.push_back(point(&c.identity, l, count(c.total)));
    active.points.push_back(point(&c.identity, l, count(c.active)));
    for (const std::string& name : c.culprits) {
      if (blamed.emplace(&c.identity, c.kind, name).second) {
        culprit.points.push_back(point(&c.identity, {{"kind", c.kind}, {"culprit", name}}, 1));
      }
    }
  }
  out.push_back(std::move(total));
  out.push_back(std::move(active));
  keep_nonempty({&culprit}, out);
}

// A job's ranks across nodes (trace/nccl_ranks.h): per communicator member, what it waited for
// its collectives, and one info series joining it to its node and job.
void add_rank_families(const Snapshot& snap, std::vector<Family>& out) {
  auto wait = family("stallwatch_nccl_rank_wait_seconds_total",
                     "Time the rank's process spent in NCCL ops and CUDA synchronizes: its wait "
                     "for its collectives (the straggler of a communicator waits least), by "
                     "NCCL commHash, rank and size.",
                     MetricKind::kCounter, "s");
  auto ops = family("stallwatch_nccl_rank_collectives_total",
                    "NCCL collective and point-to-point calls of the rank.", MetricKind::kCounter,
                    "{call}");
  auto job = family("stallwatch_job_info",
                    "1 for each NCCL communicator member on this node: its commHash, rank and "
                    "size, the node, and the job keys of the process's environment (torchrun, "
                    "Slurm), else of its pod's labels or its Slurm cgroup.",
                    MetricKind::kGauge, "1");
  std::set<std::tuple<std::string, std::uint64_t, int, int>> seen;  // one series per member
  for (const trace::NcclRank& r : trace::nccl_ranks(snap)) {
    const auto s = snap.series.find(r.cgroup);
    if (s == snap.series.end() || !seen.emplace(r.cgroup, r.comm_hash, r.rank, r.world_size).second)
      continue;
    const identity::Identity* id = &s->second.identity;
    LabelPairs l{{"comm", trace::comm_label(r.comm_hash)},
                 {"rank", std::to_string(r.rank)},
                 {"world_size", std::to_string(r.world_size)}};
    wait.points.push_back(point(id, l, seconds(r.wait_ns)));
    ops.points.push_back(point(id, l, count(r.collectives)));
    l.insert(l.end(), {{"node", snap.node},
                       {"job_id", trace::job_id_of(r.job, *id)},
                       {"global_rank", r.job.global_rank},
                       {"local_rank", r.job.local_rank}});
    job.points.push_back(point(id, l, 1));
  }
  keep_nonempty({&wait, &ops, &job}, out);
}

// A daemon-wide series without labels.
void add_scalar(std::vector<Family>& out, const char* name, const char* help, MetricKind kind,
                const char* unit, std::uint64_t v) {
  auto f = family(name, help, kind, unit);
  f.points.push_back(point(nullptr, {}, count(v)));
  out.push_back(std::move(f));
}

void add_http_families(const HttpStats& st, std::vector<Family>& out) {
  if (!st.enabled) return;
  auto f = family("stallwatch_http_rejected_total",
                  "Connections and requests the /metrics listener turned away or cut, by reason "
                  "(per_address, over_cap, header_deadline, request_deadline, evicted, "
                  "login_throttled, login_denied).",
                  MetricKind::kCounter, "{request}");
  for (const auto& [reason, v] :
       {std::pair{"per_address", st.refused_per_address}, {"over_cap", st.over_cap},
        {"header_deadline", st.header_deadline}, {"request_deadline", st.request_deadline},
        {"evicted", st.evicted}, {"login_throttled", st.login_throttled},
        {"login_denied", st.login_denied}}) {
    f.points.push_back(point(nullptr, {{"reason", reason}}, count(v)));
  }
  out.push_back(std::move(f));
}

void add_kube_families(const KubeStats& st, std::vector<Family>& out) {
  if (!st.enabled) return;
  add_scalar(out, "stallwatch_kubernetes_pods",
             "Pods of this node whose names the daemon knows (from the last good pod list).",
             MetricKind::kGauge, "{pod}", st.pods);
  auto lists = family("stallwatch_kubernetes_pod_lists_total",
                      "Pod lists asked of the Kubernetes API server, by result (success, failure).",
                      MetricKind::kCounter, "{request}");
  lists.points.push_back(point(nullptr, {{"result", "success"}}, count(st.lists_ok)));
  lists.points.push_back(point(nullptr, {{"result", "failure"}}, count(st.lists_failed)));
  out.push_back(std::move(lists));
}

void add_store_families(const StoreStats& st, std::vector<Family>& out) {
  if (!st.configured && !st.enabled) return;
  auto add = [&](const char* name, const char* help, MetricKind kind, const char* unit,
                 std::uint64_t v) { add_scalar(out, name, help, kind, unit, v); };
  add("stallwatch_store_up",
      "1 while the chain store is open and its last write succeeded, 0 while it cannot be "
      "opened or written (tracing and /metrics go on; the daemon retries every minute, moves a "
      "corrupt database aside, and logs why).",
      MetricKind::kGauge, "1", st.enabled && !st.failing ? 1 : 0);
  if (!st.enabled) return;
  add("stallwatch_store_rows_written_total", "Rows committed to the SQLite store.",
      MetricKind::kCounter, "{row}", st.rows_written);
  add("stallwatch_store_batches_dropped_total",
      "Window batches dropped because the store writer fell behind.", MetricKind::kCounter,
      "{batch}", st.batches_dropped);
  add("stallwatch_store_write_errors_total", "Failed store transactions (disk full, I/O errors).",
      MetricKind::kCounter, "{transaction}", st.write_errors);
  add("stallwatch_store_rows_pruned_total", "Rows deleted by retention (age or --max-db).",
      MetricKind::kCounter, "{row}", st.rows_pruned);
  add("stallwatch_store_queue_batches", "Window batches waiting for the store writer.",
      MetricKind::kGauge, "{batch}", st.queue_size);
  add("stallwatch_store_size_bytes", "Size of the store on disk (database and WAL).",
      MetricKind::kGauge, "By", st.db_bytes);
}

void add_otlp_families(const OtlpStats& st, std::vector<Family>& out) {
  if (!st.enabled) return;
  auto requests = family("stallwatch_otlp_requests_total",
                         "OTLP export attempts, by signal (metrics, logs) and result (success, "
                         "failure).",
                         MetricKind::kCounter, "{request}");
  for (const char* signal : {"metrics", "logs"}) {
    for (const char* result : {"success", "failure"}) {
      auto it = st.requests.find(std::string(signal) + "/" + result);
      requests.points.push_back(point(nullptr, {{"signal", signal}, {"result", result}},
                                      count(it == st.requests.end() ? 0 : it->second)));
    }
  }
  // Every reason is always present, so rate() and alerts see a 0 before the first failure.
  auto by_reason = [](Family f, const std::map<std::string, std::uint64_t>& m,
                      std::initializer_list<const char*> reasons) {
    for (const char* r : reasons) {
      auto it = m.find(r);
      f.points.push_back(point(nullptr, {{"reason", r}}, count(it == m.end() ? 0 : it->second)));
    }
    return f;
  };
  out.push_back(std::move(requests));
  out.push_back(by_reason(family("stallwatch_otlp_failures_total",
                                 "Failed OTLP export attempts, by reason (throttled: 429; "
                                 "unavailable: 502/503/504; rejected: other 4xx; server_error: "
                                 "other 5xx; timeout; connection).",
                                 MetricKind::kCounter, "{request}"),
                          st.failures,
                          {"throttled", "unavailable", "rejected", "server_error", "timeout",
                           "connection"}));
  out.push_back(by_reason(family("stallwatch_otlp_points_dropped_total",
                                 "Data points and log records that never reached the receiver, "
                                 "by reason.",
                                 MetricKind::kCounter, "{point}"),
                          st.points_dropped,
                          {"queue_full", "retries_exhausted", "rejected", "partial_success",
                           "shutdown"}));
  auto add = [&](const char* name, const char* help, MetricKind kind, const char* unit,
                 std::uint64_t v) { add_scalar(out, name, help, kind, unit, v); };
  add("stallwatch_otlp_points_sent_total",
      "Data points and log records the receiver accepted.", MetricKind::kCounter, "{point}",
      st.points_sent);
  add("stallwatch_otlp_queue_requests", "OTLP export requests waiting to be sent.",
      MetricKind::kGauge, "{request}", st.queue_requests);
  add("stallwatch_otlp_queue_bytes",
      "Uncompressed bytes of the OTLP export requests waiting to be sent.", MetricKind::kGauge,
      "By", st.queue_bytes);
}

// The families whose points are per CUDA call: merged per class unless --metrics.calls call.
bool per_call_family(const std::string& name) {
  return name == "stallwatch_cuda_call_duration_seconds" ||
         name == "stallwatch_cuda_call_offcpu_seconds_total" ||
         name == "stallwatch_cuda_call_inflight_seconds" ||
         name == "stallwatch_cuda_memory_allocated_bytes_total" ||
         name == "stallwatch_cuda_memory_freed_bytes_total" ||
         name == "stallwatch_cuda_memory_alloc_failures_total";
}

// Drops the `call` label of every point (and `class` where `drop_class`) and merges the points
// left with the same workload and labels: histograms and counters add up, gauges (the age of the
// oldest call in flight) keep the largest.
void merge_calls(Family& f, bool drop_class) {
  std::map<std::pair<const identity::Identity*, LabelPairs>, size_t> at;
  std::vector<Point> merged;
  merged.reserve(f.points.size());
  for (Point& p : f.points) {
    std::erase_if(p.labels, [&](const auto& l) {
      return l.first == "call" || (drop_class && l.first == "class");
    });
    auto [it, fresh] = at.try_emplace({p.workload, p.labels}, merged.size());
    if (fresh) {
      merged.push_back(std::move(p));
      continue;
    }
    Point& m = merged[it->second];
    switch (f.kind) {
      case MetricKind::kHistogram:
        m.histogram.count += p.histogram.count;
        m.histogram.sum_ns += p.histogram.sum_ns;
        m.histogram.max_ns = std::max(m.histogram.max_ns, p.histogram.max_ns);
        for (size_t i = 0; i < m.histogram.buckets.size(); ++i) {
          m.histogram.buckets[i] += p.histogram.buckets[i];
        }
        break;
      case MetricKind::kCounter:
        m.value += p.value;
        break;
      case MetricKind::kGauge:
        m.value = std::max(m.value, p.value);
        break;
    }
  }
  f.points = std::move(merged);
}

}  // namespace

std::map<std::string, std::string> workload_keys(const std::vector<Family>& families) {
  std::map<std::string, std::string> keys;  // cgroup → key
  std::map<std::string, int> users;         // key → distinct cgroups
  for (const Family& f : families) {
    for (const Point& p : f.points) {
      if (!p.workload) continue;
      auto [it, fresh] = keys.try_emplace(p.workload->cgroup);
      if (!fresh) continue;
      it->second = identity::workload_key(*p.workload);
      ++users[it->second];
    }
  }
  // Two workloads of one key (a unit and a cgroup below it, a container restarting while its
  // old cgroup lingers): both go by their cgroup paths, which are unique and never look like
  // another key (only paths begin with '/').
  for (auto& [cgroup, key] : keys) {
    if (users[key] > 1) key = cgroup.empty() ? std::string("/") : cgroup;
  }
  return keys;
}

void shape_families(std::vector<Family>& families, const ExpositionOptions& o,
                    std::deque<identity::Identity>& holder) {
  const auto keys = workload_keys(families);
  // Original identity → its copy, for the info series (whole) and the others (as `o` says).
  std::map<const identity::Identity*, const identity::Identity*> whole, kept;
  for (Family& f : families) {
    const bool info = f.name == "stallwatch_cgroup_info";
    auto& copies = info ? whole : kept;
    for (Point& p : f.points) {
      if (!p.workload) continue;
      auto [it, fresh] = copies.try_emplace(p.workload, nullptr);
      if (fresh) {
        identity::Identity& copy = holder.emplace_back(*p.workload);
        copy.workload = keys.at(p.workload->cgroup);
        if (!info) {
          if (!o.cgroup) copy.cgroup.clear();
          if (!o.container_id) copy.container_id.clear();
          if (!o.pod) copy.pod.clear();
          if (!o.pod_namespace) copy.pod_namespace.clear();
          if (!o.container) copy.container.clear();
        }
        it->second = &copy;
      }
      p.workload = it->second;
    }
  }
  if (!o.per_call) merge_per_class(families);
}

void merge_per_class(std::vector<Family>& families) {
  for (Family& f : families) {
    // The off-CPU time inside calls goes by api alone (2 series a state, not 7): the budget of
    // issue #37 (≤ 150 classic series for a 15-call loop) has no room for it per class.
    if (per_call_family(f.name)) merge_calls(f, f.name == "stallwatch_cuda_call_offcpu_seconds_total");
  }
}

LabelPairs identity_labels(const identity::Identity& id) {
  LabelPairs l{{"workload", id.workload.empty() ? identity::workload_key(id) : id.workload}};
  if (!id.cgroup.empty()) l.emplace_back("cgroup", id.cgroup);
  if (!id.container_id.empty()) l.emplace_back("container_id", id.container_id);
  if (!id.pod.empty()) l.emplace_back("pod", id.pod);
  if (!id.pod_namespace.empty()) l.emplace_back("namespace", id.pod_namespace);
  if (!id.container.empty()) l.emplace_back("container", id.container);
  return l;
}

std::vector<Family> build_model(const Snapshot& snap, const BuildInfo& build) {
  std::vector<Family> out;
  add_call_families(snap, out);
  add_memory_families(snap, out);
  add_host_families(snap, out);
  add_gpu_families(snap, out);
  add_daemon_families(snap, build, out);
  add_chain_families(snap, out);
  add_rank_families(snap, out);
  add_store_families(snap.store, out);
  add_otlp_families(snap.otlp, out);
  add_kube_families(snap.kube, out);
  add_http_families(snap.http, out);
  return out;
}

std::string otel_name(const Family& f) {
  std::string n = f.name;
  auto strip = [&n](std::string_view suffix) {
    if (n.size() > suffix.size() && n.ends_with(suffix)) {
      n.resize(n.size() - suffix.size());
      return true;
    }
    return false;
  };
  if (f.kind == MetricKind::kCounter) strip("_total");
  // `_ratio` stays: stallwatch_offcpu_ratio would become stallwatch.offcpu, the name of
  // stallwatch_offcpu_seconds_total.
  strip("_seconds") || strip("_bytes");
  std::replace(n.begin(), n.end(), '_', '.');
  return n;
}

}  // namespace stallwatch::metrics
