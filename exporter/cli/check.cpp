// The live half of `stallwatch check`: reads /sys, /proc and the library directories, runs the
// checks in order (kernel, btf, capabilities, tp_btf, uprobes, uprobe_multi, the BPF features,
// tracefs, cgroup, host hooks, memlock, ...) and renders the report as text or JSON.
#include "cli/check.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "cli/flags.h"
#include "cli/options.h"
#include "cli/version.h"
#include "common/json.h"
#include "common/size.h"
#include "common/strings.h"
#include "host/nvml.h"
#include "identity/kube_metadata.h"
#include "metrics/otlp/config.h"
#include "stallwatch_version.h"  // generated (cmake/GitVersion.cmake)
#include "store/report.h"
#include "trace/attach.h"
#include "trace/library_files.h"
#include "trace/probe_cost.h"
#include "trace/proc_maps.h"
#include "trace/python.h"

namespace stallwatch::cli {
namespace {

constexpr const char* kBtfFix = "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y";
constexpr size_t kMaxPidsListed = 5;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A one-line sysfs or procfs file without its trailing newline.
std::string read_line_file(const std::string& path) {
  return std::string(trim_right(read_file(path)));
}

bool is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

CheckItem kernel_check() {
  struct utsname u;
  if (uname(&u) != 0) return {"kernel", Status::kWarn, std::strerror(errno), ""};
  return {"kernel", Status::kOk, std::string(u.release) + " (" + u.machine + ")", ""};
}

CheckItem btf_check() {
  const int fd = open("/sys/kernel/btf/vmlinux", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return {"btf", Status::kFail, std::string("/sys/kernel/btf/vmlinux: ") + std::strerror(errno),
            kBtfFix};
  }
  struct stat st;
  const bool sized = fstat(fd, &st) == 0;
  close(fd);
  std::string detail = "/sys/kernel/btf/vmlinux";
  if (sized) detail += " (" + std::to_string(st.st_size / 1024) + " KiB)";
  return {"btf", Status::kOk, detail, ""};
}

// This process's effective capability set; nullopt (errno set) when capget fails.
std::optional<std::uint64_t> effective_capabilities() {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return std::nullopt;
  return data[0].effective | (static_cast<std::uint64_t>(data[1].effective) << 32);
}

CheckItem capabilities_check() {
  const auto effective = effective_capabilities();
  if (!effective) {
    return {"capabilities", Status::kFail, std::string("capget: ") + std::strerror(errno),
            "run as root"};
  }
  return capabilities_item(*effective);
}

int quiet_libbpf(libbpf_print_level, const char*, va_list) { return 0; }

CheckItem tp_btf_check() {
  const libbpf_print_fn_t previous = libbpf_set_print(quiet_libbpf);
  btf* vmlinux = btf__load_vmlinux_btf();
  const int load_errno = errno;
  libbpf_set_print(previous);
  if (vmlinux == nullptr) {
    return {"tp_btf", Status::kFail,
            std::string("cannot load vmlinux BTF: ") + std::strerror(load_errno), kBtfFix};
  }
  std::vector<std::string> missing;
  for (const char* name : {"btf_trace_sched_switch", "btf_trace_sched_wakeup"}) {
    if (btf__find_by_name_kind(vmlinux, name, BTF_KIND_TYPEDEF) < 0) missing.push_back(name);
  }
  btf__free(vmlinux);
  if (missing.empty()) {
    return {"tp_btf", Status::kOk, "sched_switch and sched_wakeup attachable as tp_btf", ""};
  }
  std::string detail = "vmlinux BTF lacks";
  for (const std::string& m : missing) detail += " " + m;
  return {"tp_btf", Status::kFail, detail,
          "boot a kernel with tp_btf support (Linux >= 5.5, CONFIG_DEBUG_INFO_BTF=y)"};
}

// How call probes attach (trace/attach.cpp): multi-uprobe links where vmlinux has their link
// type (Linux >= 6.6), one link per probe elsewhere. Both trace; only attach and detach differ.
CheckItem uprobe_multi_check() {
  const libbpf_print_fn_t previous = libbpf_set_print(quiet_libbpf);
  btf* vmlinux = btf__load_vmlinux_btf();
  libbpf_set_print(previous);
  const bool multi = !libbpf_get_error(vmlinux) &&
                     btf__find_by_name_kind(vmlinux, "bpf_uprobe_multi_link", BTF_KIND_STRUCT) >= 0;
  if (!libbpf_get_error(vmlinux)) btf__free(vmlinux);
  // Issue #40: --attach-on-disk=auto follows this: the standard directories' libraries are
  // attached at start only where a file detaches in one grace period.
  if (multi) {
    return {"uprobe_multi", Status::kOk,
            "multi-uprobe links: a library file attaches with two links and detaches at once; the "
            "CUDA libraries listed below are attached at start, so no call after a dlopen is lost",
            ""};
  }
  return {"uprobe_multi", Status::kOk,
          "one link per probe (no multi-uprobe links before Linux 6.6): detaching a library "
          "takes ~100 ms per probe, off the tracing path; so the CUDA libraries listed below are "
          "attached when a process maps them, and calls in the first tens of ms after its dlopen "
          "are not seen (--library-dirs or --attach-on-disk=true attach them at start)",
          ""};
}

// The kernel features the BPF programs use beyond tp_btf and uprobes (issue #38 item 2), one
// line each, probed on the running kernel by loading a minimal map or program (libbpf's probes)
// rather than guessed from its version, which distribution backports make meaningless. What
// the host gets with each, and what it loses without it: the ring buffer, task storage, attach
// cookies and the task iterator carry every call and window, so their absence fails; without
// bpf_loop only the Python frames are lost (tracer.cpp loads the programs without the walk).
std::vector<CheckItem> bpf_feature_checks() {
  struct Feature {
    const char* name;
    bool required;
    const char* since;  // the mainline release that added it
    const char* gives;  // what it is for, in the ok line
    const char* loses;  // what the host loses without it
  };
  static constexpr Feature kFeatures[] = {
      {"ringbuf", true, "5.8", "ring buffers carry slow calls and library mappings to the daemon",
       "no slow call or library mapping reaches the daemon"},
      {"task_storage", true, "5.11", "per-thread call state in task storage",
       "the call timer cannot keep per-thread state"},
      {"attach_cookie", true, "5.15", "each uprobe names its call by its attach cookie",
       "the probes cannot tell the calls apart"},
      {"task_iter", true, "5.8",
       "task iterators fold off-CPU time and find calls in flight every window",
       "the daemon cannot fold the threads' off-CPU time each window"},
      {"bpf_loop", false, "5.17", "bpf_loop walks the Python frames of slow calls",
       "no Python frames in call sites (native frames only)"},
  };
  const libbpf_print_fn_t previous = libbpf_set_print(quiet_libbpf);
  btf* vmlinux = btf__load_vmlinux_btf();
  libbpf_set_print(previous);
  const bool have_btf = !libbpf_get_error(vmlinux);
  // libbpf's probes load a map or a program: without CAP_BPF (or CAP_SYS_ADMIN) the kernel
  // refuses, and a refused helper probe even reads as "there". Not probed then, and said so.
  const std::uint64_t effective = effective_capabilities().value_or(0);
  const bool can_load = (effective >> 39 & 1) || (effective >> CAP_SYS_ADMIN & 1);  // CAP_BPF: 39
  std::vector<CheckItem> out;
  for (const Feature& f : kFeatures) {
    const std::string_view name = f.name;
    int r = 0;  // 1: there, 0: not, < 0: could not tell (-errno)
    if (name != "task_iter" && !can_load) {
      r = -EPERM;
    } else if (name == "ringbuf") {
      r = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr);
    } else if (name == "task_storage") {
      r = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr);
    } else if (name == "attach_cookie") {
      r = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_get_attach_cookie, nullptr);
    } else if (name == "bpf_loop") {
      r = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_loop, nullptr);
    } else if (name == "task_iter") {
      // An iterator's context type is in vmlinux BTF exactly where the kernel has the target.
      r = !have_btf ? -ENOENT
                    : btf__find_by_name_kind(vmlinux, "bpf_iter__task", BTF_KIND_STRUCT) >= 0;
    }
    const std::string since = std::string("Linux >= ") + f.since;
    if (r > 0) {
      out.push_back({f.name, Status::kOk, f.gives, ""});
    } else if (r == 0) {
      out.push_back({f.name, f.required ? Status::kFail : Status::kWarn,
                     std::string("not on this kernel (") + since + "): " + f.loses,
                     f.required ? "boot a kernel with it (" + since + ")" : ""});
    } else {
      out.push_back({f.name, Status::kWarn,
                     r == -EPERM ? std::string("not probed: probing loads a map or a program, which "
                                               "needs CAP_BPF")
                                 : std::string("could not probe: ") + std::strerror(-r),
                     r == -EPERM ? "run check as root" : ""});
    }
  }
  if (have_btf) btf__free(vmlinux);
  return out;
}

