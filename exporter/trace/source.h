// An evidence source: one concern (CUDA calls, scheduler, memory, block I/O, TCP, NCCL, PSI)
// that reads its kernel maps (or cgroup files) once per window into the cumulative totals of the
// snapshot's series (trace/snapshot.h). A concern is a trio: bpf/<concern>.bpf.c, bpf/<concern>.h
// (the structs both sides read) and trace/<concern>_source.cpp, listed in trace/sources.cpp.
// The collector (collector.h) owns what is generic: which series a cgroup feeds (labels,
// --max-cgroups overflow), the totals of exited processes and vanished cgroups, process names.
// Sources are called by the collector's one thread, in the order of the list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trace/snapshot.h"

namespace stallwatch::trace {

// One cgroup as the collector tracks it.
struct CgroupSlot {
  std::string label;     // the series it feeds (kOverflowCgroup past --max-cgroups)
  // Its path under the cgroup2 mount as the kernel names it ("" when unknown or too long to
  // open by name), for the files read there; the label is escaped and bounded.
  std::string path;
  identity::Identity identity;  // from the levels the runtime owns (CgroupResolver)
  SeriesTotals retired;  // of its exited processes (and of vanished cgroups of the same label)
  bool live = false;     // had map entries of live CUDA-issuing processes in this pass
};

// What the collector lends a source during one pass.
class SourceContext {
 public:
  // The cgroup's slot, created (and labelled) the first time the cgroup is seen.
  virtual CgroupSlot& cgroup(std::uint64_t cgroup_id) = 0;
  // The cgroup's label (identity::cgroup_label of its path), "" when unknown.
  virtual std::string cgroup_path(std::uint64_t cgroup_id) = 0;
  // Who the cgroup belongs to (pod, container, unit), from the levels the runtime owns; empty
  // fields when unknown. Creates no slot.
  virtual identity::Identity cgroup_identity(std::uint64_t cgroup_id) = 0;
  // Whether `pid` runs and is the process the kernel saw: `start_tag` is its start time from
  // the map key (bpf/stallwatch.h SW_START_TAG_NS); an exited process whose PID was reused is
  // not alive. 0: the PID alone decides. Cached for the pass.
  virtual bool alive(int pid, std::uint32_t start_tag) = 0;
  // The series' entry for a live process (comm and start time read once per process).
  virtual ProcessInfo& process(Series& s, int pid) = 0;
  // The series' entry for a process that exited since the last pass, for the window it ended in
  // (its name from the collector's cache or from discovery; nothing is read from /proc).
  virtual ProcessInfo& exited_process(Snapshot& snap, const std::string& label, int pid,
                                      std::uint32_t start_tag) = 0;
  virtual bool known_process(int pid) = 0;  // a CUDA-issuing process the collector knows
  virtual std::string comm(int pid) = 0;    // its known name, else read now

 protected:
  ~SourceContext() = default;
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string_view name() const = 0;
  // Adds this window's cumulative totals of live processes to `snap`'s series; entries of
  // exited processes go to their cgroup's retired totals (and leave the map).
  virtual void read(SourceContext& ctx, Snapshot& snap) = 0;
  // The cgroup is gone: move what the kernel still keeps of it into `into`, drop the rest.
  virtual void retire_cgroup(std::uint64_t /*cgroup_id*/, SeriesTotals& /*into*/) {}
  // After the retired totals joined their series: whatever needs the whole series.
  virtual void finish(Snapshot& /*snap*/) {}
};

}  // namespace stallwatch::trace
