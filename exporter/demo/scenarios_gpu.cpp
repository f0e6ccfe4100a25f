// The GPU memory and CUDA Graph scenarios of issue #20 (an allocation that runs out of memory,
// CUDA graphs re-recorded for every new input shape) and the GPU's own faults of issue #39 (a
// clock held down by its power cap, an Xid error). Each opens the chains its `expect` says.
#include "demo/scenario_kit.h"

namespace stallwatch::demo::kit {

namespace {
constexpr std::uint64_t kGiB = 1ULL << 30;

// An H100 as NVML reads it: SM clock `mhz` of 1980, `reasons` (nvmlClocksEventReason bits).
host::GpuReading h100(unsigned index, unsigned mhz, std::uint64_t reasons, unsigned temp,
                      double watts, std::vector<int> pids) {
  host::GpuReading g;
  g.index = index;
  g.minor = index;
  g.minor_known = true;
  g.uuid = "GPU-5f3c9e1a-7b2d-4c8e-9a6f-0d1e2f3a4b5" + std::to_string(index);
  g.name = "NVIDIA H100 80GB HBM3";
  g.bus_id = "00000000:" + std::string(index == 0 ? "3B" : "5C") + ":00.0";
  g.sm_clock_mhz = mhz;
  g.sm_clock_max_mhz = 1980;
  g.clocks_known = true;
  g.reasons = reasons;
  g.reasons_known = true;
  g.temperature_c = temp;
  g.power_w = watts;
  g.power_limit_w = reasons & 0x4 ? watts : 700;
  g.power_known = true;
  g.pids = std::move(pids);
  g.pids_known = true;
  return g;
}

// A GPU-bound loop: each step waits `sync_ns` for the GPU, asleep.
Train gpu_bound(std::uint64_t sync_ns) {
  Train t = calm();
  t.sync_ns = sync_ns;
  t.sync_tail_ns = sync_ns * 3 / 2;
  t.sync_tail_share = 0.05;
  t.sync_blocked = 0.9;
  t.thread_blocked = 0.5;
  return t;
}
}  // namespace

Scenario gpu_throttle() {
  Scenario s{"gpu-throttle",
             "an operator lowers GPU 0's power limit to 400 W: its SM clock drops to 1.2 GHz",
             "a MEDIUM gpu_throttle chain naming GPU 0, sw_power_cap and the clock lost; none for "
             "GPU 1, whose job waits on its CPU side",
             {},
             1};
  const int trainer = 3100, other = 3101;
  auto step = [=](SyntheticHost& h, std::int64_t now, std::int64_t w, bool capped) {
    if (!h.has_process(trainer)) {
      h.add_process(kTrainPod, trainer, "python3", now - 3600000000000LL);
      h.add_process(kOtherPod, other, "python3", now - 3600000000000LL);
    }
    // GPU work at 1,200 MHz instead of 1,980 takes 1.65x as long: ~85% of the window capped.
    train(h, trainer, w, gpu_bound(capped ? 7700000 : 5000000));
    h.gpu(h100(0, capped ? 1200 : 1980, capped ? 0x4 : 0x0, capped ? 71 : 66,
               capped ? 400 : 560, {trainer}),
          capped ? 0.85 : 0, w);
    // GPU 1 runs hot and is held by its thermal slowdown too, but its job is CPU-bound: its
    // syncs do not slow, and no chain names the GPU.
    train(h, other, w, calm());
    h.gpu(h100(1, capped ? 1500 : 1980, capped ? 0x20 : 0x0, capped ? 88 : 80, 300, {other}),
          capped ? 0.6 : 0, w);
  };
  s.phases.push_back({"python3 trains on GPU 0 (syncs wait ~5 ms for the GPU at 1,980 MHz); "
                      "another job runs on GPU 1",
                      5, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, false);
                      }});
  s.phases.push_back({"nvidia-smi -i 0 -pl 400: GPU 0 runs at its power cap, 1,200 MHz; GPU 1 "
                      "heats up and slows, but its job does not wait on it",
                      6, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, true);
                      }});
  s.phases.push_back({"the power limit is restored to 700 W", 4,
                      [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, false);
                      }});
  return s;
}

