// Block I/O (bpf/io.bpf.c, bpf/io.h): requests submitted by the watched cgroups' processes, from
// submission to completion, per (cgroup, disk, op, process), map block_io_duration. Devices are
// named from sysfs (host/procfs.h).
#include <algorithm>
#include <map>

#include "trace/map_iter.h"
#include "trace/sources.h"
#include "trace/tracer.h"

extern "C" {
#include "bpf/io.h"
}

namespace stallwatch::trace {
namespace {

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

class IoSource : public Source {
 public:
  IoSource(const Tracer& t, const host::Procfs& fs) : fd_(t.map_fd("block_io_duration")), fs_(fs) {}
  std::string_view name() const override { return "io"; }

  void read(SourceContext& ctx, Snapshot& snap) override {
    for_each_process_entry<io_key, io_stats>(
        fd_,
        [&](const io_key& k) { return !ctx.alive(static_cast<int>(k.tgid), k.start_tag); },
        [&](const io_key& k, const io_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
          IoKey key{device(k.dev_major, k.dev_minor), op_name(k.op)};
          IoTotals t = bytes_histogram_of<IoTotals>(v);
          const int pid = static_cast<int>(k.tgid);
          Series& s = snap.series[slot.label];
          s.io[key].add(t);
          s.io_processes.push_back(ProcessIo{pid, ctx.comm(pid), std::move(key), t});
        },
        [&](const io_key& k, const io_stats& v) {
          CgroupSlot& slot = ctx.cgroup(k.cgroup_id);
          slot.retired.io[IoKey{device(k.dev_major, k.dev_minor), op_name(k.op)}].add(
              bytes_histogram_of<IoTotals>(v));
        });
  }

 private:
  const std::string& device(std::uint32_t major, std::uint32_t minor) {
    const std::uint64_t key = (static_cast<std::uint64_t>(major) << 32) | minor;
    auto it = devices_.find(key);
    if (it != devices_.end()) return it->second;
    return devices_.emplace(key, fs_.block_device(major, minor)).first->second;
  }

  int fd_;
  const host::Procfs& fs_;
  std::map<std::uint64_t, std::string> devices_;  // (major << 32 | minor) → kernel name
};

}  // namespace

std::unique_ptr<Source> make_io_source(const SourceDeps& d) {
  return std::make_unique<IoSource>(d.tracer, d.fs);
}

}  // namespace stallwatch::trace