// The host-side evidence (memory, block I/O, TCP) needs these tracepoints and PSI; each missing
// one costs only its evidence, so this warns and never fails.
CheckItem host_hooks_check() {
  const libbpf_print_fn_t previous = libbpf_set_print(quiet_libbpf);
  btf* vmlinux = btf__load_vmlinux_btf();
  libbpf_set_print(previous);
  struct Hook {
    const char* tracepoint;
    const char* measures;
  };
  static constexpr Hook kHooks[] = {
      {"mm_vmscan_direct_reclaim_begin", "direct reclaim"},
      {"mm_vmscan_memcg_reclaim_begin", "memcg reclaim"},
      {"mark_victim", "OOM kills"},
      {"block_io_start", "block I/O latency (Linux >= 6.5)"},
      {"tcp_retransmit_skb", "TCP retransmits"},
  };
  std::vector<std::string> missing;
  for (const Hook& h : kHooks) {
    const std::string type = std::string("btf_trace_") + h.tracepoint;
    if (!vmlinux || btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) < 0) {
      missing.push_back(h.measures);
    }
  }
  btf__free(vmlinux);
  const bool psi = !read_line_file("/proc/pressure/memory").empty();
  if (missing.empty() && psi) {
    return {"host_hooks", Status::kOk,
            "reclaim, OOM, block I/O and TCP retransmit tracepoints present; PSI available", ""};
  }
  std::string detail = "missing:";
  for (const std::string& m : missing) detail += " " + m + ",";
  if (!psi) detail += " PSI (/proc/pressure),";
  detail.pop_back();
  return {"host_hooks", Status::kWarn, detail + " (that evidence is left out; the rest works)",
          psi ? "" : "boot with psi=1 (CONFIG_PSI=y) for pressure stall metrics"};
}

