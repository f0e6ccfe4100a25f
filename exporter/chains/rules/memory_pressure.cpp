// memory_pressure: reclaim time and PSI memory stalls in the workload's cgroup, and OOM kills,
// which hold the chain's severity for a while (also after the cgroup is gone). docs/chains.md.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "identity/cgroup_identity.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  // Reclaim time of the series' tasks, or PSI memory `some` stall time, as a share of the
  // window (the reclaim share that makes it high is in kinds.h); the CUDA threads' own reclaim
  // share that raises severity one step; how many windows an OOM kill keeps its severity.
  double reclaim_share = 0.05;
  double psi_share = 0.10;
  double psi_high_share = 0.40;
  double cuda_reclaim_share = 0.05;
  int oom_hold_windows = 6;
  // The effect reclaim must have had for a chain (an OOM kill is one by itself): the
  // CUDA-issuing threads reclaimed at least this share of the window themselves, or the GPU
  // starved (CUDA threads blocked outside calls) this share of it, or a call of a CUDA process
  // took this many times its baseline's mean.
  double effect_cuda_share = 0.005;
  double effect_starvation = 0.10;
  double effect_slowdown = 1.5;
};

// The slowest call of the series' CUDA processes against its baseline this window: the ratio
// of its mean to the baseline's median mean, 0 when no call has a known baseline.
double worst_slowdown(const WindowContext& ctx, const std::string& cgroup) {
  double worst = 0;
  for (const ProcessWindow* p : ctx.cuda_processes(cgroup)) {
    for (const auto& [id, t] : p->calls) {
      if (t.count < ctx.options.thresholds.min_calls) continue;
      const Baseline* b = ctx.baseline(*p, id);
      const double usual = b ? b->median_mean() : 0;
      if (usual <= 0) continue;
      const double mean = static_cast<double>(t.sum_ns) / 1e9 / static_cast<double>(t.count);
      worst = std::max(worst, mean / usual);
    }
  }
  return worst;
}

constexpr size_t kMaxVictims = 16;

Advice advise(const Chain& c) {
  Advice out;
  const std::string& cg = c.identity.cgroup;
  const bool memcg = c.evidence_value("memcg_reclaim_s") >= c.evidence_value("direct_reclaim_s");
  const bool oom = c.evidence_value("oom_kills") > 0;
  if (oom) {
    out.command(Command("journalctl -k").pipe(Command("grep -iE").arg("out of memory|oom-kill")),
                "what the kernel killed, at which usage and limit");
  }
  if (memcg || oom) {
    // The cgroup's own name, not its label (escaped where a byte is not UTF-8 or a backslash).
    const std::string path = identity::cgroup_path_of_label(cg);
    const std::string unit = last_component(path);
    if (in_kubepods(cg)) {
      out.code("resources: {requests: {memory: \"<more>\"}, limits: {memory: \"<more>\"}}",
               "the container reclaims (or is killed) at its memory limit: raise it");
    } else if (unit.ends_with(".service") || unit.ends_with(".scope")) {
      out.command(Command("systemctl set-property")
                      .arg(unit)
                      .arg("MemoryMax=<more>")
                      .arg("MemoryHigh=<more>"),
                  "the unit reclaims (or is killed) at its memory limit: raise it");
    } else {
      out.command(Command("cat")
                      .arg("/sys/fs/cgroup" + path + "/memory.max")
                      .arg("/sys/fs/cgroup" + path + "/memory.stat"),
                  "the cgroup reclaims at its limit: raise memory.max or shrink the job");
    }
  }
  if (!memcg) {
    out.note(
        "the node itself ran short (direct reclaim): check free -g and vmstat 1; move other "
        "memory-hungry workloads away or add memory");
  }
  out.code("DataLoader(num_workers=<fewer>, prefetch_factor=2)",
           "every worker holds prefetch_factor batches and its own copy of the dataset object");
  out.note("pin_memory=True page-locks every prefetched batch: it cannot be reclaimed or swapped");
  out.note(
      "keep the Dataset in numpy arrays or memory-mapped files, not Python lists of objects "
      "(reference counts make every worker copy them)");
  return out;
}

class MemoryPressure : public Rule {
 public:
  Kind kind() const override { return Kind::kMemoryPressure; }