Scenario gpu_xid() {
  Scenario s{"gpu-xid",
             "GPU 0 falls off the bus (Xid 79) under a training job; its synchronize never returns",
             "a CRITICAL gpu_xid chain at once, then a CRITICAL call_hang chain that names Xid 79 "
             "(the demo's hang threshold is 5s)",
             {},
             1};
  const int pid = 3200;
  auto since = std::make_shared<std::int64_t>(0);
  s.phases.push_back({"python3 trains on GPU 0; syncs wait ~5 ms for the GPU", 4,
                      [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        if (!h.has_process(pid)) {
                          h.add_process(kTrainPod, pid, "python3", now - 3600000000000LL);
                        }
                        train(h, pid, w, gpu_bound(5000000));
                        h.gpu(h100(0, 1980, 0, 66, 560, {pid}), 0, w);
                      }});
  s.phases.push_back(
      {"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus; cudaStreamSynchronize "
       "waits forever, asleep",
       8, [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
         // At the phase's first window, each run (a scenario object may be run more than once).
         if (i == 0) {
           *since = now - w;
           h.xid(0, 79, "pid=3200, name=python3, GPU has fallen off the bus.", now - w / 2, pid);
         }
         h.offcpu(pid, 0, static_cast<std::uint64_t>(w), 0, 0);
         h.gpu(h100(0, 1980, 0, 66, 0, {pid}), 0, w);
         InflightCall c;
         c.tid = pid;
         c.thread = "python3";
         c.age_ns = static_cast<std::uint64_t>(now - *since);
         c.blocked_ns = c.age_ns * 99 / 100;
         h.inflight(pid, "cudaStreamSynchronize", c);
       }});
  return s;
}

Scenario cuda_oom() {
  Scenario s{"cuda-oom",
             "a training process asks for 2 GiB more on a GPU its pod has nearly filled",
             "a HIGH cuda_oom chain naming the 2 GiB cudaMalloc and the two processes that hold "
             "77 GiB",
             {},
             1};
  const int trainer = 2900, evaluator = 2901;
  auto step = [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w, bool fail) {
    if (!h.has_process(trainer)) {
      h.add_process(kTrainPod, trainer, "python3", now - 7200000000000LL);
      h.add_process(kTrainPod, evaluator, "python3", now - 600000000000LL);
    }
    train(h, trainer, w, calm());
    Train eval = calm();
    eval.steps_per_s = 5;
    train(h, evaluator, w, eval);
    // The caching allocator's segments: most taken once, a few returned and taken again.
    h.calls(trainer, CallMix{"cudaMalloc", 2, 180000});
    h.calls(trainer, CallMix{"cudaFree", 2, 40000});
    h.memory(trainer, "cudaMalloc", (i == 0 ? 70 * kGiB : 0) + kGiB, kGiB);
    h.calls(evaluator, CallMix{"cudaMalloc", 1, 150000});
    h.memory(evaluator, "cudaMalloc", i == 0 ? 7 * kGiB : 0, 0);
    if (fail) {
      h.calls(trainer, CallMix{"cudaMalloc", 3, 90000});
      h.memory(trainer, "cudaMalloc", 0, 0, 3, 2 * kGiB);
    }
  };
  s.phases.push_back({"python3 trains, holding 70 GiB of the GPU's 80; an evaluation process of "
                      "the same pod holds 7 GiB",
                      4, [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
                        step(h, i, now, w, false);
                      }});
  s.phases.push_back({"a batch of long sequences: cudaMalloc of 2 GiB returns out of memory, "
                      "three times (the caching allocator frees its cache and retries)",
                      2, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, 1, now, w, true);
                      }});
  s.phases.push_back({"the evaluation moves to its own GPU and the batch is capped", 6,
                      [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, 1, now, w, false);
                      }});
  return s;
}

Scenario graph_recapture() {
  Scenario s{"graph-recapture",
             "torch.compile(mode=\"reduce-overhead\") re-records its CUDA graphs for every new "
             "sequence length",
             "a graph_recapture chain, MEDIUM then HIGH: instantiations every window after "
             "warm-up, about a quarter of the process's CUDA time",
             {},
             2};
  const int pid = 3000;
  Train gpu_bound = calm();
  gpu_bound.sync_ns = 30000000;  // each step waits ~30 ms for the GPU
  gpu_bound.sync_blocked = 0.9;
  gpu_bound.thread_blocked = 0.6;
  auto step = [=](SyntheticHost& h, std::int64_t now, std::int64_t w, double builds_per_s) {
    if (!h.has_process(pid)) h.add_process(kTrainPod, pid, "python3", now - 120000000000LL);
    train(h, pid, w, gpu_bound);
    h.calls(pid, CallMix{"cudaGraphLaunch", per_window(20, w), 12000});
    const std::uint64_t n = per_window(builds_per_s, w);
    h.calls(pid, CallMix{"cudaStreamBeginCapture", n, 20000});
    h.calls(pid, CallMix{"cudaStreamEndCapture", n, 4000000});
    h.calls(pid, CallMix{"cudaGraphInstantiateWithFlags", n, 55000000});
  };
  s.phases.push_back({"python3 compiles its model and records one CUDA graph per shape it meets",
                      2, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, 3);
                      }});
  s.phases.push_back({"it replays them: one cudaGraphLaunch per step, ~30 ms of GPU work each",
                      12, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, 0);
                      }});
  s.phases.push_back({"variable-length batches arrive: every new length re-records and "
                      "re-instantiates a graph, 4 times a second",
                      8, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, 4);
                      }});
  s.phases.push_back({"inputs are padded to four bucket lengths: the graphs are replayed again",
                      8, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, 0);
                      }});
  return s;
}

}  // namespace stallwatch::demo::kit