// The OTLP push as the OTEL_* variables configure it (run's --otlp-* flags win over them).
// Describes without secrets: header keys only, URLs without credentials or query.
CheckItem otlp_check() {
  auto push = otlp::push_config_from_environment({}, STALLWATCH_VERSION);
  if (!push) {
    return {"otlp", Status::kWarn, push.error().message,
            "fix the variable, or override it with run's --otlp-* flags"};
  }
  if (!push->enabled) {
    return {"otlp", Status::kOk,
            "push off (run --otlp-endpoint URL or OTEL_EXPORTER_OTLP_ENDPOINT turns it on)", ""};
  }
  return {"otlp", Status::kOk, "from OTEL_* variables: " + otlp::describe(*push), ""};
}

// Kubernetes names as run would resolve them by default: off outside a pod; inside one, one pod
// list with the service account, bounded by a 5 s timeout, says whether names will come.
CheckItem kubernetes_check() {
  auto settings = identity::resolve_kube_settings("", "", std::chrono::hours(1),
                                                  [](const char* n) { return std::getenv(n); });
  if (!settings) return {"kubernetes", Status::kWarn, settings.error().message, ""};
  if (!settings->enabled) return {"kubernetes", Status::kOk, settings->why_off, ""};
  settings->timeout = std::chrono::seconds(5);
  identity::KubeMetadata kube(*settings);
  kube.wait_for_lists(1, std::chrono::seconds(6));
  const KubeStats st = kube.stats();
  const std::string where = "node " + settings->node + " (from " + settings->node_source +
                            ") at " + settings->api_url;
  if (st.lists_ok == 0) {
    return {"kubernetes", Status::kWarn,
            "cannot list the pods of " + where + ": pod/namespace/container labels will be missing",
            "the log line above says why; RBAC: deploy/kubernetes/rbac.yaml"};
  }
  return {"kubernetes", Status::kOk, std::to_string(st.pods) + " pods on " + where, ""};
}

