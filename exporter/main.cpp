// stallwatch: one binary, subcommands. main only dispatches; each subcommand owns its flags.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli/check.h"
#include "app/demo.h"
#include "cli/explain.h"
#include "cli/export.h"
#include "cli/mcp.h"
#include "cli/query.h"
#include "cli/stacks.h"
#include "app/daemon.h"
#include "stallwatch_version.h"  // generated (cmake/GitVersion.cmake)

namespace {

constexpr const char* kUsage =
    "usage: stallwatch <command> [options]\n"
    "\n"
    "commands:\n"
    "  run       trace CUDA calls and the scheduler; serve /metrics (see run --help)\n"
    "  check     can this host trace? kernel, BTF, capabilities, cgroups, CUDA libraries,\n"
    "            the store (--db PATH, --json for machine-readable output)\n"
    "  explain   the incident report: causal chains with root cause, effect and fix\n"
    "            (--since 1h, --cgroup PATH, --per-process, --stacks, --json, --timeout 30s)\n"
    "  query     read-only SQL over the chain store (--format table|csv|json, --timeout 30s)\n"
    "  export    the stored evidence as a timeline for Perfetto or chrome://tracing\n"
    "            (--format perfetto|chrome-json, --since 1h, --cgroup, --pid, -o FILE)\n"
    "  stacks    folded stacks of the slow CUDA calls, weighted by stalled time, for flame\n"
    "            graphs (--since 10m, --pid, --cgroup, --call)\n"
    "  mcp       a Model Context Protocol server on stdio for an assistant: explain, chains,\n"
    "            sites, query and check over the store, read-only (--db PATH)\n"
    "  demo      a synthetic incident through the real engine, store and /metrics; no root,\n"
    "            no GPU (incident and ten more scenarios: see demo --help)\n"
    "  version   print the version\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "run") {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
    return stallwatch::cli::run_main(rest, env);
  }
  if (cmd == "explain") return stallwatch::cli::explain_main(rest);
  if (cmd == "query") return stallwatch::cli::query_main(rest);
  if (cmd == "demo") return stallwatch::cli::demo_main(rest);
  if (cmd == "check") return stallwatch::cli::check_main(rest);
  if (cmd == "export") return stallwatch::cli::export_main(rest);
  if (cmd == "mcp") return stallwatch::cli::mcp_main(rest);
  if (cmd == "stacks") return stallwatch::cli::stacks_main(rest);
  if (cmd == "version" || cmd == "--version") {
    std::cout << "stallwatch " << STALLWATCH_VERSION << " (" << STALLWATCH_REVISION << ")\n";
    return 0;
  }
  std::cerr << "stallwatch: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
