// TCP (bpf/net.bpf.c, bpf/net.h): segments retransmitted by each watched cgroup's sockets, map
// tcp_retransmits (per cgroup, read whole every window).
#include <bpf/bpf.h>

#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/net.h"
}

namespace stallwatch::trace {
namespace {

class NetSource : public Source {
 public:
  explicit NetSource(const Tracer& t) : fd_(t.map_fd("tcp_retransmits")) {}
  std::string_view name() const override { return "net"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    for_each_entry<__u64, retransmit_stats>(fd_, [&](const __u64& id, const retransmit_stats& v) {
      Series& s = snap.series[ctx.cgroup(id).label];
      s.tcp_retransmits_ipv4 += v.ipv4;
      s.tcp_retransmits_ipv6 += v.ipv6;
      return false;
    });
  }

  void retire_cgroup(std::uint64_t cgroup_id, SeriesTotals& into) override {
    __u64 id = cgroup_id;
    retransmit_stats t{};
    if (bpf_map_lookup_elem(fd_, &id, &t) == 0) {
      into.tcp_retransmits_ipv4 += t.ipv4;
      into.tcp_retransmits_ipv6 += t.ipv6;
      bpf_map_delete_elem(fd_, &id);
    }
  }

 private:
  int fd_;
};

}  // namespace

std::unique_ptr<Source> make_net_source(const SourceDeps& d) {
  return std::make_unique<NetSource>(d.tracer);
}

}  // namespace stallwatch::trace