// The chain store as `run --db PATH` would find it. Never fails the check: the store may fail,
// tracing goes on without it (app/store_keeper.h); what it says is what run would do.
CheckItem store_check(const std::string& path) {
  namespace fs = std::filesystem;
  if (path == "none") return {"store", Status::kOk, "off (--db none)", ""};
  std::error_code ec;
  const fs::path file(path);
  fs::path dir = file.parent_path();
  if (dir.empty()) dir = ".";
  std::string aside;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(file.filename().string() + ".corrupt-") && !name.ends_with("-wal") &&
        !name.ends_with("-shm")) {
      aside = escape_name(e.path().string());
    }
  }
  const std::string moved = aside.empty() ? "" : "; a corrupt database was moved aside to " +
                                                     aside + " (kept for you to inspect)";
  struct statvfs vfs {};
  const bool have_vfs = ::statvfs(fs::exists(dir, ec) ? dir.c_str() : "/", &vfs) == 0;
  const std::uint64_t free_bytes =
      have_vfs ? static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize : 0;
  const std::string free_text = have_vfs ? ", " + format_size(free_bytes) + " free" : "";
  if (!fs::exists(file, ec)) {
    if (fs::exists(dir, ec) && ::access(dir.c_str(), W_OK | X_OK) != 0) {
      return {"store", Status::kWarn,
              "no database at " + escape_name(path) + " and " + escape_name(dir.string()) +
                  " is not writable: run keeps no store until it is (tracing goes on)" + moved,
              "make the directory writable by the daemon, or pass --db with another path"};
    }
    return {"store", Status::kOk,
            "no database yet at " + escape_name(path) + "; run creates it" + free_text + moved,
            ""};
  }
  auto db = store::open_report_db(path);
  if (!db) {
    return {"store", Status::kWarn,
            db.error().message + ": run moves a corrupt file aside and starts a new one, and "
                                 "runs without a store it cannot open (tracing goes on)" + moved,
            "see docs/store.md; pass --db with another path to keep this one untouched"};
  }
  const auto wal = fs::file_size(path + "-wal", ec);
  const std::uint64_t bytes = fs::file_size(file, ec) + (ec ? 0 : wal);
  std::string detail = escape_name(path) + ": " + format_size(bytes) + " with its WAL" + free_text;
  if (have_vfs && free_bytes < (64ull << 20)) {
    return {"store", Status::kWarn, detail + "; the file system is nearly full" + moved,
            "free disk space or lower --max-db: the store prunes its oldest windows, and stops "
            "writing (tracing goes on) when nothing is left to prune"};
  }
  if (::access(path.c_str(), W_OK) != 0) {
    return {"store", Status::kWarn, detail + "; not writable by this user" + moved,
            "run as root (the unit does), or make the file writable"};
  }
  return {"store", aside.empty() ? Status::kOk : Status::kWarn, detail + moved, ""};
}

CheckItem uprobes_check() {
  const std::string type = read_line_file("/sys/bus/event_source/devices/uprobe/type");
  if (type.empty()) {
    return {"uprobes", Status::kFail, "no uprobe PMU at /sys/bus/event_source/devices/uprobe",
            "kernel needs CONFIG_UPROBES=y / CONFIG_UPROBE_EVENTS=y"};
  }
  return {"uprobes", Status::kOk, "uprobe PMU type " + type, ""};
}

CheckItem tracefs_check() {
  const int fd =
      open("/sys/kernel/tracing/events/syscalls/sys_enter_mmap/id", O_RDONLY | O_CLOEXEC);
  const int err = fd < 0 ? errno : 0;
  if (fd >= 0) close(fd);
  return tracefs_item(is_dir("/sys/kernel/tracing"), is_dir("/sys/kernel/tracing/events"), err);
}

CheckItem cgroup_check() {
  const std::string mountinfo = read_file("/proc/self/mountinfo");
  if (mountinfo.empty()) {
    return {"cgroup", Status::kFail, "cannot read /proc/self/mountinfo", "mount /proc"};
  }
  return cgroup_item(classify_cgroup(mountinfo));
}

