// `stallwatch explain`: the incident report read from the store, for a person (text) or a
// script (--json). Owns the flags and the exit codes: 0 report printed (also when it says that
// nothing happened), 1 the database cannot be read, 2 bad usage. Reads the database only;
// safe to run while `stallwatch run` writes it. Loading is store/report.h's, the text
// rendering cli/explain_render.h's; the JSON rendering is here.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/report.h"

namespace stallwatch::cli {

struct ExplainOptions {
  std::string db = "/var/lib/stallwatch/stallwatch.db";
  std::chrono::nanoseconds since = std::chrono::hours(1);
  std::string cgroup;
  bool per_process = false;
  bool stacks = false;  // --stacks: native frames under each call site
  bool json = false;
  std::chrono::nanoseconds timeout = std::chrono::seconds(30);  // --timeout; 0: none
  bool help = false;
  bool version = false;  // --version
};

extern const char* const kExplainUsage;

// One JSON object, no trailing newline:
// {"period":{"since","until","seconds"},"cgroup":str|null,
//  "host":{"hostname","windows","newest_data","cpu_busy","mem_used","load1","cpus",
//          "swap_used_bytes","cpu_steal","cpu_irq"},
//  "chains":[{"id","kind","severity","peak","open","cgroup","container_id","pod_uid","pid",
//             "comm","call","api","p50_s","p99_s","baseline_p50_s","baseline_p99_s","ratio",
//             "opened","updated","closed","windows","summary","root_cause","effect",
//             "contributors":[{"comm","pid","cgroup","role","cpu_s","count"}],
//             "evidence":{name:number},"recommendation",
//             "sites":[{"call","share","count","stalled_ns","frames":[{"kind","function",
//                       "file","line"} or {"kind","function","module","offset"}]}]}],
//  "traced":[{"cgroup","processes","calls"}],          (filled only when no chain formed)
//  "processes":[{"pid","comm","cgroup","calls":[{"call","api","count","p50_s","p99_s","max_s"}],
//                "offcpu_s","runnable_s","blocked_s","wall_s","offcpu_share","preemptions",
//                "worst_stall_s","preemptors":[{"comm","pid","cgroup","cpu_s","count"}]}]}
//                                                       (only with --per-process)
// Times are RFC 3339 UTC strings; unknown numbers are null.
std::string render_explain_json(const store::Report& report);

// args exclude the program and subcommand names. `--flag VALUE` and `--flag=VALUE` both work.
Result<ExplainOptions> parse_explain_options(const std::vector<std::string>& args);

// The report for `o` as of `now_ns`, written to `out`; errors as one line on `err`.
int run_explain(const ExplainOptions& o, std::int64_t now_ns, const std::string& hostname,
                std::ostream& out, std::ostream& err);

// Entry point for main: parses, uses the wall clock and this host's name.
int explain_main(const std::vector<std::string>& args);

}  // namespace stallwatch::cli