  void series(const WindowContext& ctx, const SeriesWindow& s, std::vector<Finding>& out) override {
    const double window = static_cast<double>(ctx.view.window_ns);

    // OOM kills are events: remember them so the chain holds their severity for a while.
    bool cuda_victim = s.oom_kills_cuda > 0;
    for (const auto& v : s.new_oom_victims) cuda_victim = cuda_victim || v.cuda;
    const std::uint64_t kills = std::max<std::uint64_t>(s.oom_kills, s.new_oom_victims.size());
    if (kills > 0) {
      OomMemory& m = ooms_[s.cgroup];
      m.window = window_;
      m.cuda = m.cuda || cuda_victim;
      m.kills += kills;
      m.victims.insert(m.victims.end(), s.new_oom_victims.begin(), s.new_oom_victims.end());
      if (m.victims.size() > kMaxVictims) {
        m.victims.erase(m.victims.begin(), m.victims.begin() + static_cast<std::ptrdiff_t>(
                                                                   m.victims.size() - kMaxVictims));
      }
    }
    const OomMemory* oom = nullptr;
    if (auto it = ooms_.find(s.cgroup);
        it != ooms_.end() &&
        window_ - it->second.window < static_cast<std::uint64_t>(th_.oom_hold_windows)) {
      oom = &it->second;
    }

    const std::uint64_t reclaim = s.reclaim.direct_ns + s.reclaim.memcg_ns;
    const double reclaim_share = share(static_cast<double>(reclaim), window);
    const double cuda_share = share(static_cast<double>(s.reclaim.cuda_ns), window);
    const double psi_share =
        s.pressure.known ? share(static_cast<double>(s.pressure.memory_some_ns), window) : 0;
    bool fires = reclaim_share >= th_.reclaim_share || psi_share >= th_.psi_share;
    // Effect first: reclaim or PSI that slowed nothing of the job is context (the reclaim and
    // pressure families on /metrics), not a chain.
    const double slowdown = fires ? worst_slowdown(ctx, s.cgroup) : 0;
    const bool effect = cuda_share >= th_.effect_cuda_share ||
                        s.starvation_ratio >= th_.effect_starvation ||
                        slowdown >= th_.effect_slowdown;
    fires = fires && effect;
    Severity sev = Severity::kLow;
    if (fires) {
      sev = std::max(kind_info(kind()).cutoffs.of(reclaim_share),
                     psi_share >= th_.psi_high_share ? Severity::kHigh : Severity::kMedium);
      if (cuda_share >= th_.cuda_reclaim_share) sev = step_up(sev);
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
    c = ctx.base_chain(kind(), s.cgroup);
    c.severity = sev;
    const auto procs = ctx.cuda_processes(s.cgroup);
    const ProcessWindow* main = procs.empty() ? nullptr : procs[0];
    if (oom) {
      for (auto it = oom->victims.rbegin(); it != oom->victims.rend(); ++it) {  // latest first
        if (c.contributors.size() == 10) break;
        c.contributors.push_back(Contributor{it->comm, it->pid, s.cgroup, "OOM victim", 0, 0, {}});
      }
    }
    const bool memcg = s.reclaim.memcg_ns >= s.reclaim.direct_ns;
    const bool reclaiming = reclaim > 0 || psi_share > 0;
    if (reclaiming || !oom) {
      c.evidence = {
          {"reclaim_s", secs(reclaim)},
          {"reclaim_share", reclaim_share},
          {"memcg_reclaim_s", secs(s.reclaim.memcg_ns)},
          {"direct_reclaim_s", secs(s.reclaim.direct_ns)},
          {"reclaims", static_cast<double>(s.reclaim.memcg_count + s.reclaim.direct_count)},
          {"cuda_reclaim_s", secs(s.reclaim.cuda_ns)},
          {"cuda_reclaim_share", cuda_share},
          {"starvation_share", s.starvation_ratio},
          {"call_slowdown", slowdown}};
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
      causes.push_back("its tasks spent " + human_ns(reclaim) +
                       " reclaiming memory in the window (" + percent(reclaim_share) + " of it, " +
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
      if (s.starvation_ratio >= th_.effect_starvation) {
        c.effect += ", and the GPU starved " + percent(s.starvation_ratio) +
                    " of it waiting for them";
      }
      if (slowdown >= th_.effect_slowdown) {
        c.effect += "; the slowest call took " + times(slowdown) + " its usual time";
      }
    }
    if (oom) {
      c.summary = summary_of(
          c, (last ? process_text(last->comm, last->pid) +
                         (last->cuda ? ", a CUDA-issuing process," : "") + " was OOM-killed"
                   : std::string("a process was OOM-killed")) +
                 " in " + workload_of(c));
    } else if (reclaim_share >= th_.reclaim_share) {
      c.summary = summary_of(c, "the workload of " + process_or_workload(main, c) + " spent " +
                                    percent(reclaim_share) + " of the window in " +
                                    (memcg ? "memcg" : "direct") + " reclaim, its CUDA threads " +
                                    percent(cuda_share));
    } else {
      c.summary =
          summary_of(c, "the workload of " + process_or_workload(main, c) + " stalled on memory " +
                            percent(psi_share) + " of the window (PSI memory some)");
    }
    set_advice(c, advise(c));
    out.push_back(std::move(f));
  }

  // An OOM kill keeps its chain going for a while even when its series is gone; then the
  // window count moves on and kills older than oom_hold_windows are forgotten.
  void host(const WindowContext& ctx, std::vector<Finding>& out) override {
    std::vector<std::string> gone;
    for (const auto& [cgroup, oom] : ooms_) {
      if (!ctx.view.series.count(cgroup)) gone.push_back(cgroup);
    }
    for (const auto& cgroup : gone) {
      SeriesWindow s;
      s.cgroup = cgroup;
      series(ctx, s, out);
    }
    const auto hold = static_cast<std::uint64_t>(std::max(1, th_.oom_hold_windows));
    for (auto it = ooms_.begin(); it != ooms_.end();) {
      it = window_ + 1 >= it->second.window + hold ? ooms_.erase(it) : std::next(it);
    }
    window_++;
  }

 private:
  struct OomMemory {
    std::uint64_t window = 0;      // window_ of the latest kill
    bool cuda = false;             // a CUDA-issuing process was among the victims
    std::uint64_t kills = 0;       // since the first of this run of kills
    std::vector<OomKill> victims;  // the latest, at most kMaxVictims
  };
  Thresholds th_;
  std::map<std::string, OomMemory> ooms_;  // by cgroup, while within oom_hold_windows
  std::uint64_t window_ = 0;               // windows observed before this one
};

}  // namespace

std::unique_ptr<Rule> make_memory_pressure_rule() { return std::make_unique<MemoryPressure>(); }

}  // namespace stallwatch::chains