// NVML, as `run` loads it (--nvml-library, "" as the dynamic loader finds it): the GPUs and
// what each reads now. Never a failure: without NVML the GPU chains are off and the rest works.
CheckItem nvml_check(const std::string& library) {
  auto n = host::Nvml::open(library);
  if (!n) {
    return {"nvml", Status::kWarn, n.error().message,
            "install the NVIDIA driver, or point --nvml-library (STALLWATCH_NVML_LIBRARY) at "
            "its libnvidia-ml.so.1"};
  }
  const std::vector<host::GpuReading> gpus = (*n)->read();
  std::string d = (*n)->path() + " (driver " +
                  ((*n)->driver().empty() ? std::string("unknown") : (*n)->driver()) + "): " +
                  std::to_string(gpus.size()) + " GPU" + (gpus.size() == 1 ? "" : "s");
  bool failed = false;
  for (const auto& g : gpus) {
    d += "; " + std::to_string(g.index) + ": " + (g.name.empty() ? "?" : g.name);
    if (!g.bus_id.empty()) d += " at " + g.bus_id;
    if (g.clocks_known) {
      d += ", SM " + std::to_string(g.sm_clock_mhz) + "/" + std::to_string(g.sm_clock_max_mhz) +
           " MHz";
    }
    if (g.reasons_known) {
      const std::string r = host::reason_names(g.reasons);
      d += r.empty() ? ", no clock reason" : ", " + r;
    }
    if (!g.error.empty()) {
      d += " (" + g.error + ")";
      failed = true;
    }
  }
  if (!(*n)->missing().empty()) {
    d += "; lacks";
    for (const auto& m : (*n)->missing()) d += " " + m;
  }
  return {"nvml", failed || !(*n)->missing().empty() ? Status::kWarn : Status::kOk, d,
          failed ? "a GPU NVML cannot read gets no gpu_throttle chain: check it with nvidia-smi"
                 : ""};
}

// /dev/kmsg, where the daemon reads Xid errors.
CheckItem kmsg_check() {
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return {"xid", Status::kWarn,
            std::string("cannot read /dev/kmsg (") + std::strerror(errno) +
                "): Xid errors are not seen, no gpu_xid chains",
            "run as root (CAP_SYSLOG); in a container, mount /dev/kmsg"};
  }
  ::close(fd);
  return {"xid", Status::kOk, "/dev/kmsg readable: Xid errors are followed as they are logged",
          ""};
}

CheckItem memlock_check() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
    return {"memlock", Status::kOk, std::string("getrlimit: ") + std::strerror(errno), ""};
  }
  const std::string limit =
      rl.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(rl.rlim_cur / 1024) + " KiB";
  return {"memlock", Status::kOk,
          "RLIMIT_MEMLOCK " + limit + " (kernels >= 5.11 charge BPF memory to the memory cgroup)",
          ""};
}

// The CUDA library files in the standard directories (trace/library_files.h), by canonical path.
void scan_disk(std::map<std::string, CudaLibrary>& libs) {
  for (const trace::LibraryFile& f : trace::cuda_library_files(trace::library_dirs())) {
    CudaLibrary& lib = libs[f.path];
    lib.path = f.path;
    lib.kind = library_kind(f.api);
    lib.api = f.api;
  }
}

// Every process's mappings of CUDA libraries. Paths are as the process sees them (inside a
// container they name the container's files); deleted files keep a " (deleted)" suffix.
void scan_maps(std::map<std::string, CudaLibrary>& libs) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (const dirent* e = readdir(proc)) {
    const std::string_view name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string_view::npos) continue;
    const int pid = std::atoi(e->d_name);
    std::ifstream maps("/proc/" + std::string(name) + "/maps");
    if (!maps) continue;  // gone, or not ours to read
    std::set<std::string> keys;
    for (std::string line; std::getline(maps, line);) {
      if (line.find("libcud") == std::string::npos && line.find("libnccl") == std::string::npos) {
        continue;
      }
      trace::MapsEntry m;
      if (!trace::parse_maps_line(line, m) || m.path.empty() || m.path[0] != '/') continue;
      const std::optional<trace::Api> api = trace::api_of_library(m.file_path());
      if (!api) continue;
      const std::string& key = m.path;  // a deleted file keeps its " (deleted)" suffix
      if (keys.insert(key).second) {
        CudaLibrary& lib = libs[key];
        if (lib.path.empty()) lib.path = key;
        lib.kind = library_kind(*api);
        lib.api = *api;
      }
    }
    if (keys.empty()) continue;
    const std::string comm = read_line_file("/proc/" + std::string(name) + "/comm");
    for (const std::string& key : keys) {
      CudaLibrary& lib = libs[key];
      lib.mapped = true;
      lib.pids.push_back(pid);
      lib.comms.push_back(comm);
    }
  }
  closedir(proc);
}

