// CPU limits and throttling (no BPF side): for each series, the CFS bandwidth limit of its
// CUDA-issuing processes' cpu cgroup and its ancestors (host/cpu_limit.h), read once per window.
// The cpu controller is the v1 `cpu` hierarchy where one is mounted (hybrid hosts), else the
// unified hierarchy; each process's own /proc/PID/cgroup line says where it is, which on a
// hybrid host need not be the series' (cgroup v2) label. The overflow series is not read.
#include <map>

#include "host/cpu_limit.h"
#include "identity/cgroup_resolver.h"
#include "trace/sources.h"

namespace stallwatch::trace {
namespace {

constexpr std::size_t kMaxProcCgroupBytes = 64 * 1024;
constexpr std::size_t kMaxMountinfoBytes = 1024 * 1024;

class CpuLimitSource : public Source {
 public:
  CpuLimitSource(const host::Procfs& fs, const identity::CgroupResolver& r)
      : fs_(fs), resolver_(r) {
    if (auto m = host::find_cgroup1_cpu_mount(
            host::Procfs::read_bounded(fs.proc_root() + "/self/mountinfo", kMaxMountinfoBytes))) {
      v1_mount_ = *m;
    }
  }
  std::string_view name() const override { return "cpu_limit"; }
  void read(SourceContext&, Snapshot&) override {}

  void finish(Snapshot& snap) override {
    std::map<std::string, host::CpuLimitTotals> read;  // by cgroup path, this pass
    const bool v1 = !v1_mount_.empty();
    const std::string& mount = v1 ? v1_mount_ : resolver_.mount();
    for (auto& [label, s] : snap.series) {
      if (is_pooled_cgroup(label)) continue;
      host::CpuLimitTotals best;
      for (const auto& [pid, info] : s.process_info) {
        const auto path = host::cpu_cgroup_path(
            host::Procfs::read_bounded(fs_.pid_path(pid, "cgroup"), kMaxProcCgroupBytes), v1);
        if (!path) continue;
        auto it = read.find(*path);
        if (it == read.end()) it = read.emplace(*path, host::read_cpu_limit(mount, *path, v1)).first;
        const host::CpuLimitTotals& l = it->second;
        const bool better = !best.known || (l.limited() && !best.limited()) ||
                            (l.limited() == best.limited() && l.throttled_ns > best.throttled_ns);
        if (l.known && better) best = l;
      }
      s.cpu_limit = best;
    }
  }

 private:
  const host::Procfs& fs_;
  const identity::CgroupResolver& resolver_;
  std::string v1_mount_;  // empty: the cpu controller is the unified hierarchy's
};

}  // namespace

std::unique_ptr<Source> make_cpu_limit_source(const SourceDeps& d) {
  return std::make_unique<CpuLimitSource>(d.fs, d.resolver);
}

}  // namespace stallwatch::trace
