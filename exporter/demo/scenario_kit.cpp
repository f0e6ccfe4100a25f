#include "demo/scenario_kit.h"

#include <cmath>
#include <utility>

namespace stallwatch::demo::kit {

std::uint64_t per_window(double per_second, std::int64_t window_ns) {
  return static_cast<std::uint64_t>(
      std::llround(per_second * static_cast<double>(window_ns) / 1e9));
}

std::uint64_t share_of(double share, std::int64_t window_ns) {
  return static_cast<std::uint64_t>(share * static_cast<double>(window_ns));
}

void train(SyntheticHost& h, int pid, std::int64_t w, const Train& t) {
  const std::uint64_t steps = per_window(t.steps_per_s, w);
  h.calls(pid, {"cudaLaunchKernel", steps * 24, 9000, 0, 0, t.sync_runnable / 4, 0});
  h.calls(pid, {"cuLaunchKernel", steps * 16, 6000, 0, 0, t.sync_runnable / 4, 0});
  h.calls(pid, {"cudaMemcpyAsync", steps * 2, t.copy_ns, 0, 0, t.sync_runnable / 2, 0});
  h.calls(pid, {"cudaStreamSynchronize", steps, t.sync_ns, t.sync_tail_ns, t.sync_tail_share,
                t.sync_runnable, t.sync_blocked});
  const std::uint64_t runnable = share_of(t.thread_runnable, w);
  const std::uint64_t blocked = share_of(t.thread_blocked, w);
  h.offcpu(pid, runnable, blocked, static_cast<std::uint64_t>(w) - runnable - blocked,
           per_window(static_cast<double>(t.preemptions_per_s), w));
}

Phase training(std::string narration, int windows, int pid, const char* cgroup, std::int64_t age_ns,
               Train load) {
  return {std::move(narration), windows,
          [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
            if (!h.has_process(pid)) h.add_process(cgroup, pid, "python3", now - age_ns);
            train(h, pid, w, load);
          }};
}

}  // namespace stallwatch::demo::kit
