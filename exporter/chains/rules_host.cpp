// The host-evidence rules about a cgroup (chains with pid 0): memory_pressure, io_stall and
// network_retransmit. docs/chains.md states every threshold.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "chains/advice.h"
#include "chains/format.h"
#include "chains/rule_helpers.h"
#include "chains/rules.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::chains {
namespace {

constexpr size_t kMaxVictims = 16;

Severity step_up(Severity s) {
  return s >= Severity::kHigh ? s : static_cast<Severity>(static_cast<int>(s) + 1);
}

// How a person knows the workload: its container, systemd unit or cgroup path.
std::string workload_of(const Chain& c) {
  if (!c.identity.container_id.empty()) return "container " + c.identity.container_id.substr(0, 12);
  if (!c.identity.systemd_unit.empty()) return c.identity.systemd_unit;
  return c.identity.cgroup;
}

// "python3 (PID 4242)", or the workload when the series has no CUDA process this window.
std::string who(const ProcessWindow* p, const Chain& c) {
  return p ? process_text(p->comm, p->pid) : workload_of(c);
}

}  // namespace

void RuleContext::memory_pressure(const SeriesWindow& s, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  const double window = static_cast<double>(view_.window_ns);

  // OOM kills are events: remember them so the chain holds their severity for a while.
  bool cuda_victim = s.oom_kills_cuda > 0;
  for (const auto& v : s.new_oom_victims) cuda_victim = cuda_victim || v.cuda;
  const std::uint64_t kills = std::max<std::uint64_t>(s.oom_kills, s.new_oom_victims.size());
  if (kills > 0) {
    Engine::OomMemory& m = engine_.ooms_[s.cgroup];
    m.window = engine_.window_index_;
    m.cuda = m.cuda || cuda_victim;
    m.kills += kills;
    m.victims.insert(m.victims.end(), s.new_oom_victims.begin(), s.new_oom_victims.end());
    if (m.victims.size() > kMaxVictims) {
      m.victims.erase(m.victims.begin(), m.victims.begin() + static_cast<std::ptrdiff_t>(
                                                                 m.victims.size() - kMaxVictims));
    }
  }
  const Engine::OomMemory* oom = nullptr;
  if (auto it = engine_.ooms_.find(s.cgroup);
      it != engine_.ooms_.end() &&
      engine_.window_index_ - it->second.window < static_cast<std::uint64_t>(th.oom_hold_windows)) {
    oom = &it->second;
  }

  const std::uint64_t reclaim = s.reclaim.direct_ns + s.reclaim.memcg_ns;
  const double reclaim_share = share(static_cast<double>(reclaim), window);
  const double cuda_share = share(static_cast<double>(s.reclaim.cuda_ns), window);
  const double psi_share =
      s.pressure.known ? share(static_cast<double>(s.pressure.memory_some_ns), window) : 0;
  bool fires = reclaim_share >= th.mem_reclaim_share || psi_share >= th.mem_psi_share;
  Severity sev = Severity::kLow;
  if (fires) {
    sev = reclaim_share >= th.mem_reclaim_high_share || psi_share >= th.mem_psi_high_share
              ? Severity::kHigh
              : Severity::kMedium;
    if (cuda_share >= th.mem_cuda_reclaim_share) sev = step_up(sev);
  }
  if (oom) {
    const Severity by_oom = oom->cuda ? Severity::kCritical : Severity::kHigh;
    sev = fires ? std::max(sev, by_oom) : by_oom;
    fires = true;
  }
  if (!fires) return;

  Finding f;
  f.immediate = oom != nullptr;  // an OOM kill is news at once
  Chain& c = f.chain;
  c = base_chain(Kind::kMemoryPressure, s.cgroup);
  c.severity = sev;
  const auto procs = cuda_processes(s.cgroup);
  const ProcessWindow* main = procs.empty() ? nullptr : procs[0];
  if (oom) {
    for (auto it = oom->victims.rbegin(); it != oom->victims.rend(); ++it) {  // latest first
      if (c.contributors.size() == 10) break;
      c.contributors.push_back(Contributor{it->comm, it->pid, s.cgroup, "OOM victim", 0, 0});
    }
  }
  const bool memcg = s.reclaim.memcg_ns >= s.reclaim.direct_ns;
  const bool reclaiming = reclaim > 0 || psi_share > 0;
  if (reclaiming || !oom) {
    c.evidence = {{"reclaim_s", secs(reclaim)},
                  {"reclaim_share", reclaim_share},
                  {"memcg_reclaim_s", secs(s.reclaim.memcg_ns)},
                  {"direct_reclaim_s", secs(s.reclaim.direct_ns)},
                  {"reclaims", static_cast<double>(s.reclaim.memcg_count + s.reclaim.direct_count)},
                  {"cuda_reclaim_s", secs(s.reclaim.cuda_ns)},
                  {"cuda_reclaim_share", cuda_share}};
    if (s.pressure.known) c.evidence.emplace_back("psi_memory_some_share", psi_share);
  }
  if (oom) {
    c.evidence.emplace_back("oom_kills", static_cast<double>(oom->kills));
    c.evidence.emplace_back("oom_kills_cuda", oom->cuda ? 1.0 : 0.0);
  }

  const OomKill* last = oom && !oom->victims.empty() ? &oom->victims.back() : nullptr;
  std::vector<std::string> causes;
  if (oom) {
    causes.push_back("the OOM killer killed " + std::to_string(oom->kills) + " process" +
                     (oom->kills == 1 ? "" : "es") + " of the workload" +
                     (last ? ", latest " + process_text(last->comm, last->pid) +
                                 (last->cuda ? ", a CUDA-issuing process" : "")
                           : std::string()));
  }
  if (reclaim > 0) {
    causes.push_back("its tasks spent " + human_ns(reclaim) + " reclaiming memory in the window (" +
                     percent(reclaim_share) + " of it, " +
                     (memcg ? "memcg reclaim at the cgroup's memory limit"
                            : "direct reclaim: the node ran short") +
                     "), the CUDA-issuing threads " + human_ns(s.reclaim.cuda_ns) + " of it");
  }
  if (s.pressure.known && (psi_share > 0 || !oom)) {
    causes.push_back("PSI memory some " + percent(psi_share) + " of the window");
  }
  c.root_cause.clear();
  for (const auto& part : causes) c.root_cause += (c.root_cause.empty() ? "" : "; ") + part;
  if (oom && oom->cuda) {
    c.effect =
        "a CUDA-issuing process was killed: the job lost its progress since the last "
        "checkpoint and its GPU memory";
  } else if (oom) {
    c.effect =
        "a process of the workload (a DataLoader worker, say) was killed: the job may "
        "fail or restart the worker";
  } else {
    c.effect =
        "while reclaiming, the tasks that feed the GPU stall; the CUDA-issuing threads "
        "lost " +
        percent(cuda_share) + " of the window to reclaim";
  }
  if (oom) {
    c.summary = summary_of(
        c, (last ? process_text(last->comm, last->pid) +
                       (last->cuda ? ", a CUDA-issuing process," : "") + " was OOM-killed"
                 : std::string("a process was OOM-killed")) +
               " in " + workload_of(c));
  } else if (reclaim_share >= th.mem_reclaim_share) {
    c.summary =
        summary_of(c, "the workload of " + who(main, c) + " spent " + percent(reclaim_share) +
                          " of the window in " + (memcg ? "memcg" : "direct") +
                          " reclaim, its CUDA threads " + percent(cuda_share));
  } else {
    c.summary = summary_of(c, "the workload of " + who(main, c) + " stalled on memory " +
                                  percent(psi_share) + " of the window (PSI memory some)");
  }
  c.recommendation = advise_memory_pressure(c);
  out.push_back(std::move(f));
}

