// stallwatch: one binary, subcommands. main only dispatches; each subcommand owns its flags.
#include <iostream>
#include <string>
#include <vector>

#include "cli/check.h"
#include "cli/run.h"

namespace {

constexpr const char* kUsage =
    "usage: stallwatch <command> [options]\n"
    "\n"
    "commands:\n"
    "  run       trace CUDA calls and the scheduler; serve /metrics (see run --help)\n"
    "  check     can this host trace? kernel, BTF, capabilities, cgroups, CUDA libraries\n"
    "            (--json for machine-readable output)\n"
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
  if (cmd == "run") return stallwatch::cli::run_main(rest);
  if (cmd == "check") {
    bool json = false;
    for (const auto& a : rest) {
      if (a == "--json") {
        json = true;
      } else if (a == "-h" || a == "--help") {
        std::cout << "usage: stallwatch check [--json]\n";
        return 0;
      } else {
        std::cerr << "stallwatch check: unknown option " << a << " (usage: stallwatch check [--json])\n";
        return 2;
      }
    }
    return stallwatch::cli::check_main(json);
  }
  if (cmd == "version" || cmd == "--version") {
    std::cout << "stallwatch " << STALLWATCH_VERSION << " (" << STALLWATCH_REVISION << ")\n";
    return 0;
  }
  std::cerr << "stallwatch: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
