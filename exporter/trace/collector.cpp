#include "trace/collector.h"

#include <bpf/bpf.h>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "trace/map_iter.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/cuda.h"
#include "bpf/sched.h"
}

namespace stallwatch::trace {
namespace {

constexpr size_t kTopPreemptors = 10;

CallTotals totals_of(const call_stats& s) {
  CallTotals t;
  t.count = s.count;
  t.sum_ns = s.sum_ns;
  t.runnable_ns = s.runnable_ns;
  t.blocked_ns = s.blocked_ns;
  t.max_ns = s.max_ns;
  std::copy(std::begin(s.buckets), std::end(s.buckets), t.buckets.begin());
  return t;
}

OffcpuTotals totals_of(const offcpu_stats& s) {
  return OffcpuTotals{s.runnable_ns, s.blocked_ns, s.oncpu_ns, s.preemptions};
}

double share(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

// /proc/PID/comm and the start time from /proc/PID/stat (field 22, clock ticks after boot).
ProcessInfo read_process(int pid) {
  ProcessInfo info;
  info.pid = pid;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream comm(dir + "/comm");
  std::getline(comm, info.comm);
  std::ifstream stat(dir + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  static const long long boot = [] {
    std::ifstream st("/proc/stat");
    std::string key;
    long long value = 0;
    while (st >> key) {
      if (key == "btime" && st >> value) return value;
    }
    return 0LL;
  }();
  if (close != std::string::npos && boot > 0) {
    std::istringstream fields(text.substr(close + 2));
    std::string f;
    for (int i = 3; i <= 22 && fields >> f; i++) {
      if (i != 22) continue;
      const long ticks = sysconf(_SC_CLK_TCK);
      const long long start = std::stoll(f);
      info.start_ns = boot * 1000000000LL + start * (1000000000LL / (ticks > 0 ? ticks : 100));
    }
  }
  return info;
}

}  // namespace

Collector::Collector(const Tracer& tracer, identity::CgroupResolver& resolver,
                     CollectorOptions options)
    : tracer_(tracer), resolver_(resolver), options_(options) {}

std::string Collector::cgroup_path(std::uint64_t cgroup_id) {
  auto path = resolver_.path_of(cgroup_id);
  return path ? *path : std::string();
}

Collector::CgroupState& Collector::state_of(std::uint64_t cgroup_id) {
  auto it = cgroups_.find(cgroup_id);
  if (it != cgroups_.end()) return it->second;
  std::string path = cgroup_path(cgroup_id);
  size_t own_labels = label_users_.size() - label_users_.count(kOverflowCgroup);
  std::string label = path;
  if (path.empty() || (!label_users_.count(path) && own_labels >= options_.max_cgroups)) {
    label = kOverflowCgroup;
  }
  label_users_[label]++;
  CgroupState st;
  st.label = label;
  return cgroups_.emplace(cgroup_id, std::move(st)).first->second;
}

bool Collector::alive(int pid) {
  auto it = alive_cache_.find(pid);
  if (it != alive_cache_.end()) return it->second;
  struct stat st {};
  bool a = ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
  alive_cache_.emplace(pid, a);
  return a;
}

ProcessInfo& Collector::process_info(Series& s, int pid) {
  auto it = s.process_info.find(pid);
  if (it != s.process_info.end()) return it->second;
  auto cached = procs_.find(pid);
  if (cached == procs_.end()) cached = procs_.emplace(pid, read_process(pid)).first;
  ProcessInfo info = cached->second;
  info.offcpu = {};
  return s.process_info.emplace(pid, std::move(info)).first->second;
}

void Collector::read_calls(std::map<std::string, Series>& out) {
  for_each_entry<call_key, call_stats>(tracer_.call_map_fd(), [&](const call_key& k,
                                                                  const call_stats& v) {
    CgroupState& st = state_of(k.cgroup_id);
    CallTotals t = totals_of(v);
    if (!alive(static_cast<int>(k.tgid))) {
      st.retired_calls[k.call_id].add(t);
      return true;
    }
    st.live = true;
    Series& s = out[st.label];
    s.calls[k.call_id].add(t);
    s.processes.push_back(ProcessCall{static_cast<int>(k.tgid), k.call_id, t});
    process_info(s, static_cast<int>(k.tgid));
    return false;
  });
}

void Collector::read_offcpu(std::map<std::string, Series>& out) {
  for_each_entry<offcpu_key, offcpu_stats>(tracer_.offcpu_map_fd(), [&](const offcpu_key& k,
                                                                        const offcpu_stats& v) {
    CgroupState& st = state_of(k.cgroup_id);
    if (!alive(static_cast<int>(k.tgid))) {
      st.retired_offcpu.add(totals_of(v));
      return true;
    }
    st.live = true;
    Series& s = out[st.label];
    s.offcpu.add(totals_of(v));
    process_info(s, static_cast<int>(k.tgid)).offcpu.add(totals_of(v));
    return false;
  });
}

void Collector::read_preemptors(std::map<std::string, Series>& out) {
  constexpr size_t kRetainedPreemptors = 64;
  std::map<std::string, std::map<int, Preemptor>> merged;  // by label, then preemptor pid
  auto add = [](std::map<int, Preemptor>& into, const Preemptor& p) {
    auto [it, fresh] = into.emplace(p.pid, p);
    if (!fresh) {
      it->second.runnable_ns += p.runnable_ns;
      it->second.count += p.count;
    }
  };
  for_each_entry<preemptor_key, preemptor_stats>(
      tracer_.preemptors_map_fd(), [&](const preemptor_key& k, const preemptor_stats& v) {
        CgroupState& st = state_of(k.victim_cgroup_id);
        Preemptor p;
        p.victim_pid = static_cast<int>(k.victim_tgid);
        p.pid = static_cast<int>(k.preemptor_tgid);
        p.comm = std::string(v.comm, strnlen(v.comm, sizeof(v.comm)));
        p.cgroup = cgroup_path(v.preemptor_cgroup_id);
        p.runnable_ns = v.runnable_ns;
        p.count = v.count;
        if (!alive(p.victim_pid)) {
          add(st.retired_preemptors, p);  // the victim's evidence outlives it
          return true;
        }
        add(merged[st.label], p);
        return false;
      });
  for (auto& [id, st] : cgroups_) {
    auto& r = st.retired_preemptors;
    while (r.size() > kRetainedPreemptors) {  // keep the heaviest
      auto lightest = std::min_element(r.begin(), r.end(), [](const auto& a, const auto& b) {
        return a.second.runnable_ns < b.second.runnable_ns;
      });
      r.erase(lightest);
    }
    for (const auto& [pid, p] : r) add(merged[st.label], p);
  }
  for (auto& [label, by_pid] : merged) {
    auto& p = out[label].preemptors;
    for (auto& [pid, pre] : by_pid) p.push_back(std::move(pre));
    std::sort(p.begin(), p.end(),
              [](const Preemptor& a, const Preemptor& b) { return a.runnable_ns > b.runnable_ns; });
    if (p.size() > kTopPreemptors) p.resize(kTopPreemptors);
  }
}

void Collector::drop_vanished_cgroups() {
  resolver_.forget_missing();
  for (auto it = cgroups_.begin(); it != cgroups_.end();) {
    CgroupState& st = it->second;
    if (st.live || resolver_.path_of(it->first)) {
      ++it;
      continue;
    }
    // Gone: its series disappears, unless its label is shared (overflow, or a cgroup
    // recreated under the same path), whose counters must not go backwards.
    retire_cgroup_maps(it->first, st);
    if (--label_users_[st.label] > 0) {
      for (auto& [id, other] : cgroups_) {
        if (id == it->first || other.label != st.label) continue;
        for (const auto& [call, t] : st.retired_calls) other.retired_calls[call].add(t);
        other.retired_offcpu.add(st.retired_offcpu);
        for (const auto& [k, t] : st.retired_io) other.retired_io[k].add(t);
        for (const auto& [k, t] : st.retired_nccl) other.retired_nccl[k].add(t);
        other.retired_reclaim.add(st.retired_reclaim);
        other.retired_retransmits_ipv4 += st.retired_retransmits_ipv4;
        other.retired_retransmits_ipv6 += st.retired_retransmits_ipv6;
        other.oom_kills += st.oom_kills;
        other.oom_kills_cuda += st.oom_kills_cuda;
        other.oom_victims.insert(other.oom_victims.end(), st.oom_victims.begin(),
                                 st.oom_victims.end());
        break;
      }
    } else {
      label_users_.erase(st.label);
    }
    it = cgroups_.erase(it);
  }
}

std::shared_ptr<Snapshot> Collector::collect(std::chrono::nanoseconds window,
                                                   const TraceCounts& counts) {
  auto snap = std::make_shared<Snapshot>();
  snap->sequence = previous_ ? previous_->sequence + 1 : 1;
  snap->taken = std::chrono::system_clock::now();
  snap->window = window;
  alive_cache_.clear();
  for (auto& [id, st] : cgroups_) st.live = false;

  auto& series = snap->series;
  read_calls(series);
  read_offcpu(series);
  read_preemptors(series);
  read_host(series);
  drop_vanished_cgroups();
  for (auto it = procs_.begin(); it != procs_.end();) {
    it = alive(it->first) ? std::next(it) : procs_.erase(it);
  }
  for (const auto& [id, st] : cgroups_) {
    if (st.retired_calls.empty() && !st.live) continue;
    Series& s = series[st.label];
    for (const auto& [call, t] : st.retired_calls) s.calls[call].add(t);
    s.offcpu.add(st.retired_offcpu);
  }
  finish_host(series);
  for (auto& [label, s] : series) {
    s.identity = label == kOverflowCgroup ? identity::Identity{} : identity::parse_cgroup_path(label);
    s.identity.cgroup = label;
    if (options_.kube) options_.kube->annotate(s.identity);
    OffcpuTotals prev;
    if (previous_) {
      auto it = previous_->series.find(label);
      if (it != previous_->series.end()) prev = it->second.offcpu;
    }
    auto d = [](std::uint64_t now, std::uint64_t before) { return now > before ? now - before : 0; };
    std::uint64_t dr = d(s.offcpu.runnable_ns, prev.runnable_ns);
    std::uint64_t db = d(s.offcpu.blocked_ns, prev.blocked_ns);
    std::uint64_t doc = d(s.offcpu.oncpu_ns, prev.oncpu_ns);
    s.runnable_ratio = share(dr, dr + db + doc);
    s.blocked_ratio = share(db, dr + db + doc);
  }
  snap->lost = read_lost(tracer_.lost_map_fd());
  snap->outliers = counts.outliers;
  snap->traced_processes = counts.traced_processes;
  snap->attached_libraries = counts.attached_libraries;
  snap->attached_probes = counts.attached_probes;
  if (options_.kube) snap->kube = options_.kube->stats();
  snap->ready = true;
  previous_ = snap;
  return snap;
}

}  // namespace stallwatch::trace
