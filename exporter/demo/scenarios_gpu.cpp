// The GPU memory and CUDA Graph scenarios of issue #20: an allocation that runs out of memory,
// and CUDA graphs re-recorded for every new input shape. Each opens exactly one chain.
#include "demo/scenario_kit.h"

namespace stallwatch::demo::kit {

namespace {
constexpr std::uint64_t kGiB = 1ULL << 30;
}  // namespace

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
