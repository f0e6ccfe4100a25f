// gpu_throttle: the workload's calls that wait for the GPU (synchronisations, copies, NCCL ops)
// take longer than their baseline while the GPU they run on spent a share of the window with its
// SM clock held down (NVML's clocks event reasons: power cap, thermal or hardware slowdown,
// power brake, applications clocks, sync boost; host/gpu_monitor.h). Effect first: a throttled
// GPU whose job did not slow is context on /metrics, not a chain; a slowdown the lower clock
// cannot account for, or that the thread spent waiting for a CPU, is not blamed on it.
// docs/chains.md.
#include <algorithm>
#include <string>

#include "chains/call_classes.h"
#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "trace/calls.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  double held_share = 0.20;       // the GPU's clock held down at least this share of the window
  double growth = 1.20;           // a GPU-waiting call's mean at least this × its baseline mean
  double min_expected = 1.10;     // and the lower clock alone would make GPU work this much slower
  double runnable_share = 0.5;    // the excess not mostly spent waiting for a CPU
  double hardware_share = 0.10;   // a hardware reason this share of the window: one step up
};

constexpr std::uint64_t kHardware = 0x8 | 0x40 | 0x80;  // hw_slowdown, hw_thermal, hw_power_brake

bool waits_for_gpu(std::uint32_t id) {
  return is_sync_call(id) || is_copy_call(id) || trace::is_nccl_op(id);
}

// The reasons of the window, most time first, as "sw_power_cap 80%, hw_thermal 10%".
std::string reasons_text(const GpuWindow& g) {
  std::vector<std::pair<std::uint64_t, size_t>> held;
  for (size_t k = 0; k < host::kClockReasons.size(); ++k) {
    if (host::kClockReasons[k].held && g.reason_ns[k] > 0) held.emplace_back(g.reason_ns[k], k);
  }
  std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a > b; });
  std::string out;
  for (const auto& [ns, k] : held) {
    if (!out.empty()) out += ", ";
    out += std::string(host::kClockReasons[k].name) + " " +
           percent(share(static_cast<double>(ns), static_cast<double>(g.sampled_ns)));
  }
  return out;
}

// The reason that held the clock longest.
const host::ClockReason* main_reason(const GpuWindow& g) {
  const host::ClockReason* best = nullptr;
  std::uint64_t most = 0;
  for (size_t k = 0; k < host::kClockReasons.size(); ++k) {
    if (host::kClockReasons[k].held && g.reason_ns[k] > most) {
      most = g.reason_ns[k];
      best = &host::kClockReasons[k];
    }
  }
  return best;
}

Advice advise(const GpuWindow& g, const host::ClockReason* r) {
  Advice out;
  const std::int64_t gpu = g.last.index;
  const std::string_view name = r ? r->name : "";
  if (name == "sw_power_cap") {
    out.command(Command("nvidia-smi -q -d POWER -i").number(gpu),
                "the power draw against the enforced limit and the default limit");
    out.command(Command("nvidia-smi -i").number(gpu).words("-pl").placeholder("watts"),
                "raise the power limit back toward the default (root), or spread the work "
                "over more GPUs");
  } else if (name == "sw_thermal" || name == "hw_thermal") {
    out.command(Command("nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i").number(gpu),
                "the GPU and memory temperatures against their slowdown thresholds");
    out.note("check the node's cooling: fans, airflow, blocked inlets, the rack's inlet "
             "temperature; a GPU hotter than its neighbours needs service");
  } else if (name == "hw_slowdown" || name == "hw_power_brake") {
    out.command(Command("nvidia-smi -q -d PERFORMANCE -i").number(gpu),
                "which hardware slowdown is active (thermal, power brake)");
    out.command(Command("dcgmi diag -r 2"),
                "DCGM diagnostics of the node: power supplies and GPU health");
    out.note("hardware slowdown is the board protecting itself: drain the node if it persists");
  } else if (name == "applications_clocks") {
    out.command(Command("nvidia-smi -q -d CLOCK -i").number(gpu),
                "the applications clocks set against the GPU's maximum");
    out.command(Command("nvidia-smi -rac -i").number(gpu), "reset the applications clocks");
  } else {
    out.command(Command("nvidia-smi -q -d PERFORMANCE -i").number(gpu),
                "the active clocks event reasons");
  }
  return out;
}

class GpuThrottle : public Rule {
 public:
  Kind kind() const override { return Kind::kGpuThrottle; }

