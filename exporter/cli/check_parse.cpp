// The pure half of `stallwatch check`: the classifiers and item builders that decide each
// check's verdict. Nothing here touches the live system, so all of it is unit-tested
// (tests/unit/check_test.cpp).
#include <algorithm>
#include <cerrno>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "cli/check.h"
#include "identity/cgroup_resolver.h"

namespace stallwatch::cli {
namespace {

// Whether some well-formed mountinfo line mounts a filesystem of type `fstype`:
// id parent major:minor root mount_point options [optional...] - fstype source super_options
bool has_mount_of_type(std::string_view mountinfo, std::string_view fstype) {
  while (!mountinfo.empty()) {
    const size_t nl = std::min(mountinfo.find('\n'), mountinfo.size());
    const std::vector<std::string_view> fields = split_fields(mountinfo.substr(0, nl));
    mountinfo.remove_prefix(std::min(nl + 1, mountinfo.size()));
    if (fields.size() < 7) continue;
    size_t sep = 6;
    while (sep < fields.size() && fields[sep] != "-") ++sep;
    if (sep + 1 < fields.size() && fields[sep + 1] == fstype) return true;
  }
  return false;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

}  // namespace

const char* status_name(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kWarn:
      return "warn";
    case Status::kFail:
      return "fail";
  }
  return "fail";
}

const char* library_kind(trace::Api api) {
  switch (api) {
    case trace::Api::kRuntime:
      return "cudart";
    case trace::Api::kDriver:
      return "cuda";
    case trace::Api::kNccl:
      return "nccl";
  }
  return "unknown";
}

CgroupClass classify_cgroup(std::string_view mountinfo) {
  CgroupClass cls;
  cls.v1_controllers = has_mount_of_type(mountinfo, "cgroup");
  const std::optional<std::string> mount = identity::find_cgroup2_mount(mountinfo);
  if (!mount) return cls;
  cls.mount = *mount;
  if (cls.mount == "/sys/fs/cgroup") {
    cls.layout = CgroupLayout::kUnified;
  } else if (cls.mount == "/sys/fs/cgroup/unified" && cls.v1_controllers) {
    cls.layout = CgroupLayout::kHybrid;
  } else {
    cls.layout = CgroupLayout::kOtherV2;
  }
  return cls;
}

CheckItem cgroup_item(const CgroupClass& cls) {
  CheckItem item{"cgroup", Status::kOk, "", ""};
  switch (cls.layout) {
    case CgroupLayout::kUnified:
      item.detail = "v2 (unified) at /sys/fs/cgroup";
      break;
    case CgroupLayout::kHybrid:
      item.detail =
          "hybrid: v1 controllers, v2 hierarchy at /sys/fs/cgroup/unified (cgroup labels are v2 "
          "paths)";
      break;
    case CgroupLayout::kOtherV2:
      item.detail = "v2 at " + cls.mount + (cls.v1_controllers ? " (v1 controllers too)" : "");
      break;
    case CgroupLayout::kNone:
      item.status = Status::kFail;
      item.detail = cls.v1_controllers ? "cgroup v1 only; no cgroup2 hierarchy is mounted"
                                       : "no cgroup2 hierarchy is mounted";
      item.fix =
          "mount a cgroup2 hierarchy (systemd.unified_cgroup_hierarchy=1 or mount -t cgroup2 none "
          "/sys/fs/cgroup/unified)";
      break;
  }
  return item;
}

CheckItem capabilities_item(std::uint64_t effective) {
  struct Cap {
    int bit;
    const char* name;
  };
  static constexpr Cap kNeeded[] = {{39, "CAP_BPF"}, {38, "CAP_PERFMON"}, {21, "CAP_SYS_ADMIN"}};
  const auto has = [&](int bit) { return ((effective >> bit) & 1) != 0; };
  std::vector<std::string> missing;
  for (const Cap& c : kNeeded) {
    if (!has(c.bit)) missing.push_back(c.name);
  }
  CheckItem item{"capabilities", Status::kOk, "", ""};
  if (missing.empty()) {
    item.detail = "CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN effective";
    return item;
  }
  item.fix =
      "run as root, or grant CAP_BPF,CAP_PERFMON,CAP_SYS_ADMIN (systemd: "
      "AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_SYS_ADMIN)";
  if (has(21)) {
    // The kernel's bpf_capable() and perfmon_capable() accept CAP_SYS_ADMIN instead.
    item.status = Status::kWarn;
    item.detail = "missing " + join(missing, ", ") + "; CAP_SYS_ADMIN stands in for them";
  } else {
    item.status = Status::kFail;
    item.detail = "missing " + join(missing, ", ");
  }
  return item;
}

CheckItem tracefs_item(bool tracing_dir, bool events_dir, int mmap_id_errno) {
  CheckItem item{"tracefs", Status::kOk, "", ""};
  if (mmap_id_errno == 0) {
    item.detail = "syscalls:sys_enter_mmap available at /sys/kernel/tracing";
  } else if (mmap_id_errno == EACCES || mmap_id_errno == EPERM) {
    item.status = Status::kWarn;
    item.detail = "/sys/kernel/tracing/events is not readable (permission denied)";
    item.fix = "run as root";
  } else if (tracing_dir && !events_dir) {
    item.status = Status::kWarn;
    item.detail = "tracefs is not mounted at /sys/kernel/tracing";
    item.fix =
        "stallwatch run mounts tracefs at /sys/kernel/tracing itself; or: mount -t tracefs "
        "tracefs /sys/kernel/tracing";
  } else {
    item.status = Status::kFail;
    item.detail = tracing_dir ? "tracefs has no syscalls:sys_enter_mmap event"
                              : "/sys/kernel/tracing does not exist (no tracefs)";
    item.fix =
        "kernel needs CONFIG_FTRACE_SYSCALLS=y (library discovery uses syscalls:sys_enter_mmap)";
  }
  return item;
}

CheckItem cuda_libraries_item(const std::vector<CudaLibrary>& libraries, std::size_t on_disk) {
  CheckItem item{"cuda_libraries", Status::kOk, "", ""};
  if (libraries.empty()) {
    item.status = Status::kWarn;
    item.detail =
        "no CUDA library found; stallwatch attaches automatically when a process maps one";
    return item;
  }
  std::size_t mapped = 0;
  std::set<int> pids;
  for (const CudaLibrary& lib : libraries) {
    if (lib.mapped) ++mapped;
    pids.insert(lib.pids.begin(), lib.pids.end());
  }
  std::ostringstream d;
  d << on_disk << " on disk, " << mapped << " mapped by " << pids.size()
    << (pids.size() == 1 ? " process" : " processes");
  item.detail = d.str();
  return item;
}

}  // namespace stallwatch::cli