// What a probe costs here and which instructions the kernel emulates (trace/probe_cost.h).
CheckItem probe_cost_check(const trace::ProbeCalibration& c) {
  if (c.emulated.measured && c.stepped.measured && c.error.empty()) {
    return {"probe_cost", Status::kOk, trace::describe_calibration(c), ""};
  }
  return {"probe_cost", Status::kWarn, trace::describe_calibration(c),
          "run check as root (CAP_BPF and CAP_PERFMON) to measure it; run measures it at start"};
}

// Where run would probe each library file: the plan of trace/attach.h, without attaching.
void plan_sites(std::vector<CudaLibrary>& libs, const trace::SitePolicy& policy) {
  for (CudaLibrary& lib : libs) {
    std::string path = lib.path;
    if (path.ends_with(trace::MapsEntry::kDeletedSuffix)) {
      lib.sites = "deleted on disk; run reads it through the process";
      continue;
    }
    auto plan = trace::plan_probes(path, lib.api, trace::LaunchLayer::kDriver, policy);
    lib.sites = plan ? trace::describe_sites(plan->sites)
                     : "not planned: " + escape_line(plan.error().message);
  }
}

CheckItem cuda_libraries_check(std::vector<CudaLibrary>& out) {
  std::map<std::string, CudaLibrary> libs;
  scan_disk(libs);
  const size_t on_disk = libs.size();
  scan_maps(libs);
  for (auto& [path, lib] : libs) {
    // /proc order is not numeric; sort pids and comms together.
    std::vector<std::pair<int, std::string>> procs;
    for (size_t i = 0; i < lib.pids.size(); ++i) procs.emplace_back(lib.pids[i], lib.comms[i]);
    std::sort(procs.begin(), procs.end());
    for (size_t i = 0; i < procs.size(); ++i) {
      lib.pids[i] = procs[i].first;
      lib.comms[i] = std::move(procs[i].second);
    }
    out.push_back(std::move(lib));
  }
  return cuda_libraries_item(out, on_disk);
}

std::string describe_library(const CudaLibrary& lib) {
  std::string s = "  " + escape_line(lib.path) + "  (" + lib.kind;
  if (!lib.mapped) return s + ", not mapped)";
  s += ", mapped by";
  for (size_t i = 0; i < lib.pids.size() && i < kMaxPidsListed; ++i) {
    s += (i == 0 ? " pid " : ", pid ") + std::to_string(lib.pids[i]) + " " + escape_line(lib.comms[i]);
  }
  if (lib.pids.size() > kMaxPidsListed) {
    s += ", and " + std::to_string(lib.pids.size() - kMaxPidsListed) + " more";
  }
  return s + ")";
}

}  // namespace

bool CheckReport::tracing_possible() const {
  return std::none_of(items.begin(), items.end(),
                      [](const CheckItem& i) { return i.status == Status::kFail; });
}

std::vector<CheckItem> run_preflight_checks() {
  return {btf_check(), capabilities_check(), tp_btf_check(), uprobes_check(), cgroup_check()};
}