  void process(const WindowContext& ctx, const ProcessWindow& p,
               std::vector<Finding>& out) override {
    const GpuWindow* g = ctx.held_gpu(p, th_.held_share);
    if (!g || g->last.sm_clock_max_mhz == 0 || g->held_clock_mhz <= 0) return;
    const double held = g->held_share();
    const double max_mhz = g->last.sm_clock_max_mhz;
    const double clock = std::min(g->held_clock_mhz, max_mhz);
    // GPU work at `clock` instead of `max_mhz` for `held` of the window.
    const double expected = 1 + held * (max_mhz / clock - 1);
    if (expected < th_.min_expected) return;

    const CallTotals* worst = nullptr;
    std::uint32_t worst_id = 0;
    double worst_ratio = 0;
    for (const auto& [id, t] : p.calls) {
      if (!waits_for_gpu(id) || t.count < ctx.options.thresholds.min_calls) continue;
      const Baseline* b = ctx.baseline(p, id);
      if (!b || b->median_mean() <= 0) continue;
      const double mean = stat_of(id, t).mean();
      const double ratio = mean / b->median_mean();
      if (ratio < th_.growth || ratio <= worst_ratio) continue;
      // The CPU wait's share of the window's whole rise, not of its longest call: one call
      // preempted inside does not refuse a window whose rise the clock explains (issue #50).
      if (WindowContext::rise_runnable_share(t, b->median_mean()) >= th_.runnable_share) continue;
      worst = &t;
      worst_id = id;
      worst_ratio = ratio;
    }
    if (!worst) return;

    std::uint64_t hardware_ns = 0;
    for (size_t k = 0; k < host::kClockReasons.size(); ++k) {
      if (host::kClockReasons[k].bit & kHardware) hardware_ns += g->reason_ns[k];
    }
    const double hardware = share(static_cast<double>(hardware_ns), static_cast<double>(g->sampled_ns));
    const host::ClockReason* reason = main_reason(*g);

    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), p);
    c.severity = kind_info(kind()).cutoffs.of(worst_ratio);
    if (hardware >= th_.hardware_share) c.severity = step_up(c.severity);
    CallStat st = stat_of(worst_id, *worst);
    const Baseline* b = ctx.baseline(p, worst_id);
    set_call(c, st, b);
    const double explained = std::min(1.0, share(expected - 1, worst_ratio - 1));
    const std::string gpu = "GPU " + std::to_string(g->last.index);
    const std::string ids = (g->last.uuid.empty() ? std::string() : g->last.uuid) +
                            (g->last.bus_id.empty() ? std::string()
                                                    : (g->last.uuid.empty() ? "" : ", ") +
                                                          std::string("PCI ") + g->last.bus_id);
    c.evidence = {{"gpu", static_cast<double>(g->last.index)},
                  {"held_share", held},
                  {"held_clock_mhz", clock},
                  {"max_clock_mhz", max_mhz},
                  {"clock_lost", 1 - clock / max_mhz},
                  {"hardware_share", hardware},
                  {"expected_slowdown", expected},
                  {"call_slowdown", worst_ratio},
                  {"explained_share", explained},
                  {"temperature_c", static_cast<double>(g->last.temperature_c)}};
    if (g->last.power_known) {
      c.evidence.push_back({"power_w", g->last.power_w});
      c.evidence.push_back({"power_limit_w", g->last.power_limit_w});
    }
    std::string state = std::to_string(g->last.temperature_c) + " C";
    if (g->last.power_known) {
      state += ", " + std::to_string(static_cast<int>(g->last.power_w + 0.5)) + " W of a " +
               std::to_string(static_cast<int>(g->last.power_limit_w + 0.5)) + " W limit";
    }
    c.root_cause = gpu + (ids.empty() ? "" : " (" + ids + ")") + ", which " +
                   process_text(p.comm, p.pid) + " uses, held its SM clock down " +
                   percent(held) + " of the window (" + reasons_text(*g) + "): " +
                   std::to_string(static_cast<int>(clock + 0.5)) + " MHz instead of " +
                   std::to_string(static_cast<int>(max_mhz + 0.5)) + " (" +
                   percent(1 - clock / max_mhz) + " less; now " + state +
                   "). GPU work at that clock takes up to " + times(expected) +
                   " as long, and " + std::string(call_name(worst_id)) + " took " +
                   times(worst_ratio) + " its usual time: the lower clock accounts for " +
                   percent(explained) + " of the rise";
    c.effect = effect_text(st, b);
    c.summary = summary_of(c, c.call + " in " + p.comm + " (PID " + std::to_string(p.pid) +
                                  ") " + times(worst_ratio) + " slower while " + gpu + " ran at " +
                                  std::to_string(static_cast<int>(clock + 0.5)) + " MHz (" +
                                  std::string(reason ? reason->name : "held") + ")");
    set_advice(c, advise(*g, reason));
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_gpu_throttle_rule() { return std::make_unique<GpuThrottle>(); }

}  // namespace stallwatch::chains
