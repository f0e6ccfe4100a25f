// The host-cause scenarios of issue 4: memory pressure, a slow disk, TCP retransmits, an NCCL
// straggler. Each opens exactly one chain of its kind.
#include <memory>

#include "demo/scenario_kit.h"

namespace stallwatch::demo::kit {

Scenario memory_pressure() {
  Scenario s{"memory-pressure",
             "the training container hits its memory limit: reclaim, then the OOM killer",
             "a HIGH memory_pressure chain from memcg reclaim that turns CRITICAL when python3 "
             "is OOM-killed",
             {},
             1};
  const int pid = 2400, restarted = 2460;
  s.phases.push_back(training("python3 trains with 4 DataLoader workers; 11 of its 16 GiB used", 4,
                              pid, kTrainPod, 1800000000000LL, calm()));
  s.phases.push_back(
      {"the page cache and the workers' copies of the dataset reach memory.max: every "
       "allocation reclaims first",
       8, [pid](SyntheticHost& h, int, std::int64_t, std::int64_t w) {
         Train t = calm();
         t.steps_per_s = 15;
         train(h, pid, w, t);
         h.reclaim(kTrainPod, 0, share_of(0.18, w), share_of(0.07, w), per_window(900, w));
         h.pressure(kTrainPod,
                    PressureTotals{true, 0, 0, share_of(0.16, w), share_of(0.05, w), 0, 0});
       }});
  s.phases.push_back(
      {"a large batch tips it over: the OOM killer picks python3 itself", 1,
       [pid](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
         train(h, pid, w, calm());
         h.reclaim(kTrainPod, 0, share_of(0.35, w), share_of(0.12, w), per_window(1500, w));
         h.pressure(kTrainPod,
                    PressureTotals{true, 0, 0, share_of(0.45, w), share_of(0.2, w), 0, 0});
         h.oom_kill(kTrainPod, pid, "python3", now - w / 3);
       }});
  s.phases.push_back(training("the job restarts from its checkpoint with a 24 GiB limit", 8,
                              restarted, kTrainPod, 2000000000LL, calm()));
  return s;
}

Scenario io_stall() {
  Scenario s{"io-stall",
             "the dataset outgrows the page cache; DataLoader workers wait on a network disk",
             "a HIGH io_stall chain naming the DataLoader workers reading from sdb",
             {},
             1};
  const int pid = 2500;
  auto workers = [](SyntheticHost& h, std::int64_t w, const char* device, double reads_per_s,
                    std::uint64_t ns, std::uint64_t tail_ns) {
    for (int k = 0; k < 4; k++) {
      h.io(kTrainPod, 2501 + k, "pt_data_worker:" + std::to_string(k),
           IoMix{device, "read", per_window(reads_per_s, w), 131072, ns, tail_ns, 0.05});
    }
  };
  auto step = [pid](SyntheticHost& h, std::int64_t now, std::int64_t w, Train t, double starved) {
    if (!h.has_process(pid)) h.add_process(kTrainPod, pid, "python3", now - 900000000000LL);
    t.thread_blocked = starved;  // waiting for the next batch, outside any CUDA call
    train(h, pid, w, t);
  };
  s.phases.push_back({"python3 trains; 4 workers read the dataset, mostly from the page cache", 4,
                      [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, calm(), 0.02);
                        workers(h, w, "sdb", 5, 400000, 0);
                      }});
  s.phases.push_back(
      {"the epoch moves past what the page cache holds: every sample comes from sdb (a network "
       "persistent disk) at 25 ms a read, and the training loop waits for batches",
       8, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
         Train t = calm();
         t.steps_per_s = 9;
         step(h, now, w, t, 0.46);
         workers(h, w, "sdb", 24, 25000000, 90000000);
       }});
  s.phases.push_back({"the dataset is copied to local NVMe: reads take 150 µs", 4,
                      [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
                        step(h, now, w, calm(), 0.02);
                        workers(h, w, "nvme0n1", 24, 150000, 0);
                      }});
  return s;
}

Scenario network_retransmit() {
  Scenario s{"network-retransmit",
             "a flapping switch port drops packets under a multi-node job's NCCL traffic",
             "a HIGH network_retransmit chain on ncclAllReduce",
             {},
             1};
  const int pid = 2600;
  auto step = [pid](SyntheticHost& h, std::int64_t now, std::int64_t w, std::uint64_t tail_ns,
                    double tail_share, std::uint64_t retrans_per_s) {
    if (!h.has_process(pid)) h.add_process(kTrainPod, pid, "python3", now - 3600000000000LL);
    Train t = calm();
    t.steps_per_s = tail_ns ? 12 : 20;
    t.thread_blocked = tail_ns ? 0.22 : 0.08;  // mostly inside the all-reduces
    train(h, pid, w, t);
    h.nccl(pid, NcclMix{"ncclAllReduce", 0, 16, per_window(t.steps_per_s, w), 104857600, 4000000,
                        tail_ns, tail_share, 0, 0.6});
    h.retransmits(kTrainPod, per_window(static_cast<double>(retrans_per_s), w), 0);
  };
  s.phases.push_back(
      {"rank 0 of a 16-rank job (2 nodes, NCCL over TCP sockets); all-reduce ~4ms", 5,
       [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) { step(h, now, w, 0, 0, 0); }});
  s.phases.push_back(
      {"a switch port starts flapping: 450 TCP retransmits/s, and every lost segment waits "
       "for a 200 ms retransmission timeout",
       8, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
         step(h, now, w, 230000000, 0.08, 450);
       }});
  s.phases.push_back(
      {"the port is replaced", 4,
       [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) { step(h, now, w, 0, 0, 0); }});
  return s;
}