CheckItem paths_check(const RunOptions& o) {
  struct stat st{};
  auto is_dir = [&](const std::string& p) { return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode); };
  auto is_file = [&](const std::string& p) { return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode); };
  const std::string procfs = escape_line(o.procfs), sysfs = escape_line(o.sysfs);
  if (!is_file(o.procfs + "/stat") || !is_dir(o.procfs + "/self")) {
    return {"paths", Status::kFail,
            "--path.procfs " + procfs + " is not a procfs mount (no " + procfs + "/stat)",
            "the host's /proc: /proc on the host, e.g. /host/proc in a container that mounts it "
            "there"};
  }
  if (!is_dir(o.sysfs + "/kernel") || !is_dir(o.sysfs + "/devices")) {
    return {"paths", Status::kFail,
            "--path.sysfs " + sysfs + " is not a sysfs mount (no " + sysfs + "/kernel)",
            "the host's /sys: /sys on the host, e.g. /host/sys in a container"};
  }
  for (const std::string& dir : o.library_dirs) {
    if (is_dir(dir)) continue;
    return {"paths", Status::kFail, "--library-dirs: " + escape_line(dir) + " is not a directory",
            "name directories that hold CUDA libraries (libcudart.so.*, libcuda.so.*), e.g. "
            "/usr/local/cuda/lib64"};
  }
  if (o.gpu_monitor && o.nvml_library.find('/') != std::string::npos &&
      !is_file(o.nvml_library)) {
    return {"paths", Status::kFail,
            "--nvml-library " + escape_line(o.nvml_library) + " does not exist",
            "the driver's libnvidia-ml.so.1 (ldconfig -p | grep nvidia-ml), or leave the flag out "
            "to load it as the dynamic loader finds it"};
  }
  std::string d = "procfs " + procfs + ", sysfs " + sysfs;
  d += o.library_dirs.empty() ? ", no --library-dirs" : ", library dirs";
  for (size_t i = 0; i < o.library_dirs.size(); ++i) {
    d += (i ? "," : " ") + escape_line(o.library_dirs[i]);
  }
  if (!o.nvml_library.empty() && o.gpu_monitor) d += ", NVML " + escape_line(o.nvml_library);
  if (!o.config.empty()) d += " (config " + escape_line(o.config) + ")";
  return {"paths", Status::kOk, d, ""};
}

CheckReport run_checks(const RunOptions& o) {
  CheckReport r;
  r.items.push_back(paths_check(o));
  r.items.push_back(kernel_check());
  auto preflight = run_preflight_checks();
  r.items.insert(r.items.end(), preflight.begin(), preflight.begin() + 4);  // btf .. uprobes
  r.items.push_back(uprobe_multi_check());
  for (CheckItem& f : bpf_feature_checks()) r.items.push_back(std::move(f));
  r.items.push_back(tracefs_check());
  r.items.push_back(preflight[4]);  // cgroup
  r.items.push_back(host_hooks_check());
  r.items.push_back(memlock_check());
  r.items.push_back(otlp_check());
  r.items.push_back(kubernetes_check());
  r.items.push_back(store_check(o.db));
  r.items.push_back(nvml_check(o.gpu_monitor ? o.nvml_library : ""));
  r.items.push_back(kmsg_check());
  const trace::ProbeCalibration calibration = trace::calibrate_probes();
  r.items.push_back(probe_cost_check(calibration));
  r.items.push_back(cuda_libraries_check(r.libraries));
  trace::SitePolicy policy;
  policy.emulation = calibration.emulation;
  plan_sites(r.libraries, policy);
  std::map<int, std::string> cuda_processes;
  for (const CudaLibrary& lib : r.libraries) {
    for (size_t i = 0; i < lib.pids.size(); ++i) {
      cuda_processes[lib.pids[i]] = i < lib.comms.size() ? lib.comms[i] : "";
    }
  }
  const host::Procfs fs;
  for (const auto& [pid, comm] : cuda_processes) {
    PythonFrames p;
    p.pid = pid;
    p.comm = comm;
    auto found = trace::inspect_python(fs, pid);
    p.frames = static_cast<bool>(found);
    p.detail = found ? "Python 3." + std::to_string(found->layout.minor) + " frames (" +
                           escape_name(found->interpreter) + ")"
                     : "no Python frames: " + found.error().message;
    r.python.push_back(std::move(p));
  }
  return r;
}