void RuleContext::io_stall(const SeriesWindow& s, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  if (s.starvation_ratio < th.io_starvation || s.io.empty()) return;
  const double window = static_cast<double>(view_.window_ns);
  const IoTotals all = s.io_total();
  const double busy = share(static_cast<double>(all.sum_ns), window);
  const double p99 = trace::quantile_seconds(all.buckets, 0.99, all.max_ns);
  const bool busy_enough = busy >= th.io_busy_share;
  const bool slow = all.count > 0 && p99 >= th.io_slow_p99_s && busy >= th.io_slow_busy_share;
  if (!busy_enough && !slow) return;

  Finding f;
  Chain& c = f.chain;
  c = base_chain(Kind::kIoStall, s.cgroup);
  c.severity = s.starvation_ratio >= th.io_starvation_high ? Severity::kHigh : Severity::kMedium;
  // The busiest device (by request time) names the storage.
  std::map<std::string, IoTotals> by_device;
  for (const auto& [key, t] : s.io) by_device[key.device].add(t);
  std::string device;
  std::uint64_t device_ns = 0;
  for (const auto& [dev, t] : by_device) {
    if (t.sum_ns > device_ns) {
      device = dev;
      device_ns = t.sum_ns;
    }
  }
  // Submitters, by request time.
  struct Submitter {
    std::string comm;
    std::uint64_t ns = 0, count = 0, bytes = 0;
  };
  std::map<int, Submitter> subs;
  for (const auto& pio : s.io_processes) {
    Submitter& k = subs[pio.pid];
    k.comm = pio.comm;
    k.ns += pio.totals.sum_ns;
    k.count += pio.totals.count;
    k.bytes += pio.totals.bytes;
  }
  std::vector<std::pair<int, Submitter>> ranked(subs.begin(), subs.end());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  for (const auto& [pid, k] : ranked) {
    if (c.contributors.size() == 10) break;
    c.contributors.push_back(Contributor{k.comm, pid, s.cgroup, "I/O submitter", k.ns, k.count});
  }
  const auto procs = cuda_processes(s.cgroup);
  const ProcessWindow* main = procs.empty() ? nullptr : procs[0];
  const double mean = all.count ? secs(all.sum_ns) / static_cast<double>(all.count) : 0;
  c.evidence = {{"starvation_share", s.starvation_ratio},
                {"io_busy_share", busy},
                {"io_p99_s", p99},
                {"io_mean_s", mean},
                {"io_requests", static_cast<double>(all.count)},
                {"io_bytes", static_cast<double>(all.bytes)},
                {"device_busy_share", share(static_cast<double>(device_ns), window)}};
  const std::string workload = who(main, c);
  c.root_cause = "the CUDA-issuing threads of " + workload + " sat blocked outside CUDA calls " +
                 percent(s.starvation_ratio) + " of the window while the workload's block I/O " +
                 "was busy: " + thousands(all.count) + " requests (" +
                 human_bytes(static_cast<double>(all.bytes)) + "), p99 " + human_seconds(p99) +
                 ", " + short_number(busy) + " requests in flight on average, most on " + device;
  if (!c.contributors.empty()) {
    const Submitter& top = ranked[0].second;
    c.root_cause += "; top submitter " + process_text(top.comm, ranked[0].first) + " moved " +
                    human_bytes(static_cast<double>(top.bytes)) + " and waited " +
                    human_ns(top.ns) + " on its requests";
  }
  c.effect =
      "the GPU starves between steps: the training loop waits for the next batch, not "
      "for the GPU";
  c.summary = summary_of(c, workload + " starved " + percent(s.starvation_ratio) +
                                " of the time waiting on " + device + " I/O (p99 " +
                                human_seconds(p99) + ")");
  c.recommendation = advise_io_stall(c, device);
  out.push_back(std::move(f));
}

