// The host-evidence half of Collector (collector.h): memory reclaim, OOM kills, block I/O,
// TCP retransmits, NCCL ops, PSI and the starvation ratio, read once per window.
#include <bpf/bpf.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <tuple>

#include "host/pressure.h"
#include "trace/collector.h"
#include "trace/map_iter.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/host.h"
}

namespace stallwatch::trace {
namespace {

constexpr size_t kMaxOomVictims = 16;
// (rank, world_size) pairs per series and op before further ones fold into rank "" (-1).
constexpr size_t kMaxRanksPerOp = 64;

template <typename T, typename S>
T histogram_of(const S& s) {
  T t;
  t.count = s.count;
  t.bytes = s.bytes;
  t.sum_ns = s.sum_ns;
  t.max_ns = s.max_ns;
  std::copy(std::begin(s.buckets), std::end(s.buckets), t.buckets.begin());
  return t;
}

ReclaimTotals reclaim_of(const reclaim_stats& v) {
  return ReclaimTotals{v.direct_ns, v.direct_count, v.memcg_ns, v.memcg_count, v.cuda_ns};
}

std::string op_name(std::uint32_t op) {
  switch (op) {
    case 0:
      return "read";
    case 1:
      return "write";
    case 2:
      return "flush";
    case 3:
      return "discard";
  }
  return "other";
}

std::uint64_t sub(std::uint64_t now, std::uint64_t before) { return now > before ? now - before : 0; }

}  // namespace

const std::string& Collector::device_name(std::uint32_t major, std::uint32_t minor) {
  const std::uint64_t key = (static_cast<std::uint64_t>(major) << 32) | minor;
  auto it = devices_.find(key);
  if (it != devices_.end()) return it->second;
  const std::string numbers = std::to_string(major) + ":" + std::to_string(minor);
  std::string name = numbers;
  std::ifstream uevent("/sys/dev/block/" + numbers + "/uevent");
  for (std::string line; std::getline(uevent, line);) {
    if (line.starts_with("DEVNAME=")) name = line.substr(8);
  }
  return devices_.emplace(key, name).first->second;
}

void Collector::add_oom_kill(std::uint64_t cgroup_id, OomKill kill) {
  std::lock_guard lock(oom_mu_);
  if (pending_ooms_.size() < 1024) pending_ooms_.emplace_back(cgroup_id, std::move(kill));
}

void Collector::take_oom_kills() {
  std::vector<std::pair<std::uint64_t, OomKill>> kills;
  {
    std::lock_guard lock(oom_mu_);
    kills.swap(pending_ooms_);
  }
  for (auto& [cgroup_id, kill] : kills) {
    CgroupState& st = state_of(cgroup_id);
    // The kernel flags a victim thread that issued CUDA calls; a process whose other threads
    // did is known from the call map.
    if (procs_.count(kill.pid)) kill.cuda = true;
    st.oom_kills++;
    if (kill.cuda) st.oom_kills_cuda++;
    st.oom_victims.push_back(std::move(kill));
    while (st.oom_victims.size() > kMaxOomVictims) st.oom_victims.pop_front();
  }
}

void Collector::read_reclaim(std::map<std::string, Series>& out) {
  for_each_entry<__u64, reclaim_stats>(tracer_.reclaim_map_fd(),
                                       [&](const __u64& id, const reclaim_stats& v) {
                                         out[state_of(id).label].reclaim.add(reclaim_of(v));
                                         return false;
                                       });
}

void Collector::read_retransmits(std::map<std::string, Series>& out) {
  for_each_entry<__u64, retransmit_stats>(tracer_.retransmit_map_fd(),
                                          [&](const __u64& id, const retransmit_stats& v) {
                                            Series& s = out[state_of(id).label];
                                            s.tcp_retransmits_ipv4 += v.ipv4;
                                            s.tcp_retransmits_ipv6 += v.ipv6;
                                            return false;
                                          });
}

void Collector::read_io(std::map<std::string, Series>& out) {
  for_each_entry<io_key, io_stats>(tracer_.io_map_fd(), [&](const io_key& k, const io_stats& v) {
    CgroupState& st = state_of(k.cgroup_id);
    IoKey key{device_name(k.dev_major, k.dev_minor), op_name(k.op)};
    IoTotals t = histogram_of<IoTotals>(v);
    const int pid = static_cast<int>(k.tgid);
    if (!alive(pid)) {
      st.retired_io[key].add(t);
      return true;
    }
    Series& s = out[st.label];
    s.io[key].add(t);
    ProcessIo p;
    p.pid = pid;
    auto cached = procs_.find(pid);
    if (cached != procs_.end()) {
      p.comm = cached->second.comm;
    } else {
      std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
      std::getline(comm, p.comm);
    }
    p.key = std::move(key);
    p.totals = t;
    s.io_processes.push_back(std::move(p));
    return false;
  });
}

void Collector::read_nccl(std::map<std::string, Series>& out) {
  // Rank pairs per (series, op): bounded so a job with thousands of communicators cannot
  // explode the label set; later pairs fold into rank "" / world_size "".
  std::map<std::pair<std::string, std::uint32_t>, std::set<std::pair<int, int>>> seen;
  auto bounded = [&](const std::string& label, NcclKey key) {
    auto& ranks = seen[{label, key.call_id}];
    if (!ranks.count({key.rank, key.world_size}) && ranks.size() >= kMaxRanksPerOp) {
      key.rank = -1;
      key.world_size = -1;
    }
    ranks.insert({key.rank, key.world_size});
    return key;
  };
  for_each_entry<nccl_key, nccl_stats>(tracer_.nccl_map_fd(), [&](const nccl_key& k,
                                                                  const nccl_stats& v) {
    CgroupState& st = state_of(k.cgroup_id);
    NcclKey key = bounded(st.label, NcclKey{k.call_id, k.rank, k.world_size});
    NcclTotals t = histogram_of<NcclTotals>(v);
    const int pid = static_cast<int>(k.tgid);
    if (!alive(pid)) {
      st.retired_nccl[key].add(t);
      return true;
    }
    Series& s = out[st.label];
    s.nccl[key].add(t);
    s.nccl_processes.push_back(ProcessNccl{pid, key, t});
    return false;
  });
}

void Collector::read_host(std::map<std::string, Series>& out) {
  take_oom_kills();
  read_reclaim(out);
  read_retransmits(out);
  read_io(out);
  read_nccl(out);
}

void Collector::retire_cgroup_maps(std::uint64_t cgroup_id, CgroupState& into) {
  __u64 id = cgroup_id;
  reclaim_stats r{};
  if (bpf_map_lookup_elem(tracer_.reclaim_map_fd(), &id, &r) == 0) {
    into.retired_reclaim.add(reclaim_of(r));
    bpf_map_delete_elem(tracer_.reclaim_map_fd(), &id);
  }
  retransmit_stats t{};
  if (bpf_map_lookup_elem(tracer_.retransmit_map_fd(), &id, &t) == 0) {
    into.retired_retransmits_ipv4 += t.ipv4;
    into.retired_retransmits_ipv6 += t.ipv6;
    bpf_map_delete_elem(tracer_.retransmit_map_fd(), &id);
  }
  bpf_map_delete_elem(tracer_.watched_map_fd(), &id);
}

void Collector::finish_host(std::map<std::string, Series>& out) {
  for (const auto& [id, st] : cgroups_) {
    const bool any = !st.retired_io.empty() || !st.retired_nccl.empty() || st.oom_kills > 0 ||
                     st.retired_reclaim.direct_count + st.retired_reclaim.memcg_count > 0 ||
                     st.retired_retransmits_ipv4 + st.retired_retransmits_ipv6 > 0;
    if (!any && !out.count(st.label)) continue;
    Series& s = out[st.label];
    for (const auto& [k, t] : st.retired_io) s.io[k].add(t);
    for (const auto& [k, t] : st.retired_nccl) s.nccl[k].add(t);
    s.reclaim.add(st.retired_reclaim);
    s.tcp_retransmits_ipv4 += st.retired_retransmits_ipv4;
    s.tcp_retransmits_ipv6 += st.retired_retransmits_ipv6;
    s.oom_kills += st.oom_kills;
    s.oom_kills_cuda += st.oom_kills_cuda;
    s.oom_victims.insert(s.oom_victims.end(), st.oom_victims.begin(), st.oom_victims.end());
  }
  for (auto& [label, s] : out) {
    std::sort(s.oom_victims.begin(), s.oom_victims.end(),
              [](const OomKill& a, const OomKill& b) { return a.at_ns < b.at_ns; });
    if (s.oom_victims.size() > kMaxOomVictims) {
      s.oom_victims.erase(s.oom_victims.begin(),
                          s.oom_victims.end() - static_cast<long>(kMaxOomVictims));
    }
    if (label != kOverflowCgroup) {
      s.pressure = host::read_pressure(resolver_.mount() + (label == "/" ? "" : label));
    }
    // Starvation: blocked off-CPU time of the CUDA-issuing threads outside any CUDA call, as
    // a share of their wall time in the window.
    std::uint64_t in_calls = 0, in_calls_before = 0;
    for (const auto& [call, t] : s.calls) in_calls += t.blocked_ns;
    OffcpuTotals before;
    if (previous_) {
      auto it = previous_->series.find(label);
      if (it != previous_->series.end()) {
        before = it->second.offcpu;
        for (const auto& [call, t] : it->second.calls) in_calls_before += t.blocked_ns;
      }
    }
    const std::uint64_t blocked = sub(s.offcpu.blocked_ns, before.blocked_ns);
    const std::uint64_t wall = blocked + sub(s.offcpu.runnable_ns, before.runnable_ns) +
                               sub(s.offcpu.oncpu_ns, before.oncpu_ns);
    const std::uint64_t outside = sub(blocked, sub(in_calls, in_calls_before));
    s.starvation_ratio = wall == 0 ? 0.0 : static_cast<double>(outside) / static_cast<double>(wall);
  }
}

}  // namespace stallwatch::trace
