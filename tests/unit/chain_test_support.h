// Shared helpers of the chain engine's unit tests (chain_engine_test.cpp,
// chain_host_rules_test.cpp): fixed timestamps and the test cgroups, a Driver that feeds the
// engine one window at a time from the demo's synthetic host, run_scenario() over a demo
// scenario's phases, synthetic workloads of our own (Load, with(), calm_and()) and builders of
// snapshots and totals for diff_windows. Header-only; everything is in stallwatch::chaintest.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chains/chain.h"
#include "chains/engine.h"
#include "chains/window.h"
#include "trace/snapshot.h"
#include "demo/scenarios.h"
#include "demo/synthetic.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::chaintest {

using chains::Chain;
using chains::Kind;
using chains::Severity;

// ---------------------------------------------------------------------------------------------
// Fixed timestamps, the test workloads' cgroups, calls and chains.

inline constexpr std::int64_t kS = 1000000000;
// 2026-11-20 14:03:11 UTC, start of window 1.
inline constexpr std::int64_t kT0 = 1795183391 * kS;
inline constexpr std::int64_t kWindow = 1 * kS;

inline const std::string kCg = "/system.slice/train.service";
inline const std::string kOtherCg = "/system.slice/other.service";

inline std::uint32_t call_id(std::string_view name) {
  auto calls = trace::all_calls();
  for (std::uint32_t i = 0; i < calls.size(); i++) {
    if (calls[i].name == name) return i;
  }
  ADD_FAILURE() << "no call " << name;
  return 0;
}

// Every calm cudaStreamSynchronize takes exactly 7 µs; quantiles are capped at the window's
// largest call, so the calm p50 and p99 are 7 µs (not the 7.6 µs bucket bound).
inline constexpr double kCalmSyncS = 7e-6;

inline double bucket_upper(std::uint64_t ns) {
  return trace::bucket_upper_seconds(trace::bucket_of_ns(ns));
}

inline bool has_contributor(const Chain& c, const std::string& comm) {
  return std::any_of(c.contributors.begin(), c.contributors.end(),
                     [&](const chains::Contributor& k) { return k.comm == comm; });
}

inline std::string contributors_of(const Chain& c) {
  std::string s;
  for (const auto& k : c.contributors) s += k.comm + "(" + std::to_string(k.pid) + ") ";
  return s;
}

// ---------------------------------------------------------------------------------------------
// The engine, window by window.

// The engine fed by a synthetic host, one window per step(), at kT0 + n * window.
class Driver {
 public:
  explicit Driver(chains::EngineOptions o = default_options(), std::int64_t window = kWindow)
      : engine(o), window_ns(window) {}

  static chains::EngineOptions default_options() {
    chains::EngineOptions o;
    o.host_cpus = 8;
    return o;
  }

  std::int64_t next_end() const { return kT0 + (windows + 1) * window_ns; }

  // Runs `fill` for the window now ending, snapshots and observes it.
  std::vector<Chain> step(const std::function<void(demo::SyntheticHost&, std::int64_t end)>& fill) {
    const std::int64_t end = next_end();
    fill(host, end);
    auto snap = host.snapshot(std::chrono::system_clock::time_point(
                                  std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                      std::chrono::nanoseconds(end))),
                              std::chrono::nanoseconds(window_ns));
    last_view = chains::diff_windows(previous.get(), *snap);
    auto changed = engine.observe(*snap, last_view, host.drain_outliers());
    previous = snap;
    windows++;
    all.insert(all.end(), changed.begin(), changed.end());
    return changed;
  }

  demo::SyntheticHost host;
  chains::Engine engine;
  std::int64_t window_ns;
  std::int64_t windows = 0;
  std::shared_ptr<const Snapshot> previous;
  chains::WindowView last_view;
  std::vector<Chain> all;  // every change, in order
};

// A demo scenario run phase by phase: what each window changed.
struct WindowOutcome {
  size_t phase = 0;
  int i = 0;  // window within the phase
  std::int64_t end_ns = 0;
  std::vector<Chain> changed;
};

struct ScenarioRun {
  std::vector<WindowOutcome> windows;
  std::vector<Chain> changes() const {
    std::vector<Chain> out;
    for (const auto& w : windows) out.insert(out.end(), w.changed.begin(), w.changed.end());
    return out;
  }
  // The first window that opened, updated or closed a chain; null when none did.
  const WindowOutcome* first_change() const {
    for (const auto& w : windows) {
      if (!w.changed.empty()) return &w;
    }
    return nullptr;
  }
  std::vector<std::string> ids() const {
    std::vector<std::string> out;
    for (const auto& c : changes()) {
      if (std::find(out.begin(), out.end(), c.id) == out.end()) out.push_back(c.id);
    }
    return out;
  }
  // The latest state of each chain.
  std::vector<Chain> chains() const {
    std::vector<Chain> out;
    for (const auto& c : changes()) {
      auto it = std::find_if(out.begin(), out.end(), [&](const Chain& o) { return o.id == c.id; });
      if (it == out.end()) {
        out.push_back(c);
      } else {
        *it = c;
      }
    }
    return out;
  }
  // The first state each chain was reported in (its opening).
  std::vector<Chain> openings() const {
    std::vector<Chain> out;
    for (const auto& c : changes()) {
      auto it = std::find_if(out.begin(), out.end(), [&](const Chain& o) { return o.id == c.id; });
      if (it == out.end()) out.push_back(c);
    }
    return out;
  }
};

