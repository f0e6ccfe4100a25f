// PSI (no BPF side): each series' cgroup v2 *.pressure files, read by host/pressure.h under the
// cgroup2 mount. The overflow series has no cgroup of its own and no pressure.
#include "host/pressure.h"
#include "identity/cgroup_resolver.h"
#include "trace/sources.h"

namespace stallwatch::trace {
namespace {

class PressureSource : public Source {
 public:
  explicit PressureSource(const identity::CgroupResolver& r) : resolver_(r) {}
  std::string_view name() const override { return "pressure"; }
  void read(SourceContext&, Snapshot&) override {}

  void finish(Snapshot& snap) override {
    for (auto& [label, s] : snap.series) {
      // The kernel's name for the directory, not the label (escaped and bounded); none for the
      // overflow series or a path too long to open by name.
      if (is_pooled_cgroup(label) || s.cgroup_dir.empty()) continue;
      s.pressure =
          host::read_pressure(resolver_.mount() + (s.cgroup_dir == "/" ? "" : s.cgroup_dir));
    }
  }

 private:
  const identity::CgroupResolver& resolver_;
};

}  // namespace

std::unique_ptr<Source> make_pressure_source(const SourceDeps& d) {
  return std::make_unique<PressureSource>(d.resolver);
}

}  // namespace stallwatch::trace
