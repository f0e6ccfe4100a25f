// network_retransmit: the workload's TCP sockets retransmit while its synchronisations or NCCL
// ops take far longer than their baseline. docs/chains.md.
#include <algorithm>
#include <string>
#include <vector>

#include "chains/call_classes.h"
#include "chains/format.h"
#include "chains/rule.h"
#include "chains/rule_helpers.h"
#include "trace/calls.h"

namespace stallwatch::chains {
namespace {

struct Thresholds {
  // Retransmits in the window (at least this many, and this rate; the rate that makes it high
  // is in kinds.h), and the inflation of a sync or NCCL call against its baseline.
  std::uint64_t min_retransmits = 10;
  double per_s = 1;
  double p99_ratio = 3;
  double nccl_mean_ratio = 2;
};

Advice advise(const Chain& c) {
  Advice out;
  out.command(Command("ethtool -S").placeholder("iface").pipe(
                  Command("grep -iE").arg("err|drop|discard|crc")),
              "NIC and link errors that cause the retransmits");
  out.command(Command("ss -ti state established"),
              "which connections retransmit (retrans:, rto:)");
  out.command(Command("ip link show").placeholder("iface"),
              "MTU must match along the path, switch ports included (jumbo frames)");
  if (c.api == "nccl") {
    out.code("NCCL_SOCKET_IFNAME=<fast iface> NCCL_DEBUG=INFO",
             "keep NCCL on the data-plane network and see which transport it chose");
    out.code("NCCL_IB_HCA=<mlx5_0,...>",
             "use RDMA (InfiniBand/RoCE) where the hosts have it instead of TCP sockets");
  } else {
    out.note(
        "the retransmits of this workload coincide with slower synchronisation: check what "
        "it waits for over the network (parameter server, remote storage, data service)");
  }
  return out;
}

class NetworkRetransmit : public Rule {
 public:
  Kind kind() const override { return Kind::kNetworkRetransmit; }

  void series(const WindowContext& ctx, const SeriesWindow& s, std::vector<Finding>& out) override {
    const std::uint64_t retrans = s.retransmits();
    const double window_s = secs(static_cast<std::uint64_t>(ctx.view.window_ns));
    const double rate = window_s > 0 ? static_cast<double>(retrans) / window_s : 0;
    if (retrans < th_.min_retransmits || rate < th_.per_s) return;

    // The most inflated synchronisation or NCCL op of the workload against its baseline.
    const ProcessWindow* worst_p = nullptr;
    std::uint32_t worst_id = 0;
    double worst_ratio = 0, worst_p99_ratio = 0, worst_mean_ratio = 0;
    for (const auto* p : ctx.cuda_processes(s.cgroup)) {
      for (const auto& [id, t] : p->calls) {
        const bool nccl = trace::is_nccl_op(id);
        if ((!is_sync_call(id) && !nccl) || t.count < ctx.options.thresholds.min_calls) continue;
        const Baseline* b = ctx.baseline(*p, id);
        if (!b || b->median_p99() <= 0) continue;
        const CallStat st = stat_of(id, t);
        const double p99_ratio = st.p99 / b->median_p99();
        const double mean_ratio = nccl && b->median_mean() > 0 ? st.mean() / b->median_mean() : 0;
        const bool inflated = p99_ratio >= th_.p99_ratio || mean_ratio >= th_.nccl_mean_ratio;
        const double ratio = std::max(p99_ratio, mean_ratio);
        if (inflated && ratio > worst_ratio) {
          worst_p = p;
          worst_id = id;
          worst_ratio = ratio;
          worst_p99_ratio = p99_ratio;
          worst_mean_ratio = mean_ratio;
        }
      }
    }
    if (!worst_p) return;

    Finding f;
    Chain& c = f.chain;
    c = ctx.base_chain(kind(), s.cgroup);
    c.severity = kind_info(kind()).cutoffs.of(rate);
    const CallStat st = stat_of(worst_id, worst_p->calls.at(worst_id));
    const Baseline* b = ctx.baseline(*worst_p, worst_id);
    set_call(c, st, b);
    c.evidence = {{"retransmits", static_cast<double>(retrans)},
                  {"retransmits_per_second", rate},
                  {"ipv4_retransmits", static_cast<double>(s.retransmits_ipv4)},
                  {"ipv6_retransmits", static_cast<double>(s.retransmits_ipv6)},
                  {"call_p99_ratio", worst_p99_ratio},
                  {"call_mean_s", st.mean()},
                  {"baseline_mean_s", b->median_mean()}};
    if (worst_mean_ratio > 0) c.evidence.emplace_back("call_mean_ratio", worst_mean_ratio);
    const std::string proc = process_text(worst_p->comm, worst_p->pid);
    const char* family = s.retransmits_ipv6 == 0   ? "IPv4"
                         : s.retransmits_ipv4 == 0 ? "IPv6"
                                                   : "IPv4 and IPv6";
    c.root_cause = "the workload's TCP sockets retransmitted " + thousands(retrans) +
                   " segments (" + short_number(rate) + "/s, " + family + ") in the window while " +
                   c.call + " in " + proc + " took p99 " + human_seconds(st.p99) + " against " +
                   human_seconds(b->median_p99()) + " usually (" + times(worst_p99_ratio) + ")" +
                   (worst_mean_ratio > 0 ? ", mean " + times(worst_mean_ratio) : std::string());
    c.effect = effect_text(st, b) +
               "; a lost segment stalls its stream for a round trip at best, for the "
               "retransmission timeout (200 ms or more) when fast retransmit cannot recover it";
    c.summary = summary_of(c, c.call + " in " + proc + " " + times(worst_ratio) + " slower with " +
                                  short_number(rate) + " TCP retransmits/s");
    set_advice(c, advise(c));
    out.push_back(std::move(f));
  }

 private:
  Thresholds th_;
};

}  // namespace

std::unique_ptr<Rule> make_network_retransmit_rule() {
  return std::make_unique<NetworkRetransmit>();
}

}  // namespace stallwatch::chains
