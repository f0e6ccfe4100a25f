#include "app/demo_runner.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>
#include <thread>

#include "chains/format.h"
#include "app/pipeline.h"
#include "chains/window.h"
#include "demo/scenario_kit.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::demo {
namespace {

using Clock = std::chrono::system_clock;

std::string clock_time(std::int64_t unix_ns) {
  std::time_t t = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

// One line per window: the slowest call of the busiest process and its runnable share.
std::string window_line(const chains::WindowView& v) {
  const chains::ProcessWindow* top = nullptr;
  for (const auto& p : v.processes) {
    if (!top || p.cuda_ns() > top->cuda_ns()) top = &p;
  }
  if (!top) return "no CUDA calls";
  std::uint32_t worst = 0;
  double worst_p99 = -1;
  std::uint64_t runnable = 0;
  for (const auto& [id, t] : top->calls) {
    runnable += t.runnable_ns;
    double p99 = trace::quantile_seconds(t.buckets, 0.99, t.max_ns);
    if (p99 > worst_p99) {
      worst_p99 = p99;
      worst = id;
    }
  }
  const std::uint64_t cuda = top->cuda_ns();
  std::ostringstream o;
  o << top->comm << " (" << top->pid << "): " << trace::all_calls()[worst].name << " p99 "
    << chains::human_seconds(worst_p99) << ", runnable off-CPU "
    << chains::percent(cuda ? static_cast<double>(runnable) / static_cast<double>(cuda) : 0)
    << " of CUDA time";
  return o.str();
}

}  // namespace

RunnerResult run_scenario(const Scenario& scenario, const RunnerOptions& options,
                          metrics::SnapshotBoard& board, store::Store* store, std::ostream& out) {
  app::PipelineOptions popts;
  popts.engine.host_cpus = options.host_cpus;
  popts.engine.seed = options.seed;
  // The scenarios are minutes long: a hang is reported after 5 s, not run's default 60 s.
  popts.engine.hang_threshold_ns = 5'000'000'000ULL;
  popts.otlp = options.otlp;
  app::Pipeline pipeline(popts, board, store);
  SyntheticHost host;
  host.rename_with(options.rename_cgroup, options.rename_comm);
  identity::KubeMetadata kube(identity::KubeSettings{});  // off: serves the demo's own pods
  std::vector<identity::KubePod> pods = kit::pods();
  if (options.rename_pod) {
    for (auto& pod : pods) {
      pod.name = options.rename_pod(pod.name);
      pod.pod_namespace = options.rename_pod(pod.pod_namespace);
      for (auto& c : pod.containers) c.name = options.rename_pod(c.name);
    }
  }
  kube.replace(pods);
  RunnerResult result;
  std::map<std::string, size_t> opened_at;  // chain id → index in result.opened

  int story = 0;
  for (const auto& p : scenario.phases) story += p.windows;
  const std::int64_t w = options.window.count();
  // The synthetic content of a window is sized for at least 1 s (a training step takes tens of
  // ms), so short --window values only speed the story up; the engine sees the content's length.
  const std::int64_t content_ns = std::max<std::int64_t>(w, 1000000000);
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  };
  const std::int64_t end0 = options.end_ns ? options.end_ns : now_ns();
  const std::int64_t t0 = options.realtime ? now_ns() : end0 - story * w;
  const auto steady0 = std::chrono::steady_clock::now();

  store::HostContext ctx;
  ctx.cpus = options.host_cpus;
  ctx.swap_used_bytes = 0;
  auto emit = [&](const Phase& phase, int i) {
    const std::int64_t end = t0 + static_cast<std::int64_t>(result.windows + 1) * w;
    if (options.realtime) {
      std::this_thread::sleep_until(steady0 + std::chrono::nanoseconds(
                                                  static_cast<std::int64_t>(result.windows + 1) * w));
    }
    phase.step(host, i, end, content_ns);
    auto snap = host.snapshot(Clock::time_point(std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::nanoseconds(end))),
                              std::chrono::nanoseconds(content_ns));
    for (auto& [label, s] : snap->series) kube.annotate(s.identity);
    ctx.cpu_busy = 0.35;
    ctx.mem_used = 0.62;
    ctx.cpu_stolen = snap->cpu_stolen;
    ctx.cpu_steal = ctx.cpu_irq = -1;  // known only in the windows the story sets it
    if (!ctx.cpu_stolen.empty()) {
      ctx.cpu_steal = ctx.cpu_irq = 0;
      for (const auto& c : ctx.cpu_stolen) {
        ctx.cpu_steal += c.steal / static_cast<double>(ctx.cpu_stolen.size());
        ctx.cpu_irq += c.irq / static_cast<double>(ctx.cpu_stolen.size());
      }
    }
    ctx.load1 = 3.1;
    for (const auto& c : pipeline.engine().open_chains()) {
      if (c.kind == chains::Kind::kCpuContention) {
        ctx.cpu_busy = 0.94;
        ctx.load1 = 12.3;
      }
      if (c.kind == chains::Kind::kMemoryPressure) ctx.mem_used = 0.97;
    }
    auto changed = pipeline.window(snap, host.drain_outliers(), ctx);
    result.windows++;
    return changed;
  };

  std::shared_ptr<const Snapshot> previous;
  auto report = [&](const std::vector<chains::Chain>& changed) {
    auto cur = board.current();
    chains::WindowView v = chains::diff_windows(previous.get(), *cur);
    previous = cur;
    out << "  [" << std::setw(2) << result.windows << "] " << clock_time(v.end_ns) << "  "
        << window_line(v) << "\n";
    for (const auto& c : changed) {
      auto it = opened_at.find(c.id);
      if (it == opened_at.end()) {
        opened_at[c.id] = result.opened.size();
        result.opened.push_back(c);
        out << "       >> chain opened: " << c.summary << "\n";
        if (!c.open) out << "       >> reported once and closed\n";
      } else {
        bool escalated = c.severity != result.opened[it->second].severity;
        result.opened[it->second] = c;
        if (!c.open) {
          out << "       >> chain closed after " << c.windows << " windows: " << c.summary << "\n";
        } else if (escalated) {
          out << "       >> chain now " << chains::severity_name(c.severity) << ": " << c.summary
              << "\n";
        }
      }
    }
    out.flush();
  };

  out << "demo " << scenario.name << ": " << scenario.title << "\n"
      << "expect: " << scenario.expect << "\n";
  for (size_t pi = 0; pi < scenario.phases.size(); pi++) {
    const Phase& phase = scenario.phases[pi];
    if (options.hold && static_cast<int>(pi) > scenario.hold_phase) break;
    out << "\n-- " << phase.narration << "\n";
    for (int i = 0; i < phase.windows; i++) report(emit(phase, i));
  }
  if (options.hold || options.serve_after) {
    const size_t last = options.hold ? static_cast<size_t>(scenario.hold_phase)
                                     : scenario.phases.size() - 1;
    const Phase& phase = scenario.phases[last];
    out << "\n-- serving /metrics; repeating \"" << phase.narration << "\" until stopped\n";
    out.flush();
    int i = phase.windows;
    while (!options.stop || !options.stop->load()) {
      auto changed = emit(phase, i++);
      for (const auto& c : changed) {
        auto it = opened_at.find(c.id);
        if (it == opened_at.end()) {
          opened_at[c.id] = result.opened.size();
          result.opened.push_back(c);
        } else {
          result.opened[it->second] = c;
        }
      }
    }
  }
  return result;
}

}  // namespace stallwatch::demo
