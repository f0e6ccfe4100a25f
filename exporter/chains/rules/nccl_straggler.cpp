// nccl_straggler: one local rank of a job whose NCCL ops take far longer than its peers' on the
// same host. docs/chains.md.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "trace/calls.h"
#include "trace/histogram.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  // One local rank's mean op time against the median of its peers' (the ratio that makes it
  // critical is in kinds.h), and by at least this much.
  double ratio = 3;
  double min_excess_s = 0.005;
};

Advice advise(const Chain& c) {
  Advice out;
  const std::string pid = std::to_string(c.pid);
  out.command(Command("stallwatch explain --per-process --since 15m"),
              "other chains on PID " + pid + " (cpu_contention, memory_pressure) are its host cause");
  if (c.evidence_value("op_runnable_share") >= 0.1) {
    out.command(Command("taskset -acp").placeholder("cores of the GPU NUMA node").number(c.pid),
                "the rank waits for a CPU inside NCCL calls");
  }
  out.command(Command("nvidia-smi topo -m"),
              "is this rank's GPU on the far NUMA node or behind another PCIe switch than its NIC?");
  out.code("numactl --cpunodebind=<node> --membind=<node>",
           "start each rank on its GPU's NUMA node (torchrun: one launcher per node or a wrapper)");
  out.code("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET",
           "which NIC and transport each rank chose; set CUDA_VISIBLE_DEVICES / "
           "NCCL_IB_HCA so every rank uses the NIC next to its GPU");
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One local rank's ops of one kind (same op and world size) in the window.
struct RankOps {
  const ProcessWindow* p = nullptr;
  int rank = -1;
  NcclTotals t;
  double mean_s() const {
    return t.count ? static_cast<double>(t.sum_ns) / 1e9 / static_cast<double>(t.count) : 0;
  }
  double quantile(double q) const { return trace::quantile_seconds(t.buckets, q, t.max_ns); }
};

struct Straggler {
  std::uint32_t op = 0;
  int world_size = 0;
  const RankOps* slow = nullptr;
  std::vector<const RankOps*> peers;
  double ratio = 0;
  double peers_mean_s = 0;
};

class NcclStraggler : public Rule {
 public:
  Kind kind() const override { return Kind::kNcclStraggler; }

  void host(const WindowContext& ctx, std::vector<Finding>& out) override {
    // The local ranks of one job: NCCL op entries with the same op and world size, across series
    // and processes. Each (process, rank) is one member; a process with several communicators of
    // that size is one member per rank.
    std::map<std::pair<std::uint32_t, int>, std::vector<RankOps>> groups;
    for (const auto& p : ctx.view.processes) {
      std::map<std::tuple<std::uint32_t, int, int>, NcclTotals> mine;
      for (const auto& [key, t] : p.nccl) {
        if (!trace::is_nccl_op(key.call_id) || key.rank < 0 || key.world_size < 2 || t.count == 0)
          continue;
        mine[{key.call_id, key.world_size, key.rank}].add(t);
      }
      for (const auto& [k, t] : mine) {
        const auto& [op, ws, rank] = k;
        groups[{op, ws}].push_back(RankOps{&p, rank, t});
      }
    }
    // The worst straggling per process (one chain per process).
    std::map<std::pair<std::string, int>, Straggler> found;
    for (const auto& [key, ranks] : groups) {
      if (ranks.size() < 2) continue;
      std::set<int> distinct;
      for (const auto& r : ranks) distinct.insert(r.rank);
      if (distinct.size() != ranks.size()) continue;  // two jobs of the same size: ambiguous
      for (size_t i = 0; i < ranks.size(); i++) {
        std::vector<double> means;
        std::vector<const RankOps*> peers;
        for (size_t j = 0; j < ranks.size(); j++) {
          if (j == i) continue;
          means.push_back(ranks[j].mean_s());
          peers.push_back(&ranks[j]);
        }
        const double peers_mean = median(means);
        const double mean = ranks[i].mean_s();
        if (peers_mean <= 0 || mean < th_.ratio * peers_mean ||
            mean - peers_mean < th_.min_excess_s)
          continue;
        // Ops that spent most of their excess waiting for a CPU: cpu_contention names that
        // cause (docs/chains.md, one stall, one cause).
        const ProcessWindow& rp = *ranks[i].p;
        if (auto call = rp.calls.find(key.first);
            call != rp.calls.end() &&
            ctx.excess_runnable_share(rp, key.first, call->second, peers_mean) >= 0.5) {
          continue;
        }
        const double ratio = mean / peers_mean;
        Straggler& s = found[{ranks[i].p->cgroup, ranks[i].p->pid}];
        if (ratio > s.ratio)
          s = Straggler{key.first, key.second, &ranks[i], peers, ratio, peers_mean};
      }
    }

    for (const auto& [who, s] : found) {
      const RankOps& slow = *s.slow;
      const ProcessWindow& p = *slow.p;
      Finding f;
      Chain& c = f.chain;
      c = ctx.base_chain(kind(), p);
      c.severity = kind_info(kind()).cutoffs.of(s.ratio);
      c.call = std::string(call_name(s.op));
      c.api = "nccl";
      c.p50_s = slow.quantile(0.50);
      c.p99_s = slow.quantile(0.99);
      // For nccl_straggler the "baseline" is the peers' median, the ratio mean over mean.
      std::vector<double> peer_p50, peer_p99;
      std::vector<const RankOps*> peers = s.peers;
      std::sort(peers.begin(), peers.end(),
                [](const RankOps* a, const RankOps* b) { return a->rank < b->rank; });
      for (const auto* q : peers) {
        peer_p50.push_back(q->quantile(0.50));
        peer_p99.push_back(q->quantile(0.99));
        if (c.contributors.size() < 16) {
          c.contributors.push_back(Contributor{q->p->comm, q->p->pid, q->p->cgroup, "peer rank",
                                               q->t.sum_ns, q->t.count, {}});
        }
      }
      c.baseline_p50_s = median(peer_p50);
      c.baseline_p99_s = median(peer_p99);
      c.ratio = s.ratio;
      double runnable_share = 0, blocked_share = 0;
      bool off_known = false;
      if (auto it = p.calls.find(s.op); it != p.calls.end() && it->second.sum_ns > 0) {
        const double in_op = static_cast<double>(it->second.sum_ns);
        runnable_share = static_cast<double>(it->second.runnable_ns) / in_op;
        blocked_share = static_cast<double>(it->second.blocked_ns) / in_op;
        off_known = true;
      }
      const double mean = slow.mean_s();
      c.evidence = {{"rank", static_cast<double>(slow.rank)},
                    {"world_size", static_cast<double>(s.world_size)},
                    {"local_ranks", static_cast<double>(s.peers.size() + 1)},
                    {"op_calls", static_cast<double>(slow.t.count)},
                    {"mean_s", mean},
                    {"p99_s", c.p99_s},
                    {"peers_mean_s", s.peers_mean_s},
                    {"peers_p99_s", c.baseline_p99_s},
                    {"mean_ratio", s.ratio}};
      if (off_known) {
        c.evidence.emplace_back("op_runnable_share", runnable_share);
        c.evidence.emplace_back("op_blocked_share", blocked_share);
      }
      const std::string rank =
          "rank " + std::to_string(slow.rank) + " of " + std::to_string(s.world_size);
      const std::string proc = process_text(p.comm, p.pid);
      c.root_cause = rank + ", " + proc + ", spent " + human_seconds(mean) + " per " + c.call +
                     " on average, " + times(s.ratio) + " the " + human_seconds(s.peers_mean_s) +
                     " of its " + std::to_string(s.peers.size()) + " local peer" +
                     (s.peers.size() == 1 ? "" : "s") + " (p99 " + human_seconds(c.p99_s) +
                     " against " + human_seconds(c.baseline_p99_s) + ")";
      if (off_known) {
        c.root_cause += "; inside the op it was runnable off-CPU " + percent(runnable_share) +
                        " and blocked " + percent(blocked_share) + " of the time";
      }
      c.effect =
          "a collective ends only when its slowest rank is done: every rank of the job "
          "(world size " +
          std::to_string(s.world_size) + ") runs at rank " + std::to_string(slow.rank) +
          "'s pace; " + thousands(slow.t.count) + " " + c.call + " calls, " +
          human_ns(slow.t.sum_ns) + " inside them";
      c.summary = summary_of(c, rank + ", " + proc + ", takes " + times(s.ratio) +
                                    " its local peers' time in " + c.call);
      set_advice(c, advise(c));
      out.push_back(std::move(f));
    }
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_nccl_straggler_rule() { return std::make_unique<NcclStraggler>(); }

}  // namespace stallwatch::chains
