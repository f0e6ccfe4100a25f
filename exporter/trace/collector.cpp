#include "trace/collector.h"

#include <optional>
#include <utility>

#include "identity/cgroup_identity.h"

#include "common/guard.h"

namespace stallwatch::trace {

Collector::Collector(std::vector<std::unique_ptr<Source>> sources,
                     identity::CgroupResolver& resolver, const host::Procfs& fs,
                     CollectorOptions options)
    : sources_(std::move(sources)), resolver_(resolver), fs_(fs), options_(options) {}

std::string Collector::cgroup_path(std::uint64_t cgroup_id) {
  auto path = resolver_.path_of(cgroup_id);
  return path ? identity::cgroup_label(*path) : std::string();
}

identity::Identity Collector::cgroup_identity(std::uint64_t cgroup_id) {
  if (auto it = cgroups_.find(cgroup_id); it != cgroups_.end()) return it->second.identity;
  const std::optional<std::string> path = resolver_.path_of(cgroup_id);
  if (!path) return {};
  return identity::parse_cgroup_path(
      *path, resolver_.trusted_path_of(cgroup_id).value_or(std::string("/")));
}

CgroupSlot& Collector::cgroup(std::uint64_t cgroup_id) {
  auto it = cgroups_.find(cgroup_id);
  if (it != cgroups_.end()) return it->second;
  CgroupSlot slot;
  const std::optional<std::string> path = resolver_.path_of(cgroup_id);
  const size_t own_labels = label_users_.size() - label_users_.count(kOverflowCgroup) -
                            label_users_.count(kUnknownCgroup);
  slot.label = path ? identity::cgroup_label(*path) : std::string();
  if (slot.label.empty()) {
    slot.label = kUnknownCgroup;
  } else if (!label_users_.count(slot.label) && own_labels >= options_.max_cgroups) {
    slot.label = kOverflowCgroup;
  } else {
    if (path->size() <= identity::CgroupResolver::kMaxCheckedPath) slot.path = *path;
    slot.identity = identity::parse_cgroup_path(
        *path, resolver_.trusted_path_of(cgroup_id).value_or(std::string("/")));
    slot.identity.cgroup = slot.label;
  }
  label_users_[slot.label]++;
  return cgroups_.emplace(cgroup_id, std::move(slot)).first->second;
}

const Collector::Running& Collector::running(int pid) {
  auto it = alive_cache_.find(pid);
  if (it != alive_cache_.end()) return it->second;
  Running r;
  r.exists = fs_.pid_exists(pid);
  if (r.exists) r.start_tag = fs_.start_tag(pid);
  return alive_cache_.emplace(pid, r).first->second;
}

bool Collector::alive(int pid, std::uint32_t start_tag) {
  const Running& r = running(pid);
  // A different start: the PID was reused, the kernel's entry is of the exited process.
  return r.exists && (start_tag == 0 || r.start_tag == 0 || r.start_tag == start_tag);
}

ProcessInfo& Collector::process(Series& s, int pid) {
  auto it = s.process_info.find(pid);
  if (it != s.process_info.end()) return it->second;
  auto cached = procs_.find(pid);
  const std::uint32_t tag = running(pid).start_tag;
  if (cached != procs_.end() && cached->second.start_tag != tag) {
    procs_.erase(cached);  // the PID was reused: another process, another name
    cached = procs_.end();
  }
  if (cached == procs_.end()) {
    ProcessInfo info;
    info.pid = pid;
    info.comm = fs_.comm(pid);
    info.start_ns = fs_.start_unix_ns(pid);
    info.start_tag = tag;
    cached = procs_.emplace(pid, std::move(info)).first;
  }
  ProcessInfo info = cached->second;
  info.offcpu = {};
  info.cpus = fs_.cpus_allowed(pid);  // taskset may change it at any time
  return s.process_info.emplace(pid, std::move(info)).first->second;
}

ProcessInfo& Collector::exited_process(Snapshot& snap, const std::string& label, int pid,
                                      std::uint32_t start_tag) {
  std::map<int, ProcessInfo>& infos = snap.exited[label].info;
  auto it = infos.find(pid);
  if (it != infos.end()) return it->second;
  ProcessInfo info;
  info.pid = pid;
  info.start_tag = start_tag;
  info.exited = true;
  auto cached = procs_.find(pid);
  if (cached != procs_.end() &&
      (start_tag == 0 || cached->second.start_tag == 0 || cached->second.start_tag == start_tag)) {
    info.comm = cached->second.comm;
    info.start_ns = cached->second.start_ns;
  } else if (options_.exited_name) {
    info.comm = options_.exited_name(pid, start_tag);
  }
  return infos.emplace(pid, std::move(info)).first->second;
}

std::string Collector::comm(int pid) {
  auto cached = procs_.find(pid);
  return cached != procs_.end() ? cached->second.comm : fs_.comm(pid);
}

void Collector::drop_vanished_cgroups() {
  resolver_.forget_missing();
  for (auto it = cgroups_.begin(); it != cgroups_.end();) {
    CgroupSlot& slot = it->second;
    if (slot.live || resolver_.path_of(it->first)) {
      ++it;
      continue;
    }
    for (auto& s : sources_) s->retire_cgroup(it->first, slot.retired);
    // Gone: its series disappears, unless its label is shared (overflow, or a cgroup
    // recreated under the same path), whose counters must not go backwards.
    if (--label_users_[slot.label] > 0) {
      for (auto& [id, other] : cgroups_) {
        if (id == it->first || other.label != slot.label) continue;
        other.retired.add(slot.retired);
        break;
      }
    } else {
      label_users_.erase(slot.label);
    }
    it = cgroups_.erase(it);
  }
}

std::shared_ptr<Snapshot> Collector::collect(std::chrono::nanoseconds window,
                                             const TraceCounts& counts) {
  auto snap = std::make_shared<Snapshot>();
  snap->sequence = ++sequence_;
  snap->taken = std::chrono::system_clock::now();
  snap->window = window;
  alive_cache_.clear();
  for (auto& [id, slot] : cgroups_) slot.live = false;

  for (auto& s : sources_) s->read(*this, *snap);
  for (const auto& [id, slot] : cgroups_) snap->cgroup_labels.emplace(id, slot.label);
  auto& series = snap->series;
  // A label's identity and directory: those of a slot that feeds it (slots share a label only
  // when the same path was made again, or in the overflow series, which has neither). Before
  // the vanished cgroups' slots go, so that their last window keeps its identity.
  const auto adopt = [](Series& s, const CgroupSlot& slot) {
    if (is_pooled_cgroup(slot.label) || !s.identity.cgroup.empty()) return;
    s.identity = slot.identity;
    s.cgroup_dir = slot.path;
  };
  for (const auto& [id, slot] : cgroups_) {
    if (const auto s = series.find(slot.label); s != series.end()) adopt(s->second, slot);
  }
  drop_vanished_cgroups();
  for (auto it = procs_.begin(); it != procs_.end();) {
    it = alive(it->first, it->second.start_tag) ? std::next(it) : procs_.erase(it);
  }
  for (const auto& [id, slot] : cgroups_) {
    if (slot.retired.empty() && !slot.live && !series.count(slot.label)) continue;
    Series& s = series[slot.label];
    s.add(slot.retired);
    adopt(s, slot);
  }
  for (auto& s : sources_) s->finish(*snap);
  for (auto& [label, s] : series) {
    if (is_pooled_cgroup(label)) {
      s.identity = {};
    } else if (s.identity.cgroup.empty()) {
      s.identity.delegated = true;  // no slot vouched for it: nothing read from its names
    }
    s.identity.cgroup = label;
    if (options_.kube) options_.kube->annotate(s.identity);
  }
  snap->outliers = counts.outliers;
  snap->traced_processes = counts.traced_processes;
  snap->attached_libraries = counts.attached_libraries;
  snap->attached_probes = counts.attached_probes;
  snap->emulated_probes = counts.emulated_probes;
  snap->stepped_calls = counts.stepped_calls;
  snap->cost_budget = counts.cost_budget;
  snap->node = options_.node;
  snap->launch_off_ns = counts.launch_off_ns;
  if (counts.calibration) {
    snap->trap_cost_emulated = counts.calibration->emulated;
    snap->trap_cost_stepped = counts.calibration->stepped;
  }
  snap->libraries_refused = counts.libraries_refused;
  snap->discovery_dropped = counts.discovery_dropped;
  snap->thread_failures = guarded_failures();
  if (options_.kube) snap->kube = options_.kube->stats();
  snap->ready = true;
  return snap;
}

}  // namespace stallwatch::trace
