// `stallwatch check`: the preflight that says, before `stallwatch run`, whether this host can be
// traced and, for each thing that is missing, how to fix it.
// Owns the checks (kernel, BTF, capabilities, tp_btf, uprobes, tracefs, cgroup, memlock, CUDA
// libraries, probe cost), the scan for CUDA libraries on disk and in /proc/*/maps, and the text
// and JSON renderings of the report. Reads /sys, /proc and library directories; never writes or
// mounts. The one thing it loads into the kernel is the probe-cost measure (trace/probe_cost.h:
// two counting programs on the daemon's own binary, hit by a child of its own, gone on return).
// It shares its parsers with the daemon so both agree: trace/proc_maps.h reads maps lines,
// trace/calls.h names CUDA libraries, identity/cgroup_resolver.h picks the cgroup2 mount and
// common/json.h quotes strings.
// check_parse.cpp holds the classifiers and item builders; check.cpp reads the live system
// (run_checks, check_main) and renders. Everything but run_checks/check_main is pure and
// unit-tested in tests/unit/check_test.cpp.
// Thread-safety: every function is reentrant; run_checks() briefly swaps libbpf's global print
// callback, so do not call it while another thread uses libbpf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/options.h"
#include "common/result.h"
#include "trace/calls.h"

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
  trace::Api api = trace::Api::kRuntime;
  // Where run would put its probes and how this kernel runs each site (trace/attach.h
  // describe_sites), or why the file could not be read from here.
  std::string sites;
};

// Whether a CUDA process's slow calls will carry Python frames (issue #17), and why not.
struct PythonFrames {
  int pid = 0;
  std::string comm;
  bool frames = false;
  std::string detail;  // "Python 3.12 frames (/usr/lib/libpython3.12.so.1.0)" or the reason
};

struct CheckReport {
  std::vector<CheckItem> items;
  std::vector<CudaLibrary> libraries;  // sorted by path
  std::vector<PythonFrames> python;    // one per process mapping a CUDA library, by pid
  bool tracing_possible() const;       // no item is kFail
};

// Reads the live system and runs every check, in the order documented in check.cpp.
// The checks without which no probe can load (btf, capabilities, tp_btf, uprobes, cgroup), in
// that order; `run` uses them before loading, without the CUDA library scan.
std::vector<CheckItem> run_preflight_checks();
// o is what `run` would be given: its paths, store and NVML library are the ones checked.
CheckReport run_checks(const RunOptions& o = {});
// The paths run was given (--path.procfs, --path.sysfs, --library-dirs, --nvml-library), as
// run refuses them at start: ok naming them, or the first that is wrong and its fix.
CheckItem paths_check(const RunOptions& o);
// Human output: a header, one aligned line per item, the CUDA libraries, a verdict line.
std::string render_text(const CheckReport& report);
// One JSON object (no trailing newline):
// {"ok":bool,"checks":[{"name","status","detail","fix"}],
//  "libraries":[{"path","kind","mapped","pids":[...],"processes":[...],"sites"}],
//  "python":[{"pid","comm","frames":bool,"detail"}]}
std::string render_json(const CheckReport& report);
struct CheckOptions {
  RunOptions run;  // the flags, STALLWATCH_* variables and config file run would read
  bool json = false;  // --json
  bool help = false;  // -h, --help
  bool version = false;  // --version
};
// "usage: stallwatch check [--json] [RUN FLAGS]\n"
extern const char* const kCheckUsage;
// args exclude the program and subcommand names.
// env: "NAME=value" entries, read as run reads them (STALLWATCH_*).
Result<CheckOptions> parse_check_options(const std::vector<std::string>& args,
                                         const std::vector<std::string>& env = {});
// Parses, prints the report to stdout; returns 0 when tracing is possible, 1 when not, 2 on
// bad usage.
int check_main(const std::vector<std::string>& args);

// ---- pure pieces (check_parse.cpp) ----

const char* status_name(Status status);  // "ok", "warn", "fail"

// The `kind` of a CUDA library in the report: "cudart", "cuda" or "nccl". Which files are CUDA
// libraries is trace::api_of_library's rule, the one discovery attaches by.
const char* library_kind(trace::Api api);

enum class CgroupLayout { kUnified, kHybrid, kOtherV2, kNone };
struct CgroupClass {
  CgroupLayout layout = CgroupLayout::kNone;
  std::string mount;            // the cgroup2 mount; empty for kNone
  bool v1_controllers = false;  // some "cgroup" (v1) hierarchy is mounted
};
// The cgroup2 mount is identity::find_cgroup2_mount's choice, the one cgroup labels come from.
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
