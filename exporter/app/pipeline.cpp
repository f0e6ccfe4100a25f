#include "app/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/strings.h"
#include "host/nvml.h"
#include "metrics/otlp/pusher.h"
#include "store/store.h"
#include "trace/calls.h"
#include "trace/records.h"

namespace stallwatch::app {

std::vector<store::Outlier> resolve_outliers(const Snapshot& snap, const chains::OutlierWindow& w,
                                             size_t keep) {
  std::map<int, const std::string*> label_of;
  for (const auto& [label, s] : snap.series) {
    for (const auto& [pid, info] : s.process_info) label_of[pid] = &label;
  }
  std::vector<store::Outlier> out;
  auto calls = trace::all_calls();
  for (const auto& e : w.worst) {
    if (out.size() == keep) break;
    store::Outlier o;
    o.ts_ns = trace::unix_ns_of_monotonic(e.ts_ns);  // the records' clock is CLOCK_MONOTONIC
    if (auto it = label_of.find(static_cast<int>(e.tgid)); it != label_of.end()) {
      o.cgroup = *it->second;
    } else if (auto id = snap.cgroup_labels.find(e.cgroup_id); id != snap.cgroup_labels.end()) {
      o.cgroup = id->second;  // the process exited before the window ended
    }
    o.pid = static_cast<int>(e.tgid);
    o.tid = static_cast<int>(e.tid);
    o.comm = escape_name(std::string_view(e.comm, strnlen(e.comm, sizeof(e.comm))));
    if (e.call_id < calls.size()) {
      o.call = std::string(calls[e.call_id].name);
      o.api = std::string(trace::api_name(calls[e.call_id].api));
    }
    o.duration_ns = e.duration_ns;
    o.runnable_ns = e.runnable_ns;
    o.blocked_ns = e.blocked_ns;
    o.preemptions = e.preemptions;
    out.push_back(std::move(o));
  }
  return out;
}

namespace {

// Each GPU of the window for the store (gpu_windows): explain's GPU context.
// What stallwatch's probes cost in the window (issue #48): a pair per site class as measured
// at start, and the largest share of a workload's CUDA-thread CPU spent in them; -1 unknown.
store::ProbeCostRow probe_cost_row(const Snapshot& snap, const chains::WindowView& view) {
  store::ProbeCostRow row;
  auto pair = [](const trace::TrapCost& t) {
    return t.measured ? t.entry_seconds + t.return_seconds : -1.0;
  };
  row.pair_emulated_s = pair(snap.trap_cost_emulated);
  row.pair_stepped_s = pair(snap.trap_cost_stepped);
  if (row.pair_emulated_s < 0 && row.pair_stepped_s < 0) return row;  // nothing priced
  for (const auto& [label, s] : view.series) {
    if (s.probe_cost_ratio > 0) row.workload_max = std::max(row.workload_max, s.probe_cost_ratio);
  }
  return row;
}

std::vector<store::GpuRow> gpu_rows(const chains::WindowView& view) {
  std::vector<store::GpuRow> out;
  for (const auto& g : view.gpus) {
    const host::GpuReading& r = g.last;
    store::GpuRow row;
    row.gpu = r.index;
    row.uuid = r.uuid;
    row.name = r.name;
    if (r.clocks_known) {
      row.sm_clock_mhz = static_cast<int>(r.sm_clock_mhz);
      row.sm_clock_max_mhz = static_cast<int>(r.sm_clock_max_mhz);
    }
    row.held_share = g.held_share();
    row.lost_since_ns = g.lost_since_ns;
    if (g.held_ns > 0) row.held_clock_mhz = g.held_clock_mhz;
    std::uint64_t top = 0;
    for (size_t k = 0; k < host::kClockReasons.size(); ++k) {
      if (host::kClockReasons[k].held && g.reason_ns[k] > top) {
        top = g.reason_ns[k];
        row.top_reason = std::string(host::kClockReasons[k].name);
      }
    }
    if (top > 0 && g.sampled_ns > 0) {
      row.top_reason_share = static_cast<double>(top) / static_cast<double>(g.sampled_ns);
    }
    if (r.temperature_c > 0) row.temperature_c = static_cast<int>(r.temperature_c);
    if (r.power_known) {
      row.power_w = r.power_w;
      row.power_limit_w = r.power_limit_w;
    }
    for (const auto& x : view.new_xids) {
      if (x.gpu == static_cast<int>(r.index) && row.xid_codes.size() < 64) {
        row.xid_codes.push_back(x.code);
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

Pipeline::Pipeline(PipelineOptions options, metrics::SnapshotBoard& board, store::Store* store)
    : options_(options),
      board_(board),
      store_(store),
      store_configured_(store != nullptr),
      engine_(options.engine) {}

std::vector<chains::Chain> Pipeline::window(std::shared_ptr<Snapshot> snap,
                                            const chains::OutlierWindow& outliers,
                                            const store::HostContext& host) {
  snap->cpu_stolen = host.cpu_stolen;
  chains::WindowView view = chains::diff_windows(previous_.get(), *snap);
  chains::set_window_ratios(*snap, view);
  if (options_.launch_duty) {
    chains::DutyPlan plan =
        chains::plan_launch_duty(view, *snap, options_.cost_budget, launch_duty_);
    launch_duty_ = plan.duty;
    options_.launch_duty(plan);
  }
  std::vector<chains::Chain> changed = engine_.observe(*snap, view, outliers);
  // A chain of a workload whose launches were sampled says so: its launch counts are
  // estimates (window.h).
  for (chains::Chain& c : changed) {
    auto s = view.series.find(c.identity.cgroup);
    if (s == view.series.end() || s->second.launch_duty >= 1) continue;
    c.evidence.emplace_back("launch_probe_duty_share", s->second.launch_duty);
  }
  snap->chains = engine_.counts();
  if (store_) {
    store::WindowBatch batch;
    batch.end_ns = view.end_ns;
    batch.window_ns = view.window_ns;
    batch.host = host;
    for (const auto& [label, s] : snap->series) batch.cgroups.push_back(s.identity);
    batch.outliers = resolve_outliers(*snap, outliers, options_.stored_outliers);
    batch.chains = changed;
    {
      std::map<int, std::pair<const std::string*, const std::string*>> proc;  // label, comm
      for (const auto& [label, s] : snap->series) {
        for (const auto& [pid, info] : s.process_info) proc[pid] = {&label, &info.comm};
      }
      const auto calls = trace::all_calls();
      for (const auto& r : outliers.resolved) {
        store::SiteRow row;
        if (auto it = proc.find(r.pid); it != proc.end()) {
          row.cgroup = *it->second.first;
          row.comm = *it->second.second;
        } else if (auto id = snap->cgroup_labels.find(r.cgroup_id);
                   id != snap->cgroup_labels.end()) {
          row.cgroup = id->second;
        }
        row.pid = r.pid;
        if (r.call_id < calls.size()) row.api = std::string(trace::api_name(calls[r.call_id].api));
        row.site = r.site;
        batch.sites.push_back(std::move(row));
      }
    }
    batch.gpus = gpu_rows(view);
    batch.nccl =
        store::member_rows(previous_.get(), *snap, store::kMaxNcclMembers, batch.nccl_dropped);
    batch.probe_cost = probe_cost_row(*snap, view);
    batch.processes = std::move(view.processes);
    for (auto& p : view.ended) batch.processes.push_back(std::move(p));
    const auto calls = trace::all_calls();
    for (const auto& [label, s] : snap->series) {
      for (const auto& c : s.inflight) {
        if (c.call_id >= calls.size()) continue;
        batch.inflight.push_back(store::Inflight{
            label, c.pid, c.tid, c.thread, std::string(calls[c.call_id].name),
            std::string(trace::api_name(calls[c.call_id].api)), c.age_ns, c.runnable_ns,
            c.blocked_ns, c.preemptions, c.on_cpu, c.rank, c.world_size});
      }
    }
    store_->enqueue(std::move(batch));
    snap->store = store_->stats();
  }
  if (options_.store_stats) snap->store = options_.store_stats();
  snap->store.configured = store_configured_;
  if (options_.otlp) snap->otlp = options_.otlp->stats();
  if (options_.http_stats) snap->http = options_.http_stats();
  board_.publish(snap);
  if (options_.otlp) options_.otlp->offer(snap, changed);
  previous_ = std::move(snap);
  return changed;
}

}  // namespace stallwatch::app