std::string render_text(const CheckReport& report) {
  size_t width = 0;
  for (const CheckItem& i : report.items) width = std::max(width, i.name.size());
  std::string out = "stallwatch check\n";
  for (const CheckItem& i : report.items) {
    out += i.status == Status::kOk ? "ok   " : i.status == Status::kWarn ? "warn " : "FAIL ";
    out += i.name + std::string(width + 2 - i.name.size(), ' ') + i.detail;
    if (!i.fix.empty()) out += " (fix: " + i.fix + ")";
    out += '\n';
  }
  out += "CUDA libraries:\n";
  if (report.libraries.empty()) out += "  none found\n";
  for (const CudaLibrary& lib : report.libraries) {
    out += describe_library(lib) + '\n';
    if (!lib.sites.empty()) out += "      probe sites: " + lib.sites + '\n';
  }
  if (!report.python.empty()) {
    out += "Call sites (explain, stacks):\n";
    for (const PythonFrames& p : report.python) {
      out += "  " + escape_name(p.comm) + " (PID " + std::to_string(p.pid) + "): " + p.detail +
             (p.frames ? "" : "; native frames only") + "\n";
    }
  }
  out += report.tracing_possible() ? "tracing: possible\n"
                                   : "tracing: NOT possible \u2014 fix the failures above\n";
  return out;
}

std::string render_json(const CheckReport& report) {
  Json out = {{"ok", report.tracing_possible()}};
  Json& checks = out["checks"] = Json::array();
  for (const CheckItem& i : report.items) {
    checks.push_back({{"name", i.name},
                      {"status", status_name(i.status)},
                      {"detail", i.detail},
                      {"fix", i.fix}});
  }
  Json& libraries = out["libraries"] = Json::array();
  for (const CudaLibrary& lib : report.libraries) {
    libraries.push_back({{"path", lib.path},
                         {"kind", lib.kind},
                         {"mapped", lib.mapped},
                         {"pids", lib.pids},
                         {"processes", lib.comms},
                         {"sites", lib.sites}});
  }
  Json& python = out["python"] = Json::array();
  for (const PythonFrames& p : report.python) {
    python.push_back({{"pid", p.pid}, {"comm", p.comm}, {"frames", p.frames}, {"detail", p.detail}});
  }
  return dump_json(out);
}

const char* const kCheckUsage =
    "usage: stallwatch check [--json] [RUN FLAGS]\n"
    "\n"
    "Says whether this host can be traced and how to fix what is missing. It reads the flags,\n"
    "STALLWATCH_* variables and config file `run` would (/etc/stallwatch/stallwatch.conf when\n"
    "present), and checks what they name: the paths, the store, the NVML library.\n"
    "  --json       one JSON object instead of text\n"
    "  RUN FLAGS    any flag of `stallwatch run` (see `stallwatch run --help`), e.g.\n"
    "               --db PATH (the store: its size, free space, what run does if it cannot open\n"
    "               it), --path.procfs, --path.sysfs, --library-dirs, --nvml-library, --config\n"
    "  -h, --help   this text\n"
    "  --version    the version (as `stallwatch version`)\n";

Result<CheckOptions> parse_check_options(const std::vector<std::string>& args,
                                         const std::vector<std::string>& env) {
  CheckOptions o;
  std::vector<std::string> run_args;
  for (const std::string& a : args) {
    if (a == "--json") {
      o.json = true;
    } else if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--version") {
      o.version = true;
    } else {
      run_args.push_back(a);
    }
  }
  if (o.help || o.version) return o;
  auto run = parse_run_options(run_args, env, nullptr);
  if (!run) {
    std::string message = run.error().message;  // check's own usage error names check's help
    constexpr std::string_view kRunHint = " (see `stallwatch run --help`)";
    if (message.ends_with(kRunHint)) message.resize(message.size() - kRunHint.size());
    return make_error(message);
  }
  o.run = std::move(*run);
  return o;
}

int check_main(const std::vector<std::string>& args) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  auto o = parse_check_options(args, env);
  if (!o) return usage_error(std::cerr, "check", o.error().message);
  if (o->help) {
    std::cout << kCheckUsage;
    return 0;
  }
  if (o->version) {
    std::cout << version_text();
    return 0;
  }
  const CheckReport report = run_checks(o->run);
  std::cout << (o->json ? render_json(report) + "\n" : escape_text(render_text(report))) << std::flush;
  return report.tracing_possible() ? 0 : 1;
}

}  // namespace stallwatch::cli