inline ScenarioRun run_scenario(const std::string& name, Driver& d) {
  auto s = demo::make_scenario(name);
  EXPECT_TRUE(s.has_value()) << name;
  ScenarioRun run;
  if (!s) return run;
  for (size_t pi = 0; pi < s->phases.size(); pi++) {
    const demo::Phase& phase = s->phases[pi];
    for (int i = 0; i < phase.windows; i++) {
      WindowOutcome w;
      w.phase = pi;
      w.i = i;
      w.end_ns = d.next_end();
      w.changed = d.step([&](demo::SyntheticHost& h, std::int64_t end) {
        phase.step(h, i, end, d.window_ns);
      });
      run.windows.push_back(std::move(w));
    }
  }
  return run;
}

inline ScenarioRun run_scenario(const std::string& name) {
  Driver d;
  return run_scenario(name, d);
}

// ---------------------------------------------------------------------------------------------
// Synthetic workloads of our own: kPid trains in kCg.

struct Load {
  std::uint64_t steps = 20;
  std::uint64_t sync_ns = 7000;
  std::uint64_t tail_ns = 0;
  double tail_share = 0;
  double call_runnable = 0;  // share of every call's time spent runnable off-CPU
  double call_blocked = 0.02;
  double thread_runnable = 0.004;
  double thread_blocked = 0.05;
};

inline void load(demo::SyntheticHost& h, int pid, std::int64_t w, const Load& l) {
  h.calls(pid, {"cudaLaunchKernel", l.steps * 24, 9000, 0, 0, l.call_runnable, 0});
  h.calls(pid, {"cudaStreamSynchronize", l.steps, l.sync_ns, l.tail_ns, l.tail_share,
                l.call_runnable, l.call_blocked});
  const auto runnable = static_cast<std::uint64_t>(l.thread_runnable * static_cast<double>(w));
  const auto blocked = static_cast<std::uint64_t>(l.thread_blocked * static_cast<double>(w));
  h.offcpu(pid, runnable, blocked, static_cast<std::uint64_t>(w) - runnable - blocked, 40);
}

inline Load calm() { return Load{}; }

// Contention with `share` of both the call time and the thread time spent runnable.
inline Load contended(double share) {
  Load l;
  l.sync_ns = 5000000;
  l.call_runnable = share;
  l.thread_runnable = share;
  l.thread_blocked = 0.02;
  return l;
}

inline constexpr int kPid = 4000;

inline std::function<void(demo::SyntheticHost&, std::int64_t)> with(const Load& l,
                                                                    int pid = kPid) {
  return [l, pid](demo::SyntheticHost& h, std::int64_t) {
    if (!h.has_process(pid)) h.add_process(kCg, pid, "python3", kT0 - 3600 * kS);
    load(h, pid, kWindow, l);
  };
}

using Fill = std::function<void(demo::SyntheticHost&, std::int64_t)>;

// The calm load of kPid plus `extra`.
inline Fill calm_and(const std::function<void(demo::SyntheticHost&, std::int64_t)>& extra,
                     const Load& l = calm()) {
  return [extra, l](demo::SyntheticHost& h, std::int64_t end) {
    with(l)(h, end);
    extra(h, end);
  };
}

// `share` of a window, in ns.
inline std::uint64_t part(double share) { return static_cast<std::uint64_t>(share * kWindow); }

inline std::vector<Chain> of_kind(const std::vector<Chain>& all, Kind k) {
  std::vector<Chain> out;
  for (const auto& c : all) {
    if (c.kind == k) out.push_back(c);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Snapshots and cumulative totals for diff_windows.

inline CallTotals totals(std::uint64_t count, std::uint64_t each_ns, std::uint64_t runnable = 0,
                         std::uint64_t blocked = 0) {
  CallTotals t;
  t.count = count;
  t.sum_ns = count * each_ns;
  t.runnable_ns = runnable;
  t.blocked_ns = blocked;
  t.max_ns = count ? each_ns : 0;
  if (count) t.buckets[trace::bucket_of_ns(each_ns)] = count;
  return t;
}

inline Snapshot snap_at(std::int64_t end_ns) {
  Snapshot s;
  s.taken = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(end_ns)));
  s.window = std::chrono::nanoseconds(kWindow);
  return s;
}

inline void add_proc(Snapshot& s, const std::string& cg, int pid, const std::string& comm,
                     std::uint32_t call, const CallTotals& t, OffcpuTotals off = {}) {
  Series& ser = s.series[cg];
  ser.identity.cgroup = cg;
  ser.processes.push_back(ProcessCall{pid, call, t});
  ser.process_info[pid] = ProcessInfo{pid, comm, 42, off, {}};
}

inline const chains::ProcessWindow* find(const chains::WindowView& v, int pid) {
  for (const auto& p : v.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

// `count` requests or ops of `bytes` in all, each taking each_ns (IoTotals or NcclTotals).
template <typename T>
T sized_totals(std::uint64_t count, std::uint64_t bytes, std::uint64_t each_ns) {
  T t;
  t.count = count;
  t.bytes = bytes;
  t.sum_ns = count * each_ns;
  t.max_ns = count ? each_ns : 0;
  if (count) t.buckets[trace::bucket_of_ns(each_ns)] = count;
  return t;
}

inline IoTotals io_totals(std::uint64_t count, std::uint64_t bytes, std::uint64_t each_ns) {
  return sized_totals<IoTotals>(count, bytes, each_ns);
}

inline NcclTotals nccl_totals(std::uint64_t count, std::uint64_t bytes, std::uint64_t each_ns) {
  return sized_totals<NcclTotals>(count, bytes, each_ns);
}

}  // namespace stallwatch::chaintest