void RuleContext::network_retransmit(const SeriesWindow& s, std::vector<Finding>& out) {
  const Thresholds& th = engine_.options_.thresholds;
  const std::uint64_t retrans = s.retransmits();
  const double window_s = secs(static_cast<std::uint64_t>(view_.window_ns));
  const double rate = window_s > 0 ? static_cast<double>(retrans) / window_s : 0;
  if (retrans < th.net_min_retransmits || rate < th.net_retransmits_per_s) return;

  // The most inflated synchronisation or NCCL op of the workload against its baseline.
  const ProcessWindow* worst_p = nullptr;
  std::uint32_t worst_id = 0;
  double worst_ratio = 0, worst_p99_ratio = 0, worst_mean_ratio = 0;
  for (const auto* p : cuda_processes(s.cgroup)) {
    for (const auto& [id, t] : p->calls) {
      const bool nccl = trace::is_nccl_op(id);
      if ((!is_sync_call(id) && !nccl) || t.count < th.min_calls) continue;
      const Baseline* b = baseline(*p, id);
      if (!baseline_known(b) || b->median_p99() <= 0) continue;
      const CallStat st = stat_of(id, t);
      const double p99_ratio = st.p99 / b->median_p99();
      const double mean_ratio = nccl && b->median_mean() > 0 ? st.mean() / b->median_mean() : 0;
      const bool inflated = p99_ratio >= th.net_p99_ratio || mean_ratio >= th.net_nccl_mean_ratio;
      const double ratio = std::max(p99_ratio, mean_ratio);
      if (inflated && ratio > worst_ratio) {
        worst_p = p;
        worst_id = id;
        worst_ratio = ratio;
        worst_p99_ratio = p99_ratio;
        worst_mean_ratio = mean_ratio;
      }
    }
  }
  if (!worst_p) return;

  Finding f;
  Chain& c = f.chain;
  c = base_chain(Kind::kNetworkRetransmit, s.cgroup);
  c.severity = rate >= th.net_high_per_s ? Severity::kHigh : Severity::kMedium;
  const CallStat st = stat_of(worst_id, worst_p->calls.at(worst_id));
  const Baseline* b = baseline(*worst_p, worst_id);
  set_call(c, st, b, true);
  c.evidence = {{"retransmits", static_cast<double>(retrans)},
                {"retransmits_per_second", rate},
                {"ipv4_retransmits", static_cast<double>(s.retransmits_ipv4)},
                {"ipv6_retransmits", static_cast<double>(s.retransmits_ipv6)},
                {"call_p99_ratio", worst_p99_ratio},
                {"call_mean_s", st.mean()},
                {"baseline_mean_s", b->median_mean()}};
  if (worst_mean_ratio > 0) c.evidence.emplace_back("call_mean_ratio", worst_mean_ratio);
  const std::string proc = process_text(worst_p->comm, worst_p->pid);
  const char* family = s.retransmits_ipv6 == 0   ? "IPv4"
                       : s.retransmits_ipv4 == 0 ? "IPv6"
                                                 : "IPv4 and IPv6";
  c.root_cause = "the workload's TCP sockets retransmitted " + thousands(retrans) + " segments (" +
                 short_number(rate) + "/s, " + family + ") in the window while " + c.call + " in " +
                 proc + " took p99 " + human_seconds(st.p99) + " against " +
                 human_seconds(b->median_p99()) + " usually (" + times(worst_p99_ratio) + ")" +
                 (worst_mean_ratio > 0 ? ", mean " + times(worst_mean_ratio) : std::string());
  c.effect = effect_text(st, b, true) +
             "; a lost segment stalls its stream for a round trip at best, for the "
             "retransmission timeout (200 ms or more) when fast retransmit cannot recover it";
  c.summary = summary_of(c, c.call + " in " + proc + " " + times(worst_ratio) + " slower with " +
                                short_number(rate) + " TCP retransmits/s");
  c.recommendation = advise_network_retransmit(c);
  out.push_back(std::move(f));
}

}  // namespace stallwatch::chains
