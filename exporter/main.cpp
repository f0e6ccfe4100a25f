// stallwatch: one binary, subcommands. main only dispatches; each subcommand owns its flags,
// its --help and --version. Usage errors here, as in every subcommand, are one line and exit 2.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "app/daemon.h"
#include "app/demo.h"
#include "cli/check.h"
#include "cli/explain.h"
#include "cli/export.h"
#include "cli/flags.h"
#include "cli/mcp.h"
#include "cli/query.h"
#include "cli/stacks.h"
#include "cli/version.h"
#include "common/strings.h"

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
    "            no GPU (incident and the other scenarios of demo --list)\n"
    "  version   print the version, revision, build date, compiler and platform\n"
    "  help      this text; `stallwatch help COMMAND` is COMMAND --help\n"
    "\n"
    "Every command takes -h/--help and --version. Exit status: 0 ok, 1 a runtime failure,\n"
    "2 bad usage or configuration.\n";

constexpr const char* kVersionUsage =
    "usage: stallwatch version\n"
    "\n"
    "Prints what `stallwatch --version` and every command's --version print: the version,\n"
    "revision, build date, compiler and platform.\n"
    "\n"
    "  -h, --help  this text\n";

using Command = int (*)(const std::vector<std::string>&);

int run_command(const std::vector<std::string>& args) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return stallwatch::cli::run_main(args, env);
}

int version_command(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << kVersionUsage;
      return 0;
    }
  }
  for (const std::string& a : args) {
    if (a != "--version") {
      return stallwatch::cli::usage_error(
          std::cerr, "version",
          (a.starts_with("-") ? "unrecognised option '" : "unexpected argument '") + a + "'");
    }
  }
  std::cout << stallwatch::cli::version_text();
  return 0;
}

int query_command(const std::vector<std::string>& args) {
  return stallwatch::cli::query_main(args);
}

// The commands, in the order of the usage text.
struct Entry {
  const char* name;
  Command main;
};
constexpr Entry kCommands[] = {
    {"run", run_command},
    {"check", stallwatch::cli::check_main},
    {"explain", stallwatch::cli::explain_main},
    {"query", query_command},
    {"export", stallwatch::cli::export_main},
    {"stacks", stallwatch::cli::stacks_main},
    {"mcp", stallwatch::cli::mcp_main},
    {"demo", stallwatch::cli::demo_main},
    {"version", version_command},
};

Command find_command(const std::string& name) {
  for (const Entry& e : kCommands) {
    if (name == e.name) return e.main;
  }
  return nullptr;
}

// `stallwatch help [COMMAND]`.
int help_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (args.size() > 1) {
    return stallwatch::cli::usage_error(
        std::cerr, "help", "one command at a time, not '" + args[0] + "' and '" + args[1] + "'");
  }
  const Command cmd = find_command(args[0]);
  if (!cmd) {
    std::cerr << "stallwatch help: unknown command '" << stallwatch::escape_line(args[0])
              << "' (see `stallwatch --help`)\n";
    return 2;
  }
  return cmd({"--help"});
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string& cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "-h" || cmd == "--help" || cmd == "help") return help_command(rest);
  if (cmd == "--version") return version_command(rest);
  if (const Command main = find_command(cmd)) return main(rest);
  std::cerr << "stallwatch: "
            << (cmd.starts_with("-") ? "unrecognised option '" : "unknown command '")
            << stallwatch::escape_line(cmd) << "' (see `stallwatch --help`)\n";
  return 2;
}
