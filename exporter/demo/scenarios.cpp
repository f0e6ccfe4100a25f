#include "demo/scenarios.h"

#include <algorithm>

#include "demo/scenario_kit.h"

namespace stallwatch::demo {
namespace {

using namespace kit;  // NOLINT: the scenarios are written in the kit's words

// CPU contention: syncs wait for a CPU; `share` of the thread's time is spent runnable.
Train contended(double share) {
  Train t;
  t.steps_per_s = 20 * (1 - share);
  t.sync_ns = 1200000;
  t.sync_tail_ns = 7200000;
  t.sync_tail_share = 0.05;
  t.sync_runnable = std::min(0.95, share + 0.08);
  t.thread_runnable = share;
  t.thread_blocked = 0.04;
  t.preemptions_per_s = 120;
  return t;
}

Scenario incident() {
  Scenario s{"incident",
             "3 a.m.: the GPU says 97% busy, the training job runs at half speed",
             "a CRITICAL cpu_contention chain on python3 naming the DataLoader workers, "
             "prometheus-node-exporter and fluent-bit",
             {},
             1};
  const int pid = 3821;
  s.phases.push_back(training("python3 train.py runs calm: cudaStreamSynchronize ~7µs, on-CPU 95%",
                              6, pid, kTrainPod, 3600000000000LL, calm()));
  s.phases.push_back(
      {"4 DataLoader workers, prometheus-node-exporter and fluent-bit start competing for the "
       "training process's cores",
       10, [pid](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
         train(h, pid, w, contended(0.52));
         const std::uint64_t ns = static_cast<std::uint64_t>(w);
         for (int k = 0; k < 4; k++) {
           h.preempted_by(pid, 3822 + k, "pt_data_worker:" + std::to_string(k), kTrainPod,
                          ns * (9 - k) / 100, per_window(25 - 3 * k, w), /*ppid=*/pid);
         }
         h.preempted_by(pid, 1205, "prometheus-node-exporter", kNodeExporter, ns * 7 / 100,
                        per_window(27, w));
         h.preempted_by(pid, 1311, "fluent-bit", kFluentBit, ns * 5 / 100, per_window(19, w));
       }});
  s.phases.push_back(training("the agents are niced and training is pinned: back to calm", 4, pid,
                              kTrainPod, 3600000000000LL, calm()));
  return s;
}

Scenario cpu_contention() {
  Scenario s{"cpu-contention",
             "a log shipper in another cgroup takes a third of the training process's CPU",
             "a HIGH cpu_contention chain naming fluent-bit",
             {},
             1};
  const int pid = 4242;
  s.phases.push_back(training("python3 trains alone", 5, pid, kTrainPod, 600000000000LL, calm()));
  s.phases.push_back({"fluent-bit wakes up on the same cores and parses a log burst", 8,
                      [pid](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
                        Train t = contended(0.30);
                        t.sync_runnable = 0.30;
                        train(h, pid, w, t);
                        h.preempted_by(pid, 1311, "fluent-bit", kFluentBit,
                                       static_cast<std::uint64_t>(w) * 28 / 100,
                                       per_window(110, w));
                      }});
  s.phases.push_back(training("fluent-bit is done", 3, pid, kTrainPod, 600000000000LL, calm()));
  return s;
}

Scenario cold_start() {
  Scenario s{"cold-start",
             "a new inference worker's first CUDA calls take 50-200x longer than steady state",
             "a LOW cold_start chain, reported once",
             {},
             1};
  const int old_pid = 5100, pid = 5150;
  const char* cg = "/system.slice/inference.service";
  auto steady = [](SyntheticHost& h, int p, std::int64_t w) {
    h.calls(p, {"cudaMalloc", 4, 20000, 0, 0, 0, 0});
    h.calls(p, {"cudaLaunchKernel", per_window(400, w), 8000, 0, 0, 0, 0});
    h.calls(p, {"cudaMemcpy", per_window(40, w), 60000, 0, 0, 0, 0.5});
    h.calls(p, {"cudaStreamSynchronize", per_window(40, w), 900000, 0, 0, 0, 0.9});
    h.offcpu(p, share_of(0.003, w), share_of(0.05, w), share_of(0.947, w), per_window(20, w));
  };
  s.phases.push_back({"the old worker serves requests", 3,
                      [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
                        if (i == 0 && !h.has_process(old_pid)) {
                          h.add_process(cg, old_pid, "python3", now - 7200000000000LL);
                        }
                        steady(h, old_pid, w);
                      }});
  s.phases.push_back(
      {"a new worker starts: context creation, module loading, the allocator's first pool", 1,
       [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
         steady(h, old_pid, w);
         h.add_process(cg, pid, "python3", now - w / 2);
         h.calls(pid, {"cudaMalloc", 4, 20000, 180000000, 0.25, 0, 0.6});
         h.calls(pid, {"cudaLaunchKernel", per_window(200, w), 8000, 45000000, 0.005, 0, 0.5});
         h.calls(pid, {"cudaStreamSynchronize", per_window(20, w), 900000, 0, 0, 0, 0.9});
         h.offcpu(pid, share_of(0.01, w), share_of(0.4, w), share_of(0.59, w), per_window(20, w));
       }});
  s.phases.push_back({"both workers serve at steady latency", 5,
                      [=](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
                        steady(h, old_pid, w);
                        steady(h, pid, w);
                      }});
  return s;
}

Scenario memcpy_bottleneck() {
  Scenario s{"memcpy-bottleneck",
             "cudaMemcpy from pageable memory takes 38% of wall time; nvidia-smi still says busy",
             "a MEDIUM memcpy_bound chain on cudaMemcpy",
             {},
             0};
  const int pid = 6200;
  const char* cg =
      "/system.slice/docker-4f3e2d1c0b9a88776655443322110ffeeddccbbaa99887766554433221100ff.scope";
  auto loop = [pid](SyntheticHost& h, std::int64_t w, std::uint64_t copy_ns) {
    const std::uint64_t steps = per_window(20, w);
    h.calls(pid, {"cudaMemcpy", steps * 2, copy_ns, 0, 0, 0, 0.3});
    h.calls(pid, {"cudaLaunchKernel", steps * 30, 9000, 0, 0, 0, 0});
    h.calls(pid, {"cudaStreamSynchronize", steps, 1000000, 0, 0, 0, 0.5});
    h.offcpu(pid, share_of(0.004, w), share_of(0.2, w), share_of(0.796, w), per_window(30, w));
  };
  s.phases.push_back({"python3 copies every batch from pageable host memory", 8,
                      [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
                        if (i == 0 && !h.has_process(pid)) {
                          h.add_process(cg, pid, "python3", now - 900000000000LL);
                        }
                        loop(h, w, 9500000);
                      }});
  s.phases.push_back({"pin_memory=True and non_blocking copies: copies shrink to 1.2ms", 4,
                      [=](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
                        loop(h, w, 1200000);
                      }});
  return s;
}

Scenario periodic_spike() {
  Scenario s{"periodic-spike",
             "cudaMalloc spikes every few windows while PyTorch's caching allocator grows",
             "a MEDIUM alloc_spike chain on cudaMalloc once the spike repeats",
             {},
             1};
  const int pid = 7300;
  auto step = [pid](SyntheticHost& h, std::int64_t w, bool spike) {
    train(h, pid, w, calm());
    h.calls(pid, {"cudaMalloc", 6, 15000, spike ? 40000000u : 0u, spike ? 1.0 / 6 : 0, 0, 0.8});
    // Five small blocks returned and taken again; a spike window's sixth is a 2 GiB segment.
    h.memory(pid, "cudaMalloc", (5 << 20) + (spike ? (2ULL << 30) : (1 << 20)), 6 << 20);
  };
  s.phases.push_back({"python3 trains; cudaMalloc takes ~15µs", 3,
                      [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
                        if (i == 0 && !h.has_process(pid)) {
                          h.add_process(kTrainPod, pid, "python3", now - 600000000000LL);
                        }
                        step(h, w, false);
                      }});
  s.phases.push_back({"variable sequence lengths: every 4th window the allocator needs a new "
                      "block and cudaMalloc takes 40ms",
                      12, [=](SyntheticHost& h, int i, std::int64_t, std::int64_t w) {
                        step(h, w, i % 4 == 3);
                      }});
  return s;
}

Scenario gpu_steal() {
  Scenario s{"gpu-steal",
             "an inference server lands on the training job's GPU",
             "a HIGH gpu_contention chain naming the inference server, with no host-side cause",
             {},
             1};
  const int pid = 8100, thief = 8400;
  auto gpu_bound = [pid](SyntheticHost& h, std::int64_t w, std::uint64_t sync, std::uint64_t tail) {
    const std::uint64_t steps = per_window(20, w);
    h.calls(pid, {"cudaLaunchKernel", steps * 24, 9000, 0, 0, 0, 0});
    h.calls(pid, {"cudaStreamSynchronize", steps, sync, tail, 0.05, 0.001, 0.95});
    // Asleep in the syncs (95% of their time) and hardly outside them: no starvation.
    const auto slow = static_cast<std::uint64_t>(static_cast<double>(steps) * 0.05 + 0.5);
    const std::uint64_t blocked =
        ((steps - slow) * sync + slow * tail) * 95 / 100 + share_of(0.02, w);
    const std::uint64_t runnable = share_of(0.002, w);
    h.offcpu(pid, runnable, blocked, static_cast<std::uint64_t>(w) - runnable - blocked,
             per_window(20, w));
  };
  s.phases.push_back({"python3 trains alone; cudaStreamSynchronize waits ~2ms for the GPU", 5,
                      [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
                        if (i == 0 && !h.has_process(pid)) {
                          h.add_process(kTrainPod, pid, "python3", now - 600000000000LL);
                        }
                        gpu_bound(h, w, 2000000, 4000000);
                      }});
  s.phases.push_back({"tritonserver starts on the same GPU in another pod", 8,
                      [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
                        if (i == 0 && !h.has_process(thief)) {
                          h.add_process(kOtherPod, thief, "tritonserver", now - w);
                        }
                        gpu_bound(h, w, 9000000, 70000000);
                        h.calls(thief, {"cudaLaunchKernel", per_window(2000, w), 8000, 0, 0, 0, 0});
                        h.calls(thief, {"cudaStreamSynchronize", per_window(200, w), 3000000, 0, 0,
                                        0, 0.9});
                        h.offcpu(thief, share_of(0.002, w), share_of(0.6, w), share_of(0.398, w),
                                 per_window(10, w));
                      }});
  s.phases.push_back({"tritonserver moves to its own GPU", 4,
                      [=](SyntheticHost& h, int i, std::int64_t, std::int64_t w) {
                        if (i == 0) h.exit_process(thief);
                        gpu_bound(h, w, 2000000, 4000000);
                      }});
  return s;
}

Scenario cpu_steal() {
  Scenario s{"cpu-steal",
             "the cloud VM's vCPUs are taken by the hypervisor: calls are slow while on-CPU",
             "a HIGH cpu_steal chain (about 30% steal), and no alloc_spike or cpu_contention",
             {},
             1};
  const int pid = 5150;
  s.phases.push_back(training("python3 trains calm on a cloud VM", 5, pid, kTrainPod,
                              600000000000LL, calm()));
  s.phases.push_back({"another guest runs on the physical cores behind the VM's vCPUs: ~30% "
                      "steal; syncs and allocations stall on-CPU",
                      8, [pid](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
                        Train t = calm();
                        t.sync_tail_ns = 12000000;
                        t.sync_tail_share = 0.1;
                        t.sync_blocked = 0;
                        train(h, pid, w, t);
                        h.calls(pid, {"cudaMalloc", 2, 15000, 9000000, 0.5, 0, 0});
                        h.cpu_stolen({{0, 0.28, 0.01}, {1, 0.27, 0.01}, {2, 0.29, 0.01},
                                      {3, 0.34, 0.03}});
                      }});
  s.phases.push_back(training("the neighbour is gone", 4, pid, kTrainPod, 600000000000LL,
                              calm()));
  return s;
}

Scenario cpu_throttle() {
  Scenario s{"cpu-throttle",
             "the training pod's limits.cpu is 2 CPUs: the kernel throttles its launch thread",
             "a HIGH cpu_throttle chain naming the 2-CPU limit, and no cpu_contention",
             {},
             1};
  const int pid = 6120;
  s.phases.push_back({"python3 trains calm in a pod limited to 2 CPUs, the limit not reached", 5,
                      [pid](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        if (!h.has_process(pid)) {
                          h.add_process(kTrainPod, pid, "python3", now - 600000000000LL);
                        }
                        train(h, pid, w, calm());
                        h.cpu_limit(kTrainPod, 2.0, per_window(10, w), 0, 0);
                      }});
  s.phases.push_back({"the DataLoader moves into the training container: the pod uses up its 2-CPU "
                      "quota early in each 100ms period and the kernel throttles it",
                      8, [pid](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
                        train(h, pid, w, contended(0.35));
                        const std::uint64_t periods = per_window(10, w);
                        h.cpu_limit(kTrainPod, 2.0, periods, periods * 8 / 10,
                                    share_of(0.9, w));
                        h.preempted_by(pid, 88, "kworker/0:1", "/", share_of(0.01, w),
                                       per_window(12, w), 2, /*kernel_thread=*/true);
                      }});
  s.phases.push_back({"limits.cpu is raised to 8 CPUs (the request stays at 2): back to calm", 4,
                      [pid](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
                        train(h, pid, w, calm());
                        h.cpu_limit(kTrainPod, 8.0, per_window(10, w), 0, 0);
                      }});
  return s;
}

Scenario healthy() {
  Scenario s{"healthy",
             "a busy, GPU-bound training job with no host-side problem",
             "no chain: high GPU wait is not a host cause",
             {},
             0};
  const int pid = 9100;
  Train busy;
  busy.sync_ns = 5000000;
  busy.sync_tail_ns = 8000000;
  busy.sync_tail_share = 0.05;
  busy.sync_blocked = 0.9;
  busy.thread_blocked = 0.12;  // nearly all of it asleep in the syncs: no starvation
  s.phases.push_back(training("python3 trains; syncs wait ~5ms for the GPU, nothing else competes",
                              12, pid, kTrainPod, 600000000000LL, busy));
  return s;
}

}  // namespace

std::vector<std::string> scenario_names() {
  return {"incident",        "cpu-contention", "cold-start",         "memcpy-bottleneck",
          "periodic-spike",  "gpu-steal",      "memory-pressure",    "io-stall",
          "network-retransmit", "nccl-straggler", "nccl-hang", "cpu-steal", "cpu-throttle",
          "cuda-oom", "graph-recapture", "gpu-throttle", "gpu-xid", "healthy"};
}

std::optional<Scenario> make_scenario(const std::string& name) {
  if (name == "incident") return incident();
  if (name == "cpu-contention") return cpu_contention();
  if (name == "cold-start") return cold_start();
  if (name == "memcpy-bottleneck") return memcpy_bottleneck();
  if (name == "periodic-spike") return periodic_spike();
  if (name == "gpu-steal") return gpu_steal();
  if (name == "memory-pressure") return kit::memory_pressure();
  if (name == "io-stall") return kit::io_stall();
  if (name == "network-retransmit") return kit::network_retransmit();
  if (name == "nccl-straggler") return kit::nccl_straggler();
  if (name == "nccl-hang") return kit::nccl_hang();
  if (name == "cpu-steal") return cpu_steal();
  if (name == "cpu-throttle") return cpu_throttle();
  if (name == "cuda-oom") return kit::cuda_oom();
  if (name == "graph-recapture") return kit::graph_recapture();
  if (name == "gpu-throttle") return kit::gpu_throttle();
  if (name == "gpu-xid") return kit::gpu_xid();
  if (name == "healthy") return healthy();
  return std::nullopt;
}

}  // namespace stallwatch::demo