Scenario nccl_straggler() {
  Scenario s{"nccl-straggler",
             "one of 4 local ranks spends 6x longer in every all-reduce than its peers",
             "a HIGH nccl_straggler chain on rank 2 naming its 3 local peers",
             {},
             1};
  auto ranks = [](SyntheticHost& h, std::int64_t now, std::int64_t w, std::uint64_t slow_ns) {
    for (int rank = 0; rank < 4; rank++) {
      const int pid = 2700 + rank;
      if (!h.has_process(pid)) h.add_process(kTrainPod, pid, "python3", now - 3600000000000LL);
      const bool slow = rank == 2 && slow_ns;
      Train t = calm();
      if (slow) t.thread_blocked = 0.38;  // the 18 ms all-reduces, 90% asleep, and a little more
      train(h, pid, w, t);
      h.nccl(pid, NcclMix{"ncclAllReduce", rank, 8, per_window(20, w), 52428800,
                          slow ? slow_ns : 3000000, 0, 0, 0.01, slow ? 0.9 : 0.5});
    }
  };
  s.phases.push_back(
      {"torchrun: 4 local ranks of an 8-rank job; ncclAllReduce ~3ms on each", 4,
       [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) { ranks(h, now, w, 0); }});
  s.phases.push_back(
      {"rank 2's GPU sits on the other NUMA node from the NIC NCCL picked: its all-reduces "
       "take 18ms",
       8, [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
         ranks(h, now, w, 18000000);
       }});
  s.phases.push_back(
      {"NCCL_IB_HCA pins each rank to the NIC next to its GPU", 4,
       [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) { ranks(h, now, w, 0); }});
  return s;
}

Scenario nccl_hang() {
  Scenario s{"nccl-hang",
             "one of 4 local ranks stops before an all-reduce; the other 3 wait in it forever",
             "3 CRITICAL call_hang chains, one per waiting rank, each naming rank 2 as the rank "
             "that never entered the collective (the demo's hang threshold is 5s)",
             {},
             1};
  // When the waiting ranks entered the all-reduce that never completes (unix ns, set at the
  // phase's first window).
  auto entered = std::make_shared<std::int64_t>(0);
  auto ranks = [](SyntheticHost& h, std::int64_t now, std::int64_t w, bool calls) {
    for (int rank = 0; rank < 4; rank++) {
      const int pid = 2800 + rank;
      if (!h.has_process(pid)) h.add_process(kTrainPod, pid, "python3", now - 3600000000000LL);
      if (!calls) continue;
      train(h, pid, w, calm());
      h.nccl(pid, NcclMix{"ncclAllReduce", rank, 4, per_window(20, w), 52428800, 3000000, 0, 0,
                          0.01, 0.5});
    }
  };
  s.phases.push_back(
      {"torchrun: a 4-rank job on one node; ncclAllReduce ~3ms on each rank", 4,
       [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
         ranks(h, now, w, true);
       }});
  s.phases.push_back(
      {"rank 2's DataLoader deadlocks before the next step: ranks 0, 1 and 3 enter "
       "ncclAllReduce and wait for it, asleep; every GPU still reads busy",
       8, [=](SyntheticHost& h, int i, std::int64_t now, std::int64_t w) {
         ranks(h, now, w, false);
         if (i == 0) *entered = now - w;  // each run's own (a scenario may be run again)
         for (int rank : {0, 1, 3}) {
           InflightCall c;
           c.tid = 2800 + rank + 40;
           c.thread = "python3";
           c.age_ns = static_cast<std::uint64_t>(now - *entered);
           c.blocked_ns = c.age_ns * 98 / 100;
           c.runnable_ns = c.age_ns / 100;
           c.rank = rank;
           c.world_size = 4;
           h.inflight(2800 + rank, "ncclAllReduce", c);
         }
       }});
  s.phases.push_back(
      {"the job is restarted from its checkpoint with the deadlock fixed", 4,
       [=](SyntheticHost& h, int, std::int64_t now, std::int64_t w) {
         *entered = 0;
         ranks(h, now, w, true);
       }});
  return s;
}

}  // namespace stallwatch::demo::kit
