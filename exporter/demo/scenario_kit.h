// Building blocks of the demo scenarios (scenarios.cpp, scenarios_host.cpp): the workloads'
// cgroups, a training loop's window, and the host-cause scenarios of issue 4. Internal to demo/.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "identity/kube_metadata.h"

#include "demo/scenarios.h"
#include "demo/synthetic.h"

namespace stallwatch::demo::kit {

inline constexpr const char* kTrainPod =
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod6f1c2a3b_9d4e_4f5a_8b6c_7d8e9f0a1b2c.slice/"
    "cri-containerd-116f54c41d04e8b1a6a5b2c9d3e7f0a4b8c1d5e9f2a6b0c4d8e3f7a1b5c9d2e6.scope";
inline constexpr const char* kOtherPod =
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod0a9b8c7d_6e5f_4a3b_2c1d_0e9f8a7b6c5d.slice/"
    "cri-containerd-9e8d7c6b5a49382716a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3.scope";
// What the API server would say of the two pods above (pod, namespace, container names), so the
// demo's series carry the Kubernetes labels a real cluster gives them.
std::vector<identity::KubePod> pods();

inline constexpr const char* kNodeExporter = "/system.slice/prometheus-node-exporter.service";
inline constexpr const char* kFluentBit = "/system.slice/fluent-bit.service";

std::uint64_t per_window(double per_second, std::int64_t window_ns);
std::uint64_t share_of(double share, std::int64_t window_ns);

// A training loop's window: kernel launches, two copies and one synchronisation per step.
struct Train {
  double steps_per_s = 20;
  std::uint64_t sync_ns = 7000;
  std::uint64_t sync_tail_ns = 0;
  double sync_tail_share = 0;
  double sync_runnable = 0;  // share of sync time runnable off-CPU
  double sync_blocked = 0.02;
  std::uint64_t copy_ns = 15000;
  double thread_runnable = 0.004;  // of the CUDA thread's wall time
  double thread_blocked = 0.05;
  std::uint64_t preemptions_per_s = 40;
};

void train(SyntheticHost& h, int pid, std::int64_t w, const Train& t);
inline Train calm() { return Train{}; }

// A phase in which `pid` (created in its first window, started `age_ns` before) trains with
// `load` and nothing else happens.
Phase training(std::string narration, int windows, int pid, const char* cgroup, std::int64_t age_ns,
               Train load);

// scenarios_host.cpp
Scenario memory_pressure();
Scenario io_stall();
Scenario network_retransmit();
Scenario nccl_straggler();
Scenario nccl_hang();

// scenarios_gpu.cpp
Scenario cuda_oom();
Scenario graph_recapture();
Scenario gpu_throttle();
Scenario gpu_xid();

}  // namespace stallwatch::demo::kit
