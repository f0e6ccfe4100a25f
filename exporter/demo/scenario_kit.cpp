#include "demo/scenario_kit.h"

#include <cmath>
#include <utility>

namespace stallwatch::demo::kit {

std::vector<identity::KubePod> pods() {
  std::vector<identity::KubePod> out(2);
  out[0].uid = "6f1c2a3b-9d4e-4f5a-8b6c-7d8e9f0a1b2c";
  out[0].name = "llm-train-0";
  out[0].pod_namespace = "ml-training";
  out[0].containers = {{"116f54c41d04e8b1a6a5b2c9d3e7f0a4b8c1d5e9f2a6b0c4d8e3f7a1b5c9d2e6", "trainer"}};
  out[1].uid = "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d";
  out[1].name = "feature-etl-5d8f7";
  out[1].pod_namespace = "data";
  out[1].containers = {{"9e8d7c6b5a49382716a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3", "etl"}};
  return out;
}


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
