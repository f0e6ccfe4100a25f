// Privileged tier, network: two network namespaces joined by a veth pair, an nftables rule in
// the receiver's namespace dropping a share of arriving TCP packets (numgen random), and a TCP
// transfer from a sender in a CUDA workload's cgroup. Retransmits are counted on the sender's
// cgroup (the socket's, not whatever task the softirq interrupted); a control cgroup whose
// sender used the same link without drops has none. Traffic never leaves the namespaces the
// test made; the sender's own TCP_INFO count is the ground truth.
#include <gtest/gtest.h>
#include <unistd.h>

#include <iostream>
#include <regex>

#include "support/evidence.h"
#include "support/harness.h"
#include "support/host_env.h"
#include "support/process.h"

namespace stallwatch::test {
namespace {

constexpr long kBytes = 8L << 20;
constexpr int kPort = 5201;

std::string unique(const std::string& name) {
  return suite_cgroup("net-" + name);
}

class Net : public DaemonSuite {
 protected:
  static Child start_keeper(const TestCgroup& cg) {
    Spawn s;
    s.argv = keeper_argv();
    s.cgroup_dir = cg.dir();
    return Child(s);
  }

  // One transfer of kBytes from `cg` (sender namespace) to the receiver namespace; returns the
  // sender's own retransmit count (TCP_INFO), or -1 when the transfer failed.
  static long transfer(const NetnsPair& pair, const TestCgroup& cg, bool ipv6 = false) {
    std::string out = "/tmp/stallwatch-net-" + std::to_string(getpid()) + ".log";
    unlink(out.c_str());
    Pipe ready;
    Spawn r;
    r.argv = {TCP_PEER_BIN,
              "--listen",
              std::to_string(kPort),
              "--ready-fd",
              std::to_string(ready.write_end),
              "--timeout-s",
              "90"};
    r.netns = pair.receiver_ns();
    r.cpu = 0;  // beside the sender: see there
    r.pass_fds = {ready.write_end};
    r.output_path = out;
    Child receiver(r);
    ready.close_write();
    EXPECT_TRUE(read_byte(ready.read_end, std::chrono::seconds(10))) << slurp(out);
    Spawn s;
    s.argv = {TCP_PEER_BIN,
              "--send",
              (ipv6 ? "[" + pair.receiver_addr6() + "]" : pair.receiver_addr()) + ":" +
                  std::to_string(kPort),
              "--bytes",
              std::to_string(kBytes),
              "--timeout-s",
              "90"};
    s.netns = pair.sender_ns();
    // Sender and receiver on one CPU: a veth delivers through the per-CPU backlog of the CPU
    // that transmits, and the sender transmits both from its own thread and from ACK processing
    // (on the receiver's CPU). On two CPUs a busy one reorders the segments, and reordering makes
    // TCP fast-retransmit (spuriously) without any drop: measured here, 45-400 per transfer.
    s.cpu = 0;
    s.cgroup_dir = cg.dir();
    s.output_path = out;
    Child sender(s);
    int sent = sender.wait(std::chrono::seconds(100));
    int received = receiver.wait(std::chrono::seconds(10));
    std::string text = slurp(out);
    unlink(out.c_str());
    EXPECT_EQ(sent, 0) << text;
    EXPECT_EQ(received, 0) << text;
    std::smatch m;
    static const std::regex re("retransmits=([0-9]+)");
    if (sent != 0 || received != 0 || !std::regex_search(text, m, re)) return -1;
    EXPECT_NE(text.find("received=" + std::to_string(kBytes)), std::string::npos) << text;
    return std::stol(m[1]);
  }

};

TEST_F(Net, RetransmitsCountOnTheSendersCgroupAndNotOnALosslessControl) {
  int id = getpid() % 100000;
  NetnsPair pair("sw" + std::to_string(id) + "-", id % 250, 0);
  ASSERT_TRUE(pair.ok()) << pair.error();
  TestCgroup control(unique("control")), lossy(unique("lossy")), lossy6(unique("lossy6"));

  // Control: the same link, no drops.
  Child keeper = start_keeper(control);
  ASSERT_TRUE(wait_traced(*daemon_, control.label())) << daemon_->log_path();
  long control_retrans = transfer(pair, control);
  ASSERT_GE(control_retrans, 0);
  keeper.stop();

  // Lossy: 10 % of TCP packets into the receiver's namespace dropped.
  ASSERT_TRUE(pair.set_drop_percent(10)) << pair.error();
  keeper = start_keeper(lossy);
  ASSERT_TRUE(wait_traced(*daemon_, lossy.label())) << daemon_->log_path();
  long lossy_retrans = transfer(pair, lossy);
  std::uint64_t dropped = pair.dropped_packets();
  ASSERT_GT(lossy_retrans, 0) << "the drop rule caused no retransmit (dropped " << dropped << ")";
  ASSERT_GT(dropped, 0u);
  keeper.stop();

  // The same drops over IPv6 (the inet table matches both), from a third cgroup.
  keeper = start_keeper(lossy6);
  ASSERT_TRUE(wait_traced(*daemon_, lossy6.label())) << daemon_->log_path();
  long lossy6_retrans = transfer(pair, lossy6, true);
  ASSERT_GT(lossy6_retrans, 0) << "no IPv6 retransmit";

  ASSERT_TRUE(daemon_->wait_windows()) << daemon_->log_path();
  std::string metrics = daemon_->metrics();
  auto s = parse_exposition(metrics);
  auto retrans = [&](const TestCgroup& cg, const std::string& family) {
    return find_sample(s, "stallwatch_tcp_retransmits_total",
                       {{"cgroup", cg.label()}, {"family", family}});
  };
  EXPECT_GT(retrans(lossy, "ipv4").value_or(0), 0)
      << "sender saw " << lossy_retrans << " retransmits, " << dropped << " packets dropped\n"
      << metrics;
  // Both count retransmitted segments of successful attempts. Usually they agree exactly, or
  // the daemon sees a few more: retransmits of the connection's tail (FIN) after the sender read
  // TCP_INFO. Once in many runs the daemon saw 3 fewer (629 of 632 over IPv6, fresh-clone CI of
  // 2026-11-23; cause not found: the tracepoint and tcpi_total_retrans are updated side by side
  // in __tcp_retransmit_skb), so the bound is ±3 segments: a misattributed socket is off by
  // hundreds or counts 0.
  constexpr long kSlack = 3;
  EXPECT_GE(retrans(lossy, "ipv4").value_or(0), lossy_retrans - kSlack) << metrics;
  EXPECT_LE(retrans(lossy, "ipv4").value_or(0), lossy_retrans + kSlack);
  EXPECT_EQ(retrans(lossy, "ipv6").value_or(0), 0);
  EXPECT_GE(retrans(lossy6, "ipv6").value_or(0), lossy6_retrans - kSlack) << metrics;
  EXPECT_LE(retrans(lossy6, "ipv6").value_or(0), lossy6_retrans + kSlack);
  EXPECT_EQ(retrans(lossy6, "ipv4").value_or(0), 0);
  // The control: lossless, so no retransmit of its own (TCP_INFO), and none of the lossy
  // sender's attributed to it (no sample at all, or zeros).
  EXPECT_EQ(control_retrans, 0) << "retransmits without drops: the control is not lossless";
  EXPECT_LE(retrans(control, "ipv4").value_or(0), control_retrans) << metrics;
  EXPECT_EQ(sum_samples(s, "stallwatch_tcp_retransmits_total", {{"cgroup", control.label()}}), 0)
      << metrics;
  // A network_retransmit chain needs inflated NCCL or sync latency too (not made here): only
  // reported, not asserted.
  std::string raw;
  auto chains = chains_of(explain_chains(*daemon_, &raw), "network_retransmit", lossy.label());
  std::cout << "network_retransmit chains for " << lossy.label() << ": " << chains.size()
            << " (sender retransmits " << lossy_retrans << ", daemon "
            << retrans(lossy, "ipv4").value_or(0) << "; IPv6 sender " << lossy6_retrans
            << ", daemon " << retrans(lossy6, "ipv6").value_or(0) << "; control " << control_retrans
            << ", daemon " << retrans(control, "ipv4").value_or(0) << ")\n";
}

}  // namespace
}  // namespace stallwatch::test

int main(int argc, char** argv) { return stallwatch::test::run_privileged_tests(argc, argv); }
