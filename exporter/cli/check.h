// `stallwatch check`: the preflight that says, before `stallwatch run`, whether this host can be
// traced and, for each thing that is missing, how to fix it.
// Owns the checks (kernel, BTF, capabilities, tp_btf, uprobes, tracefs, cgroup, memlock, CUDA
// libraries), the scan for CUDA libraries on disk and in /proc/*/maps, and the text and JSON
// renderings of the report. Reads /sys, /proc and library directories; never writes, mounts or
// loads anything into the kernel.
// check_parse.cpp holds the parsers, classifiers and item builders; check.cpp reads the live
// system (run_checks, check_main) and renders. Everything but run_checks/check_main is pure and
// unit-tested in tests/unit/check_test.cpp.
// Thread-safety: every function is reentrant; run_checks() briefly swaps libbpf's global print
// callback, so do not call it while another thread uses libbpf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stallwatch::cli {

enum class Status { kOk, kWarn, kFail };

struct CheckItem {
  std::string name;  // "kernel", "btf", "capabilities", ...
  Status status = Status::kOk;
  std::string detail;  // what was found
  std::string fix;     // how to fix it; empty when kOk and for advisory warnings
};

struct CudaLibrary {
  std::string path;  // canonical path; mapped-only libraries use the path the mapping names
  std::string kind;  // "cudart", "cuda" or "nccl"
  bool mapped = false;
  std::vector<int> pids;           // processes mapping it, ascending
  std::vector<std::string> comms;  // comms[i] is the comm of pids[i]
};

struct CheckReport {
  std::vector<CheckItem> items;
  std::vector<CudaLibrary> libraries;  // sorted by path
  bool tracing_possible() const;       // no item is kFail
};

// Reads the live system and runs every check, in the order documented in check.cpp.
CheckReport run_checks();
// Human output: a header, one aligned line per item, the CUDA libraries, a verdict line.
std::string render_text(const CheckReport& report);
// One JSON object (no trailing newline):
// {"ok":bool,"checks":[{"name","status","detail","fix"}],
//  "libraries":[{"path","kind","mapped","pids":[...],"processes":[...]}]}
std::string render_json(const CheckReport& report);
// Prints the report to stdout; returns 0 when tracing is possible, else 1.
int check_main(bool json);

// ---- pure pieces (check_parse.cpp) ----

const char* status_name(Status status);  // "ok", "warn", "fail"

// A JSON string literal, quotes included. Escapes '"', '\\' and control characters; invalid
// UTF-8 bytes (paths and comms are arbitrary bytes) become U+FFFD so the output stays valid.
std::string json_quote(std::string_view s);

// One line of /proc/<pid>/maps: "start-end perms offset dev inode   path".
struct MapsEntry {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::string perms;  // "r-xp"
  std::uint64_t offset = 0;
  std::uint64_t inode = 0;
  std::string path;  // may contain spaces; empty for anonymous mappings; " (deleted)" removed
  bool deleted = false;
};
std::optional<MapsEntry> parse_maps_line(std::string_view line);

// "cudart", "cuda" or "nccl" for a CUDA library file name or path (libcudart.so.12,
// libcuda.so.1, libnccl.so.2, and auditwheel copies such as libcudart-9335f6a2.so.12);
// nullopt for anything else (libcudart_static.a, libnccl-net.so, libcudadebugger.so, ...).
std::optional<std::string> cuda_library_kind(std::string_view path);

// The cgroup2 mount point in a mountinfo text: /sys/fs/cgroup preferred, then
// /sys/fs/cgroup/unified, else the first cgroup2 mount; nullopt when there is none.
// (Same rule as identity::find_cgroup2_mount, which labels cgroups at run time.)
std::optional<std::string> cgroup2_mount_from_mountinfo(std::string_view mountinfo);

enum class CgroupLayout { kUnified, kHybrid, kOtherV2, kNone };
struct CgroupClass {
  CgroupLayout layout = CgroupLayout::kNone;
  std::string mount;            // the cgroup2 mount; empty for kNone
  bool v1_controllers = false;  // some "cgroup" (v1) hierarchy is mounted
};
CgroupClass classify_cgroup(std::string_view mountinfo);

// Item builders: everything each check decides, given what was read.
CheckItem cgroup_item(const CgroupClass& cls);
CheckItem capabilities_item(std::uint64_t effective);  // bit n = capability n
// tracing_dir: /sys/kernel/tracing exists; events_dir: .../events exists; mmap_id_errno: 0 if
// .../events/syscalls/sys_enter_mmap/id was readable, else the errno of opening it.
CheckItem tracefs_item(bool tracing_dir, bool events_dir, int mmap_id_errno);
// on_disk: how many of `libraries` were found on disk (the others are only mapped).
// warn (with an empty fix) when `libraries` is empty.
CheckItem cuda_libraries_item(const std::vector<CudaLibrary>& libraries, std::size_t on_disk);

}  // namespace stallwatch::cli
